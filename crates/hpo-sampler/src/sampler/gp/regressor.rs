//! The Gaussian process: a Matérn-5/2 kernel with automatic relevance
//! determination (one inverse squared lengthscale per dimension; Hamming
//! distance for categoricals), its hyperparameters fitted by maximising the
//! marginal likelihood times Optuna's priors, and the posterior with its
//! gradient in the inputs.
//!
//! As Optuna's `optuna._gp.gp`, with the gradients written out instead of
//! taken by autograd.

use super::lbfgs;
use nalgebra::DMatrix;

/// Optuna's `DEFAULT_MINIMUM_NOISE_VAR`. A covariance that is not
/// positive definite at a smaller noise gets more noise, up to this
/// ([`GpRegressor::new`]).
pub const OPTUNA_MINIMUM_NOISE: f64 = 1e-6;

/// The smallest noise [`GpRegressor::new`] raises a failing one to: a
/// rounding unit of the covariance's diagonal (`kernel_scale`), since a
/// smaller noise leaves the diagonal as it is; a unit of a unit diagonal
/// when the scale is not positive (or NaN). Positive and at most
/// [`OPTUNA_MINIMUM_NOISE`].
fn noise_floor(kernel_scale: f64) -> f64 {
    let floor = f64::EPSILON * kernel_scale;
    if floor > 0.0 {
        floor.min(OPTUNA_MINIMUM_NOISE)
    } else {
        f64::EPSILON
    }
}

/// Kernel hyperparameters.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelParams {
    /// One per dimension: `1 / lengthscale^2`.
    pub inverse_squared_lengthscales: Vec<f64>,
    /// The kernel's variance: the prior variance of `y` at any point
    /// (Optuna's `kernel_scale`).
    pub kernel_scale: f64,
    /// The observation noise's variance, added to the covariance's
    /// diagonal (Optuna's `noise_var`).
    pub noise_var: f64,
}

impl KernelParams {
    /// Optuna's starting point: all ones.
    pub fn default_for(dim: usize) -> Self {
        KernelParams {
            inverse_squared_lengthscales: vec![1.0; dim],
            kernel_scale: 1.0,
            noise_var: 1.0,
        }
    }
}

/// Matérn-5/2 of a squared (scaled) distance, and its derivative in that
/// squared distance.
#[inline]
pub(crate) fn matern52(d2: f64) -> (f64, f64) {
    let s = (5.0 * d2).sqrt();
    let e = (-s).exp();
    (
        e * ((5.0 / 3.0) * d2 + s + 1.0),
        (-5.0 / 6.0) * (s + 1.0) * e,
    )
}

/// Per-dimension squared difference: 0/1 for categoricals.
#[inline]
fn sqd(a: f64, b: f64, categorical: bool) -> f64 {
    if categorical {
        if a != b { 1.0 } else { 0.0 }
    } else {
        (a - b) * (a - b)
    }
}

/// A fitted GP over `n` training points.
#[derive(Debug, Clone)]
pub struct GpRegressor {
    pub(crate) dim: usize,
    pub(crate) categorical: Vec<bool>,
    /// Row-major, `n x dim`.
    pub(crate) x: Vec<f64>,
    pub(crate) y: Vec<f64>,
    /// The hyperparameters it uses, with the noise [`GpRegressor::new`]
    /// settled on.
    pub params: KernelParams,
    /// `L^-1` where `L L^T = K + noise I` (lower triangular, column
    /// major: column `j` is nonzero from row `j` on).
    linv: DMatrix<f64>,
    /// `(K + noise I)^-1 y`.
    alpha: Vec<f64>,
}

/// Posterior mean and variance at one point, with their gradients in the
/// point's coordinates (zero for categorical coordinates).
pub(crate) struct Posterior {
    pub mean: f64,
    pub var: f64,
    pub d_mean: Vec<f64>,
    pub d_var: Vec<f64>,
}

fn kernel_matrix(x: &[f64], n: usize, dim: usize, cat: &[bool], p: &KernelParams) -> DMatrix<f64> {
    let mut k = DMatrix::zeros(n, n);
    for i in 0..n {
        k[(i, i)] = p.kernel_scale;
        for j in 0..i {
            let d2: f64 = (0..dim)
                .map(|d| {
                    sqd(x[i * dim + d], x[j * dim + d], cat[d]) * p.inverse_squared_lengthscales[d]
                })
                .sum();
            let v = p.kernel_scale * matern52(d2).0;
            k[(i, j)] = v;
            k[(j, i)] = v;
        }
    }
    k
}

