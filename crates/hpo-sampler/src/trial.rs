//! Optuna's trial model: states, directions, parameters and frozen trials,
//! and a read-only view of a study. This is the one definition the
//! project uses: `store` reads and writes these, the samplers and pruners
//! read them.

use crate::distribution::{Distribution, ParamValue};
use crate::error::{Error, Result};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::fmt;

/// A search space: distributions by parameter name (sorted by name, as
/// Optuna's intersection search space is).
pub type SearchSpace = BTreeMap<String, Distribution>;

/// Optuna's system attribute holding a trial's constraint values
/// (`optuna.samplers._base._CONSTRAINTS_KEY`): a list of numbers, the
/// trial feasible when all are `<= 0`.
pub const CONSTRAINTS_KEY: &str = "constraints";

/// The prefix of Optuna 5.0's named constraint values: `Trial.set_constraint
/// (name, value)` stores one number under `constraints:<name>`, beside or
/// instead of the list under [`CONSTRAINTS_KEY`].
pub const NAMED_CONSTRAINT_PREFIX: &str = "constraints:";

/// A JSON number as an `f64`, or one of the strings `NaN`, `Infinity` and
/// `-Infinity`, which storages read Python's non-finite floats as
/// (`json.dumps` writes them bare, which strict JSON lacks).
///
/// ```
/// use hpo_sampler::json_f64;
/// assert_eq!(json_f64(&serde_json::json!("-Infinity")), Some(f64::NEG_INFINITY));
/// assert_eq!(json_f64(&serde_json::json!(2.5)), Some(2.5));
/// assert_eq!(json_f64(&serde_json::json!("x")), None);
/// ```
pub fn json_f64(v: &Json) -> Option<f64> {
    match v {
        Json::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        v => v.as_f64(),
    }
}

/// Optuna's trial states. Ordered as listings show them (running and
/// waiting first, then the finished states).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "UPPERCASE")]
pub enum TrialState {
    /// Asked and not yet told.
    Running,
    /// Enqueued, not yet asked.
    Waiting,
    /// Finished with its value(s).
    Complete,
    /// Stopped early by a pruner.
    Pruned,
    /// Failed: the objective raised or returned no usable value.
    Fail,
}

impl TrialState {
    /// Every state, in the enum's order.
    pub const ALL: [TrialState; 5] = [
        TrialState::Running,
        TrialState::Waiting,
        TrialState::Complete,
        TrialState::Pruned,
        TrialState::Fail,
    ];

    /// Optuna's name (`RUNNING`, `WAITING`, ...), as storages hold it.
    pub fn as_str(self) -> &'static str {
        match self {
            TrialState::Running => "RUNNING",
            TrialState::Waiting => "WAITING",
            TrialState::Complete => "COMPLETE",
            TrialState::Pruned => "PRUNED",
            TrialState::Fail => "FAIL",
        }
    }

    /// The state of Optuna's name, case-insensitively.
    pub fn parse(s: &str) -> Option<TrialState> {
        TrialState::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s))
    }

    /// COMPLETE, PRUNED and FAIL end a trial; nothing may change it afterwards.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            TrialState::Complete | TrialState::Pruned | TrialState::Fail
        )
    }
}

impl fmt::Display for TrialState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// Whether an objective is minimised or maximised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StudyDirection {
    /// Optuna's placeholder for a direction never set (old storages hold
    /// it); samplers and pruners minimise such a study.
    #[serde(skip)]
    NotSet,
    /// Smaller values are better.
    Minimize,
    /// Larger values are better.
    Maximize,
}

