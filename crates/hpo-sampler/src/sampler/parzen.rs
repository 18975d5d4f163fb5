//! Optuna's `_ParzenEstimator`: a mixture of product kernels, one kernel per
//! observation plus a prior kernel. Numeric dimensions use normal kernels
//! truncated to the (log-transformed, step-widened) range; discrete ones
//! integrate each kernel over the grid cell; categoricals use smoothed
//! one-hot kernels.
//!
//! The log-density is laid out for speed: per-kernel constants are computed
//! once, and each sample only visits the kernels that can matter. The
//! log-sum-exp over kernels drops terms 50 below the largest anyway, so a
//! kernel whose term is provably below the prior kernel's exact term minus
//! 51 is skipped: dimensions are visited cheapest first (continuous,
//! categorical, then discrete), and after each one a kernel goes once its
//! partial term plus an upper bound on what the remaining dimensions can
//! add falls under that cut. Kernels sorted by centre in the first
//! continuous dimension are visited in blocks, so far blocks are skipped
//! whole, and discrete cell masses (the expensive part) are computed only
//! for the few survivors. The result equals the sum over every kernel up to
//! the order of floating-point additions (tested against it on random
//! spaces and histories).

use crate::distribution::Distribution;
use crate::rng::Rng;
use crate::special::{NORM_PDF_LOG_C, log_gauss_mass, truncnorm_ppf};
use std::collections::HashMap;

/// The estimator's options (Optuna's `_ParzenEstimatorParameters`).
#[derive(Debug, Clone, Copy)]
pub struct ParzenParams {
    pub prior_weight: f64,
    pub consider_magic_clip: bool,
    pub consider_endpoints: bool,
}

/// Numeric kernels in transformed space.
struct Numeric {
    mu: Vec<f64>,
    sigma: Vec<f64>,
    /// Range bounds in the original space (samples are clipped to them).
    low: f64,
    high: f64,
    /// Range bounds in transformed space (log, widened by half a step).
    adapted_low: f64,
    adapted_high: f64,
    log: bool,
    step: Option<f64>,
    /// `1 / sigma`.
    inv_sigma: Vec<f64>,
    /// Continuous only: `-ln(sigma) - ln(mass) - ln(sqrt(2 pi))`.
    konst: Vec<f64>,
    /// Discrete only: unique `(mu, sigma)` pairs, their log normaliser,
    /// and each kernel's index into them.
    uniq_mu: Vec<f64>,
    uniq_sigma: Vec<f64>,
    uniq_log_sigma: Vec<f64>,
    uniq_log_norm: Vec<f64>,
    uniq_of: Vec<u32>,
    /// Discrete only, per kernel: `ln sigma` and the log normaliser.
    ln_sigma: Vec<f64>,
    log_norm: Vec<f64>,
    /// Discrete only: the widest grid cell in transformed space.
    max_ln_width: f64,
    /// Every kernel (the prior included) in increasing centre order, ties
    /// by index.
    order: Vec<u32>,
}

struct Categorical {
    n_choices: usize,
    /// Row-major `[kernel][choice]` probabilities, for sampling.
    probs: Vec<f64>,
    /// Column-major `[choice][kernel]` log-probabilities, for densities.
    log_probs_by_choice: Vec<f64>,
}

// One per dimension, built once per ask: boxing would only add indirection.
#[allow(clippy::large_enum_variant)]
enum Dim {
    Numeric(Numeric),
    Categorical(Categorical),
}

/// A Parzen estimator over a fixed, ordered list of dimensions.
pub struct Parzen {
    weights: Vec<f64>,
    log_weights: Vec<f64>,
    cum_weights: Vec<f64>,
    dims: Vec<Dim>,
    /// The order `log_pdf` visits dimensions in: cheap, selective ones
    /// (continuous, categorical) before discrete ones.
    visit: Vec<usize>,
    /// `rest_peak[j * n_kernels + k]`: an upper bound on what the
    /// dimensions `visit[j..]` can add to kernel `k`'s log term.
    rest_peak: Vec<f64>,
    /// When the first visited dimension is continuous: its kernels sorted
    /// by centre, in blocks, so that blocks too far from a sample to reach
    /// the cut are skipped without looking at their kernels.
    blocked: Option<Blocked>,
}

/// The first dimension's kernels sorted by centre, with what its scan
/// reads copied into that order so the scan walks memory in sequence.
struct Blocked {
    blocks: Vec<Block>,
    /// Kernel index at each sorted position.
    order: Vec<u32>,
    mu: Vec<f64>,
    inv_sigma: Vec<f64>,
    konst: Vec<f64>,
    log_weight: Vec<f64>,
    /// `rest_peak` after the first dimension.
    rest: Vec<f64>,
}

/// Kernels at sorted positions `start..end`: their centres span `[lo, hi]`, their
/// widest sigma and their largest `log weight + peak term + rest_peak`.
struct Block {
    start: usize,
    end: usize,
    lo: f64,
    hi: f64,
    sigma_max: f64,
    peak_max: f64,
}

/// Kernels per block: small enough to skip precisely, large enough that
/// the per-block check costs little.
const BLOCK: usize = 16;

impl Parzen {
    /// Build from observations (`obs[d][i]`: internal value of dimension `d`
    /// in observation `i`) with per-observation weights (before the prior).
    pub fn new(
        dists: &[&Distribution],
        obs: &[Vec<f64>],
        obs_weights: &[f64],
        params: ParzenParams,
    ) -> Self {
        let centres: Vec<Vec<f64>> = dists
            .iter()
            .zip(obs)
            .map(|(d, o)| o.iter().map(|&v| kernel_centre(d, v)).collect())
            .collect();
        let orders: Vec<Vec<u32>> = dists
            .iter()
            .zip(&centres)
            .map(|(d, c)| match d {
                Distribution::Categorical { .. } => Vec::new(),
                _ => centre_order(c),
            })
            .collect();
        Self::from_centres(dists, &centres, &orders, obs_weights, params)
    }

