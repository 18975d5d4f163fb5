//! Optuna 5.0's `TPESampler`, single-objective: split the history into the
//! best `gamma(n)` trials and the rest, fit a Parzen estimator to each, draw
//! `n_ei_candidates` from the "below" estimator and keep the one maximising
//! `log l(x) - log g(x)`.
//!
//! Ranking follows `_split_trials`: feasible COMPLETE trials by value, then
//! PRUNED trials by (last step descending, last value), then infeasible
//! trials by total constraint violation; RUNNING trials (constant liar) are
//! always "above"; FAIL trials are ignored.

use super::Sampler;
use super::parzen::{Parzen, ParzenParams};
use super::random::sample_uniform;
use crate::distribution::Distribution;
use crate::rng::Rng;
use crate::search_space;
use crate::trial::{FrozenTrial, SearchSpace, StudyDirection, StudyView, TrialState};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

/// `min(ceil(0.1 n), 25)`: how many trials count as "below" (good).
pub fn default_gamma(n: usize) -> usize {
    n.div_ceil(10).min(25)
}

/// Weights of the "above" observations in trial-number order: 1 for up to
/// 25, else a ramp from `1/n` up to 1 for the oldest `n - 25`, then 1s.
pub fn default_weights(n: usize) -> Vec<f64> {
    if n < 25 {
        return vec![1.0; n];
    }
    let m = n - 25;
    let start = 1.0 / n as f64;
    let mut w: Vec<f64> = (0..m)
        .map(|i| {
            if m == 1 {
                start
            } else {
                start + (1.0 - start) * i as f64 / (m - 1) as f64
            }
        })
        .collect();
    w.extend(std::iter::repeat_n(1.0, 25));
    w
}

/// TPE options, defaulting to Optuna 5.0's `TPESampler()`.
#[derive(Debug, Clone)]
pub struct TpeConfig {
    pub n_startup_trials: usize,
    pub n_ei_candidates: usize,
    pub prior_weight: f64,
    pub consider_magic_clip: bool,
    pub consider_endpoints: bool,
    /// Model the relative search space jointly (Optuna 5 default for a
    /// single objective).
    pub multivariate: bool,
    /// Decompose conditional spaces into groups that always co-occur and
    /// model each jointly (requires `multivariate`).
    pub group: bool,
    /// Count RUNNING trials as "above" so parallel workers spread out.
    pub constant_liar: bool,
    pub gamma: fn(usize) -> usize,
    pub weights: fn(usize) -> Vec<f64>,
    pub seed: Option<u64>,
}

impl Default for TpeConfig {
    fn default() -> Self {
        TpeConfig {
            n_startup_trials: 10,
            n_ei_candidates: 24,
            prior_weight: 1.0,
            consider_magic_clip: true,
            consider_endpoints: false,
            multivariate: true,
            group: false,
            constant_liar: true,
            gamma: default_gamma,
            weights: default_weights,
            seed: None,
        }
    }
}

/// The tree-structured Parzen estimator sampler.
///
/// Like Optuna's, one instance serves one study: it caches what finished
/// trials contribute (their observations and the search-space
/// intersection), since finished trials never change. The cache checks
/// each trial's number, state and value, so a history that is edited or
/// replaced is recomputed rather than misread.
pub struct TpeSampler {
    config: TpeConfig,
    rng: Rng,
    random: Rng,
    groups: Vec<SearchSpace>,
    /// Observation rows of finished trials, per search space.
    obs_cache: HashMap<String, Vec<Option<CachedRow>>>,
    /// Intersection over the longest all-finished prefix of the history.
    prefix: (usize, Option<SearchSpace>),
}

/// A finished trial's internal values for one search space (`None`: it
/// lacks a parameter), with what identifies the trial.
struct CachedRow {
    state: TrialState,
    value_bits: u64,
    row: Option<Box<[f64]>>,
}

fn identity(t: &FrozenTrial) -> u64 {
    t.value().unwrap_or(0.0).to_bits() ^ t.params.len() as u64
}

impl TpeSampler {
    pub fn new(config: TpeConfig) -> Self {
        let (rng, random) = match config.seed {
            Some(s) => (Rng::seed_from(s), Rng::seed_from(s ^ 0x5eed_0f_7a4d_0000)),
            None => (Rng::from_entropy(), Rng::from_entropy()),
        };
        TpeSampler {
            config,
            rng,
            random,
            groups: Vec::new(),
            obs_cache: HashMap::new(),
            prefix: (0, None),
        }
    }

    /// Optuna's defaults with a seed.
    pub fn with_seed(seed: u64) -> Self {
        Self::new(TpeConfig {
            seed: Some(seed),
            ..TpeConfig::default()
        })
    }

    fn n_finished(&self, study: &StudyView<'_>) -> usize {
        study
            .trials
            .iter()
            .filter(|t| matches!(t.state, TrialState::Complete | TrialState::Pruned))
            .count()
    }