impl StudyDirection {
    /// Optuna's name (`NOT_SET`, `MINIMIZE`, `MAXIMIZE`).
    pub fn as_str(self) -> &'static str {
        match self {
            StudyDirection::NotSet => "NOT_SET",
            StudyDirection::Minimize => "MINIMIZE",
            StudyDirection::Maximize => "MAXIMIZE",
        }
    }

    /// The direction of Optuna's name, case-insensitively.
    pub fn parse(s: &str) -> Option<StudyDirection> {
        [
            StudyDirection::NotSet,
            StudyDirection::Minimize,
            StudyDirection::Maximize,
        ]
        .into_iter()
        .find(|d| d.as_str().eq_ignore_ascii_case(s))
    }

    /// Whether larger values are better (false for `NotSet`).
    pub fn is_maximize(self) -> bool {
        self == StudyDirection::Maximize
    }

    /// The COMPLETE trial with the best single value in this direction:
    /// the first among equals, so the lowest number when `trials` are in
    /// number order (Optuna's `study.best_trial`).
    ///
    /// ```
    /// use hpo_sampler::{FrozenTrial, StudyDirection, TrialState};
    ///
    /// let trials: Vec<FrozenTrial> = [0.3, 0.9, 0.9]
    ///     .into_iter()
    ///     .enumerate()
    ///     .map(|(n, v)| {
    ///         let mut t = FrozenTrial::new(n as u64);
    ///         t.state = TrialState::Complete;
    ///         t.values = Some(vec![v]);
    ///         t
    ///     })
    ///     .collect();
    /// let best = StudyDirection::Maximize.best_trial(&trials).unwrap();
    /// assert_eq!(best.number, 1);
    /// assert_eq!(StudyDirection::Minimize.best_trial(&trials).unwrap().number, 0);
    /// ```
    pub fn best_trial<'a>(
        self,
        trials: impl IntoIterator<Item = &'a FrozenTrial>,
    ) -> Option<&'a FrozenTrial> {
        let better = |a: f64, b: f64| if self.is_maximize() { a > b } else { a < b };
        trials
            .into_iter()
            .filter(|t| t.state == TrialState::Complete)
            .filter_map(|t| t.value().map(|v| (t, v)))
            .reduce(|best, next| if better(next.1, best.1) { next } else { best })
            .map(|(t, _)| t)
    }
}

impl fmt::Display for StudyDirection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// One parameter of a trial: its distribution and its internal value
/// (the number for ranges, the choice index for categoricals).
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// The distribution it was suggested from.
    pub distribution: Distribution,
    /// Its internal value ([`Distribution::to_internal`]), as Optuna's
    /// storage holds it.
    pub internal: f64,
}

impl Param {
    /// The external value (what the objective sees).
    ///
    /// # Panics
    ///
    /// On a categorical distribution without choices
    /// ([`Distribution::to_external`]).
    pub fn value(&self) -> ParamValue {
        self.distribution.to_external(self.internal)
    }

    /// The internal value, if its distribution holds it. Optuna runs an
    /// enqueued value outside the distribution with only a warning, so a
    /// history may hold one; samplers read such a parameter as one the
    /// trial does not have.
    pub fn internal_in_distribution(&self) -> Option<f64> {
        self.distribution
            .contains(self.internal)
            .then_some(self.internal)
    }
}

/// A trial as Optuna's `FrozenTrial` holds it: what storages return and
/// samplers and pruners read.
#[derive(Debug, Clone, PartialEq)]
pub struct FrozenTrial {
    /// 0-based, unique in the study, in creation order.
    pub number: u64,
    /// The storage's key of the trial (unique across studies); the number
    /// for a study held in memory.
    pub trial_id: i64,
    /// Its state.
    pub state: TrialState,
    /// By name.
    pub params: BTreeMap<String, Param>,
    /// One value per objective, once the trial stored them.
    pub values: Option<Vec<f64>>,
    /// Reported learning-curve values by step.
    pub intermediate_values: BTreeMap<i64, f64>,
    /// Optuna's naive local time `YYYY-MM-DD HH:MM:SS[.ffffff]`, as stored.
    pub datetime_start: Option<String>,
    /// When it finished, in the same form; `None` until then.
    pub datetime_complete: Option<String>,
    /// The user's attributes: any JSON value, as in Optuna.
    pub user_attrs: BTreeMap<String, Json>,
    /// Attributes samplers, pruners and runners keep per trial: constraint
    /// values under [`CONSTRAINTS_KEY`], successive halving's
    /// `completed_rung_N`, Optuna's `fixed_params`, ...
    pub system_attrs: BTreeMap<String, Json>,
}