    /// [`Parzen::new`] from what it derives first, for a caller that keeps
    /// it across estimators: `centres[d][i]` is [`kernel_centre`] of the
    /// observation, and `orders[d]` (numeric dimensions; empty for
    /// categoricals) is [`centre_order`] of `centres[d]`. The result is the
    /// same, bit for bit.
    pub fn from_centres(
        dists: &[&Distribution],
        centres: &[Vec<f64>],
        orders: &[Vec<u32>],
        obs_weights: &[f64],
        params: ParzenParams,
    ) -> Self {
        debug_assert!(
            dists.iter().zip(centres).zip(orders).all(|((d, c), o)| {
                matches!(d, Distribution::Categorical { .. }) || *o == centre_order(c)
            }),
            "orders must be the centres' order"
        );
        let n = obs_weights.len();
        let mut weights: Vec<f64> = if n == 0 {
            vec![1.0]
        } else {
            let mut w = obs_weights.to_vec();
            w.push(params.prior_weight);
            w
        };
        let total: f64 = weights.iter().sum();
        weights.iter_mut().for_each(|w| *w /= total);
        let log_weights: Vec<f64> = weights.iter().map(|w| w.ln()).collect();
        let mut acc = 0.0;
        let cum_weights = weights
            .iter()
            .map(|w| {
                acc += w;
                acc
            })
            .collect();
        let dims: Vec<Dim> = dists
            .iter()
            .zip(centres)
            .zip(orders)
            .map(|((d, c), o)| build_dim(d, c, o, params))
            .collect();
        let rank = |d: &Dim| match d {
            Dim::Numeric(n) if n.step.is_none() => 0,
            Dim::Categorical(_) => 1,
            Dim::Numeric(_) => 2,
        };
        let mut visit: Vec<usize> = (0..dims.len()).collect();
        visit.sort_by_key(|&i| rank(&dims[i]));
        let n_k = weights.len();
        let mut rest_peak = vec![0.0; (visit.len() + 1) * n_k];
        for (j, &i) in visit.iter().enumerate().rev() {
            let (head, tail) = rest_peak.split_at_mut((j + 1) * n_k);
            let here = &mut head[j * n_k..];
            here.copy_from_slice(&tail[..n_k]);
            add_peaks(&dims[i], n_k, here);
        }
        let blocked = match visit.first().map(|&i| &dims[i]) {
            Some(Dim::Numeric(d)) if d.step.is_none() && n_k > 4 * BLOCK => {
                Some(centre_blocks(d, &log_weights, &rest_peak[n_k..2 * n_k]))
            }
            _ => None,
        };
        Parzen {
            weights,
            log_weights,
            cum_weights,
            dims,
            visit,
            rest_peak,
            blocked,
        }
    }

    pub fn n_kernels(&self) -> usize {
        self.weights.len()
    }

    /// Draw `size` samples; returns `samples[d][i]` in internal representation.
    pub fn sample(&self, rng: &mut Rng, size: usize) -> Vec<Vec<f64>> {
        let last = self.cum_weights.len() - 1;
        let active: Vec<usize> = (0..size)
            .map(|_| {
                let u = rng.next_f64();
                self.cum_weights.partition_point(|c| *c <= u).min(last)
            })
            .collect();
        self.dims
            .iter()
            .map(|dim| match dim {
                Dim::Categorical(c) => active
                    .iter()
                    .map(|&k| {
                        let row = &c.probs[k * c.n_choices..(k + 1) * c.n_choices];
                        let u = rng.next_f64();
                        let mut cum = 0.0;
                        let mut idx = c.n_choices - 1;
                        for (i, p) in row.iter().enumerate().take(c.n_choices - 1) {
                            cum += p;
                            if cum >= u {
                                idx = i;
                                break;
                            }
                        }
                        idx as f64
                    })
                    .collect(),
                Dim::Numeric(d) => active
                    .iter()
                    .map(|&k| {
                        let (mu, sigma) = (d.mu[k], d.sigma[k]);
                        let a = (d.adapted_low - mu) / sigma;
                        let b = (d.adapted_high - mu) / sigma;
                        let mut x = truncnorm_ppf(rng.next_f64(), a, b) * sigma + mu;
                        if d.log {
                            x = x.exp();
                        }
                        if let Some(step) = d.step {
                            x = d.low + ((x - d.low) / step).round_ties_even() * step;
                        }
                        x.clamp(d.low, d.high)
                    })
                    .collect(),
            })
            .collect()
    }

    /// Log-density of each sample (`samples[d][i]`, internal representation).
    ///
    /// Equal to summing every kernel (`log_pdf_all_kernels`, kept in the
    /// tests as the reference) up to the order of floating-point additions:
    /// `log_sum_exp` drops terms more than 50 below the largest, so a
    /// kernel whose log term is provably below `L - 51` (with `L` the prior
    /// kernel's exact term, a lower bound on the largest) never counts.
    /// Dimensions are visited cheapest first; after each, kernels whose
    /// partial term plus an upper bound on the remaining dimensions
    /// (`rest_peak`) falls under that cut are dropped, so the expensive
    /// discrete cell masses are computed only for the few kernels near the
    /// sample. In a 6-dimensional space with 1,000 kernels, a handful
    /// survive.
    pub fn log_pdf(&self, samples: &[Vec<f64>]) -> Vec<f64> {
        self.log_pdf_with(samples, &mut self.cell_memos())
    }

    /// Empty memos of discrete cell masses for [`Parzen::log_pdf_with`].
    pub fn cell_memos(&self) -> CellMemos {
        CellMemos(
            self.dims
                .iter()
                .map(|dim| match dim {
                    Dim::Numeric(d) if d.step.is_some() && d.uniq_mu.len() <= MEMO_MAX_UNIQUE => {
                        Some(CellMemo::default())
                    }
                    _ => None,
                })
                .collect(),
        )
    }

    /// [`Parzen::log_pdf`], keeping the discrete cell masses it computes in
    /// `memos` (from this estimator's [`Parzen::cell_memos`]) for later
    /// samples with the same values, in this call or later ones.
    pub fn log_pdf_with(&self, samples: &[Vec<f64>], memos: &mut CellMemos) -> Vec<f64> {
        let mut scratch = Scratch::default();
        let n_s = samples.first().map_or(0, Vec::len);
        (0..n_s)
            .map(|i| self.log_pdf_at(samples, i, memos, &mut scratch))
            .collect()
    }

    /// [`Parzen::log_pdf_with`] of sample `i` alone.
    pub fn log_pdf_at(
        &self,
        samples: &[Vec<f64>],
        i: usize,
        memos: &mut CellMemos,
        scratch: &mut Scratch,
    ) -> f64 {
        let prior = self.prior_term(samples, i, memos);
        let cut = if prior.is_nan() {
            f64::NEG_INFINITY
        } else {
            prior - (DROP_BELOW_MAX + 1.0)
        };
        log_sum_exp(self.terms_reaching(samples, i, cut, memos, scratch))
    }

    /// Whether some kernel's log term (weight included) at sample `i` is
    /// above `threshold`: then the log-density is too (it is at least its
    /// largest term), without summing every kernel that counts in it. Only
    /// kernels that can reach the threshold are visited, usually a handful.
    pub fn any_term_above(
        &self,
        samples: &[Vec<f64>],
        i: usize,
        threshold: f64,
        memos: &mut CellMemos,
        scratch: &mut Scratch,
    ) -> bool {
        self.prior_term(samples, i, memos) > threshold
            || self
                .terms_reaching(samples, i, threshold, memos, scratch)
                .iter()
                .any(|&t| t > threshold)
    }

    /// The prior kernel's exact log term at sample `i`.
    fn prior_term(&self, samples: &[Vec<f64>], i: usize, memos: &mut CellMemos) -> f64 {
        let n_k = self.n_kernels();
        let prior = n_k - 1;
        debug_assert_eq!(memos.0.len(), self.dims.len());
        self.log_weights[prior]
            + self
                .dims
                .iter()
                .zip(memos.0.iter_mut())
                .enumerate()
                .map(|(d, (dim, memo))| match (dim, memo) {
                    (Dim::Numeric(num), Some(memo)) => memo.term(num, samples[d][i], prior),
                    _ => kernel_term(dim, n_k, prior, samples[d][i]),
                })
                .sum::<f64>()
    }