impl GpRegressor {
    /// The GP with the given hyperparameters (no fitting). A noise below
    /// Optuna's minimum (1e-6) whose covariance does not factorise (points
    /// so close that their rows are equal to rounding) is raised tenfold
    /// until it does, at most to that minimum; a noise that is not
    /// positive (or NaN) is first raised to a rounding unit of the
    /// diagonal (`f64::EPSILON * kernel_scale`). Its `params`
    /// say which noise it took.
    ///
    /// Returns `None` when `x` does not hold `y.len()` rows of
    /// `categorical.len()` coordinates, when `params` has not one
    /// lengthscale per coordinate, or when the covariance is not positive
    /// definite even at the noise it may reach (a NaN or infinite input,
    /// hyperparameter or noise).
    ///
    /// # Panics
    ///
    /// Never: every input is checked or tried.
    pub fn new(
        x: Vec<f64>,
        y: Vec<f64>,
        categorical: Vec<bool>,
        mut params: KernelParams,
    ) -> Option<Self> {
        let dim = categorical.len();
        let n = y.len();
        if Some(x.len()) != n.checked_mul(dim) || params.inverse_squared_lengthscales.len() != dim {
            return None;
        }
        let kernel = kernel_matrix(&x, n, dim, &categorical, &params);
        let floor = noise_floor(params.kernel_scale);
        let l = loop {
            let mut c = kernel.clone();
            for i in 0..n {
                c[(i, i)] += params.noise_var;
            }
            if let Some(l) = c.cholesky() {
                break l.unpack();
            }
            if params.noise_var >= OPTUNA_MINIMUM_NOISE {
                return None;
            }
            // Each step at least tenfold from a positive floor, capped at
            // the minimum, which ends the loop (a zero, negative or NaN
            // noise would never grow by multiplying).
            params.noise_var = if params.noise_var > 0.0 {
                (params.noise_var * 10.0).max(floor)
            } else {
                floor
            }
            .min(OPTUNA_MINIMUM_NOISE);
        };
        let linv = lower_inverse(&l)?;
        let w = &linv * nalgebra::DVector::from_column_slice(&y);
        let alpha = linv.tr_mul(&w).as_slice().to_vec();
        Some(GpRegressor {
            dim,
            categorical,
            x,
            y,
            params,
            linv,
            alpha,
        })
    }

    /// The number of training points.
    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// Whether it has no training points.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }

    /// The GP with extra points observed at `values` (kriging believer:
    /// the caller passes the posterior mean), same hyperparameters.
    pub fn with_fantasies(&self, xs: &[f64], values: &[f64]) -> Option<Self> {
        let mut x = self.x.clone();
        x.extend_from_slice(xs);
        let mut y = self.y.clone();
        y.extend_from_slice(values);
        GpRegressor::new(x, y, self.categorical.clone(), self.params.clone())
    }

    /// Posterior mean and variance at `q`, without gradients.
    ///
    /// # Panics
    ///
    /// When `q` (here and in every posterior method) has not one
    /// coordinate per input dimension (`categorical.len()` of
    /// [`GpRegressor::new`]).
    pub fn posterior(&self, q: &[f64]) -> (f64, f64) {
        let n = self.len();
        let mut k = vec![0.0; n];
        self.cross_kernel(q, &mut k, None);
        let mut w = vec![0.0; n];
        self.lower_solve(&k, &mut w);
        self.mean_var(&k, &w)
    }

    /// Mean `k . alpha` and variance `scale - |w|^2` from the cross kernel
    /// `k` and `w = L^-1 k`.
    fn mean_var(&self, k: &[f64], w: &[f64]) -> (f64, f64) {
        let mean: f64 = k.iter().zip(&self.alpha).map(|(a, b)| a * b).sum();
        let quad: f64 = w.iter().map(|v| v * v).sum();
        (mean, (self.params.kernel_scale - quad).max(0.0))
    }

