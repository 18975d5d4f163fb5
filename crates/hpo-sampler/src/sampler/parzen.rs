//! Optuna's `_ParzenEstimator`: a mixture of product kernels, one kernel per
//! observation plus a prior kernel. Numeric dimensions use normal kernels
//! truncated to the (log-transformed, step-widened) range; discrete ones
//! integrate each kernel over the grid cell; categoricals use smoothed
//! one-hot kernels.
//!
//! The log-density is laid out for speed: per-kernel constants are computed
//! once, continuous dimensions are a fused multiply-add per kernel,
//! categoricals a column add, and discrete dimensions evaluate the Gaussian
//! mass only for unique `(mu, sigma)` pairs and unique candidate values.

use crate::distribution::Distribution;
use crate::rng::Rng;
use crate::special::{NORM_PDF_LOG_C, log_gauss_mass, truncnorm_ppf};

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
    /// Continuous only: `1 / sigma` and `-ln(sigma) - ln(mass) - ln(sqrt(2 pi))`.
    inv_sigma: Vec<f64>,
    konst: Vec<f64>,
    /// Discrete only: unique `(mu, sigma)` pairs, their log normaliser,
    /// and each kernel's index into them.
    uniq_mu: Vec<f64>,
    uniq_sigma: Vec<f64>,
    uniq_log_sigma: Vec<f64>,
    uniq_log_norm: Vec<f64>,
    uniq_of: Vec<u32>,
}

struct Categorical {
    n_choices: usize,
    /// Row-major `[kernel][choice]` probabilities, for sampling.
    probs: Vec<f64>,
    /// Column-major `[choice][kernel]` log-probabilities, for densities.
    log_probs_by_choice: Vec<f64>,
}

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
}

