//! Optuna's `_ParzenEstimator`: a mixture of product kernels, one kernel per
//! observation plus a prior kernel. Numeric dimensions use normal kernels
//! truncated to the (log-transformed, step-widened) range; discrete ones
//! integrate each kernel over the grid cell; categoricals use smoothed
//! one-hot kernels.
//!
//! The log-density of a sample sums every kernel, as Optuna does, and is
//! made cheap by layout rather than by skipping kernels: per-kernel
//! constants are computed once per estimator, each dimension's
//! contribution is a contiguous per-kernel slice, and one branch-free,
//! vectorised pass (`rows`) adds them and takes the log-sum-exp. The
//! expensive part, discrete cell masses, comes from a [`CellCache`] that an
//! estimator hands on to the next one of the same search space
//! ([`Parzen::recycle`]), so a running study computes each (value,
//! kernel) cell mass once rather than once per ask; the log weights are
//! handed on too, and reused when the next estimator's weights are the
//! same (a study of constant size). An estimator whose observations
//! change by a few is updated in place instead (`update`), with the
//! same result.
//!
//! [`Evaluator`] also gives single kernels' terms, with the same
//! arithmetic, so that a caller can rule a sample out from a few kernels
//! without its full density (the TPE's candidate screening), and cheap
//! `f32` guesses of which kernels to try (`screen`).

mod cells;
mod kernels;
mod rows;
mod screen;
mod update;

pub use cells::CellCache;
use rows::{Part, log_density_row, terms_log_sum_exp};
use screen::Guesses;
pub use screen::MAX_CARRIERS;

use super::transform::{from_transformed, transformed_range};
use crate::distribution::Distribution;
use crate::rng::Rng;
use crate::special::{NORM_PDF_LOG_C, truncnorm_ppf_with_tails, truncnorm_tails};
use kernels::Kernels;
use rustc_hash::FxHashMap;

/// The estimator's options (Optuna's `_ParzenEstimatorParameters`).
#[derive(Debug, Clone, Copy)]
pub struct ParzenParams {
    /// [`crate::TpeConfig::prior_weight`].
    pub prior_weight: f64,
    /// [`crate::TpeConfig::consider_magic_clip`].
    pub consider_magic_clip: bool,
    /// [`crate::TpeConfig::consider_endpoints`].
    pub consider_endpoints: bool,
}

/// Numeric kernels in transformed space.
struct Numeric {
    /// Range bounds in the original space (samples are clipped to them).
    low: f64,
    high: f64,
    /// Range bounds in transformed space (log, widened by half a step).
    adapted_low: f64,
    adapted_high: f64,
    log: bool,
    step: Option<f64>,
    mu: Kernels<f64>,
    sigma: Kernels<f64>,
    /// `1 / sigma`; continuous only, `-ln(sigma) - ln(mass) - ln(sqrt(2 pi))`.
    inv_sigma: Kernels<f64>,
    konst: Kernels<f64>,
    /// Discrete only: each kernel's (centre, width) pair in the
    /// dimension's [`CellCache`], and the log of its normalised density's
    /// peak (for the screening's guesses); `distinct_pairs`: each id in
    /// `pair` once.
    pair: Kernels<u32>,
    distinct_pairs: Vec<u32>,
    peak: Kernels<f64>,
    /// `(total_key(centre), id)` of each observation kernel, in centre
    /// order (the prior excluded): its neighbours, for [`Parzen::update`].
    sorted: Kernels<(u64, u64)>,
    /// Each kernel's truncated normal in standard units, `(a, b)` and
    /// [`truncnorm_tails`] of them, computed when the kernel is first
    /// drawn from (an estimator that is drawn from, the "below" one, is
    /// reused across asks while its trials are unchanged).
    tails: Vec<Option<Tails>>,
}

/// A kernel's standard bounds `(a, b)` and `(ndtr(a), ndtr(-b))`.
type Tails = ((f64, f64), (f64, f64));