    /// Optuna's `_sample`: TPE over `space`, returning internal values.
    fn sample_space(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
        space: &[(&String, &Distribution)],
    ) -> Vec<f64> {
        let liar = self.config.constant_liar;
        let trials: Vec<&FrozenTrial> = study
            .trials
            .iter()
            .filter(|t| match t.state {
                TrialState::Complete | TrialState::Pruned => true,
                TrialState::Running => liar && t.number != trial_number,
                _ => false,
            })
            .collect();
        let n = trials
            .iter()
            .filter(|t| t.state != TrialState::Running)
            .count();
        let (below, above) = split_trials(&trials, (self.config.gamma)(n), study.direction);

        let params = ParzenParams {
            prior_weight: self.config.prior_weight,
            consider_magic_clip: self.config.consider_magic_clip,
            consider_endpoints: self.config.consider_endpoints,
        };
        let dists: Vec<&Distribution> = space.iter().map(|(_, d)| *d).collect();
        let key: String = space.iter().map(|(n, d)| format!("{n}={d};")).collect();
        let cache = self.obs_cache.entry(key).or_default();
        let obs_below = observations(&below, space, cache);
        let obs_above = observations(&above, space, cache);
        let build = |obs: Vec<Vec<f64>>| {
            let n_obs = obs.first().map_or(0, Vec::len);
            let mut w = (self.config.weights)(n_obs);
            w.truncate(n_obs);
            Parzen::new(&dists, &obs, &w, params)
        };
        let mpe_below = build(obs_below);
        let mpe_above = build(obs_above);

        let samples = mpe_below.sample(&mut self.rng, self.config.n_ei_candidates.max(1));
        let l = mpe_below.log_pdf(&samples);
        let g = mpe_above.log_pdf(&samples);
        let mut best = 0;
        let mut best_acq = f64::NEG_INFINITY;
        for (i, (lb, ga)) in l.iter().zip(&g).enumerate() {
            let acq = lb - ga;
            if acq > best_acq || (i == 0 && acq.is_nan()) {
                best = i;
                best_acq = acq;
            }
        }
        samples.iter().map(|column| column[best]).collect()
    }
}

/// Internal values of `space` for the trials that have all of it (`obs[d][i]`).
/// A stored value whose distribution differs is converted through its
/// external value and skipped if it falls outside the current distribution.
fn observations(
    trials: &[&FrozenTrial],
    space: &[(&String, &Distribution)],
    cache: &mut Vec<Option<CachedRow>>,
) -> Vec<Vec<f64>> {
    let mut obs: Vec<Vec<f64>> = vec![Vec::with_capacity(trials.len()); space.len()];
    for t in trials {
        let idx = t.number as usize;
        let cached = cache
            .get(idx)
            .and_then(Option::as_ref)
            .filter(|c| c.state == t.state && c.value_bits == identity(t));
        let row = match cached {
            Some(c) => c.row.clone(),
            None => {
                let row = observation_row(t, space);
                if t.state.is_finished() {
                    if cache.len() <= idx {
                        cache.resize_with(idx + 1, || None);
                    }
                    cache[idx] = Some(CachedRow {
                        state: t.state,
                        value_bits: identity(t),
                        row: row.clone(),
                    });
                }
                row
            }
        };
        if let Some(row) = row {
            for (col, v) in obs.iter_mut().zip(row.iter()) {
                col.push(*v);
            }
        }
    }
    obs
}

/// One trial's internal values of `space`, or `None` if it lacks one.
fn observation_row(t: &FrozenTrial, space: &[(&String, &Distribution)]) -> Option<Box<[f64]>> {
    let mut row = Vec::with_capacity(space.len());
    {
        for (name, dist) in space {
            let p = t.params.get(name.as_str())?;
            let v = if p.distribution == **dist {
                p.internal
            } else {
                match dist.to_internal(&p.value()) {
                    Ok(v) if in_range(dist, v) => v,
                    _ => return None,
                }
            };
            row.push(v);
        }
    }
    Some(row.into_boxed_slice())
}

fn in_range(dist: &Distribution, v: f64) -> bool {
    match dist {
        Distribution::Float { low, high, .. } => *low <= v && v <= *high,
        Distribution::Int { low, high, .. } => *low as f64 <= v && v <= *high as f64,
        Distribution::Categorical { .. } => true,
    }
}

fn cmp_f64(a: f64, b: f64) -> Ordering {
    // NaN sorts last, like a value that is never good.
    a.partial_cmp(&b)
        .unwrap_or_else(|| a.is_nan().cmp(&b.is_nan()))
}

/// Optuna's `_get_pruned_trial_score` as a sort key (smaller is better).
fn pruned_score(t: &FrozenTrial, direction: StudyDirection) -> (f64, f64) {
    match t.intermediate_values.iter().next_back() {
        Some((&step, &v)) => {
            let v = if v.is_nan() {
                f64::INFINITY
            } else if direction == StudyDirection::Minimize {
                v
            } else {
                -v
            };
            (-(step as f64), v)
        }
        None => (1.0, 0.0),
    }
}

