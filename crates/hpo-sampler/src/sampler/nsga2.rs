//! Optuna 5.0's `NSGAIISampler` with its defaults: generations of
//! `population_size` COMPLETE trials; each generation's parents are the
//! elite of the previous generation and its parents (non-domination rank,
//! then crowding distance); a child is a uniform crossover (each
//! parameter from either of two parents picked by binary tournament,
//! probability 0.9, else a copy of one parent), and each parameter is
//! mutated (re-drawn uniformly) with probability `1 / n_params`. With
//! constraints on any trial, dominance is constrained dominance (feasible
//! first, then less violation) and ranking puts infeasible trials last.
//!
//! A trial's generation is Optuna's `NSGAIISampler:generation` system
//! attribute: read from the history when the caller stored it
//! ([`Sampler::system_attrs`] returns it for the asked trial), else the one
//! this sampler assigned, so a long-lived sampler needs nothing stored.

use super::Sampler;
use super::random::sample_uniform;
use crate::distribution::Distribution;
use crate::multi::{constrained_dominates, constrained_ranks, loss_values};
use crate::rng::Rng;
use crate::search_space;
use crate::trial::{CheckedTrials, FrozenTrial, SearchSpace, StudyView, TrialState};
use std::collections::{BTreeMap, HashMap};

/// The system attribute Optuna stores a trial's generation under.
pub const GENERATION_KEY: &str = "NSGAIISampler:generation";

/// NSGA-II options; the `Default` is Optuna 5.0's `NSGAIISampler()`.
#[derive(Debug, Clone)]
pub struct NsgaIIConfig {
    /// Trials per generation (at least 2).
    pub population_size: usize,
    /// Probability of re-drawing each parameter; `None`: `1 / n_params`.
    /// Probabilities lie in `[0, 1]` ([`NsgaIIConfig::check`]).
    pub mutation_prob: Option<f64>,
    /// Probability of a crossover (else a parent is copied).
    pub crossover_prob: f64,
    /// Probability that uniform crossover takes a parameter from the
    /// second parent.
    pub swapping_prob: f64,
    /// Optuna's `seed`: the same seed and history give the same samples;
    /// `None` (the default): a different seed each run.
    pub seed: Option<u64>,
}

impl Default for NsgaIIConfig {
    fn default() -> Self {
        NsgaIIConfig {
            population_size: 50,
            mutation_prob: None,
            crossover_prob: 0.9,
            swapping_prob: 0.5,
            seed: None,
        }
    }
}

impl NsgaIIConfig {
    /// The largest `population_size`: a generation is held in memory,
    /// so a mistyped size would exhaust it rather than search better
    /// (Optuna sets no bound).
    pub const MAX_POPULATION_SIZE: usize = 1 << 20;

    /// Checks the options as Optuna's `NSGAIISampler` does: a population
    /// of at least 2 (and at most [`NsgaIIConfig::MAX_POPULATION_SIZE`]),
    /// and probabilities in `[0, 1]` (not NaN). The error names the option.
    ///
    /// ```
    /// use hpo_sampler::NsgaIIConfig;
    /// assert!(NsgaIIConfig::default().check().is_ok());
    /// let bad = NsgaIIConfig { swapping_prob: f64::NAN, ..NsgaIIConfig::default() };
    /// assert!(bad.check().unwrap_err().to_string().contains("swapping_prob"));
    /// let huge = NsgaIIConfig { population_size: 1 << 62, ..NsgaIIConfig::default() };
    /// assert!(huge.check().unwrap_err().to_string().contains("population_size"));
    /// ```
    pub fn check(&self) -> crate::Result<()> {
        use crate::pruner::require;
        require(self.population_size >= 2, "population_size", || {
            format!("must be at least 2, got {}", self.population_size)
        })?;
        require(
            self.population_size <= Self::MAX_POPULATION_SIZE,
            "population_size",
            || {
                format!(
                    "must be at most {}, got {}",
                    Self::MAX_POPULATION_SIZE,
                    self.population_size
                )
            },
        )?;
        let probability = |option: &str, p: f64| {
            require((0.0..=1.0).contains(&p), option, || {
                format!("must be in [0, 1], got {p}")
            })
        };
        if let Some(p) = self.mutation_prob {
            probability("mutation_prob", p)?;
        }
        probability("crossover_prob", self.crossover_prob)?;
        probability("swapping_prob", self.swapping_prob)
    }
}