impl FrozenTrial {
    /// A RUNNING trial with no params yet.
    pub fn new(number: u64) -> Self {
        FrozenTrial {
            number,
            trial_id: number as i64,
            state: TrialState::Running,
            params: BTreeMap::new(),
            values: None,
            intermediate_values: BTreeMap::new(),
            datetime_start: None,
            datetime_complete: None,
            user_attrs: BTreeMap::new(),
            system_attrs: BTreeMap::new(),
        }
    }

    /// The first objective's value.
    pub fn value(&self) -> Option<f64> {
        self.values.as_ref().and_then(|v| v.first().copied())
    }

    /// The largest reported step.
    pub fn last_step(&self) -> Option<i64> {
        self.intermediate_values.keys().next_back().copied()
    }

    /// The constraint values (empty when the trial has none), the values
    /// Optuna's `FrozenTrial.constraints` gathers: the list under
    /// [`CONSTRAINTS_KEY`] (its entries named "0", "1", ...), then each
    /// named value ([`NAMED_CONSTRAINT_PREFIX`]), one named like a list
    /// entry replacing it. Named values come in name order (Optuna's in the
    /// order they were stored): the same order for every trial that set
    /// the same constraints; a model per constraint matches trials that did
    /// not by [`FrozenTrial::constraints_by_name`]. An entry that is not a
    /// number, which [`FrozenTrial::check`] refuses, is NaN.
    pub fn constraints(&self) -> Vec<f64> {
        if self.named_constraints().next().is_some() {
            let values = self.constraints_by_name();
            return values.into_iter().map(|(_, v)| v).collect();
        }
        // The list alone (samplers ask per trial, in sorts too): no names.
        match self.system_attrs.get(CONSTRAINTS_KEY) {
            Some(Json::Array(items)) => items
                .iter()
                .map(|v| json_f64(v).unwrap_or(f64::NAN))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// [`FrozenTrial::constraints`] with their names (a list entry's is
    /// its position, "0", "1", ...), for matching one constraint across
    /// trials that do not all set the same ones.
    pub fn constraints_by_name(&self) -> Vec<(String, f64)> {
        let number = |v: &Json| json_f64(v).unwrap_or(f64::NAN);
        let mut values: Vec<(String, f64)> = match self.system_attrs.get(CONSTRAINTS_KEY) {
            Some(Json::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| (i.to_string(), number(v)))
                .collect(),
            _ => Vec::new(),
        };
        for (name, v) in self.named_constraints() {
            match values.iter_mut().find(|(n, _)| n == name) {
                Some(entry) => entry.1 = number(v),
                None => values.push((name.to_string(), number(v))),
            }
        }
        values
    }

    /// Whether the trial stored constraint values.
    pub fn has_constraints(&self) -> bool {
        matches!(self.system_attrs.get(CONSTRAINTS_KEY), Some(Json::Array(a)) if !a.is_empty())
            || self.named_constraints().next().is_some()
    }

    /// The named constraint values by name, the prefix cut off.
    fn named_constraints(&self) -> impl Iterator<Item = (&str, &Json)> {
        self.system_attrs
            .range::<str, _>((
                std::ops::Bound::Included(NAMED_CONSTRAINT_PREFIX),
                std::ops::Bound::Unbounded,
            ))
            .map_while(|(k, v)| Some((k.strip_prefix(NAMED_CONSTRAINT_PREFIX)?, v)))
    }

    /// No constraint value above 0 (a trial without constraints is
    /// feasible), as Optuna's `_get_feasible_trials` decides; a NaN value
    /// is not feasible.
    pub fn is_feasible(&self) -> bool {
        self.constraints().iter().all(|v| *v <= 0.0)
    }

    /// Total positive constraint violation (0 for a feasible trial).
    pub fn violation(&self) -> f64 {
        self.constraints().into_iter().filter(|v| *v > 0.0).sum()
    }

    /// A numeric system attribute (successive halving's rungs).
    pub fn system_number(&self, key: &str) -> Option<f64> {
        self.system_attrs.get(key).and_then(Json::as_f64)
    }

    /// What a sampler may rely on and a storage cannot promise: every
    /// parameter's distribution is valid, a COMPLETE trial has values and
    /// none is NaN, and the constraints are numbers, none NaN (Optuna
    /// raises "Constraint values cannot be NaN"). Errors name the trial and
    /// the parameter or attribute. A finite number outside its numeric
    /// distribution is not an error: Optuna stores one (an enqueued value
    /// it ran with a warning) and reads it back, and samplers take it as
    /// missing ([`Param::internal_in_distribution`]). A value Optuna could
    /// not read back is: not a finite number, or not the index of a
    /// categorical choice.
    pub fn check(&self) -> Result<()> {
        let bad = |reason: String| Error::Trial {
            number: self.number,
            reason,
        };
        if self.state == TrialState::Complete {
            match &self.values {
                None => return Err(bad("a COMPLETE trial has no values".into())),
                Some(v) if v.iter().any(|x| x.is_nan()) => {
                    return Err(bad(format!("a COMPLETE trial's values contain NaN: {v:?}")));
                }
                Some(_) => {}
            }
        }
        for (name, p) in &self.params {
            if let Err(Error::InvalidDistribution { reason, .. }) = p.distribution.validate() {
                return Err(bad(format!("parameter `{name}`: {reason}")));
            }
            let categorical = matches!(p.distribution, Distribution::Categorical { .. });
            if !p.internal.is_finite() || (categorical && !p.distribution.contains(p.internal)) {
                return Err(bad(format!(
                    "parameter `{name}`: stored value {} is outside {}",
                    p.internal, p.distribution
                )));
            }
        }
        // NaN is neither feasible nor a violation: samplers would disagree
        // on the trial (`is_feasible` false, `violation` 0).
        let number = |v: &Json| json_f64(v).filter(|x| !x.is_nan());
        if let Some((name, v)) = self.named_constraints().find(|(_, v)| number(v).is_none()) {
            return Err(bad(format!(
                "system attribute `{NAMED_CONSTRAINT_PREFIX}{name}` must be a number, not NaN, found {v}"
            )));
        }
        match self.system_attrs.get(CONSTRAINTS_KEY) {
            None | Some(Json::Null) => Ok(()),
            Some(Json::Array(items)) if items.iter().all(|v| number(v).is_some()) => Ok(()),
            Some(other) => Err(bad(format!(
                "system attribute `{CONSTRAINTS_KEY}` must be a list of numbers, none NaN, found {other}"
            ))),
        }
    }
}

/// What samplers and pruners are given: the study's name (Hyperband hashes
/// it), its direction(s) and its trials in number order.
#[derive(Debug, Clone, Copy)]
pub struct StudyView<'a> {
    /// The study's name.
    pub name: &'a str,
    /// The (first) objective's direction: what pruners and single-objective
    /// samplers use.
    pub direction: StudyDirection,
    /// Every objective's direction, for a study of several objectives
    /// (Optuna's `study.directions`); empty for a single objective, whose
    /// direction is `direction`.
    pub directions: &'a [StudyDirection],
    /// Its trials, in number order.
    pub trials: &'a [FrozenTrial],
}

impl<'a> StudyView<'a> {
    /// A single-objective study.
    pub fn new(name: &'a str, direction: StudyDirection, trials: &'a [FrozenTrial]) -> Self {
        StudyView {
            name,
            direction,
            directions: &[],
            trials,
        }
    }

