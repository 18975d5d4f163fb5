//! Optuna 5.0's `TPESampler`: split the history into the best `gamma(n)`
//! trials and the rest, fit a Parzen estimator to each, draw
//! `n_ei_candidates` from the "below" estimator and keep the one maximising
//! `log l(x) - log g(x)` (by default among the few of highest `l(x)`:
//! [`TpeConfig::ei_finalists`]).
//!
//! Ranking follows `_split_trials`: feasible COMPLETE trials by value, then
//! PRUNED trials by (last step descending, last value), then infeasible
//! trials by total constraint violation; RUNNING trials (constant liar) are
//! always "above"; FAIL trials are ignored.
//!
//! On a study of several objectives (Optuna's multi-objective TPE), the
//! COMPLETE trials are ranked by non-domination (`multi::non_domination_ranks`)
//! and the last front that does not fit is cut by greedy hypervolume subset
//! selection; "below" trials all weigh 1, `gamma` is
//! [`TpeConfig::gamma_multi_objective`], and parameters are sampled
//! independently unless [`TpeConfig::multivariate_multi_objective`] or
//! [`TpeConfig::group`].

use super::Sampler;
use super::observations::SpaceCache;
use super::parzen::{Evaluator, Parzen, ParzenParams, total_key};
use super::random::sample_uniform;
use crate::distribution::Distribution;
use crate::error::{Error, Result};
use crate::multi::{
    losses, non_domination_ranks, ranks_of_pairs, reference_point, select_by_hypervolume,
};
use crate::pruner::require;
use crate::rng::Rng;
use crate::search_space;
use crate::trial::{
    CheckedTrials, FrozenTrial, SearchSpace, StudyDirection, StudyView, TrialState,
};
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};

/// `min(ceil(0.1 n), 25)`: how many trials count as "below" (good).
pub fn default_gamma(n: usize) -> usize {
    n.div_ceil(10).min(25)
}

