//! The plain data a study is made of, and how Optuna spells it on disk.

use serde_json::Value as Json;
use std::collections::BTreeMap;

/// The state of a trial, stored as Optuna's enum name in `trials.state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TrialState {
    Running,
    Waiting,
    Complete,
    Pruned,
    Fail,
}

impl TrialState {
    pub const ALL: [TrialState; 5] = [
        TrialState::Running,
        TrialState::Waiting,
        TrialState::Complete,
        TrialState::Pruned,
        TrialState::Fail,
    ];

    /// The string Optuna stores (`RUNNING`, `WAITING`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TrialState::Running => "RUNNING",
            TrialState::Waiting => "WAITING",
            TrialState::Complete => "COMPLETE",
            TrialState::Pruned => "PRUNED",
            TrialState::Fail => "FAIL",
        }
    }

    /// Parse Optuna's stored name; case-insensitive so CLI input can use it too.
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

impl std::fmt::Display for TrialState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An objective's direction, stored in `study_directions.direction`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StudyDirection {
    /// Optuna's placeholder for a study whose direction is not yet known.
    NotSet,
    Minimize,
    Maximize,
}

impl StudyDirection {
    pub fn as_str(self) -> &'static str {
        match self {
            StudyDirection::NotSet => "NOT_SET",
            StudyDirection::Minimize => "MINIMIZE",
            StudyDirection::Maximize => "MAXIMIZE",
        }
    }

    pub fn parse(s: &str) -> Option<StudyDirection> {
        [
            StudyDirection::NotSet,
            StudyDirection::Minimize,
            StudyDirection::Maximize,
        ]
        .into_iter()
        .find(|d| d.as_str().eq_ignore_ascii_case(s))
    }
}

impl std::fmt::Display for StudyDirection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A study as stored: its id (the key for every trial operation), name and directions.
#[derive(Clone, Debug, PartialEq)]
pub struct Study {
    pub study_id: i64,
    pub name: String,
    pub directions: Vec<StudyDirection>,
}

/// A study with its trial counts per state, for listings.
#[derive(Clone, Debug, PartialEq)]
pub struct StudySummary {
    pub study: Study,
    pub n_trials: usize,
    pub counts: BTreeMap<TrialState, usize>,
    pub user_attrs: BTreeMap<String, Json>,
}

/// The two keys of a trial: `trial_id` is global to the file, `number` counts
/// within the study from 0 without gaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TrialRef {
    pub trial_id: i64,
    pub number: i64,
}

/// One parameter of a trial exactly as Optuna stores it: the internal value
/// (the float itself for float/int distributions, the choice index for
/// categorical ones) and the distribution as Optuna's JSON. The store treats
/// the JSON as opaque; [`crate::Distribution`] reads and writes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub internal_value: f64,
    pub distribution_json: String,
}

/// Everything stored about one trial.
#[derive(Clone, Debug, PartialEq)]
pub struct FrozenTrial {
    pub trial_id: i64,
    pub study_id: i64,
    pub number: i64,
    pub state: TrialState,
    /// One value per objective, or `None` when none were stored.
    pub values: Option<Vec<f64>>,
    /// Optuna's naive local-time format `YYYY-MM-DD HH:MM:SS[.ffffff]`.
    pub datetime_start: Option<String>,
    pub datetime_complete: Option<String>,
    /// Sorted by name.
    pub params: Vec<Param>,
    pub intermediate_values: BTreeMap<i64, f64>,
    pub user_attrs: BTreeMap<String, Json>,
    pub system_attrs: BTreeMap<String, Json>,
    /// Last heartbeat (UTC, `YYYY-MM-DD HH:MM:SS[.ffffff]`), if one was recorded.
    pub heartbeat: Option<String>,
}

impl FrozenTrial {
    pub fn trial_ref(&self) -> TrialRef {
        TrialRef {
            trial_id: self.trial_id,
            number: self.number,
        }
    }

    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// The single objective value, for single-objective studies.
    pub fn value(&self) -> Option<f64> {
        self.values.as_ref().and_then(|v| v.first().copied())
    }
}

/// Which trials to list.
#[derive(Clone, Debug, Default)]
pub struct TrialFilter {
    /// Only trials in one of these states (all states when empty).
    pub states: Vec<TrialState>,
    /// Only trials with a user or system attribute of this key.
    pub attr_key: Option<String>,
}

/// How Optuna encodes a float: `(value, value_type)` with NULL for the
/// non-finite ones. `trial_values` has no NAN type; intermediate values do.
pub(crate) fn encode_float(v: f64) -> (Option<f64>, &'static str) {
    if v.is_nan() {
        (None, "NAN")
    } else if v == f64::INFINITY {
        (None, "INF_POS")
    } else if v == f64::NEG_INFINITY {
        (None, "INF_NEG")
    } else {
        (Some(v), "FINITE")
    }
}

/// The inverse of [`encode_float`]; `None` for an unknown type string.
pub(crate) fn decode_float(value: Option<f64>, kind: &str) -> Option<f64> {
    match kind {
        "FINITE" => Some(value.unwrap_or(f64::NAN)),
        "INF_POS" => Some(f64::INFINITY),
        "INF_NEG" => Some(f64::NEG_INFINITY),
        "NAN" => Some(f64::NAN),
        _ => None,
    }
}