    /// The exact log terms (weight included) at sample `i` of the kernels
    /// whose term can reach `cut`, and perhaps a few below it: every kernel
    /// left out is provably below `cut`. Dimensions are visited cheapest
    /// first; after each, kernels whose partial term plus the most the
    /// remaining dimensions can add (`rest_peak`) is under `cut` go.
    fn terms_reaching<'s>(
        &self,
        samples: &[Vec<f64>],
        i: usize,
        cut: f64,
        memos: &mut CellMemos,
        scratch: &'s mut Scratch,
    ) -> &'s [f64] {
        let n_k = self.n_kernels();
        let xs = |d: usize| samples[d][i];
        let Scratch { alive, acc, ub } = scratch;
        alive.clear();
        acc.clear();
        let rest = |j: usize| &self.rest_peak[(j + 1) * n_k..(j + 2) * n_k];
        for (j, &d) in self.visit.iter().enumerate() {
            let dim = &self.dims[d];
            if j == 0 {
                first_dim(
                    dim,
                    n_k,
                    xs(d),
                    &self.log_weights,
                    rest(0),
                    self.blocked.as_ref(),
                    cut,
                    alive,
                    acc,
                );
                continue;
            }
            if is_discrete(dim) && !is_discrete(&self.dims[self.visit[j - 1]]) {
                // Before any exact cell mass: drop kernels that the bounds
                // of all discrete dimensions rule out.
                let bounds = self.visit[j..].iter().map(|&e| (&self.dims[e], xs(e)));
                retain_by_discrete_bounds(bounds, cut, alive, acc, ub);
            }
            let memo = memos.0[d].as_mut();
            accumulate(dim, n_k, xs(d), rest(j), cut, memo, alive, acc);
            retain_above(cut, rest(j), alive, acc);
        }
        acc
    }

    /// The straightforward log-density: every kernel, every dimension.
    #[cfg(test)]
    fn log_pdf_all_kernels(&self, samples: &[Vec<f64>]) -> Vec<f64> {
        let n_k = self.n_kernels();
        let n_s = samples.first().map_or(0, Vec::len);
        // Discrete dimensions: the per-kernel terms of each distinct value,
        // computed once (over unique kernels) and indexed per sample.
        let discrete: Vec<(Vec<Vec<f64>>, Vec<usize>)> = self
            .dims
            .iter()
            .zip(samples)
            .map(|(dim, xs)| match dim {
                Dim::Numeric(d) if d.step.is_some() => discrete_terms(d, xs),
                _ => (Vec::new(), Vec::new()),
            })
            .collect();
        // One sample at a time, so its row of kernel terms stays in L1.
        let mut row = vec![0.0; n_k];
        (0..n_s)
            .map(|i| {
                row.copy_from_slice(&self.log_weights);
                for ((dim, xs), (terms, which)) in self.dims.iter().zip(samples).zip(&discrete) {
                    let x = xs[i];
                    match dim {
                        Dim::Categorical(c) => {
                            let col =
                                &c.log_probs_by_choice[x as usize * n_k..(x as usize + 1) * n_k];
                            row.iter_mut().zip(col).for_each(|(r, l)| *r += l);
                        }
                        Dim::Numeric(d) if d.step.is_none() => {
                            let x = if d.log { x.ln() } else { x };
                            for (((r, mu), is), k) in
                                row.iter_mut().zip(&d.mu).zip(&d.inv_sigma).zip(&d.konst)
                            {
                                let z = (x - mu) * is;
                                *r += k - 0.5 * z * z;
                            }
                        }
                        Dim::Numeric(d) => {
                            let terms = &terms[which[i]];
                            row.iter_mut()
                                .zip(&d.uniq_of)
                                .for_each(|(r, &u)| *r += terms[u as usize]);
                        }
                    }
                }
                log_sum_exp(&row)
            })
            .collect()
    }
}

/// `log_sum_exp` drops terms this far below the largest (relative weight
/// below 2e-22).
const DROP_BELOW_MAX: f64 = 50.0;

/// Kernel `k`'s exact log term in dimension `dim` at `x` (the same
/// arithmetic as the full evaluation).
fn kernel_term(dim: &Dim, n_k: usize, k: usize, x: f64) -> f64 {
    match dim {
        Dim::Categorical(c) => c.log_probs_by_choice[x as usize * n_k + k],
        Dim::Numeric(d) if d.step.is_none() => {
            let x = if d.log { x.ln() } else { x };
            let z = (x - d.mu[k]) * d.inv_sigma[k];
            d.konst[k] - 0.5 * z * z
        }
        Dim::Numeric(d) => {
            let cell = Cell::new(d, x);
            cell_log_mass(
                cell.l,
                cell.r,
                cell.ln_width,
                d.mu[k],
                d.sigma[k],
                d.ln_sigma[k],
            ) - d.log_norm[k]
        }
    }
}

/// A grid cell `[l, r]` around a discrete value, in transformed space.
struct Cell {
    l: f64,
    r: f64,
    ln_width: f64,
}

impl Cell {
    fn new(d: &Numeric, x: f64) -> Self {
        let step = d.step.expect("discrete");
        let (mut l, mut r) = (x - step / 2.0, x + step / 2.0);
        if d.log {
            l = l.ln();
            r = r.ln();
        }
        Cell {
            l,
            r,
            ln_width: (r - l).ln(),
        }
    }
}

/// Add each kernel's largest possible log term in `dim` to `out`.
fn add_peaks(dim: &Dim, n_k: usize, out: &mut [f64]) {
    match dim {
        Dim::Categorical(c) => {
            for (k, o) in out.iter_mut().enumerate() {
                let best = (0..c.n_choices)
                    .map(|ch| c.log_probs_by_choice[ch * n_k + k])
                    .fold(f64::NEG_INFINITY, f64::max);
                *o += best;
            }
        }
        // `konst - z^2 / 2` is largest at z = 0.
        Dim::Numeric(d) if d.step.is_none() => {
            out.iter_mut().zip(&d.konst).for_each(|(o, k)| *o += k);
        }
        // A cell's mass is at most its width times the density's peak,
        // and never more than the whole (truncated) range's.
        Dim::Numeric(d) => {
            for (k, o) in out.iter_mut().enumerate() {
                let peak = d.max_ln_width - d.ln_sigma[k] - NORM_PDF_LOG_C - d.log_norm[k];
                *o += peak.min(0.0);
            }
        }
    }
}