impl Numeric {
    fn transform(&self, x: f64) -> f64 {
        if self.log { x.ln() } else { x }
    }
}

struct Categorical {
    n_choices: usize,
    /// Row-major `[template][choice]` probabilities: an observation's row
    /// depends only on its choice (template `c`), the prior's is uniform
    /// (template `n_choices`).
    templates: Vec<f64>,
    /// Each kernel's template.
    template: Kernels<u32>,
    /// `[choice][kernel]` log-probabilities, for densities.
    log_probs_by_choice: Vec<Kernels<f64>>,
}

// One per dimension: boxing would only add indirection.
#[allow(clippy::large_enum_variant)]
enum Dim {
    Numeric(Numeric),
    Categorical(Categorical),
}

/// A Parzen estimator over a fixed, ordered list of dimensions.
pub struct Parzen {
    w: Weights,
    dims: Vec<Dim>,
    /// One per dimension (only discrete ones use theirs).
    cells: Vec<CellCache>,
    /// Each observation's id (the caller's, ascending: a trial number),
    /// by which [`Parzen::update`] finds kernels.
    ids: Kernels<u64>,
}

/// What an estimator hands on to the next one over the same
/// distributions ([`Parzen::recycle`]): its cell caches, and its weights
/// with what they were made from.
#[derive(Default)]
pub struct Recycled {
    cells: Vec<CellCache>,
    weights: Option<Weights>,
}

/// The mixture weights, and what they were made from.
struct Weights {
    obs_weights: Vec<f64>,
    prior_weight: f64,
    weights: Vec<f64>,
    log_weights: Vec<f64>,
    cum_weights: Vec<f64>,
}

impl Weights {
    /// The mixture weights: the observations' then the prior's,
    /// normalised (a lone prior when there are no observations).
    fn new(obs_weights: &[f64], prior_weight: f64) -> Self {
        let mut weights: Vec<f64> = if obs_weights.is_empty() {
            vec![1.0]
        } else {
            let mut w = Vec::with_capacity(obs_weights.len() + 1);
            w.extend_from_slice(obs_weights);
            w.push(prior_weight);
            w
        };
        let total: f64 = weights.iter().sum();
        weights.iter_mut().for_each(|w| *w /= total);
        let log_weights = weights.iter().map(|w| w.ln()).collect();
        let mut acc = 0.0;
        let cum_weights = weights
            .iter()
            .map(|w| {
                acc += w;
                acc
            })
            .collect();
        Weights {
            obs_weights: obs_weights.to_vec(),
            prior_weight,
            weights,
            log_weights,
            cum_weights,
        }
    }

    fn made_from(&self, obs_weights: &[f64], prior_weight: f64) -> bool {
        self.prior_weight.to_bits() == prior_weight.to_bits()
            && self.obs_weights.len() == obs_weights.len()
            && self
                .obs_weights
                .iter()
                .zip(obs_weights)
                .all(|(a, b)| a.to_bits() == b.to_bits())
    }
}

impl Parzen {
    /// Build from observations (`obs[d][i]`: internal value of dimension `d`
    /// in observation `i`) with per-observation weights (before the prior).
    #[cfg(any(test, feature = "testing"))]
    pub fn new(
        dists: &[&Distribution],
        obs: &[Vec<f64>],
        obs_weights: &[f64],
        params: ParzenParams,
    ) -> Self {
        let (centres, orders) = centres_and_orders(dists, obs);
        let ids: Vec<u64> = (0..obs_weights.len() as u64).collect();
        Self::from_centres(
            dists,
            &centres,
            &orders,
            &ids,
            obs_weights,
            params,
            Recycled::default(),
        )
    }

