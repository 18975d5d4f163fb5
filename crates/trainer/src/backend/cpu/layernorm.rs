//! LayerNorm over the last axis, forward and backward.

use rayon::prelude::*;

use crate::float::Float;

/// Per row of `n`: `out = (x - mean) * rstd * gamma + beta` with `rstd =
/// 1 / sqrt(var + eps)` (biased variance); writes each row's `mean` and
/// `rstd` for the backward.
#[allow(clippy::too_many_arguments)]
pub fn forward<T: Float>(
    x: &[T],
    gamma: &[T],
    beta: &[T],
    n: usize,
    eps: f64,
    out: &mut [T],
    mean: &mut [T],
    rstd: &mut [T],
) {
    let rows = x.len() / n;
    assert!(out.len() == x.len() && mean.len() == rows && rstd.len() == rows);
    let nf = T::from_f64(n as f64);
    out.par_chunks_mut(n)
        .zip(x.par_chunks(n))
        .zip(mean.par_iter_mut().zip(rstd.par_iter_mut()))
        .for_each(|((o, x), (mu, rs))| {
            let m = x.iter().fold(T::ZERO, |a, &v| a + v) / nf;
            let var = x.iter().fold(T::ZERO, |a, &v| a + (v - m) * (v - m)) / nf;
            let r = T::ONE / (var + T::from_f64(eps)).sqrt();
            for j in 0..n {
                o[j] = (x[j] - m) * r * gamma[j] + beta[j];
            }
            *mu = m;
            *rs = r;
        });
}

/// `dx = rstd * (g - mean(g) - xhat * mean(g * xhat))` with `g = dout *
/// gamma`; `dgamma += sum dout * xhat`, `dbeta += sum dout` (column sums in
/// row order, split by columns, so deterministic).
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Float>(
    dout: &[T],
    x: &[T],
    gamma: &[T],
    mean: &[T],
    rstd: &[T],
    n: usize,
    dx: &mut [T],
    dgamma: &mut [T],
    dbeta: &mut [T],
) {
    let rows = x.len() / n;
    assert!(dout.len() == x.len() && dx.len() == x.len() && mean.len() == rows);
    let nf = T::from_f64(n as f64);
    dx.par_chunks_mut(n).enumerate().for_each(|(r, dx)| {
        let (x, d) = (&x[r * n..(r + 1) * n], &dout[r * n..(r + 1) * n]);
        let (m, rs) = (mean[r], rstd[r]);
        let mut sum_g = T::ZERO;
        let mut sum_gx = T::ZERO;
        for j in 0..n {
            let g = d[j] * gamma[j];
            sum_g += g;
            sum_gx += g * (x[j] - m) * rs;
        }
        let (mg, mgx) = (sum_g / nf, sum_gx / nf);
        for j in 0..n {
            let xhat = (x[j] - m) * rs;
            dx[j] = rs * (d[j] * gamma[j] - mg - xhat * mgx);
        }
    });
    const COLS: usize = 16;
    dgamma
        .par_chunks_mut(COLS)
        .zip(dbeta.par_chunks_mut(COLS))
        .enumerate()
        .for_each(|(ci, (dg, db))| {
            let j0 = ci * COLS;
            let mut ag = [T::ZERO; COLS];
            let mut ab = [T::ZERO; COLS];
            for r in 0..rows {
                let (m, rs) = (mean[r], rstd[r]);
                for c in 0..dg.len() {
                    let i = r * n + j0 + c;
                    ag[c] += dout[i] * (x[i] - m) * rs;
                    ab[c] += dout[i];
                }
            }
            for c in 0..dg.len() {
                dg[c] += ag[c];
                db[c] += ab[c];
            }
        });
}
