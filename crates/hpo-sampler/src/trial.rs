//! The in-memory history the samplers and pruners read: frozen trials with
//! Optuna's fields, and a read-only view of a study.

use crate::distribution::{Distribution, ParamValue};
use std::collections::BTreeMap;

/// A search space: distributions by parameter name (sorted by name, as
/// Optuna's intersection search space is).
pub type SearchSpace = BTreeMap<String, Distribution>;

/// Optuna's trial states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum TrialState {
    Running,
    Complete,
    Pruned,
    Fail,
    Waiting,
}

impl TrialState {
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            TrialState::Complete | TrialState::Pruned | TrialState::Fail
        )
    }
}

/// Whether the study minimises or maximises its (single) objective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StudyDirection {
    Minimize,
    Maximize,
}

/// One parameter of a trial: its distribution and its internal value
/// (the number for ranges, the choice index for categoricals).
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub distribution: Distribution,
    pub internal: f64,
}

impl Param {
    /// The external value (what the objective sees).
    pub fn value(&self) -> ParamValue {
        self.distribution.to_external(self.internal)
    }
}

/// A trial as the samplers and pruners see it (Optuna's `FrozenTrial`,
/// single-objective).
#[derive(Debug, Clone, PartialEq)]
pub struct FrozenTrial {
    /// 0-based, unique in the study, in creation order.
    pub number: u64,
    pub state: TrialState,
    pub params: BTreeMap<String, Param>,
    /// The objective values of a COMPLETE trial (only `values[0]` is used).
    pub values: Option<Vec<f64>>,
    /// Reported learning-curve values by step.
    pub intermediate_values: BTreeMap<i64, f64>,
    /// Constraint values by name; the trial is feasible when all are `<= 0`
    /// (Optuna 5's `trial.set_constraint`).
    pub constraints: BTreeMap<String, f64>,
    /// Numeric system attributes the pruners keep per trial (the successive
    /// halving rungs, `completed_rung_N`); the caller persists them.
    pub system_attrs: BTreeMap<String, f64>,
}

impl FrozenTrial {
    /// A RUNNING trial with no params yet.
    pub fn new(number: u64) -> Self {
        FrozenTrial {
            number,
            state: TrialState::Running,
            params: BTreeMap::new(),
            values: None,
            intermediate_values: BTreeMap::new(),
            constraints: BTreeMap::new(),
            system_attrs: BTreeMap::new(),
        }
    }

    /// The objective value of a COMPLETE trial.
    pub fn value(&self) -> Option<f64> {
        self.values.as_ref().and_then(|v| v.first().copied())
    }

    /// The largest reported step.
    pub fn last_step(&self) -> Option<i64> {
        self.intermediate_values.keys().next_back().copied()
    }

    /// Total positive constraint violation (0 for a feasible trial).
    pub fn violation(&self) -> f64 {
        self.constraints.values().filter(|v| **v > 0.0).sum()
    }
}

/// What samplers and pruners are given: the study's name (Hyperband hashes
/// it), its direction and its trials in number order.
#[derive(Debug, Clone, Copy)]
pub struct StudyView<'a> {
    pub name: &'a str,
    pub direction: StudyDirection,
    pub trials: &'a [FrozenTrial],
}