    /// [`Parzen::new`] from what it derives first, for a caller that keeps
    /// it across estimators: `centres[d][i]` is [`kernel_centre`] of the
    /// observation, and `orders[d]` (numeric dimensions; empty for
    /// categoricals) is [`centre_order`] of `centres[d]`. `ids` name the
    /// observations, ascending (for a later [`Parzen::update`]).
    /// `recycled` is what an earlier estimator over the same distributions
    /// left ([`Parzen::recycle`]), or the default. The result is the same,
    /// bit for bit.
    pub fn from_centres(
        dists: &[&Distribution],
        centres: &[Vec<f64>],
        orders: &[Vec<u32>],
        ids: &[u64],
        obs_weights: &[f64],
        params: ParzenParams,
        recycled: Recycled,
    ) -> Self {
        debug_assert!(
            dists.iter().zip(centres).zip(orders).all(|((d, c), o)| {
                matches!(d, Distribution::Categorical { .. }) || *o == centre_order(c)
            }),
            "orders must be the centres' order"
        );
        debug_assert!(ids.is_sorted_by(|a, b| a < b), "ids must ascend");
        let Recycled { mut cells, weights } = recycled;
        let w = match weights {
            Some(w) if w.made_from(obs_weights, params.prior_weight) => w,
            _ => Weights::new(obs_weights, params.prior_weight),
        };
        cells.resize_with(dists.len(), CellCache::default);
        let dims: Vec<Dim> = dists
            .iter()
            .zip(centres)
            .zip(orders)
            .zip(&mut cells)
            .map(|(((dist, c), o), cells)| build_dim(dist, c, o, ids, params, cells))
            .collect();
        Parzen {
            w,
            dims,
            cells,
            ids: ids.to_vec().into(),
        }
    }

    /// What the next estimator over the same distributions can reuse.
    pub fn recycle(self) -> Recycled {
        Recycled {
            cells: self.cells,
            weights: Some(self.w),
        }
    }

    /// Observation kernels (the prior's not counted).
    pub fn n_observations(&self) -> usize {
        self.ids.len()
    }

    /// Kernels, the prior's included.
    #[cfg(any(test, feature = "testing"))]
    pub fn n_kernels(&self) -> usize {
        self.w.weights.len()
    }

    /// Draw `size` samples; returns `samples[d][i]` in internal representation.
    pub fn sample(&mut self, rng: &mut Rng, size: usize) -> Vec<Vec<f64>> {
        let last = self.w.cum_weights.len() - 1;
        let active: Vec<usize> = (0..size)
            .map(|_| {
                let u = rng.next_f64();
                self.w.cum_weights.partition_point(|c| *c <= u).min(last)
            })
            .collect();
        self.dims
            .iter_mut()
            .map(|dim| match dim {
                Dim::Categorical(c) => active
                    .iter()
                    .map(|&k| {
                        let t = c.template[k] as usize;
                        let row = &c.templates[t * c.n_choices..(t + 1) * c.n_choices];
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
                        if d.tails.len() <= k {
                            d.tails.resize(d.mu.len(), None);
                        }
                        let (ab, tails) = *d.tails[k].get_or_insert_with(|| {
                            let a = (d.adapted_low - mu) / sigma;
                            let b = (d.adapted_high - mu) / sigma;
                            ((a, b), truncnorm_tails(a, b))
                        });
                        let q = rng.next_f64();
                        let x = truncnorm_ppf_with_tails(q, ab.0, ab.1, tails) * sigma + mu;
                        from_transformed(x, d.low, d.high, d.log, d.step)
                    })
                    .collect(),
            })
            .collect()
    }

    /// Log-density of each sample (`samples[d][i]`, internal representation).
    pub fn log_pdf(&mut self, samples: &[Vec<f64>]) -> Vec<f64> {
        let n_s = samples.first().map_or(0, Vec::len);
        let mut ev = self.evaluator(samples);
        (0..n_s).map(|i| ev.log_pdf(i)).collect()
    }