/// Add dimension `dim`'s term at `x` to the surviving kernels' partial
/// terms. A discrete dimension first drops kernels whose bound (cell
/// width times the density at the cell's nearest point) cannot reach
/// `cut`, and computes exact cell masses only for the rest.
#[allow(clippy::too_many_arguments)]
fn accumulate(
    dim: &Dim,
    n_k: usize,
    x: f64,
    rest: &[f64],
    cut: f64,
    mut memo: Option<&mut CellMemo>,
    alive: &mut Vec<u32>,
    acc: &mut Vec<f64>,
) {
    match dim {
        Dim::Categorical(c) => {
            let col = &c.log_probs_by_choice[x as usize * n_k..(x as usize + 1) * n_k];
            for (a, &k) in acc.iter_mut().zip(alive.iter()) {
                *a += col[k as usize];
            }
        }
        Dim::Numeric(d) if d.step.is_none() => {
            let x = if d.log { x.ln() } else { x };
            // `alive` is in `first_dim`'s order (by centre when blocked),
            // so always index through it.
            for (a, &k) in acc.iter_mut().zip(alive.iter()) {
                let k = k as usize;
                let z = (x - d.mu[k]) * d.inv_sigma[k];
                *a += d.konst[k] - 0.5 * z * z;
            }
        }
        Dim::Numeric(d) => {
            let cell = Cell::new(d, x);
            let (centre, half) = (0.5 * (cell.l + cell.r), 0.5 * (cell.r - cell.l));
            let mut w = 0;
            for r in 0..alive.len() {
                let k = alive[r] as usize;
                let s = d.sigma[k];
                let bound = discrete_bound(d, &cell, centre, half, k);
                // NaN bounds are kept (never dropped on a comparison that fails).
                if reaches(acc[r] + bound + rest[k], cut) {
                    alive[w] = k as u32;
                    acc[w] = acc[r]
                        + match memo.as_deref_mut() {
                            Some(m) => m.term(d, x, k),
                            None => {
                                cell_log_mass(
                                    cell.l,
                                    cell.r,
                                    cell.ln_width,
                                    d.mu[k],
                                    s,
                                    d.ln_sigma[k],
                                ) - d.log_norm[k]
                            }
                        };
                    w += 1;
                }
            }
            alive.truncate(w);
            acc.truncate(w);
        }
    }
}

/// Up to this many distinct (centre, width) pairs in a discrete dimension,
/// `log_pdf` memoises its cell masses per value and pair (a row of that
/// many floats per distinct value). Kernels share pairs: a discrete
/// dimension has few values, so its kernels' centres repeat.
const MEMO_MAX_UNIQUE: usize = 256;

/// Buffers [`Parzen::log_pdf_at`] and [`Parzen::any_term_above`] reuse
/// from one sample to the next.
#[derive(Default)]
pub struct Scratch {
    alive: Vec<u32>,
    acc: Vec<f64>,
    ub: Vec<f64>,
}

/// Discrete cell masses an estimator has computed, per dimension (`None`
/// where there is nothing to keep: continuous and categorical dimensions,
/// and estimators with too many kernels for rows per value to pay).
/// Samples share discrete values, within an ask and across asks that
/// reuse the estimator.
pub struct CellMemos(Vec<Option<CellMemo>>);

/// One discrete dimension's cell-mass terms (`cell_log_mass - log_norm`)
/// by value and unique (centre, width) pair, computed on first use (NaN:
/// not yet).
#[derive(Default)]
struct CellMemo {
    /// Row of each value seen (by its bits).
    index: HashMap<u64, usize>,
    values: Vec<f64>,
    cells: Vec<Cell>,
    rows: Vec<Vec<f64>>,
    last: usize,
}

impl CellMemo {
    fn term(&mut self, d: &Numeric, x: f64, k: usize) -> f64 {
        if self.values.get(self.last).map(|v| v.to_bits()) != Some(x.to_bits()) {
            let next = self.values.len();
            self.last = *self.index.entry(x.to_bits()).or_insert(next);
            if self.last == next {
                self.values.push(x);
                self.cells.push(Cell::new(d, x));
                self.rows.push(vec![f64::NAN; d.uniq_mu.len()]);
            }
        }
        let u = d.uniq_of[k] as usize;
        let slot = &mut self.rows[self.last][u];
        if slot.is_nan() {
            let cell = &self.cells[self.last];
            *slot = cell_log_mass(
                cell.l,
                cell.r,
                cell.ln_width,
                d.uniq_mu[u],
                d.uniq_sigma[u],
                d.uniq_log_sigma[u],
            ) - d.uniq_log_norm[u];
        }
        *slot
    }
}

/// Whether an upper bound `v` may reach `cut` (NaN may: it is never
/// grounds to drop a kernel).
#[inline(always)]
fn reaches(v: f64, cut: f64) -> bool {
    v >= cut || v.is_nan()
}

fn is_discrete(dim: &Dim) -> bool {
    matches!(dim, Dim::Numeric(d) if d.step.is_some())
}

/// The first visited dimension for every kernel, keeping only those whose
/// weight, term and `rest` reach `cut` (one pass instead of add-then-filter).
#[allow(clippy::too_many_arguments)]
fn first_dim(
    dim: &Dim,
    n_k: usize,
    x: f64,
    log_weights: &[f64],
    rest: &[f64],
    blocked: Option<&Blocked>,
    cut: f64,
    alive: &mut Vec<u32>,
    acc: &mut Vec<f64>,
) {
    alive.resize(n_k, 0);
    acc.resize(n_k, 0.0);
    if let (Dim::Numeric(d), Some(bl)) = (dim, blocked) {
        let x = if d.log { x.ln() } else { x };
        return first_dim_blocked(bl, x, cut, alive, acc);
    }
    let mut w = 0;
    let mut push = |k: usize, v: f64| {
        alive[w] = k as u32;
        acc[w] = v;
        w += usize::from(reaches(v + rest[k], cut));
    };
    match dim {
        Dim::Numeric(d) if d.step.is_none() => {
            let x = if d.log { x.ln() } else { x };
            for (k, lw) in log_weights.iter().enumerate() {
                let z = (x - d.mu[k]) * d.inv_sigma[k];
                push(k, lw + (d.konst[k] - 0.5 * z * z));
            }
        }
        Dim::Categorical(c) => {
            let col = &c.log_probs_by_choice[x as usize * n_k..(x as usize + 1) * n_k];
            for (k, (lw, c)) in log_weights.iter().zip(col).enumerate() {
                push(k, lw + c);
            }
        }
        Dim::Numeric(_) => {
            for (k, lw) in log_weights.iter().enumerate() {
                push(k, lw + kernel_term(dim, n_k, k, x));
            }
        }
    }
    alive.truncate(w);
    acc.truncate(w);
}

