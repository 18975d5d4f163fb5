//! Optuna's `ThresholdPruner`: prunes when the latest value leaves
//! `[lower, upper]` (or is NaN), on the warmup/interval grid.

use super::{PruneDecision, Pruner, StepGrid, require};
use crate::error::Result;
use crate::trial::{FrozenTrial, StudyView};

/// Optuna's `ThresholdPruner`: prunes a trial whose latest value is NaN or
/// leaves `[lower, upper]`.
#[derive(Debug, Clone)]
pub struct ThresholdPruner {
    lower: f64,
    upper: f64,
    grid: StepGrid,
}

impl ThresholdPruner {
    /// At least one of `lower`/`upper`; Optuna's defaults are
    /// `n_warmup_steps=0`, `interval_steps=1`.
    pub fn new(
        lower: Option<f64>,
        upper: Option<f64>,
        n_warmup_steps: i64,
        interval_steps: i64,
    ) -> Result<Self> {
        require(lower.is_some() || upper.is_some(), "lower/upper", || {
            "give at least one".to_string()
        })?;
        for (option, value) in [("lower", lower), ("upper", upper)] {
            require(!value.is_some_and(f64::is_nan), option, || {
                "must be a number, not NaN".to_string()
            })?;
        }
        let lower = lower.unwrap_or(f64::NEG_INFINITY);
        let upper = upper.unwrap_or(f64::INFINITY);
        require(lower <= upper, "lower", || {
            format!("must be <= upper, got {lower} > {upper}")
        })?;
        Ok(ThresholdPruner {
            lower,
            upper,
            grid: StepGrid::new(n_warmup_steps, interval_steps)?,
        })
    }
}

impl Pruner for ThresholdPruner {
    fn prune(&mut self, _study: &StudyView<'_>, trial: &FrozenTrial) -> PruneDecision {
        let Some(step) = self.grid.due_step(trial) else {
            return PruneDecision::keep();
        };
        let v = trial.intermediate_values[&step];
        if v.is_nan() || v < self.lower || v > self.upper {
            PruneDecision::prune()
        } else {
            PruneDecision::keep()
        }
    }
}