    /// Densities and kernel terms of `samples`, one sample at a time.
    pub fn evaluator<'p>(&'p mut self, samples: &'p [Vec<f64>]) -> Evaluator<'p> {
        let discrete = self
            .dims
            .iter()
            .zip(&mut self.cells)
            .zip(samples)
            .map(|((dim, cells), xs)| match dim {
                Dim::Numeric(d) if d.step.is_some() => {
                    let step = d.step.expect("discrete");
                    let mut local: FxHashMap<u64, u32> = FxHashMap::default();
                    let mut rows = Vec::new();
                    let of_sample = xs
                        .iter()
                        .map(|&x| {
                            let next = rows.len() as u32;
                            let at = *local.entry(x.to_bits()).or_insert(next);
                            if at == next {
                                rows.push(cells.row(x, step, d.log));
                            }
                            at
                        })
                        .collect();
                    let expanded = vec![Vec::new(); rows.len()];
                    DiscreteRows {
                        of_sample,
                        rows,
                        expanded,
                    }
                }
                _ => DiscreteRows::default(),
            })
            .collect();
        // Each continuous dimension's samples in transformed space, once
        // (a log dimension's logarithm is otherwise taken per term).
        let transformed = (self.dims.iter().zip(samples))
            .map(|(dim, xs)| match dim {
                Dim::Numeric(d) if d.step.is_none() => xs.iter().map(|&x| d.transform(x)).collect(),
                _ => Vec::new(),
            })
            .collect();
        Evaluator {
            log_weights: &self.w.log_weights,
            dims: &self.dims,
            cells: &mut self.cells,
            samples,
            transformed,
            discrete,
            row: Vec::with_capacity(self.w.weights.len()),
            guesses: None,
        }
    }
}

/// A discrete dimension's rows in one evaluation: each sample's distinct
/// value, that value's row in the cell cache, and its terms per kernel
/// (filled when a full density first needs them).
#[derive(Default)]
struct DiscreteRows {
    of_sample: Vec<u32>,
    rows: Vec<u32>,
    expanded: Vec<Vec<f64>>,
}

/// One estimator's densities at a fixed set of samples.
pub struct Evaluator<'p> {
    log_weights: &'p [f64],
    dims: &'p [Dim],
    cells: &'p mut [CellCache],
    samples: &'p [Vec<f64>],
    /// Per dimension, the samples in transformed space (continuous
    /// dimensions; empty for the others).
    transformed: Vec<Vec<f64>>,
    /// Per dimension (empty for all but discrete ones).
    discrete: Vec<DiscreteRows>,
    row: Vec<f64>,
    /// The screening's guesses, made on the first screening.
    guesses: Option<Guesses>,
}