    /// `w = L^-1 k`, column by column of `L^-1` (contiguous in memory).
    fn lower_solve(&self, k: &[f64], w: &mut [f64]) {
        w.fill(0.0);
        for (j, kj) in k.iter().enumerate() {
            let col = &self.linv.as_slice()[j * k.len()..(j + 1) * k.len()];
            for (wi, l) in w[j..].iter_mut().zip(&col[j..]) {
                *wi += l * kj;
            }
        }
    }

    /// Posterior means and variances at many points: the cross kernels as
    /// the columns of one `n x m` matrix, one matrix product with `L^-1`.
    pub fn posterior_batch(&self, qs: &[Vec<f64>]) -> Vec<(f64, f64)> {
        let n = self.len();
        let mut k = DMatrix::<f64>::zeros(n, qs.len());
        for (col, q) in k.as_mut_slice().chunks_exact_mut(n.max(1)).zip(qs) {
            self.cross_kernel(q, col, None);
        }
        self.posterior_of_columns(k)
    }

    /// Posterior means and variances at `base` with coordinate `d` set to
    /// each of `values` in turn (a line search along one coordinate): the
    /// other coordinates' share of each distance is computed once, and for
    /// a categorical coordinate, whose share is 0 or one lengthscale, the
    /// two possible kernel values per training point too.
    pub(crate) fn posterior_along(
        &self,
        base: &[f64],
        d: usize,
        values: &[f64],
    ) -> Vec<(f64, f64)> {
        let (n, dim) = (self.len(), self.dim);
        let p = &self.params;
        let t = p.inverse_squared_lengthscales[d];
        let rest: Vec<f64> = (0..n)
            .map(|i| {
                let xi = &self.x[i * dim..(i + 1) * dim];
                (0..dim)
                    .filter(|e| *e != d)
                    .map(|e| {
                        sqd(base[e], xi[e], self.categorical[e]) * p.inverse_squared_lengthscales[e]
                    })
                    .sum()
            })
            .collect();
        let mut k = DMatrix::<f64>::zeros(n, values.len());
        if self.categorical[d] {
            let same: Vec<f64> = rest
                .iter()
                .map(|r| p.kernel_scale * matern52(*r).0)
                .collect();
            let differ: Vec<f64> = rest
                .iter()
                .map(|r| p.kernel_scale * matern52(r + t).0)
                .collect();
            for (col, v) in k.as_mut_slice().chunks_exact_mut(n.max(1)).zip(values) {
                for (i, ki) in col.iter_mut().enumerate() {
                    *ki = if self.x[i * dim + d] == *v {
                        same[i]
                    } else {
                        differ[i]
                    };
                }
            }
        } else {
            for (col, v) in k.as_mut_slice().chunks_exact_mut(n.max(1)).zip(values) {
                for (i, ki) in col.iter_mut().enumerate() {
                    let diff = v - self.x[i * dim + d];
                    *ki = p.kernel_scale * matern52(rest[i] + diff * diff * t).0;
                }
            }
        }
        self.posterior_of_columns(k)
    }

    /// Means and variances from cross kernels, one point per column.
    fn posterior_of_columns(&self, k: DMatrix<f64>) -> Vec<(f64, f64)> {
        let n = self.len();
        if n == 0 {
            return vec![(0.0, self.params.kernel_scale); k.ncols()];
        }
        let w = &self.linv * &k;
        k.as_slice()
            .chunks_exact(n)
            .zip(w.as_slice().chunks_exact(n))
            .map(|(k, w)| self.mean_var(k, w))
            .collect()
    }

    /// Posterior mean and variance at `q` with their gradients in `q`.
    pub(crate) fn posterior_grad(&self, q: &[f64]) -> Posterior {
        let (n, dim) = (self.len(), self.dim);
        let mut k = vec![0.0; n];
        // dk_i/dq_d = dk[i * dim + d]
        let mut dk = vec![0.0; n * dim];
        self.cross_kernel(q, &mut k, Some(&mut dk));
        let mean: f64 = k.iter().zip(&self.alpha).map(|(a, b)| a * b).sum();
        // w = L^-1 k, v = L^-T w = C^-1 k
        let mut w = vec![0.0; n];
        self.lower_solve(&k, &mut w);
        let quad: f64 = w.iter().map(|v| v * v).sum();
        let v: Vec<f64> = (0..n)
            .map(|j| {
                let col = &self.linv.as_slice()[j * n..(j + 1) * n];
                col[j..].iter().zip(&w[j..]).map(|(a, b)| a * b).sum()
            })
            .collect();
        let mut d_mean = vec![0.0; dim];
        let mut d_var = vec![0.0; dim];
        for i in 0..n {
            for d in 0..dim {
                let g = dk[i * dim + d];
                d_mean[d] += self.alpha[i] * g;
                d_var[d] -= 2.0 * v[i] * g;
            }
        }
        let var = self.params.kernel_scale - quad;
        if var <= 0.0 {
            d_var.iter_mut().for_each(|g| *g = 0.0);
        }
        Posterior {
            mean,
            var: var.max(0.0),
            d_mean,
            d_var,
        }
    }