/// `ceil(0.1 n)`: how many trials count as "below" on a study of several
/// objectives (Optuna's `default_gamma_multiobjective`).
pub fn default_gamma_multi_objective(n: usize) -> usize {
    n.div_ceil(10)
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

/// TPE options. The `Default` is Optuna 5.0's `TPESampler()` but for
/// [`TpeConfig::continuous`], [`TpeConfig::continuous_wide`] and
/// [`TpeConfig::integer`]
/// ([`TpeConfig::optuna`] is Optuna's exactly).
/// [`TpeConfig::many_candidates`] draws 96 EI candidates and lets the 4 of
/// highest `l(x)` compete on `l(x) / g(x)` ([`TpeConfig::ei_finalists`]):
/// better optima on smooth continuous spaces (Hartmann6, Branin,
/// Styblinski-Tang over 1,000 seeds), worse on the study runner's
/// conditional, mostly categorical space at 1, 2 and 4 trials in flight,
/// which is why it is not the default (docs/benchmarks.md).
#[derive(Debug, Clone)]
pub struct TpeConfig {
    /// Optuna's `n_startup_trials`: parameters are drawn uniformly at random
    /// until this many trials are COMPLETE or PRUNED (default 10).
    pub n_startup_trials: usize,
    /// Candidates drawn from the "good" estimator per ask; the best by
    /// `l(x) / g(x)` wins.
    pub n_ei_candidates: usize,
    /// How many of the candidates, those of highest `l(x)`, compete on
    /// `l(x) / g(x)`; `None` (or `Some(0)`): all of them (Optuna). Drawing many
    /// candidates and comparing `g` only among the few that `l` ranks
    /// highest leans the choice towards the good trials' densest region:
    /// it finds better optima than comparing all of them, and costs less
    /// (`g`, over the whole history, is the expensive density). While a
    /// RUNNING trial is lied about (`constant_liar`), all candidates
    /// compete, so the lie can push the choice away from it.
    pub ei_finalists: Option<usize>,
    /// The prior's weight against the observations' (positive, finite;
    /// Optuna's `prior_weight`, default 1).
    pub prior_weight: f64,
    /// Optuna's `consider_magic_clip` (default `true`): the kernels' widths
    /// have a lower bound that shrinks as observations accumulate
    /// (without it, the bound is 1e-12).
    pub consider_magic_clip: bool,
    /// Optuna's `consider_endpoints` (default `false`): the range's ends
    /// count as neighbours when the two outermost kernels' widths are set.
    pub consider_endpoints: bool,
    /// Model the relative search space jointly (Optuna 5 default for a
    /// single objective).
    pub multivariate: bool,
    /// Decompose conditional spaces into groups that always co-occur and
    /// model each jointly (requires `multivariate`), on several objectives
    /// too.
    pub group: bool,
    /// Count RUNNING trials as "above" so parallel workers spread out.
    pub constant_liar: bool,
    /// Optuna's `gamma`: how many of `n` ranked trials count as "below" on
    /// one objective ([`default_gamma`], `min(ceil(0.1 n), 25)`).
    pub gamma: fn(usize) -> usize,
    /// How far the "below" trials' weights lean towards the best of them,
    /// `a` in `[0, 0.99]` (others are clamped to it, so that every weight
    /// stays positive): the best weighs `1 + a`, the worst `1 - a`,
    /// linearly in rank between (feasible COMPLETE trials by value first). `0`
    /// (Optuna's): all weigh 1. One objective only.
    pub below_rank_weight: f64,
    /// The weights of `n` "above" observations in trial-number order
    /// ([`default_weights`]): at least `n` values (more are cut), finite,
    /// none negative, not all zero. Checked at each call, as Optuna does;
    /// other values make [`Sampler::check`] (so every later ask) an
    /// error naming `weights`.
    pub weights: fn(usize) -> Vec<f64>,
    /// `gamma` on a study of several objectives (Optuna's
    /// `default_gamma_multiobjective`: `ceil(0.1 n)`, no cap).
    pub gamma_multi_objective: fn(usize) -> usize,
    /// Model the relative search space jointly on a study of several
    /// objectives (Optuna 5: independent, `false`); `group` does anyway.
    pub multivariate_multi_objective: bool,
    /// One objective, a continuous space (every parameter a float without
    /// a step): the candidates, finalists and `gamma` an ask uses there
    /// instead of the three above (`None`: the same everywhere). The
    /// default draws 96, lets the 8 of highest `l(x)` compete and counts
    /// the best 15% as "below", which leans each ask towards the good
    /// trials' densest region: on COCO's bbob at 10 and 20 evaluations
    /// per dimension it is at least as good as Optuna's `TPESampler()` in
    /// more than four cells of five (at 50, two of three), where Optuna's
    /// own configuration is in half of them. On integers of a few values
    /// (bbob-mixint) and on the runner's categorical and conditional spaces
    /// that lean commits too early, so they have a rule of their own or
    /// Optuna's (docs/benchmarks.md). A caller that sets the
    /// candidates or finalists for every space clears it (`memtune`'s
    /// study file and `--sampler-kwargs` do, through
    /// [`TpeConfig::one_rule_everywhere`]).
    pub continuous: Option<CandidateRule>,
    /// One objective, a continuous space of at least `.0` parameters
    /// sampled at once: the rule an ask uses there instead of
    /// [`TpeConfig::continuous`]. The default, from 10 parameters: 96
    /// candidates, the 4 of highest `l(x)` competing, 5% "below"
    /// ([`wide_continuous_gamma`]). A sharper "below" set pays in 10
    /// dimensions and costs in 2 and 5: on COCO's bbob at 10 dimensions
    /// (budgets of 10, 20 and 50 evaluations per dimension, 25 runs a cell)
    /// it is at least as good as Optuna's `TPESampler()` in 54 of 72
    /// cells, where the continuous rule is in 30; at 5 and 2 dimensions it
    /// would lose cells to that rule (docs/benchmarks.md). Measured at 10
    /// parameters; more are taken to lean the same way.
    pub continuous_wide: Option<(usize, CandidateRule)>,
    /// One objective, a numeric space with an integer or stepped parameter
    /// (no categorical one): the rule an ask uses there (`None`:
    /// `n_ei_candidates`, `ei_finalists` and `gamma`). The default keeps
    /// Optuna's 24 candidates and `gamma`, lets the 8 of highest `l(x)`
    /// compete, and holds for the first 20 finished trials per parameter
    /// of the space sampled at once (all of it, a group, or the one
    /// parameter of an independent draw):
    /// on COCO's bbob-mixint at 10 and 20 evaluations per dimension it is
    /// at least as good as Optuna's `TPESampler()` in four cells of five,
    /// where Optuna's configuration is in three of five. Kept longer some
    /// runs stall on one plateau (at 50 evaluations per dimension f15's
    /// median is 3.4x Optuna's, 0.01x with the handover); more candidates
    /// or a larger "below" set, as on floats, commit too early among a
    /// few integer values (docs/benchmarks.md). A space (or group) with a
    /// categorical parameter keeps Optuna's configuration.
    pub integer: Option<CandidateRule>,
    /// Optuna's `seed`: the same seed and history give the same samples;
    /// `None` (the default): a different seed each run.
    pub seed: Option<u64>,
}

/// How an ask picks its candidate: how many it draws from the "below"
/// estimator, how many of those of highest `l(x)` compete on
/// `l(x) / g(x)` (`None`: all), and how many trials count as "below";
/// and for how long.
#[derive(Debug, Clone, Copy)]
pub struct CandidateRule {
    /// [`TpeConfig::n_ei_candidates`] under this rule.
    pub n_ei_candidates: usize,
    /// [`TpeConfig::ei_finalists`] under this rule.
    pub ei_finalists: Option<usize>,
    /// [`TpeConfig::gamma`] under this rule.
    pub gamma: fn(usize) -> usize,
    /// [`TpeConfig::below_rank_weight`] under this rule.
    pub below_rank_weight: f64,
    /// The rule holds while fewer trials than this many per parameter of
    /// the space have finished (`None`: always); from then on
    /// `n_ei_candidates`, `ei_finalists`, `gamma` and `below_rank_weight`
    /// of the [`TpeConfig`] do.
    pub until_trials_per_parameter: Option<usize>,
}

/// [`CandidateRule::below_rank_weight`] of the default's rules: the best
/// "below" trial weighs 1.25, the worst 0.75. `l(x)` then leans towards
/// the best trials rather than where the good ones are densest: on COCO's
/// bbob at 2 and 5 dimensions (budgets of 10, 20 and 50 evaluations per
/// dimension) it is at least as good as Optuna's `TPESampler()` in 113 of
/// 144 cells over 10 seeds, against 107 with equal weights, and six cells
/// better on the five seeds the choice did not see; at 10 dimensions ten
/// cells of 72 better on four seeds the choice did not see and one over
/// nine pooled, on bbob-mixint level with equal weights
/// (docs/benchmarks.md).
pub const BELOW_RANK_WEIGHT: f64 = 0.25;

/// `min(ceil(0.15 n), 25)`: "below" on a continuous space
/// ([`TpeConfig::continuous`]).
pub fn continuous_gamma(n: usize) -> usize {
    (3 * n).div_ceil(20).min(25)
}

/// `min(ceil(0.05 n), 25)`: "below" on a continuous space of many
/// parameters ([`TpeConfig::continuous_wide`]).
pub fn wide_continuous_gamma(n: usize) -> usize {
    n.div_ceil(20).min(25)
}

impl TpeConfig {
    /// The most candidates an ask may draw (`n_ei_candidates`): each is a
    /// row of every parameter's samples and densities, so a mistyped count
    /// would exhaust memory rather than sample better.
    pub const MAX_EI_CANDIDATES: usize = 1_000_000;

    /// Checks the options a sampler cannot use: `n_ei_candidates` (the
    /// configuration's and each space rule's) above
    /// [`TpeConfig::MAX_EI_CANDIDATES`], a `prior_weight` that is not
    /// positive and finite, and `group` without `multivariate` (Optuna's
    /// `ValueError`). The error names the option. A [`TpeSampler`] built
    /// with such options returns this error from [`Sampler::check`], so
    /// from every ask, and draws at random.
    ///
    /// ```
    /// use hpo_sampler::TpeConfig;
    /// assert!(TpeConfig::default().check().is_ok());
    /// let bad = TpeConfig { prior_weight: f64::NAN, ..TpeConfig::default() };
    /// assert!(bad.check().unwrap_err().to_string().contains("prior_weight"));
    /// ```
    pub fn check(&self) -> Result<()> {
        let candidates = |option: &str, n: usize| {
            require((1..=Self::MAX_EI_CANDIDATES).contains(&n), option, || {
                format!("must be between 1 and {}, got {n}", Self::MAX_EI_CANDIDATES)
            })
        };
        candidates("n_ei_candidates", self.n_ei_candidates)?;
        for (option, rule) in [
            ("continuous.n_ei_candidates", self.continuous),
            (
                "continuous_wide.n_ei_candidates",
                self.continuous_wide.map(|(_, r)| r),
            ),
            ("integer.n_ei_candidates", self.integer),
        ] {
            if let Some(rule) = rule {
                candidates(option, rule.n_ei_candidates)?;
            }
        }
        require(
            self.prior_weight > 0.0 && self.prior_weight.is_finite(),
            "prior_weight",
            || format!("must be positive and finite, got {}", self.prior_weight),
        )?;
        require(!self.group || self.multivariate, "group", || {
            "can only be enabled when `multivariate` is enabled".into()
        })
    }

    /// Optuna 5.0's `TPESampler()` defaults, unchanged: the `Default`
    /// but for [`TpeConfig::continuous`] and [`TpeConfig::integer`].
    pub fn optuna() -> Self {
        TpeConfig::default().one_rule_everywhere()
    }

    /// Drops the rules of continuous and integer spaces, so that
    /// `n_ei_candidates`, `ei_finalists`, `gamma` and `below_rank_weight`
    /// (0, equal weights, unless set) hold on every space (what a caller
    /// that sets the candidates or finalists means).
    pub fn one_rule_everywhere(self) -> Self {
        TpeConfig {
            continuous: None,
            continuous_wide: None,
            integer: None,
            ..self
        }
    }

    /// 96 EI candidates of which the 4 of highest `l(x)` compete: for
    /// smooth, mostly continuous spaces (see the type's doc).
    pub fn many_candidates() -> Self {
        TpeConfig {
            n_ei_candidates: 96,
            ei_finalists: Some(4),
            ..TpeConfig::optuna()
        }
    }
}

impl Default for TpeConfig {
    fn default() -> Self {
        TpeConfig {
            n_startup_trials: 10,
            n_ei_candidates: 24,
            ei_finalists: None,
            prior_weight: 1.0,
            consider_magic_clip: true,
            consider_endpoints: false,
            multivariate: true,
            group: false,
            constant_liar: true,
            gamma: default_gamma,
            below_rank_weight: 0.0,
            weights: default_weights,
            gamma_multi_objective: default_gamma_multi_objective,
            multivariate_multi_objective: false,
            continuous: Some(CandidateRule {
                n_ei_candidates: 96,
                ei_finalists: Some(8),
                gamma: continuous_gamma,
                below_rank_weight: BELOW_RANK_WEIGHT,
                until_trials_per_parameter: None,
            }),
            continuous_wide: Some((
                10,
                CandidateRule {
                    n_ei_candidates: 96,
                    ei_finalists: Some(4),
                    gamma: wide_continuous_gamma,
                    below_rank_weight: BELOW_RANK_WEIGHT,
                    until_trials_per_parameter: None,
                },
            )),
            integer: Some(CandidateRule {
                n_ei_candidates: 24,
                ei_finalists: Some(8),
                gamma: default_gamma,
                below_rank_weight: BELOW_RANK_WEIGHT,
                until_trials_per_parameter: Some(20),
            }),
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
    /// What finished trials contribute, and the last estimators, per
    /// search space.
    spaces: HashMap<String, SpaceState>,
    /// Intersection over the longest all-finished prefix of the history.
    prefix: (usize, Option<SearchSpace>),
    /// The last space sampled and its key in `spaces`.
    last_space: Option<(Vec<(String, Distribution)>, String)>,
    /// The last split's cut, a hint for the next (see [`split_rows`]).
    split_cut: Option<u64>,
    /// The last observation weights made, with their count.
    weights_memo: Option<(usize, Vec<f64>)>,
    /// The last multi-objective split, reused while the considered trials
    /// and `n_below` are the same (independent sampling splits once per
    /// parameter).
    multi_split: Option<MultiSplit>,
    /// [`obs_weights`]' memo for uniform weights.
    ones_memo: Option<(usize, Vec<f64>)>,
    /// The rows of the trial being asked (see [`ConsideredMemo`]).
    considered: Option<ConsideredMemo>,
    /// Why it cannot sample ([`Sampler::check`]): its configuration's
    /// error, or the first unusable values its `weights` returned.
    error: Option<Error>,
    /// The finished trials that passed [`StudyView::check`].
    checked: CheckedTrials,
}

/// The rows [`considered`] made for the trial being asked, by position in
/// its history. Every parameter of one trial reads the same history (a
/// [`crate::Trial`] holds its `StudyView` while it lives), so independent
/// sampling reads the history once a trial instead of once a parameter.
/// Kept for the trial number, the history's address and its length, and
/// dropped by [`Sampler::before_trial`].
struct ConsideredMemo {
    asked: (u64, usize, usize),
    rows: Vec<(u32, Group, u64, TrialKey)>,
}

/// [`Row::key`].
type TrialKey = (u64, u64, u64);

/// A multi-objective split and what it was made from.
struct MultiSplit {
    keys: Vec<TrialKey>,
    n_below: usize,
    below: Vec<u32>,
    above: Vec<u32>,
}

/// Per search space: the finished trials' observations and the last
/// "below" and "above" estimators. An estimator is reused while its set of
/// trials is unchanged (at 1,000 trials the best 25 rarely change from one
/// ask to the next) and updated in place when a few trials left or joined
/// (the "above" set, every ask); a rebuilt one inherits the discrete cell
/// masses its predecessor computed.
#[derive(Default)]
struct SpaceState {
    observations: SpaceCache,
    below: Option<Estimator>,
    above: Option<Estimator>,
}

struct Estimator {
    /// The trials it was built from (each [`Row::key`]).
    key: Vec<TrialKey>,
    /// The lean of its weights by rank (0: none): a rule that ends
    /// (`until_trials_per_parameter`) leaves the same trials weighed
    /// alike.
    lean: f64,
    parzen: Parzen,
}

/// How a trial counts in the split (FAIL trials are not considered).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Group {
    /// Feasible COMPLETE trials, ranked by value.
    Complete,
    /// Feasible PRUNED trials, ranked by their last step and value.
    Pruned,
    /// Finished trials that violate a constraint, ranked by violation.
    Infeasible,
    /// RUNNING trials (the constant liar): always "above".
    Running,
}

/// What an ask needs of one trial it considers, read in one pass over the
/// history: later steps (the split, the estimators' keys) work on these
/// compact rows instead of each following a trial's heap blocks again.
struct Row<'a> {
    trial: &'a FrozenTrial,
    /// The trial's position in the history.
    position: u32,
    group: Group,
    /// The trial's rank by value ([`total_key`] of its value signed for
    /// minimisation, `-0` as `0`, NaN or none last): the split's order of
    /// COMPLETE trials.
    rank: u64,
    /// What identifies the trial for reusing an estimator: its number with
    /// its state, feasibility, value and number of parameters (as the
    /// observation cache checks them; a RUNNING trial's parameters only
    /// grow).
    key: TrialKey,
}

/// The trials of a history that an ask of trial `number` considers, in
/// history order: COMPLETE and PRUNED ones, and with the constant liar the
/// other RUNNING ones.
fn considered<'a>(
    trials: impl ExactSizeIterator<Item = &'a FrozenTrial>,
    number: u64,
    liar: bool,
    direction: StudyDirection,
) -> Vec<Row<'a>> {
    let sign = match direction {
        StudyDirection::Minimize | StudyDirection::NotSet => 1.0,
        StudyDirection::Maximize => -1.0,
    };
    let mut rows = Vec::with_capacity(trials.len());
    for (position, t) in trials.enumerate() {
        let group = match t.state {
            TrialState::Running if liar && t.number != number => Group::Running,
            TrialState::Complete | TrialState::Pruned
                if t.has_constraints() && t.violation() > 0.0 =>
            {
                Group::Infeasible
            }
            TrialState::Complete => Group::Complete,
            TrialState::Pruned => Group::Pruned,
            _ => continue,
        };
        let value = t.value();
        let rank = match value {
            Some(v) if !v.is_nan() => total_key(sign * v + 0.0),
            _ => u64::MAX,
        };
        // Feasibility too: a trial whose constraints are edited changes
        // group, and so its weight by rank, while its value stays.
        let infeasible = u64::from(group == Group::Infeasible) << 40;
        let shape = ((t.state as u64) << 32) | infeasible | t.params.len() as u64;
        // The value's bits (every value's, folded, for several objectives).
        let bits = t.values.as_deref().map_or(0, |vs| {
            vs.iter().fold(0u64, |h, v| h.rotate_left(17) ^ v.to_bits())
        });
        rows.push(Row {
            trial: t,
            position: position as u32,
            group,
            rank,
            key: (t.number, bits, shape),
        });
    }
    rows
}