impl Evaluator<'_> {
    /// Sample `i`'s log-density.
    pub fn log_pdf(&mut self, i: usize) -> f64 {
        for ((dim, cells), rows) in self
            .dims
            .iter()
            .zip(self.cells.iter_mut())
            .zip(&mut self.discrete)
        {
            if let Dim::Numeric(d) = dim
                && d.step.is_some()
            {
                let local = rows.of_sample[i] as usize;
                if rows.expanded[local].is_empty() {
                    cells.expand(
                        rows.rows[local],
                        &d.pair,
                        &d.distinct_pairs,
                        &mut rows.expanded[local],
                    );
                }
            }
        }
        let parts = self
            .dims
            .iter()
            .zip(&self.discrete)
            .zip(self.samples)
            .zip(&self.transformed)
            .map(|(((dim, rows), xs), ts)| part(dim, rows, xs[i], ts, i, self.log_weights.len()));
        // A few dimensions' parts on the stack: this runs for every
        // candidate, and independent sampling has one dimension.
        const ON_STACK: usize = 8;
        let mut stack = [Part::Terms(&[]); ON_STACK];
        let heap: Vec<Part<'_>>;
        let parts: &[Part<'_>] = if self.dims.len() <= ON_STACK {
            let mut filled = 0;
            for (slot, p) in stack.iter_mut().zip(parts) {
                *slot = p;
                filled += 1;
            }
            &stack[..filled]
        } else {
            heap = parts.collect();
            &heap
        };
        log_density_row(self.log_weights, parts, &mut self.row)
    }

    /// Whether the exact terms of `kernels` at sample `i` prove its
    /// log-density above `limit`: one term above it, or their log-sum-exp
    /// (the full density's arithmetic on a subset of its terms, so never
    /// above it but for rounding far below the caller's margin).
    pub fn exceeds(&mut self, i: usize, kernels: &[u32], limit: f64) -> bool {
        // (The terms on the stack: this runs for nearly every candidate.)
        let mut stack = [0.0; MAX_CARRIERS];
        let mut heap = Vec::new();
        let terms = if kernels.len() <= MAX_CARRIERS {
            &mut stack[..kernels.len()]
        } else {
            heap.resize(kernels.len(), 0.0);
            &mut heap[..]
        };
        for (term, &k) in terms.iter_mut().zip(kernels) {
            *term = self.kernel_term(i, k as usize);
            if *term > limit {
                return true;
            }
        }
        terms.len() > 1 && terms_log_sum_exp(terms) > limit
    }

    /// Kernel `k`'s log term (weight included) at sample `i`: the number
    /// the full density adds for it, bit for bit (a discrete dimension's
    /// term comes from the cell cache when its row is not expanded).
    pub fn kernel_term(&mut self, i: usize, k: usize) -> f64 {
        let n_k = self.log_weights.len();
        let mut t = self.log_weights[k];
        for ((((dim, cells), rows), xs), ts) in self
            .dims
            .iter()
            .zip(self.cells.iter_mut())
            .zip(&self.discrete)
            .zip(self.samples)
            .zip(&self.transformed)
        {
            t += match dim {
                Dim::Numeric(d) if d.step.is_some() => {
                    let local = rows.of_sample[i] as usize;
                    match rows.expanded[local].get(k) {
                        Some(&term) => term,
                        None => cells.term(rows.rows[local], d.pair[k]),
                    }
                }
                _ => part(dim, rows, xs[i], ts, i, n_k).term(k),
            };
        }
        t
    }
}

/// Dimension `dim`'s part of sample `i`'s row (`x` its value there,
/// `transformed` the samples' transformed values if it is continuous).
fn part<'a>(
    dim: &'a Dim,
    rows: &'a DiscreteRows,
    x: f64,
    transformed: &[f64],
    i: usize,
    n_k: usize,
) -> Part<'a> {
    match dim {
        Dim::Categorical(c) => {
            let choice = x as usize;
            Part::Terms(&c.log_probs_by_choice[choice][..n_k])
        }
        Dim::Numeric(d) if d.step.is_none() => Part::Continuous {
            x: transformed[i],
            mu: &d.mu,
            inv_sigma: &d.inv_sigma,
            konst: &d.konst,
        },
        Dim::Numeric(_) => Part::Terms(&rows.expanded[rows.of_sample[i] as usize]),
    }
}