impl Parzen {
    /// Build from observations (`obs[d][i]`: internal value of dimension `d`
    /// in observation `i`) with per-observation weights (before the prior).
    pub fn new(
        dists: &[&Distribution],
        obs: &[Vec<f64>],
        obs_weights: &[f64],
        params: ParzenParams,
    ) -> Self {
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
        let log_weights = weights.iter().map(|w| w.ln()).collect();
        let mut acc = 0.0;
        let cum_weights = weights
            .iter()
            .map(|w| {
                acc += w;
                acc
            })
            .collect();
        let dims = dists
            .iter()
            .zip(obs)
            .map(|(d, o)| build_dim(d, o, params))
            .collect();
        Parzen {
            weights,
            log_weights,
            cum_weights,
            dims,
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
    pub fn log_pdf(&self, samples: &[Vec<f64>]) -> Vec<f64> {
        let n_k = self.n_kernels();
        let n_s = samples.first().map_or(0, Vec::len);
        let mut acc = Vec::with_capacity(n_s * n_k);
        for _ in 0..n_s {
            acc.extend_from_slice(&self.log_weights);
        }
        for (dim, xs) in self.dims.iter().zip(samples) {
            match dim {
                Dim::Categorical(c) => {
                    for (row, &x) in acc.chunks_exact_mut(n_k).zip(xs) {
                        let col = &c.log_probs_by_choice[x as usize * n_k..(x as usize + 1) * n_k];
                        row.iter_mut().zip(col).for_each(|(r, l)| *r += l);
                    }
                }
                Dim::Numeric(d) if d.step.is_none() => {
                    for (row, &x) in acc.chunks_exact_mut(n_k).zip(xs) {
                        let x = if d.log { x.ln() } else { x };
                        for (((r, mu), is), k) in
                            row.iter_mut().zip(&d.mu).zip(&d.inv_sigma).zip(&d.konst)
                        {
                            let z = (x - mu) * is;
                            *r += k - 0.5 * z * z;
                        }
                    }
                }
                Dim::Numeric(d) => {
                    let step = d.step.expect("discrete");
                    let mut cache: Vec<(f64, Vec<f64>)> = Vec::new();
                    for (row, &x) in acc.chunks_exact_mut(n_k).zip(xs) {
                        let pos = match cache.iter().position(|(v, _)| *v == x) {
                            Some(p) => p,
                            None => {
                                let (mut l, mut r) = (x - step / 2.0, x + step / 2.0);
                                if d.log {
                                    l = l.ln();
                                    r = r.ln();
                                }
                                let ln_width = (r - l).ln();
                                let terms = d
                                    .uniq_mu
                                    .iter()
                                    .zip(&d.uniq_sigma)
                                    .zip(&d.uniq_log_sigma)
                                    .zip(&d.uniq_log_norm)
                                    .map(|(((mu, s), ln_s), norm)| {
                                        cell_log_mass(l, r, ln_width, *mu, *s, *ln_s) - norm
                                    })
                                    .collect();
                                cache.push((x, terms));
                                cache.len() - 1
                            }
                        };
                        let terms = &cache[pos].1;
                        row.iter_mut()
                            .zip(&d.uniq_of)
                            .for_each(|(r, &u)| *r += terms[u as usize]);
                    }
                }
            }
        }
        acc.chunks_exact(n_k).map(log_sum_exp).collect()
    }
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
    if h * (z.abs() + 3.0) > 0.5 {
        return log_gauss_mass((l - mu) / s, (r - mu) / s);
    }
    let h2 = h * h;
    let (mut he_n, mut he_n1) = (1.0, z); // He_n, He_{n+1}
    let mut coef = 1.0; // h^n / (n+1)!
    let mut rest = 0.0; // the series minus its first term
    let mut n = 0.0;
    for _ in 0..20 {
        let he_n2 = z * he_n1 - (n + 1.0) * he_n;
        let he_n3 = z * he_n2 - (n + 2.0) * he_n1;
        n += 2.0;
        coef *= h2 / (n * (n + 1.0));
        let term = he_n2 * coef;
        rest += term;
        (he_n, he_n1) = (he_n2, he_n3);
        if term.abs() <= 1e-17 * (1.0 + rest).abs() {
            break;
        }
    }
    let ln_series = if rest.abs() < 1e-5 {
        rest - 0.5 * rest * rest + rest * rest * rest / 3.0
    } else {
        rest.ln_1p()
    };
    head + ln_series
}

/// `ln(sum(exp(row)))`. Terms more than 50 below the maximum (relative
/// weight < 2e-22) are dropped; the rest use a branch-free `exp` that the
/// compiler vectorises.
fn log_sum_exp(row: &[f64]) -> f64 {
    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return max;
    }
    let sum: f64 = row
        .iter()
        .map(|v| {
            let d = v - max;
            let keep = if d > -50.0 { 1.0 } else { 0.0 };
            keep * fast_exp(d.max(-50.0))
        })
        .sum();
    sum.ln() + max
}

/// `exp(x)` for `x` in `[-50, 0]`, accurate to ~2 ulp: `x = n ln2 + r` with
/// `|r| <= ln2 / 2`, a degree-12 Taylor polynomial for `exp(r)` (truncation
/// below 2e-16) and `2^n` built from its bits. No branches, so it vectorises.
#[inline(always)]
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

fn build_dim(dist: &Distribution, obs: &[f64], params: ParzenParams) -> Dim {
    match dist {
        Distribution::Categorical { choices } => {
            let n_choices = choices.len();
            let n_k = obs.len() + 1;
            let mut probs = if obs.is_empty() {
                vec![1.0 / n_choices as f64; n_choices]
            } else {
                let mut p = vec![params.prior_weight / n_k as f64; n_k * n_choices];
                for (i, &o) in obs.iter().enumerate() {
                    p[i * n_choices + o as usize] += 1.0;
                }
                p
            };
            let rows = probs.len() / n_choices;
            for row in probs.chunks_exact_mut(n_choices) {
                let s: f64 = row.iter().sum();
                if s > 0.0 {
                    row.iter_mut().for_each(|v| *v /= s);
                }
            }
            // Each row holds at most two distinct values (the smoothed
            // observed choice and the rest), so only a few logs are needed.
            let mut log_probs_by_choice = vec![0.0; rows * n_choices];
            let mut last = (f64::NAN, 0.0);
            for k in 0..rows {
                for c in 0..n_choices {
                    let p = probs[k * n_choices + c];
                    if p != last.0 {
                        last = (p, p.ln());
                    }
                    log_probs_by_choice[c * rows + k] = last.1;
                }
            }
            Dim::Categorical(Categorical {
                n_choices,
                probs,
                log_probs_by_choice,
            })
        }
        Distribution::Float {
            low,
            high,
            log,
            step,
        } => Dim::Numeric(numeric(*low, *high, *log, *step, obs, params)),
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
            params,
        )),
    }
}