/// Above this many trials leaving or joining a set, its estimator is
/// rebuilt rather than updated (each change costs a few passes over the
/// kernel arrays; a rebuild costs a few dozen).
const MAX_UPDATE: usize = 16;

/// The trial numbers in `old` but not in `new`, and the positions in `new`
/// of the trials not in `old` (a trial whose value, state or parameters
/// changed is both), if there are at most [`MAX_UPDATE`] of them. Both keys
/// are in trial-number order.
fn key_change(old: &[TrialKey], new: &[TrialKey]) -> Option<(Vec<u64>, Vec<usize>)> {
    if old.len().abs_diff(new.len()) > MAX_UPDATE {
        return None;
    }
    let (mut gone, mut joined) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        match (old.get(i), new.get(j)) {
            (Some(a), Some(b)) if a == b => {
                i += 1;
                j += 1;
                continue;
            }
            (Some(a), Some(b)) if a.0 == b.0 => {
                gone.push(a.0);
                joined.push(j);
                i += 1;
                j += 1;
            }
            (Some(a), b) if b.is_none_or(|b| a.0 < b.0) => {
                gone.push(a.0);
                i += 1;
            }
            _ => {
                joined.push(j);
                j += 1;
            }
        }
        if gone.len() + joined.len() > MAX_UPDATE {
            return None;
        }
    }
    Some((gone, joined))
}

impl TpeSampler {
    /// The sampler of `config`. Options out of range
    /// ([`TpeConfig::check`]) do not panic: [`Sampler::check`] returns
    /// their error and the sampler draws at random.
    pub fn new(config: TpeConfig) -> Self {
        let (rng, random) = match config.seed {
            Some(s) => (Rng::seed_from(s), Rng::seed_from(s ^ 0x005e_ed0f_7a4d_0000)),
            None => (Rng::from_entropy(), Rng::from_entropy()),
        };
        TpeSampler {
            error: config.check().err(),
            config,
            rng,
            random,
            groups: Vec::new(),
            spaces: HashMap::new(),
            prefix: (0, None),
            last_space: None,
            split_cut: None,
            weights_memo: None,
            multi_split: None,
            ones_memo: None,
            considered: None,
            checked: CheckedTrials::default(),
        }
    }

    /// The defaults ([`TpeConfig::default`]) with a seed.
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

    /// The name of `space` in `spaces` (its parameters with their
    /// distributions), formatted once per distinct space rather than per
    /// ask.
    fn space_key(&mut self, space: &[(&String, &Distribution)]) -> String {
        let same = |(named, _): &(Vec<(String, Distribution)>, String)| {
            named.len() == space.len()
                && named
                    .iter()
                    .zip(space)
                    .all(|((n, d), (m, e))| n == *m && d == *e)
        };
        match &self.last_space {
            Some(last) if same(last) => last.1.clone(),
            _ => {
                let key: String = space.iter().map(|(n, d)| format!("{n}={d};")).collect();
                let named = space
                    .iter()
                    .map(|(n, d)| ((*n).clone(), (*d).clone()))
                    .collect();
                self.last_space = Some((named, key.clone()));
                key
            }
        }
    }

    /// [`considered`]'s rows of `study` for an ask of `trial_number`, read
    /// from the history once per trial.
    fn considered_rows<'a>(&mut self, study: &StudyView<'a>, trial_number: u64) -> Vec<Row<'a>> {
        let asked = (
            trial_number,
            study.trials.as_ptr() as usize,
            study.trials.len(),
        );
        if let Some(memo) = self.considered.as_ref().filter(|m| m.asked == asked) {
            return memo
                .rows
                .iter()
                .map(|&(position, group, rank, key)| Row {
                    trial: &study.trials[position as usize],
                    position,
                    group,
                    rank,
                    key,
                })
                .collect();
        }
        let rows = considered(
            study.trials.iter(),
            trial_number,
            self.config.constant_liar,
            study.direction,
        );
        self.considered = Some(ConsideredMemo {
            asked,
            rows: rows
                .iter()
                .map(|r| (r.position, r.group, r.rank, r.key))
                .collect(),
        });
        rows
    }

    /// Optuna's `_sample`: TPE over `space`, returning internal values.
    fn sample_space(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
        space: &[(&String, &Distribution)],
    ) -> Vec<f64> {
        let rows = self.considered_rows(study, trial_number);
        let n = rows.iter().filter(|r| r.group != Group::Running).count();
        let multi = study.is_multi_objective();
        let is = |kind: fn(&Distribution) -> bool| space.iter().all(|(_, d)| kind(d));
        let space_rule = if multi {
            None
        } else if is(|d| matches!(d, Distribution::Float { step: None, .. })) {
            match self.config.continuous_wide {
                Some((from, rule)) if space.len() >= from => Some(rule),
                _ => self.config.continuous,
            }
        } else if is(|d| !matches!(d, Distribution::Categorical { .. })) {
            self.config.integer
        } else {
            None
        };
        let rule = space_rule
            .filter(|r| {
                r.until_trials_per_parameter
                    .is_none_or(|k| n < k.saturating_mul(space.len()))
            })
            .unwrap_or(CandidateRule {
                n_ei_candidates: self.config.n_ei_candidates,
                ei_finalists: self.config.ei_finalists,
                gamma: self.config.gamma,
                below_rank_weight: self.config.below_rank_weight,
                until_trials_per_parameter: None,
            });
        let (below, above) = if multi {
            let n_below = (self.config.gamma_multi_objective)(n);
            // Compared in place: every parameter of an ask finds the split
            // of the same history.
            let same_rows = |keys: &[TrialKey]| {
                keys.len() == rows.len() && keys.iter().zip(&rows).all(|(k, r)| *k == r.key)
            };
            match &self.multi_split {
                Some(m) if m.n_below == n_below && same_rows(&m.keys) => {
                    (m.below.clone(), m.above.clone())
                }
                _ => {
                    let (below, above) = split_rows_multi(&rows, n_below, study.objectives());
                    self.multi_split = Some(MultiSplit {
                        keys: rows.iter().map(|r| r.key).collect(),
                        n_below,
                        below: below.clone(),
                        above: above.clone(),
                    });
                    (below, above)
                }
            }
        } else {
            let n_below = (rule.gamma)(n);
            split_rows(&rows, n_below, study.direction, &mut self.split_cut)
        };

        // Whether a RUNNING trial with this space's values is lied about in
        // `g` (asked only when finalists are configured). RUNNING trials
        // steer the choice only through `g`, so while one is, every
        // candidate competes on `l / g` (Optuna's constant liar): finalists
        // picked by `l` alone would all sit where `l` peaks, and parallel
        // workers would pick alike.
        let lying = || {
            above.iter().map(|&r| &rows[r as usize]).any(|row| {
                row.group == Group::Running
                    && space
                        .iter()
                        .all(|(name, _)| row.trial.params.contains_key(*name))
            })
        };

        let params = ParzenParams {
            prior_weight: self.config.prior_weight,
            consider_magic_clip: self.config.consider_magic_clip,
            consider_endpoints: self.config.consider_endpoints,
        };
        let dists: Vec<&Distribution> = space.iter().map(|(_, d)| *d).collect();
        let key = self.space_key(space);
        let cached = self.spaces.entry(key).or_default();
        cached.observations.fit_history(study.trials.len());
        let weights = self.config.weights;
        let memo = &mut self.weights_memo;
        let ones_memo = &mut self.ones_memo;
        let error = &mut self.error;
        for (slot, set, is_below) in [
            (&mut cached.below, &below, true),
            (&mut cached.above, &above, false),
        ] {
            // Multi-objective TPE weighs its "below" trials alike.
            let (memo, weights) = if multi && is_below {
                (&mut *ones_memo, uniform_weights as fn(usize) -> Vec<f64>)
            } else {
                (&mut *memo, weights)
            };
            let key_of = |&r: &u32| rows[r as usize].key;
            let lean = if is_below && !multi {
                rank_lean(rule.below_rank_weight)
            } else {
                0.0
            };
            let by_rank = lean > 0.0;
            if let Some(e) = slot.as_ref()
                && e.lean == lean
                && e.key.len() == set.len()
                && e.key.iter().zip(set).all(|(k, r)| *k == key_of(r))
            {
                continue;
            }
            let key: Vec<TrialKey> = set.iter().map(key_of).collect();
            // Weights by rank change with the set's order, not only with
            // who joins or leaves it: such an estimator (at most 25
            // kernels) is rebuilt rather than updated.
            if let Some(e) = slot.as_mut().filter(|_| !by_rank) {
                // A few trials left or joined: update the estimator in
                // place (the same result as rebuilding it).
                if let Some((gone, joined)) = key_change(&e.key, &key)
                    && !e.parzen.needs_rebuild()
                {
                    let removed: Vec<usize> =
                        gone.iter().filter_map(|&n| e.parzen.kernel_of(n)).collect();
                    let added: Vec<(u64, Box<[f64]>)> = joined
                        .iter()
                        .filter_map(|&j| {
                            let t = rows[set[j] as usize].trial;
                            let centres = cached.observations.centres_of(t, space)?;
                            Some((t.number, centres))
                        })
                        .collect();
                    let n_obs = e.parzen.n_observations() - removed.len() + added.len();
                    e.parzen.update(
                        &removed,
                        &added,
                        obs_weights(memo, weights, n_obs, error),
                        params,
                    );
                    e.key = key;
                    e.lean = lean;
                    continue;
                }
            }
            let trials: Vec<&FrozenTrial> = set.iter().map(|&r| rows[r as usize].trial).collect();
            let obs = cached.observations.observations(&trials, space);
            let ranked;
            let w = if by_rank {
                ranked = rank_weights(&rows, set, &obs.numbers, lean);
                &ranked[..]
            } else {
                obs_weights(memo, weights, obs.len(), error)
            };
            // The new estimator inherits the cell masses its predecessor
            // computed, and its log weights if they are the same.
            let recycled = slot.take().map(|e| e.parzen.recycle()).unwrap_or_default();
            let parzen = Parzen::from_centres(
                &dists,
                &obs.centres,
                &obs.orders,
                &obs.numbers,
                w,
                params,
                recycled,
            );
            *slot = Some(Estimator { key, lean, parzen });
        }
        let (Some(below), Some(above)) = (&mut cached.below, &mut cached.above) else {
            unreachable!("both estimators were just set");
        };
        let mut samples = below
            .parzen
            .sample(&mut self.rng, rule.n_ei_candidates.max(1));
        let mut l = below.parzen.log_pdf(&samples);
        let finalists = rule.ei_finalists.filter(|&k| k > 0 && !lying());
        let best = match finalists {
            Some(k) if k < l.len() => {
                keep_finalists(&mut samples, &mut l, k);
                best_by_scan(&l, &mut above.parzen.evaluator(&samples))
            }
            // One dimension (independent sampling): a full density is a
            // single row of kernel terms, cheaper than the screening's
            // guesses (ZDT1, 2 objectives, 1,000 trials: 2.6 -> 1.45 ms
            // an ask + tell).
            _ if space.len() == 1 => best_by_scan(&l, &mut above.parzen.evaluator(&samples)),
            _ => best_candidate(&l, &mut above.parzen.evaluator(&samples)),
        };
        samples.iter().map(|column| column[best]).collect()
    }
}

