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
/// it), its direction(s) and its trials in number order.
#[derive(Debug, Clone, Copy)]
pub struct StudyView<'a> {
    pub name: &'a str,
    /// The (first) objective's direction: what pruners and single-objective
    /// samplers use.
    pub direction: StudyDirection,
    /// Every objective's direction, for a study of several objectives
    /// (Optuna's `study.directions`); empty for a single objective, whose
    /// direction is `direction`.
    pub directions: &'a [StudyDirection],
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
}
