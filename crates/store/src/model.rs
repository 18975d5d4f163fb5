//! The plain data a study is made of beyond `hpo_sampler`'s trial model,
//! and how Optuna spells floats on disk.

use serde_json::Value as Json;
use std::collections::BTreeMap;

pub use hpo_sampler::{FrozenTrial, Param, StudyDirection, TrialState};

/// A study as stored: its id (the key for every trial operation), name and directions.
#[derive(Clone, Debug, PartialEq)]
pub struct Study {
    /// The study's key in the storage (`studies.study_id`).
    pub study_id: i64,
    /// The study's name, unique in the storage.
    pub name: String,
    /// One direction per objective, in objective order (at least one).
    pub directions: Vec<StudyDirection>,
}

/// A study with its trial counts per state, for listings.
#[derive(Clone, Debug, PartialEq)]
pub struct StudySummary {
    /// The study itself.
    pub study: Study,
    /// Its trials in every state, together.
    pub n_trials: usize,
    /// Its trials per state; a state no trial is in has no entry.
    pub counts: BTreeMap<TrialState, usize>,
    /// The study's user attributes, by key.
    pub user_attrs: BTreeMap<String, Json>,
}

/// The two keys of a trial: `trial_id` is global to the file, `number` counts
/// within the study from 0 without gaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TrialRef {
    /// The key for every trial operation (`trials.trial_id`).
    pub trial_id: i64,
    /// The trial's number in its study, 0-based.
    pub number: i64,
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

/// The inverse of [`encode_float`]; `None` for an unknown type string or
/// a FINITE one without a value (Optuna refuses both).
pub(crate) fn decode_float(value: Option<f64>, kind: &str) -> Option<f64> {
    match kind {
        "FINITE" => value,
        "INF_POS" => Some(f64::INFINITY),
        "INF_NEG" => Some(f64::NEG_INFINITY),
        "NAN" => Some(f64::NAN),
        _ => None,
    }
}