    fn cross_kernel(&self, q: &[f64], k: &mut [f64], mut dk: Option<&mut [f64]>) {
        let dim = self.dim;
        // A shorter query would be compared on its first coordinates only:
        // a plausible, wrong posterior.
        assert_eq!(
            q.len(),
            dim,
            "a query has one coordinate per input dimension"
        );
        let p = &self.params;
        for (i, ki) in k.iter_mut().enumerate() {
            let xi = &self.x[i * dim..(i + 1) * dim];
            let mut d2 = 0.0;
            for (((a, b), c), t) in q
                .iter()
                .zip(xi)
                .zip(&self.categorical)
                .zip(&p.inverse_squared_lengthscales)
            {
                d2 += sqd(*a, *b, *c) * t;
            }
            let (m, dm) = matern52(d2);
            *ki = p.kernel_scale * m;
            if let Some(dk) = dk.as_deref_mut() {
                for d in 0..dim {
                    dk[i * dim + d] = if self.categorical[d] {
                        0.0
                    } else {
                        p.kernel_scale
                            * dm
                            * p.inverse_squared_lengthscales[d]
                            * 2.0
                            * (q[d] - xi[d])
                    };
                }
            }
        }
    }
}

/// Optuna's `default_log_prior` and its gradient in the raw (log)
/// parameters `[log isl.., log scale, log(noise - min)]`.
fn log_prior(p: &KernelParams, raw_noise: f64, grad: &mut [f64]) -> f64 {
    let dim = p.inverse_squared_lengthscales.len();
    let mut lp = 0.0;
    for (d, &t) in p.inverse_squared_lengthscales.iter().enumerate() {
        lp -= 0.1 / t + 0.1 * t;
        grad[d] = 0.1 / t - 0.1 * t;
    }
    // Gamma(2, 1) on the kernel scale, Gamma(1.1, 30) on the noise.
    let s = p.kernel_scale;
    lp += s.ln() - s;
    grad[dim] = 1.0 - s;
    let nv = p.noise_var;
    lp += 0.1 * nv.ln() - 30.0 * nv;
    grad[dim + 1] = (0.1 / nv - 30.0) * raw_noise.exp();
    lp
}

/// The training inputs' squared differences, per pair and dimension:
/// what the fitting loss needs of the inputs, computed once per fit.
pub(crate) struct PairDistances {
    n: usize,
    dim: usize,
    /// Pair `(i, j)`, `j < i`, at `(i (i - 1) / 2 + j) * dim`.
    sq: Vec<f64>,
}

impl PairDistances {
    pub(crate) fn new(x: &[f64], n: usize, categorical: &[bool]) -> Self {
        let dim = categorical.len();
        let mut sq = Vec::with_capacity(n * n.saturating_sub(1) / 2 * dim);
        for i in 0..n {
            for j in 0..i {
                for d in 0..dim {
                    sq.push(sqd(x[i * dim + d], x[j * dim + d], categorical[d]));
                }
            }
        }
        PairDistances { n, dim, sq }
    }
}

/// `L^-1` of a lower-triangular `L`, column by column; column `j` of the
/// inverse is zero above row `j`, so only the trailing block is solved
/// (a third of the work of solving against the identity).
fn lower_inverse(l: &DMatrix<f64>) -> Option<DMatrix<f64>> {
    let n = l.nrows();
    let mut inv = DMatrix::<f64>::identity(n, n);
    for j in 0..n {
        let block = l.view((j, j), (n - j, n - j));
        let mut col = inv.view_mut((j, j), (n - j, 1));
        if !block.solve_lower_triangular_mut(&mut col) {
            return None;
        }
    }
    Some(inv)
}