/// Keeps the `k` (at least 1) candidates of highest `l` (the lower index
/// first on ties), in their original order, so the first of equal
/// finalists is still the first candidate.
fn keep_finalists(samples: &mut [Vec<f64>], l: &mut Vec<f64>, k: usize) {
    let mut order: Vec<usize> = (0..l.len()).collect();
    order.select_nth_unstable_by(k - 1, |&a, &b| l[b].total_cmp(&l[a]).then(a.cmp(&b)));
    order.truncate(k);
    order.sort_unstable();
    for column in samples.iter_mut() {
        *column = order.iter().map(|&i| column[i]).collect();
    }
    *l = order.iter().map(|&i| l[i]).collect();
}

/// The first candidate of largest `l - g`, every `g` evaluated in full.
/// For a few candidates this beats [`best_candidate`]'s screening, whose
/// guesses cost about as much to build as a few full densities and rule
/// out little where `l` peaks (there the history's trials cluster, so
/// many kernels carry each `g`).
fn best_by_scan(l: &[f64], above: &mut Evaluator<'_>) -> usize {
    let mut best = (0, l[0] - above.log_pdf(0));
    for (i, li) in l.iter().enumerate().skip(1) {
        let a = li - above.log_pdf(i);
        if a > best.1 {
            best = (i, a);
        }
    }
    best.0
}

/// A [`CandidateRule::below_rank_weight`] as used: in `[0, 0.99]`, so
/// that every weight stays positive (NaN: 0).
fn rank_lean(a: f64) -> f64 {
    if a.is_nan() { 0.0 } else { a.clamp(0.0, 0.99) }
}

/// The weights of the "below" trials `set` (positions in `rows`), in the
/// order of `numbers` (the observations' trial numbers): `1 + a` for the
/// best down to `1 - a` for the worst, linear in rank; feasible COMPLETE
/// trials by value, then the others (PRUNED and infeasible ones, which
/// fill the set only when too few are COMPLETE) by value, then number.
fn rank_weights(rows: &[Row<'_>], set: &[u32], numbers: &[u64], a: f64) -> Vec<f64> {
    let mut order: Vec<&Row<'_>> = set.iter().map(|&r| &rows[r as usize]).collect();
    order.sort_by_key(|r| (r.group != Group::Complete, r.rank, r.trial.number));
    // One trial is both the best and the worst: it weighs 1.
    let (a, step) = match order.len() {
        0 | 1 => (0.0, 0.0),
        m => (a, 2.0 * a / (m - 1) as f64),
    };
    // (number, weight), by number.
    let mut by_number: Vec<(u64, f64)> = (order.iter().enumerate())
        .map(|(j, r)| (r.trial.number, 1.0 + a - step * j as f64))
        .collect();
    by_number.sort_unstable_by_key(|&(n, _)| n);
    let weight_of = |n: u64| match by_number.binary_search_by_key(&n, |&(m, _)| m) {
        Ok(i) => by_number[i].1,
        Err(_) => 1.0,
    };
    numbers.iter().map(|&n| weight_of(n)).collect()
}

/// `weights(n)` cut to `n` values, or an error naming `weights` as
/// Optuna's `_call_weights_func` refuses them (a negative, infinite or
/// NaN value, all zero); and fewer than `n`, which Optuna leaves to numpy
/// to fail on.
fn checked_weights(weights: fn(usize) -> Vec<f64>, n: usize) -> Result<Vec<f64>> {
    let mut w = weights(n);
    w.truncate(n);
    let refused = |reason: String| Error::InvalidOption {
        option: "weights".into(),
        reason: format!("{reason}, called with {n} observations"),
    };
    if w.len() < n {
        return Err(refused(format!("returned only {} values", w.len())));
    }
    if let Some((i, v)) = w
        .iter()
        .enumerate()
        .find(|(_, v)| !(**v >= 0.0 && v.is_finite()))
    {
        return Err(refused(format!(
            "returned {v} at index {i} (weights must be finite and not negative)"
        )));
    }
    if n > 0 && w.iter().all(|v| *v == 0.0) {
        return Err(refused("returned only zeros".into()));
    }
    Ok(w)
}

/// Equal weights (multi-objective TPE's "below" trials).
fn uniform_weights(n: usize) -> Vec<f64> {
    vec![1.0; n]
}

/// The weights of `n` observations (the configured ramp, one per
/// observation), remembered in `memo` for the next call: nearly every ask
/// has the count of the last. Unusable ones ([`checked_weights`]) are
/// recorded in `error` (the first only) and replaced by equal weights, so
/// the draw completes and its caller returns the error.
fn obs_weights<'m>(
    memo: &'m mut Option<(usize, Vec<f64>)>,
    weights: fn(usize) -> Vec<f64>,
    n: usize,
    error: &mut Option<Error>,
) -> &'m [f64] {
    if memo.as_ref().is_none_or(|(m, _)| *m != n) {
        let w = checked_weights(weights, n).unwrap_or_else(|e| {
            error.get_or_insert(e);
            vec![1.0; n]
        });
        *memo = Some((n, w));
    }
    memo.as_ref().map_or(&[], |(_, w)| w)
}

/// The candidate maximising `l - g` (`g` the "above" log-density), the
/// first one on ties, as evaluating every `g` and scanning in order would
/// give.
///
/// Most candidates never need their `g`. It is at least the log-sum-exp
/// of any of its kernels' terms, so once a candidate `i` has kernels whose
/// exact terms already exceed `l[i] - best` (with a margin for rounding),
/// `i` cannot win. Which kernels to try comes from a cheap `f32` row of
/// guessed terms ([`Evaluator::carriers`]); the same row guesses each `g`,
/// and candidates are tried in decreasing `l - guess`, so the winner
/// usually comes first and every other candidate is ruled out from
/// a few kernels. The guesses decide cost, never the result: a candidate
/// they do not rule out gets its exact `g`.
fn best_candidate(l: &[f64], above: &mut Evaluator<'_>) -> usize {
    if l.iter().any(|v| !v.is_finite()) {
        // No bound to trust.
        return best_by_scan(l, above);
    }
    // With every `l` finite, `g` is finite or minus infinity (a density
    // drops NaN terms), so no `l - g` is NaN and any order of comparison
    // gives the scan's answer.
    let mut screened: Vec<(f64, usize, u32)> = (0..l.len())
        .map(|i| {
            let (bound, top) = above.screen(i);
            (l[i] - f64::from(bound), i, top)
        })
        .collect();
    screened.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut best: Option<(usize, f64)> = None;
    for (_, i, top) in screened {
        if let Some((_, b)) = best {
            let threshold = l[i] - b;
            let limit = threshold + 1e-9 * (1.0 + threshold.abs());
            if above.exceeds(i, &[top], limit) {
                continue;
            }
            // Kernels far below the limit cannot add up to it.
            let near = above.carriers(i, limit as f32 - CARRIER_SPAN);
            if above.exceeds(i, &near, limit) {
                continue;
            }
        }
        let a = l[i] - above.log_pdf(i);
        if best.is_none_or(|(j, b)| a > b || (a == b && i < j)) {
            best = Some((i, a));
        }
    }
    best.map_or(0, |(i, _)| i)
}

/// Kernels whose bound is this many nats below a candidate's limit (a
/// relative weight of 6e-6) are not tried for ruling it out.
const CARRIER_SPAN: f32 = 12.0;

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