fn numeric(
    low: f64,
    high: f64,
    log: bool,
    step: Option<f64>,
    obs: &[f64],
    params: ParzenParams,
) -> Numeric {
    let (mut a_low, mut a_high) = match step {
        Some(s) => (low - s / 2.0, high + s / 2.0),
        None => (low, high),
    };
    let mut mu: Vec<f64> = if log {
        a_low = a_low.ln();
        a_high = a_high.ln();
        obs.iter().map(|o| o.ln()).collect()
    } else {
        obs.to_vec()
    };
    let mut sigma = kernel_sigmas(&mu, a_low, a_high, params);
    mu.push(0.5 * (a_low + a_high));
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
    };
    if step.is_none() {
        d.inv_sigma = d.sigma.iter().map(|s| 1.0 / s).collect();
        d.konst =
            d.mu.iter()
                .zip(&d.sigma)
                .map(|(m, s)| {
                    -s.ln() - log_gauss_mass((a_low - m) / s, (a_high - m) / s) - NORM_PDF_LOG_C
                })
                .collect();
    } else {
        let mut order: Vec<usize> = (0..d.mu.len()).collect();
        order.sort_unstable_by(|&i, &j| {
            (d.mu[i], d.sigma[i])
                .partial_cmp(&(d.mu[j], d.sigma[j]))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        d.uniq_of = vec![0; d.mu.len()];
        for &i in &order {
            let (m, s) = (d.mu[i], d.sigma[i]);
            if d.uniq_mu.last() != Some(&m) || d.uniq_sigma.last() != Some(&s) {
                d.uniq_mu.push(m);
                d.uniq_sigma.push(s);
                d.uniq_log_sigma.push(s.ln());
                d.uniq_log_norm
                    .push(log_gauss_mass((a_low - m) / s, (a_high - m) / s));
            }
            d.uniq_of[i] = (d.uniq_mu.len() - 1) as u32;
        }
    }
    d
}

/// Optuna's `compute_sigmas`: the larger gap to a sorted neighbour (the range
/// ends count as neighbours), optionally not for the two extreme kernels,
/// clipped to `[range / min(100, n + 2), range]` with the magic clip.
fn kernel_sigmas(mus: &[f64], low: f64, high: f64, params: ParzenParams) -> Vec<f64> {
    let n = mus.len();
    if n == 0 {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| mus[i].total_cmp(&mus[j]));
    let mut sorted = Vec::with_capacity(n + 2);
    sorted.push(low);
    sorted.extend(order.iter().map(|&i| mus[i]));
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
    let mut sigmas = vec![0.0; n];
    for (rank, &i) in order.iter().enumerate() {
        sigmas[i] = sorted_sigmas[rank].clamp(min_sigma, max_sigma);
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

    #[test]
    fn sigmas_follow_optuna() {
        // mus 0.2, 0.5, 0.6 in [0, 1]: gaps with endpoints, extremes use the
        // inner neighbour, min sigma = 1 / (1 + 4) = 0.2.
        let s = kernel_sigmas(&[0.5, 0.2, 0.6], 0.0, 1.0, P);
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

    #[test]
    fn narrow_cells_match_the_exact_mass() {
        for &(l, r, mu, s) in &[
            (4.0, 4.001, 4.2, 0.5),
            (-1.0, -0.999, 0.0, 0.3),
            (10.0, 10.01, 0.0, 2.0),
            (0.0, 0.05, 0.3, 0.1),
            (1.0, 1.02, 0.0, 0.1),
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