/// `first_dim` for a continuous dimension in centre order: blocks that
/// cannot reach `cut` are skipped whole, the rest scanned in sequence.
fn first_dim_blocked(bl: &Blocked, x: f64, cut: f64, alive: &mut Vec<u32>, acc: &mut Vec<f64>) {
    let mut w = 0;
    for b in &bl.blocks {
        // Every kernel here has `weight + term + rest <= peak_max - z^2 / 2`
        // with `|z| >= gap / sigma_max`.
        let slack = b.peak_max - cut;
        let gap = (b.lo - x).max(x - b.hi).max(0.0);
        let radius = b.sigma_max * (2.0 * slack).sqrt() * (1.0 + 1e-9);
        if slack < 0.0 || gap > radius {
            continue;
        }
        for i in b.start..b.end {
            let z = (x - bl.mu[i]) * bl.inv_sigma[i];
            let v = bl.log_weight[i] + (bl.konst[i] - 0.5 * z * z);
            alive[w] = bl.order[i];
            acc[w] = v;
            w += usize::from(reaches(v + bl.rest[i], cut));
        }
    }
    alive.truncate(w);
    acc.truncate(w);
}

/// Sort kernels by centre in dimension `d` and cut them into blocks of
/// `BLOCK`, recording what `first_dim` needs to skip a block.
fn centre_blocks(d: &Numeric, log_weights: &[f64], rest: &[f64]) -> Blocked {
    let order = d.order.clone();
    let gather = |v: &[f64]| -> Vec<f64> { order.iter().map(|&k| v[k as usize]).collect() };
    let (mu, inv_sigma, konst) = (gather(&d.mu), gather(&d.inv_sigma), gather(&d.konst));
    let (log_weight, rest) = (gather(log_weights), gather(rest));
    let sigma = gather(&d.sigma);
    let blocks = (0..order.len())
        .step_by(BLOCK)
        .map(|start| {
            let end = (start + BLOCK).min(order.len());
            let max =
                |v: &dyn Fn(usize) -> f64| (start..end).map(v).fold(f64::NEG_INFINITY, nan_max);
            Block {
                start,
                end,
                lo: mu[start],
                hi: mu[end - 1],
                sigma_max: max(&|i| sigma[i]),
                peak_max: max(&|i| log_weight[i] + konst[i] + rest[i]),
            }
        })
        .collect();
    Blocked {
        blocks,
        order,
        mu,
        inv_sigma,
        konst,
        log_weight,
        rest,
    }
}

/// `max` where a NaN counts as infinite, so it never lets a block be skipped.
fn nan_max(acc: f64, v: f64) -> f64 {
    if v.is_nan() {
        f64::INFINITY
    } else {
        acc.max(v)
    }
}

/// Keep the kernels whose partial term plus the bounds of the given
/// (last, discrete) dimensions at their values reaches `cut`.
fn retain_by_discrete_bounds<'a>(
    dims: impl Iterator<Item = (&'a Dim, f64)>,
    cut: f64,
    alive: &mut Vec<u32>,
    acc: &mut Vec<f64>,
    scratch: &mut Vec<f64>,
) {
    let mut ub = std::mem::take(scratch);
    ub.clear();
    ub.extend_from_slice(acc);
    for (dim, x) in dims {
        let Dim::Numeric(d) = dim else { continue };
        let cell = Cell::new(d, x);
        let (centre, half) = (0.5 * (cell.l + cell.r), 0.5 * (cell.r - cell.l));
        for (u, &k) in ub.iter_mut().zip(alive.iter()) {
            let k = k as usize;
            *u += discrete_bound(d, &cell, centre, half, k);
        }
    }
    let mut w = 0;
    for r in 0..alive.len() {
        alive[w] = alive[r];
        acc[w] = acc[r];
        w += usize::from(reaches(ub[r], cut));
    }
    alive.truncate(w);
    acc.truncate(w);
    *scratch = ub;
}

/// An upper bound on kernel `k`'s term in discrete dimension `d` at `cell`:
/// the cell's width times the density at its point nearest the kernel's
/// centre, and at most the whole range's mass (log 0).
#[inline]
fn discrete_bound(d: &Numeric, cell: &Cell, centre: f64, half: f64, k: usize) -> f64 {
    let gap = (((centre - d.mu[k]).abs() - half) * d.inv_sigma[k]).max(0.0);
    (cell.ln_width - d.ln_sigma[k] - NORM_PDF_LOG_C - d.log_norm[k] - 0.5 * gap * gap).min(0.0)
}

/// Keep the kernels whose partial term plus `rest` (the most the other
/// dimensions can add) reaches `cut`.
fn retain_above(cut: f64, rest: &[f64], alive: &mut Vec<u32>, acc: &mut Vec<f64>) {
    let mut w = 0;
    for r in 0..alive.len() {
        let (k, a) = (alive[r], acc[r]);
        alive[w] = k;
        acc[w] = a;
        w += usize::from(reaches(a + rest[k as usize], cut));
    }
    alive.truncate(w);
    acc.truncate(w);
}

/// For a discrete dimension: the distinct sample values' terms per unique
/// kernel (log cell mass minus the kernel's log normaliser), and which
/// distinct value each sample has.
#[cfg(test)]
fn discrete_terms(d: &Numeric, xs: &[f64]) -> (Vec<Vec<f64>>, Vec<usize>) {
    let step = d.step.expect("discrete");
    let mut values: Vec<f64> = Vec::new();
    let mut terms: Vec<Vec<f64>> = Vec::new();
    let which = xs
        .iter()
        .map(|&x| {
            if let Some(p) = values.iter().position(|v| *v == x) {
                return p;
            }
            let (mut l, mut r) = (x - step / 2.0, x + step / 2.0);
            if d.log {
                l = l.ln();
                r = r.ln();
            }
            let ln_width = (r - l).ln();
            terms.push(
                d.uniq_mu
                    .iter()
                    .zip(&d.uniq_sigma)
                    .zip(&d.uniq_log_sigma)
                    .zip(&d.uniq_log_norm)
                    .map(|(((mu, s), ln_s), norm)| {
                        cell_log_mass(l, r, ln_width, *mu, *s, *ln_s) - norm
                    })
                    .collect(),
            );
            values.push(x);
            values.len() - 1
        })
        .collect();
    (terms, which)
}

/// Log of the normal(mu, s) mass on the grid cell `[l, r]` (`ln_s = ln s`,
/// `ln_width = ln(r - l)`). The mass is `2 h phi(z) sum_k He_2k(z) h^2k /
/// (2k+1)!` (`z` the cell centre and `h` its half-width in sigma units,
/// `He` the Hermite polynomials), which converges fast for narrow cells
/// and needs no erfc; cells 20 sigma away keep only the first term (such
/// kernels weigh < e^-150 and never matter); wide cells use the exact mass.
#[inline]
fn cell_log_mass(l: f64, r: f64, ln_width: f64, mu: f64, s: f64, ln_s: f64) -> f64 {
    let h = 0.5 * (r - l) / s;
    let z = (0.5 * (l + r) - mu) / s;
    let head = -0.5 * z * z - NORM_PDF_LOG_C + ln_width - ln_s;
    if z.abs() - h > 20.0 {
        return head;
    }
    if h * (z.abs() + 3.0) > SERIES_LIMIT {
        return log_gauss_mass((l - mu) / s, (r - mu) / s);
    }
    head + log_hermite_series(h, z)
}