/// Optuna's `_split_trials` for one objective over `rows` (see
/// [`considered`]): the positions in `rows` of the best `n_below` trials
/// and of the rest, each in trial-number order.
///
/// `cut` is a hint, the rank of the previous split's last "below" complete
/// trial: when at least `n_below` complete trials rank at or under it, the
/// best `n_below` are among those, so only they are selected from (at
/// 1,000 trials, a few dozen instead of all). It becomes this split's.
fn split_rows(
    rows: &[Row<'_>],
    n_below: usize,
    direction: StudyDirection,
    cut: &mut Option<u64>,
) -> (Vec<u32>, Vec<u32>) {
    // Only which trials are the best `n_below` matters: select the
    // complete ones under (rank, position), the order a stable sort by
    // value gives, as integer keys; then pruned and infeasible ones, in
    // their (rarely needed) orders.
    let hint = cut.unwrap_or(u64::MAX);
    // (A `gamma` may ask for more than there are trials.)
    let mut complete: Vec<(u64, u32)> =
        Vec::with_capacity(n_below.saturating_mul(4).min(rows.len()));
    let (mut n_complete, mut pruned, mut infeasible) = (0, Vec::new(), Vec::new());
    for (i, r) in rows.iter().enumerate() {
        match r.group {
            Group::Complete => {
                n_complete += 1;
                if r.rank <= hint {
                    complete.push((r.rank, i as u32));
                }
            }
            Group::Pruned => pruned.push(i as u32),
            Group::Infeasible => infeasible.push(i as u32),
            Group::Running => {}
        }
    }
    let k = n_below.min(n_complete);
    if complete.len() < k {
        // The hint was too tight (better trials left the history).
        complete.clear();
        complete.extend(
            (rows.iter().enumerate())
                .filter(|(_, r)| r.group == Group::Complete)
                .map(|(i, r)| (r.rank, i as u32)),
        );
    }
    if 0 < k && k < complete.len() {
        complete.select_nth_unstable(k - 1);
    }
    *cut = complete[..k].iter().map(|c| c.0).max();
    let mut is_below = vec![false; rows.len()];
    complete[..k]
        .iter()
        .for_each(|&(_, i)| is_below[i as usize] = true);
    // Then pruned trials by last step and value, then infeasible ones by
    // violation, each sorted only if some of it is needed.
    let mut left = n_below - k;
    let mut take = |group: &[u32], left: &mut usize| {
        let k = (*left).min(group.len());
        group[..k].iter().for_each(|&i| is_below[i as usize] = true);
        *left -= k;
    };
    let trial = |i: &u32| rows[*i as usize].trial;
    if left > 0 {
        pruned.sort_by(|a, b| {
            let (sa, va) = pruned_score(trial(a), direction);
            let (sb, vb) = pruned_score(trial(b), direction);
            cmp_f64(sa, sb).then(cmp_f64(va, vb))
        });
        take(&pruned, &mut left);
    }
    if left > 0 {
        infeasible.sort_by(|a, b| cmp_f64(trial(a).violation(), trial(b).violation()));
        take(&infeasible, &mut left);
    }
    let mut below = Vec::with_capacity(n_below.min(rows.len()));
    let mut above = Vec::with_capacity(rows.len());
    for (i, &b) in is_below.iter().enumerate() {
        if b {
            below.push(i as u32)
        } else {
            above.push(i as u32)
        }
    }
    // Usually already in order (a history is kept by number).
    for side in [&mut below, &mut above] {
        if !side.is_sorted_by_key(|&i| rows[i as usize].key.0) {
            side.sort_by_key(|&i| rows[i as usize].key.0);
        }
    }
    (below, above)
}

/// Which trials TPE models as good: Optuna's `_split_trials(study,
/// trials, n_below)` over every COMPLETE, PRUNED and RUNNING trial of
/// `study` (RUNNING ones always "above"), as trial numbers in order:
/// `(below, above)`. One objective ranks by value; several by
/// non-domination and hypervolume (see the module doc).
///
/// ```
/// use hpo_sampler::sampler::split_trials;
/// use hpo_sampler::{FrozenTrial, StudyDirection, StudyView, TrialState};
///
/// let trials: Vec<FrozenTrial> = [[1.0, 4.0], [2.0, 2.0], [3.0, 3.0], [4.0, 1.0]]
///     .iter()
///     .enumerate()
///     .map(|(i, v)| {
///         let mut t = FrozenTrial::new(i as u64);
///         t.state = TrialState::Complete;
///         t.values = Some(v.to_vec());
///         t
///     })
///     .collect();
/// let directions = [StudyDirection::Minimize; 2];
/// let study = StudyView::with_directions("s", &directions, &trials);
/// // The front is trials 0, 1 and 3; of those, two by hypervolume.
/// let (below, above) = split_trials(&study, 2);
/// assert_eq!((below.len(), above.len()), (2, 2));
/// assert!(above.contains(&2));
/// // More "below" than there are trials: every trial.
/// assert_eq!(split_trials(&study, usize::MAX).0.len(), 4);
/// ```
pub fn split_trials(study: &StudyView<'_>, n_below: usize) -> (Vec<u64>, Vec<u64>) {
    let rows = considered(study.trials.iter(), u64::MAX, true, study.direction);
    let (below, above) = if study.is_multi_objective() {
        split_rows_multi(&rows, n_below, study.objectives())
    } else {
        split_rows(&rows, n_below, study.direction, &mut None)
    };
    let numbers = |side: Vec<u32>| {
        side.iter()
            .map(|&i| rows[i as usize].trial.number)
            .collect()
    };
    (numbers(below), numbers(above))
}

/// Optuna's `_split_trials` on a study of several objectives: the COMPLETE
/// trials by non-domination rank, the last front that does not fit whole cut
/// by greedy hypervolume subset selection (reference: that front's worst
/// losses pushed 10% out); then PRUNED trials (by last step, then the first
/// objective's last value: Optuna raises here), then infeasible ones by
/// violation. Returns positions in `rows`, each side in trial-number order.
fn split_rows_multi(
    rows: &[Row<'_>],
    n_below: usize,
    directions: &[StudyDirection],
) -> (Vec<u32>, Vec<u32>) {
    // The COMPLETE trials' loss vectors, one after another (`m` each).
    let m = directions.len();
    let (mut complete, mut flat) = (Vec::new(), Vec::new());
    let (mut pruned, mut infeasible) = (Vec::new(), Vec::new());
    for (i, r) in rows.iter().enumerate() {
        match r.group {
            Group::Complete => {
                let finite = |v: &Vec<f64>| v.iter().all(|x| !x.is_nan());
                if r.trial.values.as_ref().is_some_and(finite)
                    && let Some(l) = losses(r.trial, directions)
                {
                    complete.push(i as u32);
                    flat.extend(l);
                }
            }
            Group::Pruned => pruned.push(i as u32),
            Group::Infeasible => infeasible.push(i as u32),
            Group::Running => {}
        }
    }
    let mut is_below = vec![false; rows.len()];
    let k = n_below.min(complete.len());
    if k == complete.len() {
        complete.iter().for_each(|&i| is_below[i as usize] = true);
    } else if k > 0 {
        let ranks = if m == 2 {
            let pairs: Vec<(f64, f64)> = flat.chunks_exact(2).map(|l| (l[0], l[1])).collect();
            ranks_of_pairs(&pairs, Some(k))
        } else {
            let losses: Vec<Vec<f64>> = flat.chunks_exact(m).map(<[f64]>::to_vec).collect();
            non_domination_ranks(&losses, Some(k))
        };
        let max_rank = ranks.iter().copied().max().unwrap_or(0);
        let mut count = vec![0usize; max_rank + 1];
        ranks.iter().for_each(|&r| count[r] += 1);
        // The fronts that fit whole.
        let (mut fit, mut total) = (0, 0);
        while fit <= max_rank && total + count[fit] <= k {
            total += count[fit];
            fit += 1;
        }
        for (j, &r) in ranks.iter().enumerate() {
            if r < fit {
                is_below[complete[j] as usize] = true;
            }
        }
        if total < k {
            let tie: Vec<usize> = (0..ranks.len()).filter(|&j| ranks[j] == fit).collect();
            let front: Vec<Vec<f64>> = tie.iter().map(|&j| flat[j * m..][..m].to_vec()).collect();
            let reference = reference_point(&front);
            for s in select_by_hypervolume(&front, k - total, &reference) {
                is_below[complete[tie[s]] as usize] = true;
            }
        }
    }
    let mut left = n_below - k;
    let trial = |i: &u32| rows[*i as usize].trial;
    let first = directions
        .first()
        .copied()
        .unwrap_or(StudyDirection::Minimize);
    if left > 0 {
        pruned.sort_by(|a, b| {
            let (sa, va) = pruned_score(trial(a), first);
            let (sb, vb) = pruned_score(trial(b), first);
            cmp_f64(sa, sb).then(cmp_f64(va, vb))
        });
        let take = left.min(pruned.len());
        pruned[..take]
            .iter()
            .for_each(|&i| is_below[i as usize] = true);
        left -= take;
    }
    if left > 0 {
        infeasible.sort_by(|a, b| cmp_f64(trial(a).violation(), trial(b).violation()));
        let take = left.min(infeasible.len());
        infeasible[..take]
            .iter()
            .for_each(|&i| is_below[i as usize] = true);
    }
    let (mut below, mut above) = (Vec::new(), Vec::new());
    for (i, &b) in is_below.iter().enumerate() {
        if b {
            below.push(i as u32)
        } else {
            above.push(i as u32)
        }
    }
    for side in [&mut below, &mut above] {
        side.sort_by_key(|&i| rows[i as usize].key.0);
    }
    (below, above)
}

impl Sampler for TpeSampler {
    fn check(&self) -> Result<()> {
        self.error.clone().map_or(Ok(()), Err)
    }

    fn checked_trials(&mut self) -> Option<&mut CheckedTrials> {
        Some(&mut self.checked)
    }

    fn before_trial(&mut self, _study: &StudyView<'_>, _trial_number: u64) {
        self.considered = None;
    }

    fn infer_relative_search_space(
        &mut self,
        study: &StudyView<'_>,
        _trial_number: u64,
    ) -> SearchSpace {
        // `group` is a joint model (Optuna's `_is_multivariate`), on several
        // objectives too.
        let multivariate = if study.is_multi_objective() {
            self.config.multivariate_multi_objective || self.config.group
        } else {
            self.config.multivariate
        };
        if !multivariate {
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
        if self.error.is_some()
            || space.is_empty()
            || self.n_finished(study) < self.config.n_startup_trials
        {
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
        if self.error.is_some() || self.n_finished(study) < self.config.n_startup_trials {
            return sample_uniform(&mut self.random, distribution);
        }
        let name = name.to_string();
        self.sample_space(study, trial_number, &[(&name, distribution)])[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::CategoricalChoice;
    use crate::rng::Rng;
    use crate::trial::CONSTRAINTS_KEY;
    use std::collections::BTreeMap;

    /// Trial numbers are keys, not sizes: numbers near `u64::MAX` or far
    /// apart cost what the trials' count costs.
    #[test]
    fn trial_numbers_far_apart_or_huge_are_asked_about() {
        let x = Distribution::float(0.0, 1.0, false, None).unwrap();
        let space = SearchSpace::from([("x".to_string(), x.clone())]);
        for numbers in [
            (0..100u64).map(|i| u64::MAX - 200 + i).collect::<Vec<_>>(),
            (0..100u64).map(|i| i * (u64::MAX / 128)).collect(),
        ] {
            let trials: Vec<FrozenTrial> = numbers
                .iter()
                .map(|&n| {
                    let mut t = trial(n, TrialState::Complete, Some((n % 7) as f64));
                    let internal = (n % 13) as f64 / 13.0;
                    t.params.insert(
                        "x".into(),
                        crate::Param {
                            distribution: x.clone(),
                            internal,
                        },
                    );
                    t
                })
                .collect();
            let mut sampler = TpeSampler::with_seed(3);
            for k in 0..3 {
                let view = StudyView::new("s", StudyDirection::Minimize, &trials[k..]);
                let next = numbers.last().unwrap().saturating_add(1);
                let params = crate::ask(&mut sampler, view, next, &space).unwrap();
                assert!(x.contains(params["x"].internal));
            }
        }
    }

    /// `group` models its groups jointly on several objectives too, where
    /// the joint model is otherwise off (Optuna's `_is_multivariate`: group
    /// implies multivariate).
    #[test]
    fn groups_are_joint_on_several_objectives() {
        let x = Distribution::float(0.0, 1.0, false, None).unwrap();
        let trials: Vec<FrozenTrial> = (0..12u64)
            .map(|i| {
                let (a, b) = (i as f64 / 12.0, ((i * 5) % 12) as f64 / 12.0);
                let mut t = trial(i, TrialState::Complete, None);
                t.values = Some(vec![a, b]);
                for (name, internal) in [("x", a), ("y", b)] {
                    let distribution = x.clone();
                    let param = crate::Param {
                        distribution,
                        internal,
                    };
                    t.params.insert(name.into(), param);
                }
                t
            })
            .collect();
        let dirs = [StudyDirection::Minimize; 2];
        let view = StudyView::with_directions("s", &dirs, &trials);
        let space = |config| TpeSampler::new(config).infer_relative_search_space(&view, 12);
        let grouped = TpeConfig {
            group: true,
            ..TpeConfig::default()
        };
        assert_eq!(space(grouped.clone()).len(), 2);
        assert!(space(TpeConfig::default()).is_empty());
        let asked = SearchSpace::from([("x".into(), x.clone()), ("y".into(), x.clone())]);
        let params = crate::ask(&mut TpeSampler::new(grouped), view, 12, &asked).unwrap();
        assert!(
            params.values().all(|p| x.contains(p.internal)),
            "{params:?}"
        );
    }

    /// Optuna's estimator options.
    fn optuna_params() -> ParzenParams {
        ParzenParams {
            prior_weight: 1.0,
            consider_magic_clip: true,
            consider_endpoints: false,
        }
    }

    fn trial(number: u64, state: TrialState, value: Option<f64>) -> FrozenTrial {
        let mut t = FrozenTrial::new(number);
        t.state = state;
        t.values = value.map(|v| vec![v]);
        t
    }

    /// The split of `trials` as an ask of a new trial (the constant liar
    /// on) makes it.
    fn split_trials<'a>(
        trials: &[&'a FrozenTrial],
        n_below: usize,
        direction: StudyDirection,
    ) -> (Vec<&'a FrozenTrial>, Vec<&'a FrozenTrial>) {
        let rows = considered(trials.iter().copied(), u64::MAX, true, direction);
        let (below, above) = split_rows(&rows, n_below, direction, &mut None);
        let trials = |side: Vec<u32>| side.iter().map(|&i| rows[i as usize].trial).collect();
        (trials(below), trials(above))
    }

    fn numbers(ts: &[&FrozenTrial]) -> Vec<u64> {
        ts.iter().map(|t| t.number).collect()
    }

    #[test]
    fn split_ranks_complete_then_pruned_then_infeasible() {
        let mut ts = [
            trial(0, TrialState::Complete, Some(5.0)),
            trial(1, TrialState::Complete, Some(1.0)),
            trial(2, TrialState::Pruned, None),
            trial(3, TrialState::Pruned, None),
            trial(4, TrialState::Complete, Some(0.5)),
            trial(5, TrialState::Running, None),
            trial(6, TrialState::Complete, Some(-9.0)),
            trial(7, TrialState::Pruned, None),
        ];
        // Pruned: 2 reached step 3 (value 9), 3 reached step 3 (value 2),
        // 7 reported nothing (ranked last).
        ts[2].intermediate_values.insert(3, 9.0);
        ts[3].intermediate_values.insert(1, 0.0);
        ts[3].intermediate_values.insert(3, 2.0);
        // 6 has the best value but violates a constraint by 0.5; 4 by 0.1.
        ts[6]
            .system_attrs
            .insert(CONSTRAINTS_KEY.into(), serde_json::json!([0.5]));
        ts[4]
            .system_attrs
            .insert(CONSTRAINTS_KEY.into(), serde_json::json!([0.1, -3.0]));
        let refs: Vec<&FrozenTrial> = ts.iter().collect();

        let (below, above) = split_trials(&refs, 2, StudyDirection::Minimize);
        assert_eq!(numbers(&below), vec![0, 1]);
        assert_eq!(numbers(&above), vec![2, 3, 4, 5, 6, 7]);

        let (below, _) = split_trials(&refs, 4, StudyDirection::Minimize);
        assert_eq!(numbers(&below), vec![0, 1, 2, 3]);
        // Then the least violating infeasible trial, never the running one.
        let (below, above) = split_trials(&refs, 6, StudyDirection::Minimize);
        assert_eq!(numbers(&below), vec![0, 1, 2, 3, 4, 7]);
        assert_eq!(numbers(&above), vec![5, 6]);

        // Maximising flips values, for complete and pruned alike.
        let (below, _) = split_trials(&refs, 3, StudyDirection::Maximize);
        assert_eq!(numbers(&below), vec![0, 1, 2]);
    }

    #[test]
    fn ties_at_the_split_go_to_the_earlier_trial() {
        // As a stable sort by value: among equal values the earlier trial
        // (in history order) is "below"; NaN values rank last.
        let ts: Vec<FrozenTrial> = [3.0, 0.0, f64::NAN, 0.0, 0.0, 2.0, 0.0]
            .iter()
            .enumerate()
            .map(|(i, &v)| trial(i as u64, TrialState::Complete, Some(v)))
            .collect();
        let refs: Vec<&FrozenTrial> = ts.iter().rev().collect();
        for (n_below, want) in [
            (0, vec![]),
            (2, vec![4, 6]),
            (3, vec![3, 4, 6]),
            (5, vec![1, 3, 4, 5, 6]),
            (6, vec![0, 1, 3, 4, 5, 6]),
            (9, vec![0, 1, 2, 3, 4, 5, 6]),
        ] {
            let (below, above) = split_trials(&refs, n_below, StudyDirection::Minimize);
            assert_eq!(numbers(&below), want, "n_below {n_below}");
            assert_eq!(below.len() + above.len(), 7);
            assert!(above.is_sorted_by_key(|t| t.number));
        }
    }

    /// The cut a split hands the next is only a hint: carried across
    /// histories that slide, improve, lose their best trials or change
    /// entirely, the split is the one made without it.
    #[test]
    fn a_carried_cut_never_changes_the_split() {
        let mut rng = Rng::seed_from(9);
        let mut cut = None;
        let mut ts: Vec<FrozenTrial> = Vec::new();
        for step in 0..400u64 {
            let value = match step % 97 {
                // A whole new history now and then.
                0 => {
                    ts.clear();
                    rng.next_f64()
                }
                // Ties and repeated values.
                v if v % 5 == 0 => (v % 3) as f64,
                _ => rng.next_f64() * 10.0 - (step as f64) / 100.0,
            };
            ts.push(trial(step, TrialState::Complete, Some(value)));
            if step % 7 == 3 && ts.len() > 4 {
                // The best trial leaves.
                let best = (0..ts.len())
                    .min_by(|&a, &b| ts[a].value().unwrap().total_cmp(&ts[b].value().unwrap()))
                    .unwrap();
                ts.remove(best);
            }
            if ts.len() > 60 {
                ts.remove(0);
            }
            let refs: Vec<&FrozenTrial> = ts.iter().collect();
            let rows = considered(
                refs.iter().copied(),
                u64::MAX,
                true,
                StudyDirection::Minimize,
            );
            let n_below = default_gamma(rows.len()) + (step % 3) as usize;
            let with = split_rows(&rows, n_below, StudyDirection::Minimize, &mut cut);
            let without = split_rows(&rows, n_below, StudyDirection::Minimize, &mut None);
            assert_eq!(with, without, "step {step}");
        }
    }

    #[test]
    fn fail_trials_are_ignored_and_running_ones_are_lies() {
        let mut ts: Vec<FrozenTrial> = (0..12)
            .map(|i| trial(i, TrialState::Complete, Some(i as f64)))
            .collect();
        ts.push(trial(12, TrialState::Fail, None));
        let space = SearchSpace::from([(
            "x".to_string(),
            Distribution::float(0.0, 1.0, false, None).unwrap(),
        )]);
        for t in ts.iter_mut().take(12) {
            t.params.insert(
                "x".into(),
                crate::Param {
                    distribution: space["x"].clone(),
                    internal: t.number as f64 / 12.0,
                },
            );
        }
        let study = StudyView {
            name: "s",
            direction: StudyDirection::Minimize,
            directions: &[],
            trials: &ts,
        };
        let mut a = TpeSampler::with_seed(0);
        let mut b = TpeSampler::with_seed(0);
        let with_fail = a.sample_relative(&study, 13, &space);
        let without = b.sample_relative(
            &StudyView {
                trials: &ts[..12],
                ..study
            },
            13,
            &space,
        );
        assert_eq!(with_fail, without);
        // A RUNNING trial changes the model (it is counted as bad) unless
        // it is the trial being sampled, or the liar is off.
        // Two workers are running at exactly the point chosen without them.
        for number in [13, 14] {
            let mut running = trial(number, TrialState::Running, None);
            running.params = ts[0].params.clone();
            running.params.get_mut("x").unwrap().internal = without["x"];
            ts.push(running);
        }
        let study = StudyView {
            name: "s",
            direction: StudyDirection::Minimize,
            directions: &[],
            trials: &ts,
        };
        let mut d = TpeSampler::with_seed(0);
        assert_ne!(d.sample_relative(&study, 15, &space), without);
        let mut e = TpeSampler::new(TpeConfig {
            seed: Some(0),
            constant_liar: false,
            ..TpeConfig::default()
        });
        assert_eq!(e.sample_relative(&study, 15, &space), without);
    }

    /// What the sampler keeps across asks (observation rows, sorted
    /// centres, reused estimators and their cell masses) never changes a
    /// result: a long-lived sampler and one that forgets everything before
    /// each ask draw the same parameters, through pruned, failed, running
    /// and infeasible trials, edits to finished trials and a history that
    /// loses its oldest trials.
    #[test]
    fn reused_work_gives_the_same_samples_as_a_fresh_start() {
        use crate::distribution::ParamValue;
        let mut space = SearchSpace::from([
            (
                "lr".into(),
                Distribution::float(1e-5, 1e-1, true, None).unwrap(),
            ),
            (
                "wd".into(),
                Distribution::float(0.0, 0.3, false, None).unwrap(),
            ),
            ("bs".into(), Distribution::int(16, 256, false, 16).unwrap()),
            ("ws".into(), Distribution::int(1, 1000, true, 1).unwrap()),
            (
                "q".into(),
                Distribution::float(0.0, 1.0, false, Some(0.1)).unwrap(),
            ),
            (
                "opt".into(),
                Distribution::categorical(vec![
                    ParamValue::Str("a".into()),
                    ParamValue::Str("b".into()),
                    ParamValue::Str("c".into()),
                ])
                .unwrap(),
            ),
        ]);
        let config = TpeConfig {
            seed: Some(5),
            n_ei_candidates: 16,
            ..TpeConfig::many_candidates()
        };
        check_reuse(config, &space);
        // The default's rules, whose "below" trials weigh by rank: on a
        // numeric space (the integer rule) and on floats alone.
        let default = TpeConfig {
            seed: Some(5),
            ..TpeConfig::default()
        };
        space.remove("opt");
        check_reuse(default.clone(), &space);
        space.retain(|name, _| name == "lr" || name == "wd");
        check_reuse(default, &space);
    }

    /// A long-lived sampler and one that forgets everything before each
    /// ask draw the same parameters over 420 trials of `space` (some of
    /// `lr`, `wd`, `bs`, `ws`, `q`, `opt`).
    fn check_reuse(config: TpeConfig, space: &SearchSpace) {
        let objective = |p: &BTreeMap<String, crate::Param>| {
            let f = |k: &str| p.get(k).map_or(1.0, |p| p.internal);
            (f("lr").log10() + 3.0).powi(2)
                + (f("wd") - 0.1).powi(2)
                + ((f("bs") - 64.0) / 100.0).powi(2)
                + 0.1 * (f("ws").ln() - 3.0).powi(2)
                + f("q")
                + f("opt")
        };
        let mut kept = TpeSampler::new(config.clone());
        let mut forgetful = TpeSampler::new(config);
        let mut history: Vec<FrozenTrial> = Vec::new();
        let mut start = 0;
        for number in 0..420u64 {
            let study = StudyView {
                name: "s",
                direction: StudyDirection::Minimize,
                directions: &[],
                trials: &history[start..],
            };
            let a = crate::ask(&mut kept, study, number, space).unwrap();
            forgetful.spaces.clear();
            forgetful.prefix = (0, None);
            forgetful.last_space = None;
            let b = crate::ask(&mut forgetful, study, number, space).unwrap();
            assert_eq!(a, b, "trial {number}");
            let mut t = FrozenTrial::new(number);
            t.params = a;
            let value = objective(&t.params);
            t.state = match number % 13 {
                3 => TrialState::Pruned,
                5 => TrialState::Fail,
                7 | 8 => TrialState::Running,
                _ => TrialState::Complete,
            };
            match t.state {
                TrialState::Complete => t.values = Some(vec![value]),
                TrialState::Pruned => {
                    t.intermediate_values.insert((number % 4) as i64, value);
                }
                _ => {}
            }
            if number % 17 == 0 {
                t.system_attrs.insert(
                    CONSTRAINTS_KEY.into(),
                    serde_json::json!([(number % 3) as f64 - 1.0]),
                );
            }
            history.push(t);
            // Running trials finish a few asks later.
            if number >= 4 && history[number as usize - 4].state == TrialState::Running {
                let old = &mut history[number as usize - 4];
                old.values = Some(vec![objective(&old.params)]);
                old.state = TrialState::Complete;
            }
            // Edit a finished trial's value now and then, and replace
            // one (other parameters, other value, same number).
            if number % 50 == 49 {
                let i = (number as usize * 7) % history.len();
                if let Some(v) = history[i].values.as_mut() {
                    v[0] -= 1.0;
                }
            }
            if number % 30 == 29 {
                // The best trial (it stays "below" while new trials join
                // "above", so a wrongly reused estimator would show) or
                // the worst (its old centres must leave the sorted lists).
                let value = |i: usize| history[i].values.as_ref().unwrap()[0];
                let complete =
                    (start..history.len()).filter(|&i| history[i].state == TrialState::Complete);
                let i = if number % 60 == 59 {
                    complete.min_by(|&a, &b| value(a).total_cmp(&value(b)))
                } else {
                    complete.max_by(|&a, &b| value(a).total_cmp(&value(b)))
                }
                .unwrap();
                let donor = history.len() - 1;
                if i != donor {
                    // A value of the same rank, so the split stays as it was.
                    history[i].params = history[donor].params.clone();
                    let v = history[i].values.as_mut().unwrap();
                    v[0] = f64::from_bits(v[0].to_bits() ^ 1);
                }
            }
            // Later, the oldest trials leave the history.
            if number >= 300 {
                start += 2;
            }
        }
    }

    /// The screened argmax is the exhaustive one: the first candidate of
    /// largest `l - g`, on random estimators, with duplicated candidates
    /// (exact ties) among them.
    #[test]
    fn screening_candidates_picks_what_scanning_them_all_picks() {
        let dists = [
            Distribution::float(1e-5, 1e-1, true, None).unwrap(),
            Distribution::float(0.0, 1.0, false, None).unwrap(),
            Distribution::int(16, 256, false, 16).unwrap(),
            Distribution::int(1, 1000, true, 1).unwrap(),
        ];
        let refs: Vec<&Distribution> = dists.iter().collect();
        let params = optuna_params();
        let mut rng = Rng::seed_from(11);
        let mut screened_differently = 0;
        for case in 0..300 {
            let n = [5, 40, 300, 900][case % 4];
            // Clustered observations (a study's steady state) or uniform.
            let clustered = case % 2 == 0;
            let centre: Vec<f64> = refs.iter().map(|d| sample_uniform(&mut rng, d)).collect();
            let obs: Vec<Vec<f64>> = refs
                .iter()
                .zip(&centre)
                .map(|(d, c)| {
                    (0..n)
                        .map(|_| {
                            if clustered && rng.next_f64() < 0.8 {
                                *c
                            } else {
                                sample_uniform(&mut rng, d)
                            }
                        })
                        .collect()
                })
                .collect();
            let mut above = Parzen::new(&refs, &obs, &default_weights(n), params);
            let below_obs: Vec<Vec<f64>> = obs.iter().map(|o| o[..n.min(8)].to_vec()).collect();
            let mut below = Parzen::new(&refs, &below_obs, &default_weights(n.min(8)), params);
            let mut samples = below.sample(&mut rng, 24);
            for col in samples.iter_mut() {
                col[17] = col[3];
                col[9] = col[20];
            }
            let l = below.log_pdf(&samples);
            let g = above.log_pdf(&samples);
            let mut want = 0;
            for i in 1..l.len() {
                if l[i] - g[i] > l[want] - g[want] {
                    want = i;
                }
            }
            let got = best_candidate(&l, &mut above.evaluator(&samples));
            assert_eq!(got, want, "case {case}");
            screened_differently += usize::from(want != 0);
        }
        assert!(screened_differently > 100);
    }

    /// The best "below" trial weighs `1 + a`, the worst `1 - a`, whatever
    /// their numbers; a PRUNED trial that fills the set weighs least.
    #[test]
    fn below_weights_follow_rank() {
        let trials = [
            trial(0, TrialState::Complete, Some(3.0)),
            trial(1, TrialState::Complete, Some(1.0)),
            trial(2, TrialState::Pruned, Some(0.5)),
            trial(3, TrialState::Complete, Some(2.0)),
        ];
        let all: Vec<u32> = (0..4).collect();
        let weights = |direction, set: &[u32], numbers: &[u64], a| {
            let rows = considered(trials.iter(), 4, true, direction);
            rank_weights(&rows, set, numbers, a)
        };
        let close = |w: Vec<f64>, expected: [f64; 4]| {
            let far = w.iter().zip(expected).any(|(w, e)| (w - e).abs() > 1e-12);
            assert!(!far, "{w:?} != {expected:?}");
        };
        close(
            weights(StudyDirection::Minimize, &all, &[0, 1, 2, 3], 0.3),
            [0.9, 1.3, 0.7, 1.1],
        );
        close(
            weights(StudyDirection::Maximize, &all, &[0, 1, 2, 3], 0.3),
            [1.3, 0.9, 0.7, 1.1],
        );
        close(
            weights(StudyDirection::Minimize, &all, &[0, 1, 2, 3], 0.0),
            [1.0; 4],
        );
        assert_eq!(weights(StudyDirection::Minimize, &[1], &[1], 0.3), [1.0]);
        // A lean of 1 or more would weigh the worst 0 or less.
        let worst = weights(
            StudyDirection::Minimize,
            &all,
            &[0, 1, 2, 3],
            rank_lean(5.0),
        )[2];
        assert!((worst - 0.01).abs() < 1e-12, "{worst}");
        assert_eq!(rank_lean(f64::NAN), 0.0);
    }

    /// With finalists, the winner is the first candidate of largest
    /// `l - g` among the `k` of highest `l`: checked against sorting all
    /// candidates by `l`, on random estimators, with exact ties in `l`.
    #[test]
    fn finalists_are_the_highest_l_and_the_best_of_them_wins() {
        let dists = [
            Distribution::float(1e-5, 1e-1, true, None).unwrap(),
            Distribution::int(16, 256, false, 16).unwrap(),
            Distribution::float(0.0, 1.0, false, None).unwrap(),
        ];
        let refs: Vec<&Distribution> = dists.iter().collect();
        let params = optuna_params();
        let mut rng = Rng::seed_from(5);
        let mut not_the_full_argmax = 0;
        for case in 0..200 {
            let n = [12, 60, 400][case % 3];
            let obs: Vec<Vec<f64>> = refs
                .iter()
                .map(|d| (0..n).map(|_| sample_uniform(&mut rng, d)).collect())
                .collect();
            let mut above = Parzen::new(&refs, &obs, &default_weights(n), params);
            let below_obs: Vec<Vec<f64>> = obs.iter().map(|o| o[..n / 6].to_vec()).collect();
            let mut below = Parzen::new(&refs, &below_obs, &default_weights(n / 6), params);
            let mut samples = below.sample(&mut rng, 40);
            for col in samples.iter_mut() {
                col[31] = col[2]; // an exact tie in `l` (and `g`)
            }
            let l = below.log_pdf(&samples);
            let g = above.log_pdf(&samples);
            let k = [1, 4, 9][case % 3];
            let mut by_l: Vec<usize> = (0..l.len()).collect();
            by_l.sort_by(|&a, &b| l[b].total_cmp(&l[a]).then(a.cmp(&b)));
            let mut top = by_l[..k].to_vec();
            top.sort_unstable();
            // The first of largest `l - g`.
            let argmax = |among: &mut dyn Iterator<Item = usize>| {
                among
                    .reduce(|best, i| {
                        if l[i] - g[i] > l[best] - g[best] {
                            i
                        } else {
                            best
                        }
                    })
                    .unwrap()
            };
            let want = argmax(&mut top.iter().copied());
            let full = argmax(&mut (0..l.len()));
            not_the_full_argmax += usize::from(want != full);
            let (mut kept, mut kept_l) = (samples.clone(), l.clone());
            keep_finalists(&mut kept, &mut kept_l, k);
            assert_eq!(kept_l, top.iter().map(|&i| l[i]).collect::<Vec<_>>());
            let got = best_by_scan(&kept_l, &mut above.evaluator(&kept));
            let got: Vec<f64> = kept.iter().map(|c| c[got]).collect();
            let want: Vec<f64> = samples.iter().map(|c| c[want]).collect();
            assert_eq!(got, want, "case {case}");
        }
        // The finalists change the answer often enough to be tested.
        assert!(not_the_full_argmax > 20, "{not_the_full_argmax}");
    }

    /// While a RUNNING trial is lied about, every candidate competes
    /// (finalists would ignore the lie): the choice is the one of the same
    /// sampler without finalists. Without a lie the finalists decide.
    #[test]
    fn a_lie_makes_every_candidate_compete() {
        let space = SearchSpace::from([
            (
                "x".to_string(),
                Distribution::float(0.0, 1.0, false, None).unwrap(),
            ),
            (
                "y".to_string(),
                Distribution::float(-1.0, 1.0, false, None).unwrap(),
            ),
        ]);
        let mut rng = Rng::seed_from(3);
        let mut ts: Vec<FrozenTrial> = Vec::new();
        for i in 0..40u64 {
            let mut t = trial(i, TrialState::Complete, Some(rng.next_f64()));
            for (name, d) in &space {
                t.params.insert(
                    name.clone(),
                    crate::Param {
                        distribution: d.clone(),
                        internal: sample_uniform(&mut rng, d),
                    },
                );
            }
            ts.push(t);
        }
        let config = |finalists| TpeConfig {
            seed: Some(9),
            ei_finalists: finalists,
            ..TpeConfig::optuna()
        };
        let ask = |trials: &[FrozenTrial], finalists| {
            let study = StudyView {
                name: "s",
                direction: StudyDirection::Minimize,
                directions: &[],
                trials,
            };
            TpeSampler::new(config(finalists)).sample_relative(&study, 99, &space)
        };
        let (mut same, mut lied_same) = (0, 0);
        for seed_trial in 0..20 {
            let history = &ts[..20 + seed_trial];
            same += usize::from(ask(history, Some(4)) == ask(history, None));
            let mut lied = history.to_vec();
            let mut running = lied[seed_trial].clone();
            running.number = 98;
            running.state = TrialState::Running;
            running.values = None;
            lied.push(running.clone());
            assert_eq!(ask(&lied, Some(4)), ask(&lied, None));
            // A RUNNING trial without this space's values is no lie.
            running.params.remove("y");
            *lied.last_mut().unwrap() = running;
            lied_same += usize::from(ask(&lied, Some(4)) == ask(&lied, None));
        }
        assert!(same < 15, "finalists decided alike {same} times of 20");
        assert!(lied_same < 15, "{lied_same}");
    }

    /// The default differs from Optuna's configuration on continuous and
    /// integer spaces of one objective, each by its own rule, and is
    /// Optuna's wherever a categorical parameter is.
    #[test]
    fn space_rules_apply_to_their_spaces_alone() {
        let x = Distribution::float(0.0, 1.0, false, None).unwrap();
        let continuous = SearchSpace::from([("x".to_string(), x.clone()), ("y".to_string(), x)]);
        let mut with_int = continuous.clone();
        with_int.insert("k".to_string(), Distribution::int(0, 7, false, 1).unwrap());
        let mut stepped = continuous.clone();
        let step = Distribution::float(0.0, 1.0, false, Some(0.25)).unwrap();
        stepped.insert("s".to_string(), step);
        let mut with_categorical = with_int.clone();
        let choices = vec![
            CategoricalChoice::Str("a".into()),
            CategoricalChoice::Str("b".into()),
        ];
        with_categorical.insert("c".to_string(), Distribution::categorical(choices).unwrap());
        let history = |space: &SearchSpace| -> Vec<FrozenTrial> {
            let mut rng = Rng::seed_from(5);
            (0..60u64)
                .map(|i| {
                    let mut t = trial(i, TrialState::Complete, Some(rng.next_f64()));
                    for (name, d) in space {
                        let internal = sample_uniform(&mut rng, d);
                        let param = crate::Param {
                            distribution: d.clone(),
                            internal,
                        };
                        t.params.insert(name.clone(), param);
                    }
                    t
                })
                .collect()
        };
        // Several seeds, so that one draw agreeing by chance cannot pass
        // an `assert_ne`. Two directions give every trial a second value.
        let asks_of = |config: &TpeConfig,
                       space: &SearchSpace,
                       directions: &[StudyDirection]|
         -> Vec<BTreeMap<String, f64>> {
            let mut trials = history(space);
            if directions.len() > 1 {
                for t in &mut trials {
                    let v = t.values.as_ref().unwrap()[0];
                    t.values = Some(vec![v, 1.0 - v * v]);
                }
            }
            let study = StudyView {
                name: "s",
                direction: StudyDirection::Minimize,
                directions,
                trials: &trials,
            };
            (0..8)
                .map(|seed| {
                    let config = TpeConfig {
                        seed: Some(seed),
                        ..config.clone()
                    };
                    TpeSampler::new(config).sample_relative(&study, 60, space)
                })
                .collect()
        };
        let asks = |config: &TpeConfig, space: &SearchSpace| asks_of(config, space, &[]);
        let spelled_out = |rule: CandidateRule| TpeConfig {
            n_ei_candidates: rule.n_ei_candidates,
            ei_finalists: rule.ei_finalists,
            gamma: rule.gamma,
            below_rank_weight: rule.below_rank_weight,
            ..TpeConfig::optuna()
        };
        let optuna = TpeConfig::optuna();
        // The default's integer rule rarely changes a draw on so random a
        // history (its finalists nearly always hold the best `l / g`), so
        // a rule of 7 candidates shows where the integer rule applies.
        let integer = CandidateRule {
            n_ei_candidates: 7,
            ei_finalists: None,
            gamma: default_gamma,
            below_rank_weight: BELOW_RANK_WEIGHT,
            // 60 finished trials of 3 parameters: 20 each.
            until_trials_per_parameter: Some(21),
        };
        let config = TpeConfig {
            integer: Some(integer),
            ..TpeConfig::default()
        };
        let continuous_rule = spelled_out(config.continuous.unwrap());
        let integer_rule = spelled_out(integer);
        for (space, rule) in [
            (&continuous, &continuous_rule),
            (&with_int, &integer_rule),
            (&stepped, &integer_rule),
        ] {
            assert_eq!(asks(&config, space), asks(rule, space));
            assert_ne!(asks(&config, space), asks(&optuna, space));
        }
        assert_ne!(
            asks(&continuous_rule, &with_int),
            asks(&integer_rule, &with_int)
        );
        assert_eq!(
            asks(&config, &with_categorical),
            asks(&optuna, &with_categorical)
        );
        // Several objectives: Optuna's configuration on every space.
        let two = [StudyDirection::Minimize, StudyDirection::Minimize];
        for space in [&continuous, &with_int] {
            assert_eq!(asks_of(&config, space, &two), asks_of(&optuna, space, &two));
        }
        // From 20 finished trials per parameter on, Optuna's.
        let ended = TpeConfig {
            integer: Some(CandidateRule {
                until_trials_per_parameter: Some(20),
                ..integer
            }),
            ..config.clone()
        };
        assert_eq!(asks(&ended, &with_int), asks(&optuna, &with_int));
        // Each rule weighs its "below" trials by rank, Optuna's equally.
        let default = TpeConfig::default();
        let rules = [
            default.continuous,
            default.continuous_wide.map(|w| w.1),
            default.integer,
        ];
        assert!(
            rules
                .iter()
                .all(|r| r.unwrap().below_rank_weight == BELOW_RANK_WEIGHT)
        );
        assert_eq!(optuna.below_rank_weight, 0.0);
        let unweighted = |rule: CandidateRule| TpeConfig {
            below_rank_weight: 0.0,
            ..spelled_out(rule)
        };
        assert_ne!(
            asks(&continuous_rule, &continuous),
            asks(&unweighted(config.continuous.unwrap()), &continuous)
        );
        let rule = TpeConfig::default().integer.unwrap();
        assert_eq!((rule.n_ei_candidates, rule.ei_finalists), (24, Some(8)));
        assert_eq!(rule.until_trials_per_parameter, Some(20));
        assert_eq!((rule.gamma)(100), default_gamma(100));
        assert_eq!(continuous_gamma(100), 15);
        assert_eq!(continuous_gamma(1000), 25);
        // A continuous space of 10 parameters takes the wide rule, one of
        // 9 the continuous rule.
        let floats = |n: usize| -> SearchSpace {
            let x = Distribution::float(0.0, 1.0, false, None).unwrap();
            (0..n).map(|i| (format!("x{i}"), x.clone())).collect()
        };
        let (wide, narrow) = (floats(10), floats(9));
        let wide_rule = spelled_out(TpeConfig::default().continuous_wide.unwrap().1);
        let default = TpeConfig::default();
        assert_eq!(asks(&default, &wide), asks(&wide_rule, &wide));
        assert_ne!(asks(&default, &wide), asks(&continuous_rule, &wide));
        assert_eq!(asks(&default, &narrow), asks(&continuous_rule, &narrow));
        assert_ne!(asks(&default, &narrow), asks(&wide_rule, &narrow));
        assert_eq!(TpeConfig::default().continuous_wide.unwrap().0, 10);
        assert_eq!(wide_continuous_gamma(100), 5);
        assert_eq!(wide_continuous_gamma(1000), 25);
    }

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