/// The loss Optuna minimises (`-log marginal likelihood - log prior`, up
/// to a constant) and its gradient in the raw parameters; `None` when the
/// covariance is not positive definite.
pub(crate) fn loss_and_grad(
    pairs: &PairDistances,
    y: &[f64],
    raw: &[f64],
    noise: Noise,
) -> Option<(f64, Vec<f64>)> {
    let (n, dim) = (pairs.n, pairs.dim);
    let p = from_raw(raw, dim, noise);
    // The kernel, and per pair the Matern derivative in the squared distance.
    let mut c = DMatrix::<f64>::zeros(n, n);
    let mut dm = Vec::with_capacity(pairs.sq.len() / dim.max(1));
    let mut pair = pairs.sq.chunks_exact(dim.max(1));
    for i in 0..n {
        for j in 0..i {
            let r2: f64 = match pair.next() {
                Some(s) if dim > 0 => s
                    .iter()
                    .zip(&p.inverse_squared_lengthscales)
                    .map(|(a, b)| a * b)
                    .sum(),
                _ => 0.0,
            };
            let (m, d) = matern52(r2);
            c[(i, j)] = p.kernel_scale * m;
            c[(j, i)] = p.kernel_scale * m;
            dm.push(d);
        }
        c[(i, i)] = p.kernel_scale + p.noise_var;
    }
    let l = c.clone().cholesky()?;
    let logdet_half: f64 = l.l_dirty().diagonal().iter().map(|v| v.ln()).sum();
    let yv = nalgebra::DVector::from_column_slice(y);
    let alpha = l.solve(&yv);
    let quad = yv.dot(&alpha);
    let mll = -logdet_half - 0.5 * quad;
    let linv = lower_inverse(&l.unpack())?;
    // C^-1 = L^-T L^-1, one matrix product.
    let cinv = linv.transpose() * &linv;
    // d mll / d theta = 0.5 tr((alpha alpha^T - C^-1) dC/dtheta)
    let mut grad = vec![0.0; dim + 2];
    let lp = log_prior(&p, raw[dim + 1], &mut grad);
    let mut g_scale = 0.0;
    let mut g_trace = 0.0;
    let mut g_isl = vec![0.0; dim];
    let mut k = 0;
    for i in 0..n {
        g_trace += alpha[i] * alpha[i] - cinv[(i, i)];
        g_scale += 0.5 * (alpha[i] * alpha[i] - cinv[(i, i)]) * p.kernel_scale;
        for j in 0..i {
            // Both (i, j) and (j, i): factor 2 cancels the 0.5.
            let w = alpha[i] * alpha[j] - cinv[(i, j)];
            g_scale += w * c[(i, j)];
            let f = w * p.kernel_scale * dm[k];
            for (g, s) in g_isl.iter_mut().zip(&pairs.sq[k * dim..(k + 1) * dim]) {
                *g += f * s;
            }
            k += 1;
        }
    }
    // Loss = -(mll + lp): negate, and chain rule through exp for log isl.
    for d in 0..dim {
        grad[d] = -(g_isl[d] * p.inverse_squared_lengthscales[d] + grad[d]);
    }
    grad[dim] = -(g_scale + grad[dim]);
    grad[dim + 1] = if noise.fixed {
        0.0
    } else {
        -(0.5 * g_trace * raw[dim + 1].exp() + grad[dim + 1])
    };
    let loss = -(mll + lp);
    loss.is_finite().then_some((loss, grad))
}

fn from_raw(raw: &[f64], dim: usize, noise: Noise) -> KernelParams {
    KernelParams {
        inverse_squared_lengthscales: raw[..dim].iter().map(|v| v.exp()).collect(),
        kernel_scale: raw[dim].exp(),
        noise_var: if noise.fixed {
            noise.minimum
        } else {
            raw[dim + 1].exp() + noise.minimum
        },
    }
}

/// How [`fit`] treats the noise variance: at least `minimum`, and fixed
/// there when `fixed` (a deterministic objective).
#[derive(Debug, Clone, Copy)]
pub struct Noise {
    /// The smallest noise variance.
    pub minimum: f64,
    /// The noise variance is `minimum`, not fitted.
    pub fixed: bool,
}