/// Cells with `h (|z| + 3)` up to this use the series (no erfc): its terms
/// shrink like `(h |z|)^2k / (2k+1)!`, so it converges in a few terms and
/// stays accurate (see `the_cell_series_matches_the_exact_mass`).
const SERIES_LIMIT: f64 = 2.0;

/// `ln(sum_k He_2k(z) h^2k / (2k+1)!)`, the cell mass over its first-order
/// value `2 h phi(z)`.
#[inline]
fn log_hermite_series(h: f64, z: f64) -> f64 {
    let h2 = h * h;
    let (mut he_n, mut he_n1) = (1.0, z); // He_n, He_{n+1}
    let mut coef = 1.0; // h^n / (n+1)!
    let mut rest = 0.0; // the series minus its first term
    let mut n = 0.0;
    for _ in 0..40 {
        let he_n2 = z * he_n1 - (n + 1.0) * he_n;
        let he_n3 = z * he_n2 - (n + 2.0) * he_n1;
        n += 2.0;
        coef *= h2 / (n * (n + 1.0));
        let term = he_n2 * coef;
        rest += term;
        (he_n, he_n1) = (he_n2, he_n3);
        // Stop on the coefficient, not the term: a term can vanish where
        // He_n(z) has a root while later ones do not.
        if coef * (he_n.abs() + he_n1.abs() + 1.0) <= 1e-17 {
            break;
        }
    }
    if rest.abs() < 1e-5 {
        rest - 0.5 * rest * rest + rest * rest * rest / 3.0
    } else {
        rest.ln_1p()
    }
}

/// `ln(sum(exp(row)))`. Terms more than 50 below the maximum (relative
/// weight < 2e-22) are dropped; the rest use a branch-free `exp` that the
/// compiler vectorises.
fn log_sum_exp(row: &[f64]) -> f64 {
    // Eight independent lanes so the reductions vectorise and pipeline.
    const LANES: usize = 8;
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    let mut lane_max = [f64::NEG_INFINITY; LANES];
    for c in chunks.clone() {
        for i in 0..LANES {
            lane_max[i] = lane_max[i].max(c[i]);
        }
    }
    let max = tail
        .iter()
        .chain(&lane_max)
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return max;
    }
    let term = |v: f64| {
        let d = v - max;
        let keep = if d > -DROP_BELOW_MAX { 1.0 } else { 0.0 };
        keep * fast_exp(d.max(-DROP_BELOW_MAX))
    };
    let mut lane_sum = [0.0; LANES];
    for c in chunks {
        for i in 0..LANES {
            lane_sum[i] += term(c[i]);
        }
    }
    let sum: f64 = lane_sum.iter().sum::<f64>() + tail.iter().map(|&v| term(v)).sum::<f64>();
    sum.ln() + max
}

/// `exp(x)` for `x` in `[-50, 0]`, accurate to ~2 ulp: `x = n ln2 + r` with
/// `|r| <= ln2 / 2`, a degree-12 Taylor polynomial for `exp(r)` (truncation
/// below 2e-16) and `2^n` built from its bits. No branches, so it vectorises.
#[inline(always)]
#[allow(clippy::excessive_precision)]
fn fast_exp(x: f64) -> f64 {
    const LOG2E: f64 = std::f64::consts::LOG2_E;
    const LN2_HI: f64 = 6.931_471_803_691_238_2e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    const SHIFT: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52: adding it rounds to an integer
    let t = x * LOG2E + SHIFT;
    let n = t - SHIFT;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.0 / 479_001_600.0;
    for k in [
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = p * r + k;
    }
    let bits = ((t.to_bits() as i64 - SHIFT.to_bits() as i64 + 1023) << 52) as u64;
    p * f64::from_bits(bits)
}

/// A dimension's kernels from their centres (`kernel_centre` of each
/// observation) and, for numeric dimensions, their `centre_order`.
fn build_dim(dist: &Distribution, obs: &[f64], order: &[u32], params: ParzenParams) -> Dim {
    match dist {
        Distribution::Categorical { choices } => categorical(choices.len(), obs, params),
        Distribution::Float {
            low,
            high,
            log,
            step,
        } => Dim::Numeric(numeric(*low, *high, *log, *step, obs, order, params)),
        Distribution::Int {
            low,
            high,
            log,
            step,
        } => Dim::Numeric(numeric(
            *low as f64,
            *high as f64,
            *log,
            Some(*step as f64),
            obs,
            order,
            params,
        )),
    }
}

/// Smoothed one-hot kernels: each observation's row is the prior's share
/// on every choice plus one on the observed choice, normalised; the prior
/// kernel is uniform.
fn categorical(n_choices: usize, obs: &[f64], params: ParzenParams) -> Dim {
    let normalise = |row: &mut [f64]| {
        let s: f64 = row.iter().sum();
        if s > 0.0 {
            row.iter_mut().for_each(|v| *v /= s);
        }
    };
    if obs.is_empty() {
        let mut probs = vec![1.0 / n_choices as f64; n_choices];
        normalise(&mut probs);
        let log_probs_by_choice = probs.iter().map(|p| p.ln()).collect();
        return Dim::Categorical(Categorical {
            n_choices,
            probs,
            log_probs_by_choice,
        });
    }
    let n_k = obs.len() + 1;
    let share = params.prior_weight / n_k as f64;
    // Observation rows differ only in the observed choice: normalise one
    // row per choice (templates[c], the prior's row last) and copy.
    let mut templates = vec![share; (n_choices + 1) * n_choices];
    for (c, row) in templates.chunks_exact_mut(n_choices).enumerate() {
        if c < n_choices {
            row[c] += 1.0;
        }
        normalise(row);
    }
    let log_templates: Vec<f64> = templates.iter().map(|p| p.ln()).collect();
    let template_of = |k: usize| obs.get(k).map_or(n_choices, |&o| o as usize);
    let mut probs = Vec::with_capacity(n_k * n_choices);
    for k in 0..n_k {
        let t = template_of(k);
        probs.extend_from_slice(&templates[t * n_choices..(t + 1) * n_choices]);
    }
    let mut log_probs_by_choice = vec![0.0; n_k * n_choices];
    for (c, col) in log_probs_by_choice.chunks_exact_mut(n_k).enumerate() {
        for (k, v) in col.iter_mut().enumerate() {
            *v = log_templates[template_of(k) * n_choices + c];
        }
    }
    Dim::Categorical(Categorical {
        n_choices,
        probs,
        log_probs_by_choice,
    })
}