/// Optuna's `_split_trials` for one objective: returns (below, above), each
/// in trial-number order.
pub(crate) fn split_trials<'a>(
    trials: &[&'a FrozenTrial],
    n_below: usize,
    direction: StudyDirection,
) -> (Vec<&'a FrozenTrial>, Vec<&'a FrozenTrial>) {
    let mut complete = Vec::new();
    let mut pruned = Vec::new();
    let mut running = Vec::new();
    let mut infeasible = Vec::new();
    for &t in trials {
        if t.state == TrialState::Running {
            running.push(t);
        } else if t.violation() > 0.0 {
            infeasible.push(t);
        } else if t.state == TrialState::Complete {
            complete.push(t);
        } else {
            pruned.push(t);
        }
    }
    let sign = if direction == StudyDirection::Minimize {
        1.0
    } else {
        -1.0
    };
    complete.sort_by(|a, b| {
        cmp_f64(
            sign * a.value().unwrap_or(f64::NAN),
            sign * b.value().unwrap_or(f64::NAN),
        )
    });
    pruned.sort_by(|a, b| {
        let (sa, va) = pruned_score(a, direction);
        let (sb, vb) = pruned_score(b, direction);
        cmp_f64(sa, sb).then(cmp_f64(va, vb))
    });
    infeasible.sort_by(|a, b| cmp_f64(a.violation(), b.violation()));

    let mut below = Vec::new();
    let mut above = running;
    let mut left = n_below;
    for group in [complete, pruned, infeasible] {
        let k = left.min(group.len());
        left -= k;
        below.extend_from_slice(&group[..k]);
        above.extend_from_slice(&group[k..]);
    }
    below.sort_by_key(|t| t.number);
    above.sort_by_key(|t| t.number);
    (below, above)
}

impl Sampler for TpeSampler {
    fn infer_relative_search_space(
        &mut self,
        study: &StudyView<'_>,
        _trial_number: u64,
    ) -> SearchSpace {
        if !self.config.multivariate {
            return SearchSpace::new();
        }
        if self.config.group {
            self.groups = search_space::groups(study.trials);
            return self
                .groups
                .iter()
                .flat_map(|g| g.iter())
                .filter(|(_, d)| !d.single())
                .map(|(k, d)| (k.clone(), d.clone()))
                .collect();
        }
        // Extend the cached intersection over the all-finished prefix,
        // then intersect the (few) trials after it.
        let trials = study.trials;
        let (mut done, mut prefix) = std::mem::take(&mut self.prefix);
        if done > trials.len() {
            (done, prefix) = (0, None);
        }
        let finished = trials[done..]
            .iter()
            .take_while(|t| t.state.is_finished())
            .count();
        prefix = search_space::intersect_from(prefix, &trials[done..done + finished]);
        done += finished;
        let mut space =
            search_space::intersect_from(prefix.clone(), &trials[done..]).unwrap_or_default();
        self.prefix = (done, prefix);
        space.retain(|_, d| !d.single());
        space
    }

    fn sample_relative(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
        space: &SearchSpace,
    ) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        if space.is_empty() || self.n_finished(study) < self.config.n_startup_trials {
            return out;
        }
        let groups = std::mem::take(&mut self.groups);
        let subspaces: Vec<Vec<(&String, &Distribution)>> = if self.config.group {
            groups
                .iter()
                .map(|g| {
                    g.iter()
                        .filter(|(k, d)| !d.single() && space.contains_key(*k))
                        .collect()
                })
                .collect()
        } else {
            vec![space.iter().collect()]
        };
        for sub in subspaces.iter().filter(|s| !s.is_empty()) {
            let values = self.sample_space(study, trial_number, sub);
            for ((name, _), v) in sub.iter().zip(values) {
                out.insert((*name).clone(), v);
            }
        }
        self.groups = groups;
        out
    }

    fn sample_independent(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
        name: &str,
        distribution: &Distribution,
    ) -> f64 {
        if self.n_finished(study) < self.config.n_startup_trials {
            return sample_uniform(&mut self.random, distribution);
        }
        let name = name.to_string();
        self.sample_space(study, trial_number, &[(&name, distribution)])[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gamma_and_weights_match_optuna() {
        assert_eq!(default_gamma(0), 0);
        assert_eq!(default_gamma(10), 1);
        assert_eq!(default_gamma(11), 2);
        assert_eq!(default_gamma(1000), 25);
        assert_eq!(default_weights(3), vec![1.0; 3]);
        // np.linspace(1/27, 1, 2) then 25 ones.
        let w = default_weights(27);
        assert_eq!(w.len(), 27);
        assert!((w[0] - 1.0 / 27.0).abs() < 1e-15 && w[1] == 1.0 && w[26] == 1.0);
        let w = default_weights(26);
        assert!((w[0] - 1.0 / 26.0).abs() < 1e-15 && w[1] == 1.0);
    }
}