/// The NSGA-II sampler (see the module doc). One instance serves one study.
pub struct NsgaIISampler {
    config: NsgaIIConfig,
    rng: Rng,
    random: Rng,
    /// Generations this sampler assigned, by trial number.
    generations: HashMap<u64, i64>,
    /// Parent populations (trial numbers) by generation.
    parents: HashMap<i64, Vec<u64>>,
    /// Its configuration's error ([`NsgaIIConfig::check`]).
    error: Option<crate::Error>,
    /// The finished trials that passed [`StudyView::check`].
    checked: CheckedTrials,
}

impl NsgaIISampler {
    /// The sampler, or the error of an option out of range
    /// ([`NsgaIIConfig::check`]: a population below 2, which a generation
    /// cannot have, or a probability outside `[0, 1]`; Optuna's
    /// `ValueError`).
    pub fn try_new(config: NsgaIIConfig) -> crate::Result<Self> {
        config.check()?;
        Ok(Self::new(config))
    }

    /// The sampler of a configuration known to be valid. A probability out
    /// of range does not panic: [`Sampler::check`] returns its error and
    /// the sampler draws at random.
    ///
    /// # Panics
    ///
    /// On a population below 2; [`NsgaIISampler::try_new`] returns that as
    /// an error.
    pub fn new(config: NsgaIIConfig) -> Self {
        assert!(config.population_size >= 2, "population_size must be >= 2");
        let (rng, random) = match config.seed {
            Some(s) => (Rng::seed_from(s), Rng::seed_from(s ^ 0x0a5a_9e11_0000_0001)),
            None => (Rng::from_entropy(), Rng::from_entropy()),
        };
        NsgaIISampler {
            rng,
            random,
            generations: HashMap::new(),
            parents: HashMap::new(),
            error: config.check().err(),
            config,
            checked: CheckedTrials::default(),
        }
    }

    fn generation_of(&self, t: &FrozenTrial) -> Option<i64> {
        t.system_number(GENERATION_KEY)
            .map(|g| g as i64)
            .or_else(|| self.generations.get(&t.number).copied())
    }

    /// Optuna's `get_trial_generation`: the newest generation among
    /// COMPLETE trials, or the next one once it holds `population_size`.
    fn trial_generation(&mut self, study: &StudyView<'_>, number: u64) -> i64 {
        if let Some(t) = study.trials.iter().find(|t| t.number == number)
            && let Some(g) = self.generation_of(t)
        {
            return g;
        }
        if let Some(&g) = self.generations.get(&number) {
            return g;
        }
        let (mut max_generation, mut count) = (0, 0);
        for t in study.trials.iter().rev() {
            if t.state != TrialState::Complete {
                continue;
            }
            let g = self.generation_of(t).unwrap_or(-1);
            if g > max_generation {
                (max_generation, count) = (g, 1);
            } else if g == max_generation {
                count += 1;
            }
        }
        let g = if count < self.config.population_size {
            max_generation
        } else {
            max_generation.saturating_add(1)
        };
        self.generations.insert(number, g);
        g
    }

    /// Optuna's `get_parent_population` (cached per generation): the
    /// elite of generation `g - 1` and its parents. Built upwards from the
    /// newest cached generation rather than by recursion, since a stored
    /// generation may be huge; a generation without COMPLETE trials hands
    /// its parents on unchanged, so only generations with trials are
    /// visited.
    fn parent_population(&mut self, study: &StudyView<'_>, g: i64) -> Vec<usize> {
        if g <= 0 {
            return Vec::new();
        }
        let positions = |numbers: &Vec<u64>| -> Vec<usize> {
            (0..study.trials.len())
                .filter(|&i| numbers.contains(&study.trials[i].number))
                .collect()
        };
        if let Some(numbers) = self.parents.get(&g) {
            return positions(numbers);
        }
        let start = self.parents.keys().copied().filter(|&k| k < g).max();
        let (mut elite, from) = match start {
            Some(k) => (positions(&self.parents[&k]), k),
            None => (Vec::new(), 0),
        };
        let mut members: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
        for (i, t) in study.trials.iter().enumerate() {
            if t.state == TrialState::Complete
                && let Some(tg) = self.generation_of(t)
                && (from..g).contains(&tg)
            {
                members.entry(tg).or_default().push(i);
            }
        }
        for (tg, mut pool) in members {
            pool.extend(elite);
            elite = self.select_elite(study, pool);
            self.parents.insert(
                tg + 1,
                elite.iter().map(|&i| study.trials[i].number).collect(),
            );
        }
        self.parents
            .insert(g, elite.iter().map(|&i| study.trials[i].number).collect());
        elite
    }