/// A dimension's kernels from their centres (`kernel_centre` of each
/// observation) and, for numeric dimensions, their `centre_order`.
fn build_dim(
    dist: &Distribution,
    obs: &[f64],
    order: &[u32],
    ids: &[u64],
    params: ParzenParams,
    cells: &mut CellCache,
) -> Dim {
    match dist {
        Distribution::Categorical { choices } => categorical(choices.len(), obs, params),
        Distribution::Float {
            low,
            high,
            log,
            step,
        } => Dim::Numeric(numeric(
            *low, *high, *log, *step, obs, order, ids, params, cells,
        )),
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
            ids,
            params,
            cells,
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
    let n_k = obs.len() + 1;
    let share = if obs.is_empty() {
        1.0 / n_choices as f64
    } else {
        params.prior_weight / n_k as f64
    };
    // Observation rows differ only in the observed choice: normalise one
    // row per choice (templates[c], the prior's row last) and index them.
    let mut templates = vec![share; (n_choices + 1) * n_choices];
    for (c, row) in templates.chunks_exact_mut(n_choices).enumerate() {
        if c < n_choices && !obs.is_empty() {
            row[c] += 1.0;
        }
        normalise(row);
    }
    let template: Vec<u32> = obs
        .iter()
        .map(|&o| o as u32)
        .chain([n_choices as u32])
        .collect();
    let log_templates: Vec<f64> = templates.iter().map(|p| p.ln()).collect();
    let log_probs_by_choice = (0..n_choices)
        .map(|c| {
            (template.iter())
                .map(|&t| log_templates[t as usize * n_choices + c])
                .collect()
        })
        .collect();
    Dim::Categorical(Categorical {
        n_choices,
        templates,
        template: template.into(),
        log_probs_by_choice,
    })
}

/// A numeric dimension's kernels: Optuna's widths (see [`kernel_sigmas`])
/// and, in one pass over the kernels in centre order, what the densities
/// need of each: a continuous kernel's `1 / sigma` and log constant, a
/// discrete kernel's pair in the cell cache (looked up only when the
/// (centre, width) pair differs from the last one: equal centres are
/// adjacent in this order and mostly share the clipped minimum width).
#[allow(clippy::too_many_arguments)]
fn numeric(
    low: f64,
    high: f64,
    log: bool,
    step: Option<f64>,
    centres: &[f64],
    order: &[u32],
    ids: &[u64],
    params: ParzenParams,
    cells: &mut CellCache,
) -> Numeric {
    let (a_low, a_high) = transformed_range(low, high, log, step);
    let n_k = centres.len() + 1;
    let mut mu = Vec::with_capacity(n_k);
    mu.extend_from_slice(centres);
    let mut sigma = kernel_sigmas(&mu, order, a_low, a_high, params);
    mu.push(0.5 * (a_low + a_high));
    sigma.push(a_high - a_low);
    let inv_sigma = sigma.iter().map(|s| 1.0 / s).collect();
    let (mut konst, mut pair, mut peak) = (Vec::new(), Vec::new(), Vec::new());
    let mut distinct_pairs = Vec::new();
    let kernels = order.iter().map(|&k| k as usize).chain([n_k - 1]);
    cells.trim();
    if step.is_none() {
        konst.resize(n_k, 0.0);
        // (width bits, its log) of the last kernel.
        let mut last = (u64::MAX, 0.0);
        for k in kernels {
            let (m, s) = (mu[k], sigma[k]);
            let ln_sigma = || {
                if s.to_bits() != last.0 {
                    last = (s.to_bits(), s.ln());
                }
                last.1
            };
            konst[k] = continuous_konst(m, s, (a_low, a_high), ln_sigma, cells);
        }
    } else {
        pair.resize(n_k, 0);
        peak.resize(n_k, 0.0);
        let mut last = (u64::MAX, u64::MAX, (0, 0.0));
        for k in kernels {
            let (m, s) = (mu[k], sigma[k]);
            if (m.to_bits(), s.to_bits()) != (last.0, last.1) {
                last = (m.to_bits(), s.to_bits(), cells.pair(m, s, a_low, a_high));
            }
            (pair[k], peak[k]) = last.2;
        }
        distinct_pairs = cells.distinct(&pair);
    }
    Numeric {
        low,
        high,
        adapted_low: a_low,
        adapted_high: a_high,
        log,
        step,
        mu: mu.into(),
        sigma: sigma.into(),
        inv_sigma,
        konst: konst.into(),
        pair: pair.into(),
        distinct_pairs,
        peak: peak.into(),
        sorted: order
            .iter()
            .map(|&k| (total_key(centres[k as usize]), ids[k as usize]))
            .collect(),
        tails: Vec::new(),
    }
}

/// A continuous kernel's log constant: `-ln(sigma) - ln(sqrt(2 pi))`
/// less the log of its mass on the range `(a_low, a_high)` (`ln_sigma`
/// gives `sigma.ln()`, which a caller may have at hand).
///
/// Far from both ends the truncation loses nothing: the normaliser's log
/// is exactly 0 (as `log_gauss_mass` finds, with a margin for rounding).
/// Near an end it needs erfc: the cache keeps it by (centre, width), which
/// repeat from ask to ask.
fn continuous_konst(
    m: f64,
    s: f64,
    (a_low, a_high): (f64, f64),
    ln_sigma: impl FnOnce() -> f64,
    cells: &mut CellCache,
) -> f64 {
    if m - a_low > FAR * s && a_high - m > FAR * s {
        -ln_sigma() - NORM_PDF_LOG_C
    } else {
        cells.pair(m, s, a_low, a_high).1
    }
}

/// Kernels more than this many widths from both ends of the range have a
/// truncation normaliser of exactly 1 (`log_gauss_mass` treats tails
/// beyond 8.5 as 0; the margin covers the rounding of `(end - mu) / s`).
const FAR: f64 = 8.5 * (1.0 + 1e-12);

/// [`kernel_centre`] of every observation (`obs[d][i]`), and
/// [`centre_order`] of each numeric dimension's (empty for categoricals):
/// what [`Parzen::from_centres`] takes.
#[cfg(any(test, feature = "testing"))]
pub fn centres_and_orders(
    dists: &[&Distribution],
    obs: &[Vec<f64>],
) -> (Vec<Vec<f64>>, Vec<Vec<u32>>) {
    let centres: Vec<Vec<f64>> = dists
        .iter()
        .zip(obs)
        .map(|(d, o)| o.iter().map(|&v| kernel_centre(d, v)).collect())
        .collect();
    let orders = dists
        .iter()
        .zip(&centres)
        .map(|(d, c)| match d {
            Distribution::Categorical { .. } => Vec::new(),
            _ => centre_order(c),
        })
        .collect();
    (centres, orders)
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

/// Optuna's `compute_sigmas`: each kernel's [`rank_gap`] in centre
/// order, clipped by [`sigma_bounds`].
fn kernel_sigmas(
    mus: &[f64],
    order: &[u32],
    low: f64,
    high: f64,
    params: ParzenParams,
) -> Vec<f64> {
    let n = mus.len();
    let mut sorted = Vec::with_capacity(n + 2);
    sorted.push(low);
    sorted.extend(order.iter().map(|&i| mus[i as usize]));
    sorted.push(high);
    let (min_sigma, max_sigma) = sigma_bounds(n, low, high, params);
    // One spare slot: the caller appends the prior kernel's width.
    let mut sigmas = Vec::with_capacity(n + 1);
    sigmas.resize(n, 0.0);
    for (rank, &i) in order.iter().enumerate() {
        let gap = rank_gap(|j| sorted[j], rank, n, params.consider_endpoints);
        sigmas[i as usize] = gap.clamp(min_sigma, max_sigma);
    }
    sigmas
}

/// The unclipped width of the kernel at rank `r` of `n` centres: the
/// larger gap to a neighbour, the range ends counting as neighbours
/// (`sorted(j)`: the range's low end, the centres in increasing order,
/// then its high end, so the kernel's own centre is `sorted(r + 1)`);
/// without `consider_endpoints`, the two extreme kernels take the gap to
/// their inner neighbour.
#[inline]
fn rank_gap(sorted: impl Fn(usize) -> f64, r: usize, n: usize, consider_endpoints: bool) -> f64 {
    if !consider_endpoints && n >= 2 {
        if r == 0 {
            return sorted(2) - sorted(1);
        }
        if r == n - 1 {
            return sorted(n) - sorted(n - 1);
        }
    }
    let i = r + 1;
    (sorted(i) - sorted(i - 1)).max(sorted(i + 1) - sorted(i))
}

/// The clip on the widths of `n` kernels on `[low, high]`: the range
/// above, `range / min(100, n + 2)` below with the magic clip.
fn sigma_bounds(n: usize, low: f64, high: f64, params: ParzenParams) -> (f64, f64) {
    let min_sigma = if params.consider_magic_clip {
        (high - low) / (100.0f64).min(1.0 + (n + 1) as f64)
    } else {
        1e-12
    };
    (min_sigma, high - low)
}

#[cfg(test)]
mod tests;
