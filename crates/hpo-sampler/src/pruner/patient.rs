//! Optuna's `PatientPruner`: only lets the wrapped pruner (or, with none,
//! itself) prune once the trial has not improved for `patience` steps.

use super::{PruneDecision, Pruner, require};
use crate::error::Result;
use crate::trial::{FrozenTrial, StudyDirection, StudyView};

/// Optuna's `PatientPruner`: defers to the wrapped pruner (or, with none,
/// prunes) only once the best of the trial's last `patience + 1` values is
/// worse than its best before them by more than `min_delta`.
pub struct PatientPruner {
    wrapped: Option<Box<dyn Pruner + Send>>,
    patience: usize,
    min_delta: f64,
}

impl PatientPruner {
    /// Optuna's `PatientPruner(wrapped_pruner, patience, min_delta=0.0)`;
    /// `min_delta` must not be negative.
    pub fn new(
        wrapped: Option<Box<dyn Pruner + Send>>,
        patience: usize,
        min_delta: f64,
    ) -> Result<Self> {
        require(min_delta >= 0.0, "min_delta", || {
            format!("cannot be negative, got {min_delta}")
        })?;
        Ok(PatientPruner {
            wrapped,
            patience,
            min_delta,
        })
    }
}

fn nan_extreme(values: &[f64], direction: StudyDirection) -> f64 {
    let it = values.iter().copied().filter(|v| !v.is_nan());
    match direction {
        StudyDirection::Minimize | StudyDirection::NotSet => it.fold(f64::NAN, f64::min),
        StudyDirection::Maximize => it.fold(f64::NAN, f64::max),
    }
}

impl Pruner for PatientPruner {
    fn prune(&mut self, study: &StudyView<'_>, trial: &FrozenTrial) -> PruneDecision {
        if trial.last_step().is_none() {
            return PruneDecision::keep();
        }
        // Steps in order (BTreeMap keys are sorted).
        let values: Vec<f64> = trial.intermediate_values.values().copied().collect();
        if values.len() <= self.patience.saturating_add(1) {
            return PruneDecision::keep();
        }
        let split = values.len() - self.patience - 1;
        let before = nan_extreme(&values[..split], study.direction);
        let after = nan_extreme(&values[split..], study.direction);
        let maybe_prune = match study.direction {
            StudyDirection::Minimize | StudyDirection::NotSet => before + self.min_delta < after,
            StudyDirection::Maximize => before - self.min_delta > after,
        };
        if !maybe_prune {
            return PruneDecision::keep();
        }
        match &mut self.wrapped {
            Some(p) => p.prune(study, trial),
            None => PruneDecision::prune(),
        }
    }
}