    /// `NSGAIIElitePopulationSelectionStrategy`: whole fronts while they
    /// fit, then the last front by crowding distance, largest first.
    fn select_elite(&self, study: &StudyView<'_>, pool: Vec<usize>) -> Vec<usize> {
        let directions = study.objectives();
        let constrained = pool.iter().any(|&i| study.trials[i].has_constraints());
        let losses: Vec<Vec<f64>> = pool
            .iter()
            .map(|&i| {
                loss_values(&study.trials[i], directions)
                    .unwrap_or_else(|| vec![f64::INFINITY; directions.len()])
            })
            .collect();
        let penalty: Vec<f64> = pool
            .iter()
            .map(|&i| {
                if constrained {
                    study.trials[i].violation()
                } else {
                    0.0
                }
            })
            .collect();
        let ranks = constrained_ranks(&losses, &penalty, None);
        let n_ranks = ranks.iter().max().map_or(0, |r| r + 1);
        let mut elite = Vec::with_capacity(self.config.population_size);
        for rank in 0..n_ranks {
            let front: Vec<usize> = (0..pool.len()).filter(|&j| ranks[j] == rank).collect();
            if elite.len() + front.len() < self.config.population_size {
                elite.extend(front.iter().map(|&j| pool[j]));
            } else {
                let n = self.config.population_size - elite.len();
                let members: Vec<usize> = front.iter().map(|&j| pool[j]).collect();
                let sorted = crowding_sort(study.trials, members);
                elite.extend(sorted.into_iter().take(n));
                break;
            }
        }
        elite
    }

    /// A child of `parents` (positions in the history) over `space`.
    fn child(
        &mut self,
        study: &StudyView<'_>,
        space: &SearchSpace,
        parents: &[usize],
    ) -> BTreeMap<String, f64> {
        let trials = study.trials;
        let directions = study.objectives();
        let constrained = parents.iter().any(|&i| trials[i].has_constraints());
        let dominates = |a: &FrozenTrial, b: &FrozenTrial| {
            if constrained {
                constrained_dominates(a, b, directions)
            } else {
                match (loss_values(a, directions), loss_values(b, directions)) {
                    (Some(x), Some(y)) => crate::multi::dominates(&x, &y),
                    _ => false,
                }
            }
        };
        let value = |i: usize, name: &str| trials[i].params.get(name).map(|p| p.internal);
        let child: Vec<(String, f64)> =
            if self.rng.next_f64() < self.config.crossover_prob && parents.len() >= 2 {
                // Binary tournaments; the second parent is not the first.
                // (Fewer than two parents, as a trimmed history can leave,
                // take the copy branch below.)
                let mut chosen: Vec<usize> = Vec::with_capacity(2);
                for _ in 0..2 {
                    let pool: Vec<usize> = parents
                        .iter()
                        .copied()
                        .filter(|p| !chosen.contains(p))
                        .collect();
                    let a = pool[self.rng.below(pool.len())];
                    let b = pool[self.rng.below(pool.len())];
                    chosen.push(if dominates(&trials[a], &trials[b]) {
                        a
                    } else {
                        b
                    });
                }
                let (p0, p1) = (chosen[0], chosen[1]);
                space
                    .keys()
                    .filter_map(|name| {
                        let from = if self.rng.next_f64() >= self.config.swapping_prob {
                            p1
                        } else {
                            p0
                        };
                        value(from, name).map(|v| (name.clone(), v))
                    })
                    .collect()
            } else {
                let p = parents[self.rng.below(parents.len())];
                space
                    .keys()
                    .filter_map(|name| value(p, name).map(|v| (name.clone(), v)))
                    .collect()
            };
        let mutation_prob = self
            .config
            .mutation_prob
            .unwrap_or(1.0 / (child.len().max(1) as f64));
        // A mutated parameter is left out, so it is drawn independently.
        child
            .into_iter()
            .filter(|_| self.rng.next_f64() >= mutation_prob)
            .collect()
    }
}