/// Fit the hyperparameters from `start` (the previous fit, or the
/// defaults), as Optuna's `fit_kernel_params`: L-BFGS on the log
/// parameters with `gtol = 1e-2`; on failure again from the defaults; if
/// that fails too, the defaults unfitted, at a noise of 1 if need be.
/// `None` when even that covariance is not positive definite (a NaN or
/// infinite input).
pub fn fit(
    x: Vec<f64>,
    y: Vec<f64>,
    categorical: Vec<bool>,
    start: Option<&KernelParams>,
    noise: Noise,
) -> Option<GpRegressor> {
    let dim = categorical.len();
    let defaults = KernelParams::default_for(dim);
    let pairs = PairDistances::new(&x, y.len(), &categorical);
    let mut starts = vec![];
    if let Some(s) = start.filter(|s| s.inverse_squared_lengthscales.len() == dim) {
        starts.push(s.clone());
    }
    starts.push(defaults.clone());
    for s in &starts {
        let mut raw: Vec<f64> = s
            .inverse_squared_lengthscales
            .iter()
            .map(|v| v.ln())
            .collect();
        raw.push(s.kernel_scale.ln());
        // Optuna adds 1% of the minimum noise to the initial noise.
        raw.push((s.noise_var - 0.99 * noise.minimum).max(1e-300).ln());
        let bounds = vec![(f64::NEG_INFINITY, f64::INFINITY); dim + 2];
        let result = lbfgs::minimize(
            |r: &[f64]| loss_and_grad(&pairs, &y, r, noise),
            raw,
            &bounds,
            lbfgs::Options {
                pgtol: 1e-2,
                max_iters: 1000,
                ..Default::default()
            },
        );
        if let Some(r) = result {
            let p = from_raw(&r.x, dim, noise);
            if let Some(gp) = GpRegressor::new(x.clone(), y.clone(), categorical.clone(), p) {
                return Some(gp);
            }
        }
    }
    let mut p = defaults;
    if noise.fixed {
        p.noise_var = noise.minimum;
    }
    GpRegressor::new(x.clone(), y.clone(), categorical.clone(), p.clone()).or_else(|| {
        // A large noise gives a positive definite covariance of finite inputs.
        p.noise_var = 1.0;
        GpRegressor::new(x, y, categorical, p)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A search along one coordinate (continuous, integer grid or
    /// categorical) gives the posteriors of the same points scored one by one.
    #[test]
    fn posterior_along_equals_batch() {
        let x = vec![
            0.1, 0.0, 0.9, 0.4, 1.0, 0.2, 0.7, 2.0, 0.5, 0.3, 1.0, 0.8, 0.95, 0.0, 0.1,
        ];
        let y = vec![0.3, -1.2, 0.8, 0.1, -0.4];
        let params = KernelParams {
            inverse_squared_lengthscales: vec![2.0, 0.7, 5.0],
            kernel_scale: 1.3,
            noise_var: 1e-3,
        };
        let gp = GpRegressor::new(x, y, vec![false, true, false], params).unwrap();
        let base = [0.35, 1.0, 0.6];
        for (d, values) in [
            (0, vec![0.0, 0.3, 0.75, 1.0]),
            (1, vec![0.0, 1.0, 2.0]),
            (2, vec![0.1, 0.95]),
        ] {
            let points: Vec<Vec<f64>> = values
                .iter()
                .map(|v| {
                    let mut p = base.to_vec();
                    p[d] = *v;
                    p
                })
                .collect();
            let along = gp.posterior_along(&base, d, &values);
            for ((m, v), (bm, bv)) in along.iter().zip(gp.posterior_batch(&points)) {
                assert!(
                    (m - bm).abs() < 1e-12 && (v - bv).abs() < 1e-12,
                    "dim {d}: {m} {v} vs {bm} {bv}"
                );
            }
        }
    }

    /// Two equal points make the covariance singular at a tiny noise: the
    /// GP takes more noise, at most Optuna's minimum, rather than failing.
    #[test]
    fn a_singular_covariance_gets_more_noise() {
        let x = vec![0.2, 0.7, 0.2, 0.7, 0.9, 0.1];
        let y = vec![0.5, 0.5, -1.0];
        let params = KernelParams {
            inverse_squared_lengthscales: vec![1.0, 1.0],
            kernel_scale: 1.0,
            noise_var: 1e-300,
        };
        let gp = GpRegressor::new(x, y, vec![false, false], params).unwrap();
        assert!(gp.params.noise_var > 1e-300 && gp.params.noise_var <= OPTUNA_MINIMUM_NOISE);
        let (mean, _) = gp.posterior(&[0.2, 0.7]);
        assert!((mean - 0.5).abs() < 1e-3, "{mean}");
    }

    /// A noise that is zero, negative or NaN never grows by multiplying:
    /// on a singular covariance (an int space's repeated values) it is
    /// raised from a positive floor instead, and the GP is built (the
    /// construction runs on a thread so that a regression fails here
    /// rather than hanging the suite).
    #[test]
    fn a_noise_that_is_not_positive_is_raised_from_a_floor() {
        for noise_var in [0.0, -1.0, f64::NEG_INFINITY, f64::NAN, f64::MIN_POSITIVE] {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let x = vec![1.0, 1.0, 2.0, 2.0, 3.0, 0.0];
                let y = vec![0.5, 0.5, 0.1, 0.1, -1.0, 0.3];
                let params = KernelParams {
                    inverse_squared_lengthscales: vec![1.0],
                    kernel_scale: 1.0,
                    noise_var,
                };
                let _ = tx.send(GpRegressor::new(x, y, vec![false], params));
            });
            let gp = rx
                .recv_timeout(std::time::Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("noise {noise_var}: no GP after 20 s"))
                .unwrap_or_else(|| panic!("noise {noise_var}: no GP"));
            let taken = gp.params.noise_var;
            assert!(
                taken > 0.0 && taken <= OPTUNA_MINIMUM_NOISE,
                "{noise_var}: {taken}"
            );
        }
    }

    /// Inputs no covariance of which is positive definite (a NaN
    /// coordinate) are no fit, not a panic.
    #[test]
    fn a_nan_input_is_no_fit() {
        let noise = Noise {
            minimum: 1e-6,
            fixed: false,
        };
        let x = vec![f64::NAN, 0.5, 0.9];
        assert!(fit(x, vec![0.0, 1.0, -1.0], vec![false], None, noise).is_none());
        let x = vec![0.1, 0.5, 0.9];
        assert!(fit(x, vec![0.0, 1.0, -1.0], vec![false], None, noise).is_some());
    }

    /// Inputs of inconsistent sizes are no GP, not an index out of bounds.
    #[test]
    fn inconsistent_sizes_are_no_gp() {
        let params = KernelParams::default_for(2);
        // Three values, five coordinates for rows of two.
        assert!(
            GpRegressor::new(vec![0.0; 5], vec![0.0; 3], vec![false; 2], params.clone()).is_none()
        );
        // One lengthscale for two coordinates.
        let short = KernelParams::default_for(1);
        assert!(GpRegressor::new(vec![0.0; 6], vec![0.0; 3], vec![false; 2], short).is_none());
        assert!(GpRegressor::new(vec![0.0, 1.0], vec![0.0], vec![false; 2], params).is_some());
    }

    /// The written-out gradient of the fitting loss equals central
    /// differences, for every raw parameter, with a categorical dimension.
    #[test]
    fn loss_gradient_matches_finite_differences() {
        let x = vec![
            0.1, 0.0, 0.9, 0.4, 1.0, 0.2, 0.7, 2.0, 0.5, 0.3, 1.0, 0.8, 0.95, 0.0, 0.1,
        ];
        let y = vec![0.3, -1.2, 0.8, 0.1, -0.4];
        let cat = vec![false, true, false];
        let pairs = PairDistances::new(&x, y.len(), &cat);
        for (minimum, fixed) in [(1e-6, false), (1e-6, true), (1e-10, false)] {
            let noise = Noise { minimum, fixed };
            let raw = vec![0.3, -0.5, 1.1, 0.2, -3.0];
            let (_, g) = loss_and_grad(&pairs, &y, &raw, noise).unwrap();
            for i in 0..raw.len() {
                let h = 1e-6;
                let mut up = raw.clone();
                up[i] += h;
                let mut down = raw.clone();
                down[i] -= h;
                let fd = (loss_and_grad(&pairs, &y, &up, noise).unwrap().0
                    - loss_and_grad(&pairs, &y, &down, noise).unwrap().0)
                    / (2.0 * h);
                assert!(
                    (fd - g[i]).abs() < 1e-5 * (1.0 + fd.abs()),
                    "param {i} ({noise:?}): {} vs {fd}",
                    g[i]
                );
            }
        }
    }
}
