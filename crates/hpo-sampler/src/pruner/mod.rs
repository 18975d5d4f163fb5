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
    /// Let the trial continue, with no system attributes to store.
    pub fn keep() -> Self {
        Self::default()
    }
    /// Stop the trial, with no system attributes to store.
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
    /// The decision for `trial` (Optuna's `BasePruner.prune`), with the
    /// system attributes the caller must store on it.
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

/// The steps at which a step-based pruner (percentile, median, threshold)
/// may decide: none before `n_warmup_steps`, then every `interval_steps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StepGrid {
    n_warmup_steps: i64,
    interval_steps: i64,
}

impl StepGrid {
    /// The grid, with Optuna's checks of its two options.
    pub(crate) fn new(n_warmup_steps: i64, interval_steps: i64) -> crate::error::Result<Self> {
        require(n_warmup_steps >= 0, "n_warmup_steps", || {
            format!("cannot be negative, got {n_warmup_steps}")
        })?;
        require(interval_steps >= 1, "interval_steps", || {
            format!("must be at least 1, got {interval_steps}")
        })?;
        Ok(StepGrid {
            n_warmup_steps,
            interval_steps,
        })
    }

    /// The step `trial` just reported, if a decision is due there: past
    /// the warmup, and the first report at or after the latest point of
    /// the interval grid (Optuna's `_is_first_in_interval_step`).
    pub(crate) fn due_step(&self, trial: &FrozenTrial) -> Option<i64> {
        let step = trial.last_step()?;
        if step < self.n_warmup_steps {
            return None;
        }
        let nearest_lower_pruning_step =
            (step - self.n_warmup_steps).div_euclid(self.interval_steps) * self.interval_steps
                + self.n_warmup_steps;
        let second_last_step = trial
            .intermediate_values
            .keys()
            .copied()
            .filter(|&s| s != step)
            .fold(-1, i64::max);
        (second_last_step < nearest_lower_pruning_step).then_some(step)
    }
}

/// An option's check (a pruner's or a sampler's): `Ok` when `ok`, else Optuna's error for
/// `option` with the reason.
pub(crate) fn require(
    ok: bool,
    option: &str,
    reason: impl FnOnce() -> String,
) -> crate::error::Result<()> {
    match ok {
        true => Ok(()),
        false => Err(crate::error::Error::InvalidOption {
            option: option.to_string(),
            reason: reason(),
        }),
    }
}