/// `_crowding_distance_sort`: sum over objectives of the normalised gap
/// between a trial's neighbours (sorted stably by each objective in
/// turn), then largest distance first (a stable ascending sort, reversed).
fn crowding_sort(trials: &[FrozenTrial], mut members: Vec<usize>) -> Vec<usize> {
    let value = |i: usize, k: usize| {
        trials[i]
            .values
            .as_ref()
            .and_then(|v| v.get(k).copied())
            .unwrap_or(f64::INFINITY)
    };
    let m = members
        .first()
        .and_then(|&i| trials[i].values.as_ref())
        .map_or(0, Vec::len);
    let mut distance: HashMap<usize, f64> = HashMap::new();
    for k in 0..m {
        members.sort_by(|&a, &b| value(a, k).total_cmp(&value(b, k)));
        let n = members.len();
        if value(members[0], k) == value(members[n - 1], k) {
            continue;
        }
        let mut vs = vec![f64::NEG_INFINITY];
        vs.extend(members.iter().map(|&i| value(i, k)));
        vs.push(f64::INFINITY);
        let v_min = vs
            .iter()
            .copied()
            .find(|x| *x != f64::NEG_INFINITY)
            .unwrap_or(0.0);
        let v_max = vs
            .iter()
            .rev()
            .copied()
            .find(|x| *x != f64::INFINITY)
            .unwrap_or(0.0);
        let width = if v_max - v_min > 0.0 {
            v_max - v_min
        } else {
            1.0
        };
        for j in 0..n {
            let gap = if vs[j] == vs[j + 2] {
                0.0
            } else {
                vs[j + 2] - vs[j]
            };
            *distance.entry(members[j]).or_default() += gap / width;
        }
    }
    let d = |i: &usize| distance.get(i).copied().unwrap_or(0.0);
    members.sort_by(|a, b| d(a).total_cmp(&d(b)));
    members.reverse();
    members
}

impl Sampler for NsgaIISampler {
    fn check(&self) -> crate::Result<()> {
        self.error.clone().map_or(Ok(()), Err)
    }

    fn checked_trials(&mut self) -> Option<&mut CheckedTrials> {
        Some(&mut self.checked)
    }

    fn infer_relative_search_space(
        &mut self,
        study: &StudyView<'_>,
        _trial_number: u64,
    ) -> SearchSpace {
        let mut space = search_space::complete_intersection(study.trials);
        space.retain(|_, d| !d.single());
        space
    }

    fn sample_relative(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
        space: &SearchSpace,
    ) -> BTreeMap<String, f64> {
        let g = self.trial_generation(study, trial_number);
        let parents = self.parent_population(study, g);
        if self.error.is_some() || parents.is_empty() || space.is_empty() {
            return BTreeMap::new();
        }
        self.child(study, space, &parents)
    }

    fn sample_independent(
        &mut self,
        _study: &StudyView<'_>,
        _trial_number: u64,
        _name: &str,
        distribution: &Distribution,
    ) -> f64 {
        sample_uniform(&mut self.random, distribution)
    }