fn numeric(
    low: f64,
    high: f64,
    log: bool,
    step: Option<f64>,
    centres: &[f64],
    order: &[u32],
    params: ParzenParams,
) -> Numeric {
    let (mut a_low, mut a_high) = match step {
        Some(s) => (low - s / 2.0, high + s / 2.0),
        None => (low, high),
    };
    if log {
        a_low = a_low.ln();
        a_high = a_high.ln();
    }
    let mut mu = Vec::with_capacity(centres.len() + 1);
    mu.extend_from_slice(centres);
    let mut sigma = kernel_sigmas(&mu, order, a_low, a_high, params);
    // The prior kernel (index n) goes after every centre it does not
    // precede, as a stable sort would place it.
    let prior = 0.5 * (a_low + a_high);
    let at = order.partition_point(|&k| total_key(mu[k as usize]) <= total_key(prior));
    let mut full_order = Vec::with_capacity(order.len() + 1);
    full_order.extend_from_slice(&order[..at]);
    full_order.push(order.len() as u32);
    full_order.extend_from_slice(&order[at..]);
    mu.push(prior);
    sigma.push(a_high - a_low);

    let mut d = Numeric {
        mu,
        sigma,
        low,
        high,
        adapted_low: a_low,
        adapted_high: a_high,
        log,
        step,
        inv_sigma: Vec::new(),
        konst: Vec::new(),
        uniq_mu: Vec::new(),
        uniq_sigma: Vec::new(),
        uniq_log_sigma: Vec::new(),
        uniq_log_norm: Vec::new(),
        uniq_of: Vec::new(),
        ln_sigma: Vec::new(),
        log_norm: Vec::new(),
        max_ln_width: f64::NEG_INFINITY,
        order: full_order,
    };
    d.inv_sigma = d.sigma.iter().map(|s| 1.0 / s).collect();
    if step.is_none() {
        // Most kernels share the clipped minimum width: take its log once.
        let mut last_ln = (f64::NAN, f64::NAN);
        d.konst =
            d.mu.iter()
                .zip(&d.sigma)
                .map(|(m, &s)| {
                    if s.to_bits() != last_ln.0.to_bits() {
                        last_ln = (s, s.ln());
                    }
                    -last_ln.1 - log_gauss_mass((a_low - m) / s, (a_high - m) / s) - NORM_PDF_LOG_C
                })
                .collect();
    } else {
        // Kernels with the same centre are adjacent in centre order and
        // share at most three widths (the run's two ends and the clipped
        // minimum between them): compute each (centre, width) pair once.
        d.uniq_of = vec![0; d.mu.len()];
        let mut run = (u64::MAX, 0); // centre key, first unique entry of its run
        for &i in &d.order {
            let i = i as usize;
            let (m, s) = (d.mu[i], d.sigma[i]);
            if total_key(m) != run.0 {
                run = (total_key(m), d.uniq_mu.len());
            }
            let same = (run.1..d.uniq_mu.len()).find(|&u| d.uniq_sigma[u].to_bits() == s.to_bits());
            d.uniq_of[i] = match same {
                Some(u) => u as u32,
                None => {
                    d.uniq_mu.push(m);
                    d.uniq_sigma.push(s);
                    d.uniq_log_sigma.push(s.ln());
                    d.uniq_log_norm
                        .push(log_gauss_mass((a_low - m) / s, (a_high - m) / s));
                    (d.uniq_mu.len() - 1) as u32
                }
            };
        }
        d.ln_sigma = d
            .uniq_of
            .iter()
            .map(|&u| d.uniq_log_sigma[u as usize])
            .collect();
        d.log_norm = d
            .uniq_of
            .iter()
            .map(|&u| d.uniq_log_norm[u as usize])
            .collect();
        // Cells are equally wide, or (log) widest at the low end.
        let s = step.unwrap_or(1.0);
        d.max_ln_width = if log {
            ((low + s / 2.0).ln() - (low - s / 2.0).ln()).ln()
        } else {
            s.ln()
        };
    }
    d
}

/// A kernel's centre for an observation's internal value: its log for log
/// dimensions (kernels live in log space there), the value itself
/// otherwise (a categorical's choice index included).
pub fn kernel_centre(dist: &Distribution, internal: f64) -> f64 {
    match dist {
        Distribution::Float { log: true, .. } | Distribution::Int { log: true, .. } => {
            internal.ln()
        }
        _ => internal,
    }
}

/// `f64::total_cmp`'s order as an unsigned integer order: sorting centres by
/// this key (ties by index) is [`centre_order`].
#[inline]
pub fn total_key(v: f64) -> u64 {
    let b = v.to_bits();
    if b >> 63 == 1 { !b } else { b | (1 << 63) }
}