    /// A study of one or more objectives (at least one direction).
    pub fn with_directions(
        name: &'a str,
        directions: &'a [StudyDirection],
        trials: &'a [FrozenTrial],
    ) -> Self {
        StudyView {
            name,
            direction: directions
                .first()
                .copied()
                .unwrap_or(StudyDirection::Minimize),
            directions: if directions.len() > 1 {
                directions
            } else {
                &[]
            },
            trials,
        }
    }

    /// Every objective's direction (one for a single-objective study).
    pub fn objectives(&self) -> &[StudyDirection] {
        if self.directions.is_empty() {
            std::slice::from_ref(&self.direction)
        } else {
            self.directions
        }
    }

    /// Whether the study has several objectives.
    pub fn is_multi_objective(&self) -> bool {
        self.directions.len() > 1
    }

    /// Every trial passes [`FrozenTrial::check`] and each COMPLETE one
    /// has one value per objective: what the samplers rely on, and what
    /// [`crate::ask()`] and [`crate::Trial`] check before they read the
    /// history. The error names the first bad trial.
    pub fn check(&self) -> Result<()> {
        let objectives = self.objectives().len();
        self.trials
            .iter()
            .try_for_each(|t| check_in_study(t, objectives))?;
        numbered_once(self.trials)
    }
}

/// Which finished trials of one study passed [`StudyView::check`], so
/// that a long-lived sampler ([`crate::Sampler::checked_trials`]) checks each
/// once rather than the whole history on every ask: a finished trial
/// never changes (as Optuna's storages promise), and one that does
/// (another state, values, params or attributes count) is checked again.
#[derive(Debug, Clone, Default)]
pub struct CheckedTrials {
    /// `(number, fingerprint)` of the finished trials that passed, in the
    /// order of the last view checked (number order, so the next view is
    /// matched against it in one pass).
    passed: Vec<(u64, u64)>,
    objectives: usize,
}

impl CheckedTrials {
    /// [`StudyView::check`], skipping the finished trials that passed
    /// before unchanged.
    pub fn check(&mut self, view: &StudyView<'_>) -> Result<()> {
        let objectives = view.objectives().len();
        if objectives != self.objectives {
            self.passed.clear();
            self.objectives = objectives;
        }
        let mut passed = Vec::with_capacity(view.trials.len());
        let mut known = self.passed.iter().peekable();
        let result = view.trials.iter().try_for_each(|t| {
            let print = fingerprint(t);
            while known.next_if(|(n, _)| *n < t.number).is_some() {}
            let seen = known.next_if(|k| **k == (t.number, print)).is_some();
            if !seen {
                check_in_study(t, objectives)?;
            }
            if t.state.is_finished() {
                passed.push((t.number, print));
            }
            Ok(())
        });
        let result = result.and_then(|()| numbered_once(view.trials));
        if result.is_ok() {
            self.passed = passed;
        }
        result
    }
}

/// No two trials share a number: samplers tell observations apart by it,
/// as Optuna's `study.trials[number]` does. (Optuna's storage itself can
/// number two trials alike on a PostgreSQL database whose default
/// isolation is REPEATABLE READ or SERIALIZABLE.)
fn numbered_once(trials: &[FrozenTrial]) -> Result<()> {
    let twice = if trials.is_sorted_by_key(|t| t.number) {
        trials
            .windows(2)
            .find(|w| w[0].number == w[1].number)
            .map(|w| w[1].number)
    } else {
        let mut seen = std::collections::HashSet::with_capacity(trials.len());
        trials
            .iter()
            .find(|t| !seen.insert(t.number))
            .map(|t| t.number)
    };
    match twice {
        None => Ok(()),
        Some(number) => Err(Error::Trial {
            number,
            reason: "two trials of the study have this number; a study numbers each \
                     trial once"
                .into(),
        }),
    }
}

/// What tells a finished trial from an edited or replaced one cheaply.
fn fingerprint(t: &FrozenTrial) -> u64 {
    let values = t.values.as_deref().unwrap_or(&[]);
    let mut h = (t.state as u64) ^ (t.trial_id as u64).rotate_left(8);
    for v in values {
        h = h.rotate_left(5) ^ v.to_bits();
    }
    h ^ ((t.params.len() as u64) << 40) ^ ((t.system_attrs.len() as u64) << 52)
}

/// [`FrozenTrial::check`], and a COMPLETE trial's values one per objective.
pub(crate) fn check_in_study(t: &FrozenTrial, objectives: usize) -> Result<()> {
    t.check()?;
    match &t.values {
        Some(v) if t.state == TrialState::Complete && v.len() != objectives => Err(Error::Trial {
            number: t.number,
            reason: format!("{} values for {objectives} objectives", v.len()),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::CategoricalChoice;
    use serde_json::json;

    /// Tables (`memtune trials`) align states and directions with a width.
    #[test]
    fn names_honour_width_and_alignment() {
        assert_eq!(format!("{:<8}|", TrialState::Fail), "FAIL    |");
        assert_eq!(format!("{:>9}", StudyDirection::Minimize), " MINIMIZE");
    }

    #[test]
    fn names_parse_back_as_optuna_spells_them() {
        for s in TrialState::ALL {
            assert_eq!(TrialState::parse(s.as_str()), Some(s));
            assert_eq!(TrialState::parse(&s.as_str().to_lowercase()), Some(s));
        }
        assert_eq!(TrialState::parse("DONE"), None);
        assert_eq!(
            StudyDirection::parse("not_set"),
            Some(StudyDirection::NotSet)
        );
        assert_eq!(StudyDirection::Maximize.to_string(), "MAXIMIZE");
    }

    #[test]
    fn constraints_come_from_the_system_attribute() {
        let mut t = FrozenTrial::new(3);
        assert!(!t.has_constraints() && t.violation() == 0.0);
        t.system_attrs
            .insert(CONSTRAINTS_KEY.into(), json!([0.5, -1.0, 2]));
        assert!(t.has_constraints());
        assert_eq!(t.constraints(), vec![0.5, -1.0, 2.0]);
        assert_eq!(t.violation(), 2.5);
        assert!(t.check().is_ok());
        t.system_attrs.insert(CONSTRAINTS_KEY.into(), json!("x"));
        let e = t.check().unwrap_err().to_string();
        assert!(e.contains("trial 3") && e.contains("\"x\""), "{e}");
    }

    /// Optuna 5.0's `Trial.set_constraint(name, value)` values, alone and
    /// beside the list, gathered as `FrozenTrial.constraints` does.
    #[test]
    fn named_constraints_join_the_list() {
        let mut t = FrozenTrial::new(5);
        t.system_attrs
            .insert(format!("{NAMED_CONSTRAINT_PREFIX}mem"), json!(5.0));
        t.system_attrs
            .insert(format!("{NAMED_CONSTRAINT_PREFIX}latency"), json!(-1.0));
        t.system_attrs.insert("constraintsx".into(), json!(9.0));
        assert!(t.has_constraints() && !t.is_feasible());
        assert_eq!(t.constraints(), vec![-1.0, 5.0]);
        t.system_attrs
            .insert(CONSTRAINTS_KEY.into(), json!([0.5, -2.0]));
        t.system_attrs
            .insert(format!("{NAMED_CONSTRAINT_PREFIX}1"), json!(-3.0));
        assert_eq!(t.constraints(), vec![0.5, -3.0, -1.0, 5.0]);
        let names: Vec<String> = t
            .constraints_by_name()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["0", "1", "latency", "mem"]);
        assert_eq!(t.violation(), 5.5);
        assert!(t.check().is_ok());
        // Python's non-finite floats, as a storage reads them.
        t.system_attrs
            .insert(format!("{NAMED_CONSTRAINT_PREFIX}mem"), json!("Infinity"));
        assert_eq!(t.constraints()[3], f64::INFINITY);
        assert!(t.check().is_ok());
        t.system_attrs
            .insert(format!("{NAMED_CONSTRAINT_PREFIX}mem"), json!("big"));
        let e = t.check().unwrap_err().to_string();
        assert!(
            e.contains("trial 5") && e.contains("constraints:mem"),
            "{e}"
        );
    }

    #[test]
    fn check_names_a_value_optuna_could_not_read() {
        let int = Distribution::int(0, 3, false, 1).unwrap();
        let choices = vec![CategoricalChoice::Int(1), CategoricalChoice::Int(2)];
        let cat = Distribution::categorical(choices).unwrap();
        for (distribution, internal) in [(&int, f64::NAN), (&int, f64::INFINITY), (&cat, 2.0)] {
            let mut t = FrozenTrial::new(4);
            let param = Param {
                distribution: distribution.clone(),
                internal,
            };
            t.params.insert("x".into(), param);
            let e = t.check().unwrap_err().to_string();
            assert!(
                e.contains("trial 4") && e.contains("`x`") && e.contains("outside"),
                "{e}"
            );
        }
        // Optuna reads these back (an enqueued value it ran with a
        // warning); samplers take them as missing.
        for internal in [5.0, 2.5, -1.0] {
            let mut t = FrozenTrial::new(4);
            let param = Param {
                distribution: int.clone(),
                internal,
            };
            assert_eq!(param.internal_in_distribution(), None);
            t.params.insert("x".into(), param);
            assert_eq!(t.check(), Ok(()));
        }
    }
}