    fn system_attrs(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
    ) -> BTreeMap<String, serde_json::Value> {
        // An integer, as Optuna stores it: its NSGA-II keys the parents it
        // caches by the generation's text, which for 1.0 is not 1's.
        let g = self.trial_generation(study, trial_number);
        BTreeMap::from([(GENERATION_KEY.to_string(), g.into())])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StudyDirection;
    use crate::trial::{CONSTRAINTS_KEY, Param};

    fn done(number: u64, x: f64, values: Vec<f64>) -> FrozenTrial {
        let mut t = FrozenTrial::new(number);
        t.state = TrialState::Complete;
        t.values = Some(values);
        t.params.insert(
            "x".into(),
            Param {
                distribution: Distribution::float(0.0, 1.0, false, None).unwrap(),
                internal: x,
            },
        );
        t
    }

    #[test]
    fn a_population_below_two_is_an_error() {
        for population_size in [0, 1] {
            let e = NsgaIISampler::try_new(NsgaIIConfig {
                population_size,
                ..NsgaIIConfig::default()
            })
            .err()
            .expect("refused");
            assert!(e.to_string().contains("population_size"), "{e}");
        }
        assert!(NsgaIISampler::try_new(NsgaIIConfig::default()).is_ok());
    }

    /// A huge stored generation is not a recursion that deep, and a
    /// history trimmed to one parent is copied from, not a panic.
    #[test]
    fn a_huge_generation_or_a_lone_parent_is_sampled() {
        let dirs = [StudyDirection::Minimize, StudyDirection::Minimize];
        let space = SearchSpace::from([(
            "x".to_string(),
            Distribution::float(0.0, 1.0, false, None).unwrap(),
        )]);
        let mut trials: Vec<FrozenTrial> = (0..4)
            .map(|i| done(i, 0.25 * i as f64, vec![i as f64, 4.0 - i as f64]))
            .collect();
        for t in &mut trials {
            t.system_attrs
                .insert(GENERATION_KEY.into(), 1_000_000_000_000.0.into());
        }
        let config = NsgaIIConfig {
            population_size: 4,
            crossover_prob: 1.0,
            seed: Some(3),
            ..NsgaIIConfig::default()
        };
        let mut sampler = NsgaIISampler::new(config.clone());
        let study = StudyView::with_directions("s", &dirs, &trials);
        let g = sampler.trial_generation(&study, 4);
        assert_eq!(g, 1_000_000_000_001);
        assert_eq!(sampler.parent_population(&study, g).len(), 4);
        crate::ask(&mut sampler, study, 4, &space).unwrap();
        // One parent of generation 1 left in the view.
        let mut sampler = NsgaIISampler::new(config);
        let mut trials: Vec<FrozenTrial> = (0..4)
            .map(|i| done(i, 0.25 * i as f64, vec![i as f64, i as f64]))
            .collect();
        for t in &mut trials {
            t.system_attrs.insert(GENERATION_KEY.into(), 0.0.into());
        }
        let study = StudyView::with_directions("s", &dirs, &trials);
        assert_eq!(sampler.trial_generation(&study, 4), 1);
        let parents = sampler.parent_population(&study, 1);
        let lone = &trials[parents[0]..=parents[0]];
        let study = StudyView::with_directions("s", &dirs, lone);
        for _ in 0..20 {
            let params = crate::ask(&mut sampler, study, 4, &space).unwrap();
            assert!((0.0..=1.0).contains(&params["x"].internal));
        }
    }

    #[test]
    fn crowding_distance_puts_the_extremes_first() {
        let trials: Vec<FrozenTrial> = [(0.0, 4.0), (1.0, 3.0), (1.5, 2.9), (3.0, 1.0), (4.0, 0.0)]
            .iter()
            .enumerate()
            .map(|(i, &(a, b))| done(i as u64, 0.5, vec![a, b]))
            .collect();
        let sorted = crowding_sort(&trials, (0..5).collect());
        // The extremes are infinitely far; then (3, 1), whose neighbours are
        // farthest apart; (1, 3) is the most crowded.
        assert_eq!(&sorted[2..], &[3, 2, 1]);
        assert!(sorted[..2].contains(&0) && sorted[..2].contains(&4));
    }

    #[test]
    fn generations_fill_then_advance_and_children_come_from_parents() {
        let dirs = [StudyDirection::Minimize, StudyDirection::Minimize];
        let mut sampler = NsgaIISampler::new(NsgaIIConfig {
            population_size: 4,
            mutation_prob: Some(0.0),
            seed: Some(1),
            ..NsgaIIConfig::default()
        });
        let mut trials: Vec<FrozenTrial> = Vec::new();
        let space = SearchSpace::from([(
            "x".to_string(),
            Distribution::float(0.0, 1.0, false, None).unwrap(),
        )]);
        let mut generations = Vec::new();
        for n in 0..12u64 {
            let study = StudyView::with_directions("s", &dirs, &trials);
            let params = crate::ask(&mut sampler, study, n, &space).unwrap();
            generations.push(sampler.system_attrs(&study, n)[GENERATION_KEY].clone());
            let x = params["x"].internal;
            trials.push(done(n, x, vec![x, (1.0 - x).powi(2)]));
        }
        assert_eq!(
            generations,
            [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2].map(serde_json::Value::from)
        );
        // Without mutation, every child of generation 1 is a parent's x.
        let study = StudyView::with_directions("s", &dirs, &trials);
        let parents: Vec<f64> = sampler
            .parent_population(&study, 1)
            .iter()
            .map(|&i| trials[i].params["x"].internal)
            .collect();
        assert_eq!(parents.len(), 4);
        for t in &trials[4..8] {
            assert!(parents.contains(&t.params["x"].internal), "{t:?}");
        }
    }

    /// A PRUNED trial stopped before suggesting `y` leaves `y` in the
    /// relative space (Optuna's `IntersectionSearchSpace()` counts COMPLETE
    /// trials only): without mutation every child copies a parent's `y`.
    #[test]
    fn a_pruned_trial_does_not_shrink_the_relative_space() {
        let dirs = [StudyDirection::Minimize, StudyDirection::Minimize];
        let unit = Distribution::float(0.0, 1.0, false, None).unwrap();
        let ys = [0.11, 0.22, 0.33, 0.44];
        let mut trials: Vec<FrozenTrial> = (0..4)
            .map(|i| {
                let x = 0.1 * (i + 1) as f64;
                let mut t = done(i as u64, x, vec![x, 1.0 - x]);
                let y = Param {
                    distribution: unit.clone(),
                    internal: ys[i],
                };
                t.params.insert("y".into(), y);
                t
            })
            .collect();
        let mut pruned = done(4, 0.5, vec![0.0, 0.0]);
        (pruned.state, pruned.values) = (TrialState::Pruned, None);
        trials.push(pruned);
        for t in &mut trials {
            t.system_attrs.insert(GENERATION_KEY.into(), 0.into());
        }
        let mut sampler = NsgaIISampler::new(NsgaIIConfig {
            population_size: 4,
            mutation_prob: Some(0.0),
            seed: Some(1),
            ..NsgaIIConfig::default()
        });
        let study = StudyView::with_directions("s", &dirs, &trials);
        let space = SearchSpace::from([("x".to_string(), unit.clone()), ("y".to_string(), unit)]);
        for n in 5..35 {
            let params = crate::ask(&mut sampler, study, n, &space).unwrap();
            assert!(ys.contains(&params["y"].internal), "{n}: {params:?}");
        }
    }

    #[test]
    fn feasible_trials_are_the_elite_under_constraints() {
        let dirs = [StudyDirection::Minimize, StudyDirection::Minimize];
        let mut trials: Vec<FrozenTrial> = (0..6)
            .map(|i| done(i, 0.1 * i as f64, vec![i as f64, 6.0 - i as f64]))
            .collect();
        for (i, t) in trials.iter_mut().enumerate() {
            let violation = if i < 3 { 1.0 + i as f64 } else { 0.0 };
            t.system_attrs
                .insert(CONSTRAINTS_KEY.into(), serde_json::json!([violation]));
            t.system_attrs.insert(GENERATION_KEY.into(), 0.0.into());
        }
        let sampler = NsgaIISampler::new(NsgaIIConfig {
            population_size: 4,
            seed: Some(2),
            ..NsgaIIConfig::default()
        });
        let study = StudyView::with_directions("s", &dirs, &trials);
        let mut elite = sampler.select_elite(&study, (0..6).collect());
        elite.sort_unstable();
        // Three feasible trials, then the least violating infeasible one.
        assert_eq!(elite, vec![0, 3, 4, 5]);
    }
}