/// Indices of `values` in increasing `total_cmp` order, equal values in
/// index order (a stable sort), sorting plain integer keys (several times
/// faster than an index sort that compares through the slice).
pub fn centre_order(values: &[f64]) -> Vec<u32> {
    let mut keyed: Vec<(u64, u32)> = values
        .iter()
        .enumerate()
        .map(|(i, &v)| (total_key(v), i as u32))
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// Optuna's `compute_sigmas`: the larger gap to a sorted neighbour (the range
/// ends count as neighbours), optionally not for the two extreme kernels,
/// clipped to `[range / min(100, n + 2), range]` with the magic clip.
fn kernel_sigmas(
    mus: &[f64],
    order: &[u32],
    low: f64,
    high: f64,
    params: ParzenParams,
) -> Vec<f64> {
    let n = mus.len();
    if n == 0 {
        return Vec::new();
    }
    let mut sorted = Vec::with_capacity(n + 2);
    sorted.push(low);
    sorted.extend(order.iter().map(|&i| mus[i as usize]));
    sorted.push(high);
    let mut sorted_sigmas: Vec<f64> = (1..=n)
        .map(|i| (sorted[i] - sorted[i - 1]).max(sorted[i + 1] - sorted[i]))
        .collect();
    if !params.consider_endpoints && sorted.len() >= 4 {
        sorted_sigmas[0] = sorted[2] - sorted[1];
        sorted_sigmas[n - 1] = sorted[n] - sorted[n - 1];
    }
    let max_sigma = high - low;
    let min_sigma = if params.consider_magic_clip {
        (high - low) / (100.0f64).min(1.0 + (n + 1) as f64)
    } else {
        1e-12
    };
    // One spare slot: the caller appends the prior kernel's width.
    let mut sigmas = Vec::with_capacity(n + 1);
    sigmas.resize(n, 0.0);
    for (rank, &i) in order.iter().enumerate() {
        sigmas[i as usize] = sorted_sigmas[rank].clamp(min_sigma, max_sigma);
    }
    sigmas
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: ParzenParams = ParzenParams {
        prior_weight: 1.0,
        consider_magic_clip: true,
        consider_endpoints: false,
    };

    /// A random space of every kind of dimension.
    fn random_space(rng: &mut Rng) -> Vec<Distribution> {
        let mut dims = Vec::new();
        for _ in 0..1 + rng.below(6) {
            let d = match rng.below(8) {
                6 => Distribution::int(-5, 5, false, 1),
                7 => Distribution::float(-5.0, 5.0, false, None),
                0 => Distribution::float(-2.0, 3.0, false, None),
                1 => Distribution::float(1e-5, 1e-1, true, None),
                2 => Distribution::float(0.0, 1.0, false, Some(0.125)),
                3 => Distribution::int(16, 256, false, 16),
                4 => Distribution::int(1, 1000, true, 1),
                _ => Distribution::categorical(
                    (0..2 + rng.below(4))
                        .map(|i| crate::ParamValue::Int(i as i64))
                        .collect(),
                ),
            };
            dims.push(d.unwrap());
        }
        dims
    }

    /// Observations clustered near a few centres (so kernels overlap and
    /// repeat, as in a converging study) plus uniform ones.
    fn random_obs(rng: &mut Rng, dists: &[Distribution], n: usize) -> Vec<Vec<f64>> {
        use crate::sampler::random::sample_uniform;
        let centres: Vec<Vec<f64>> = (0..3)
            .map(|_| dists.iter().map(|d| sample_uniform(rng, d)).collect())
            .collect();
        let mut obs = vec![Vec::with_capacity(n); dists.len()];
        for _ in 0..n {
            let c = &centres[rng.below(3)];
            let uniform = rng.next_f64() < 0.3;
            for (j, d) in dists.iter().enumerate() {
                let v = if uniform || rng.next_f64() < 0.2 {
                    sample_uniform(rng, d)
                } else {
                    c[j]
                };
                obs[j].push(v);
            }
        }
        obs
    }

    #[test]
    fn pruned_log_pdf_equals_the_sum_over_every_kernel() {
        use crate::sampler::random::sample_uniform;
        let mut rng = Rng::seed_from(42);
        let mut compared = 0;
        for case in 0..3000 {
            // Every tenth: six continuous dimensions, where the first keeps
            // every kernel (many dimensions left to lose in) and the
            // survivors stay in block order.
            let dists = if case % 10 == 0 {
                vec![Distribution::float(0.0, 1.0, false, None).unwrap(); 6]
            } else {
                random_space(&mut rng)
            };
            let refs: Vec<&Distribution> = dists.iter().collect();
            let n = [0, 1, 2, 5, 30, 120, 400][case % 7];
            let obs = random_obs(&mut rng, &dists, n);
            let weights = crate::sampler::default_weights(n);
            let params = ParzenParams {
                prior_weight: [1.0, 0.3, 2.0][case % 3],
                consider_magic_clip: case % 5 != 0,
                consider_endpoints: case % 4 == 0,
            };
            let p = Parzen::new(&refs, &obs, &weights, params);
            // Points from the estimator itself and uniform ones.
            let mut points = p.sample(&mut rng, 24);
            for (col, d) in points.iter_mut().zip(&dists) {
                col.extend((0..8).map(|_| sample_uniform(&mut rng, d)));
            }
            let fast = p.log_pdf(&points);
            let full = p.log_pdf_all_kernels(&points);
            for (a, b) in fast.iter().zip(&full) {
                assert!(
                    (a - b).abs() <= 1e-12 * (1.0 + b.abs()),
                    "case {case}: {a} vs {b} ({dists:?}, n = {n})"
                );
                compared += 1;
            }
        }
        assert_eq!(compared, 3000 * 32);
    }

    #[test]
    fn sigmas_follow_optuna() {
        // mus 0.2, 0.5, 0.6 in [0, 1]: gaps with endpoints, extremes use the
        // inner neighbour, min sigma = 1 / (1 + 4) = 0.2.
        let mus = [0.5, 0.2, 0.6];
        let s = kernel_sigmas(&mus, &centre_order(&mus), 0.0, 1.0, P);
        assert_eq!(s, vec![0.3, 0.3, 0.2]);
    }

    #[test]
    fn fast_exp_is_accurate() {
        for i in 0..=5000 {
            let x = -50.0 * i as f64 / 5000.0;
            let (fast, exact) = (fast_exp(x), x.exp());
            assert!(
                ((fast - exact) / exact).abs() < 1e-15,
                "{x}: {fast} vs {exact}"
            );
        }
    }

    #[test]
    fn density_integrates_to_one() {
        let d = Distribution::float(0.0, 2.0, false, None).unwrap();
        let p = Parzen::new(&[&d], &[vec![0.1, 1.5, 1.9]], &[1.0, 1.0, 1.0], P);
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|i| (i as f64 + 0.5) * 2.0 / n as f64).collect();
        let integral: f64 = p
            .log_pdf(&[xs])
            .iter()
            .map(|l| l.exp() * 2.0 / n as f64)
            .sum();
        assert!((integral - 1.0).abs() < 1e-6, "{integral}");

        let i = Distribution::int(1, 9, false, 2).unwrap();
        let p = Parzen::new(&[&i], &[vec![3.0, 3.0, 9.0]], &[1.0, 1.0, 1.0], P);
        let mass: f64 = p
            .log_pdf(&[vec![1.0, 3.0, 5.0, 7.0, 9.0]])
            .iter()
            .map(|l| l.exp())
            .sum();
        assert!((mass - 1.0).abs() < 1e-12, "{mass}");
    }

    /// Wherever `cell_log_mass` uses the series, it equals the exact mass
    /// (erfc-based) to a few ulps, and does so well past the limit. (Below
    /// h = 0.05 the exact mass itself loses digits to cancellation, so it
    /// cannot judge the series there.)
    #[test]
    fn the_cell_series_matches_the_exact_mass() {
        for limit in [SERIES_LIMIT, 1.5 * SERIES_LIMIT] {
            let mut worst: f64 = 0.0;
            for i in 0..=400 {
                for j in 0..=400 {
                    let h = 0.05 + i as f64 / 400.0;
                    let z = -25.0 + 50.0 * j as f64 / 400.0;
                    if h * (z.abs() + 3.0) > limit || z.abs() - h > 20.0 {
                        continue;
                    }
                    let head = -0.5 * z * z - NORM_PDF_LOG_C + (2.0 * h).ln();
                    let series = head + log_hermite_series(h, z);
                    let exact = log_gauss_mass(z - h, z + h);
                    worst = worst.max((series - exact).abs() / exact.abs().max(1.0));
                }
            }
            assert!(worst < 1e-14, "limit {limit}: {worst:e}");
        }
    }

    #[test]
    fn narrow_cells_match_the_exact_mass() {
        for &(l, r, mu, s) in &[
            (4.0, 4.001, 4.2, 0.5),
            (-1.0, -0.999, 0.0, 0.3),
            (10.0, 10.01, 0.0, 2.0),
            (0.0, 0.05, 0.3, 0.1),
            (1.0, 1.02, 0.0, 0.1),
            (232.0, 248.0, 240.0, 51.2),
            (232.0, 248.0, 230.0, 51.2),
            (232.0, 248.0, 160.0, 80.0),
            (0.0, 0.1, 0.02, 0.4),
        ] {
            let fast = cell_log_mass(l, r, (r - l).ln(), mu, s, s.ln());
            let exact = log_gauss_mass((l - mu) / s, (r - mu) / s);
            assert!((fast - exact).abs() < 1e-9, "{fast} vs {exact}");
        }
        // Far cells are only approximated, but stay negligible.
        let far = cell_log_mass(3.0, 4.0, 0.0, 0.0, 0.05, 0.05f64.ln());
        assert!(far < -150.0 && log_gauss_mass(60.0, 80.0) < -150.0);
    }
}
