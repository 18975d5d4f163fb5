//! Elementwise kernels, bias add and its column-sum backward, sums of squares.

use rayon::prelude::*;

use crate::float::Float;

/// Elements per rayon task for elementwise work.
pub(crate) const CHUNK: usize = 1 << 14;

/// Overwrites with zeros (a recycled buffer handed out as fresh).
pub fn zero<T: Float>(buf: &mut [T]) {
    buf.par_chunks_mut(CHUNK * 4)
        .for_each(|o| o.iter_mut().for_each(|v| *v = T::ZERO));
}

/// `out = a + b`, element by element (all three of one length).
pub fn add<T: Float>(a: &[T], b: &[T], out: &mut [T]) {
    assert!(
        a.len() == out.len() && b.len() == out.len(),
        "add: length mismatch"
    );
    out.par_chunks_mut(CHUNK)
        .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
        .for_each(|(o, (a, b))| {
            for i in 0..o.len() {
                o[i] = a[i] + b[i];
            }
        });
}

/// `acc += x`, element by element.
pub fn add_assign<T: Float>(acc: &mut [T], x: &[T]) {
    assert_eq!(acc.len(), x.len(), "add_assign: length mismatch");
    acc.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(o, x)| {
            for i in 0..o.len() {
                o[i] += x[i];
            }
        });
}

/// `buf *= factor` (the factor rounded to `T` first).
pub fn scale<T: Float>(buf: &mut [T], factor: f64) {
    let f = T::from_f64(factor);
    buf.par_chunks_mut(CHUNK)
        .for_each(|o| o.iter_mut().for_each(|v| *v *= f));
}

/// Fixed chunks summed in order: the same result for any thread count.
pub fn sum_squares<T: Float>(buf: &[T]) -> f64 {
    let partial: Vec<f64> = buf
        .par_chunks(CHUNK)
        .map(|c| c.iter().map(|v| v.to_f64() * v.to_f64()).sum::<f64>())
        .collect();
    partial.iter().sum()
}

/// `out[r, j] += bias[j]` for every row of `n` columns of `out`.
pub fn bias_add<T: Float>(out: &mut [T], bias: &[T], n: usize) {
    assert_eq!(bias.len(), n, "bias_add: bias length");
    assert_eq!(out.len() % n, 0, "bias_add: rows");
    let rows_per_task = (CHUNK / n).max(1);
    out.par_chunks_mut(rows_per_task * n).for_each(|o| {
        for row in o.chunks_mut(n) {
            for (v, b) in row.iter_mut().zip(bias) {
                *v += *b;
            }
        }
    });
}

/// Columns are split between tasks; each sums its columns over all rows in
/// row order, so the sum is deterministic.
pub fn bias_backward<T: Float>(dout: &[T], dbias: &mut [T], n: usize) {
    assert_eq!(dbias.len(), n, "bias_backward: bias length");
    let rows = dout.len() / n;
    const COLS: usize = 32;
    dbias.par_chunks_mut(COLS).enumerate().for_each(|(ci, db)| {
        let j0 = ci * COLS;
        let mut acc = [T::ZERO; COLS];
        for r in 0..rows {
            let row = &dout[r * n + j0..r * n + j0 + db.len()];
            for (a, v) in acc.iter_mut().zip(row) {
                *a += *v;
            }
        }
        for (d, a) in db.iter_mut().zip(acc) {
            *d += a;
        }
    });
}
