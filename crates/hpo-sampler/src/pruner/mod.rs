//! Pruners behind one trait, with Optuna 5.0's defaults and decisions:
//! [`NopPruner`], [`MedianPruner`] / [`PercentilePruner`],
//! [`SuccessiveHalvingPruner`], [`HyperbandPruner`], [`PatientPruner`] and
//! [`ThresholdPruner`].

mod hyperband;
mod patient;
mod percentile;
mod successive_halving;
mod threshold;

pub use hyperband::HyperbandPruner;
pub use patient::PatientPruner;
pub use percentile::{MedianPruner, PercentilePruner};
pub use successive_halving::{MinResource, SuccessiveHalvingPruner};
pub use threshold::ThresholdPruner;

use crate::trial::{FrozenTrial, StudyView};

/// A pruner's answer for a trial that just reported a value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PruneDecision {
    /// Stop the trial now.
    pub prune: bool,
    /// System attributes to store on the trial (whatever the decision), so
    /// that later decisions see them; successive halving records the value
    /// with which the trial reached each rung (`completed_rung_N`).
    pub system_attrs: Vec<(String, f64)>,
}

impl PruneDecision {
    pub fn keep() -> Self {
        Self::default()
    }
    pub fn prune() -> Self {
        PruneDecision {
            prune: true,
            system_attrs: Vec::new(),
        }
    }
}

/// Decides whether `trial` (RUNNING, with its latest report in
/// `intermediate_values`) should stop. `study.trials` may include `trial`
/// itself. `&mut self` because some pruners fix settings from the first
/// history they see, as Optuna's do (`min_resource="auto"`).
pub trait Pruner {
    fn prune(&mut self, study: &StudyView<'_>, trial: &FrozenTrial) -> PruneDecision;
}

/// Never prunes.
#[derive(Debug, Clone, Copy, Default)]
pub struct NopPruner;

impl Pruner for NopPruner {
    fn prune(&mut self, _study: &StudyView<'_>, _trial: &FrozenTrial) -> PruneDecision {
        PruneDecision::keep()
    }
}

/// Optuna's `_is_first_in_interval_step`: whether `step` is the first
/// report at or after the latest pruning point of the interval grid.
pub(crate) fn is_first_in_interval_step(
    step: i64,
    trial: &FrozenTrial,
    n_warmup_steps: i64,
    interval_steps: i64,
) -> bool {
    let nearest_lower_pruning_step =
        (step - n_warmup_steps).div_euclid(interval_steps) * interval_steps + n_warmup_steps;
    let second_last_step = trial
        .intermediate_values
        .keys()
        .copied()
        .filter(|&s| s != step)
        .fold(-1, i64::max);
    second_last_step < nearest_lower_pruning_step
}

pub(crate) fn option_error(option: &str, reason: String) -> crate::error::Error {
    crate::error::Error::InvalidOption {
        option: option.to_string(),
        reason,
    }
}
