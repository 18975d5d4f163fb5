//! Optuna's `ThresholdPruner`: prunes when the latest value leaves
//! `[lower, upper]` (or is NaN), on the warmup/interval grid.

use super::{PruneDecision, Pruner, is_first_in_interval_step, option_error};
use crate::error::Result;
use crate::trial::{FrozenTrial, StudyView};

#[derive(Debug, Clone)]
pub struct ThresholdPruner {
    lower: f64,
    upper: f64,
    n_warmup_steps: i64,
    interval_steps: i64,
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
        if lower.is_none() && upper.is_none() {
            return Err(option_error("lower/upper", "give at least one".into()));
        }
        let lower = lower.unwrap_or(f64::NEG_INFINITY);
        let upper = upper.unwrap_or(f64::INFINITY);
        if lower > upper {
            return Err(option_error(
                "lower",
                format!("must be <= upper, got {lower} > {upper}"),
            ));
        }
        if n_warmup_steps < 0 {
            return Err(option_error(
                "n_warmup_steps",
                format!("cannot be negative, got {n_warmup_steps}"),
            ));
        }
        if interval_steps < 1 {
            return Err(option_error(
                "interval_steps",
                format!("must be at least 1, got {interval_steps}"),
            ));
        }
        Ok(ThresholdPruner {
            lower,
            upper,
            n_warmup_steps,
            interval_steps,
        })
    }
}

impl Pruner for ThresholdPruner {
    fn prune(&mut self, _study: &StudyView<'_>, trial: &FrozenTrial) -> PruneDecision {
        let Some(step) = trial.last_step() else {
            return PruneDecision::keep();
        };
        if step < self.n_warmup_steps
            || !is_first_in_interval_step(step, trial, self.n_warmup_steps, self.interval_steps)
        {
            return PruneDecision::keep();
        }
        let v = trial.intermediate_values[&step];
        if v.is_nan() || v < self.lower || v > self.upper {
            PruneDecision::prune()
        } else {
            PruneDecision::keep()
        }
    }
}
