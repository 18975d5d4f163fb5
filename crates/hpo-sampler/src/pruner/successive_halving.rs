//! Optuna's `SuccessiveHalvingPruner` (asynchronous successive halving).
//! A trial reaching rung `r` (step `min_resource * reduction_factor^(rate + r)`)
//! records its value there and continues only if it is in the top
//! `1 / reduction_factor` of all values recorded at that rung.

use super::{PruneDecision, Pruner, require};
use crate::error::Result;
use crate::trial::{FrozenTrial, StudyDirection, StudyView, TrialState};

/// `min_resource`: a fixed step count, or estimated from the first
/// COMPLETE trials as `max(last_step / 100, 1)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinResource {
    /// Optuna's `"auto"`: fixed from the largest last step of the COMPLETE
    /// trials once one exists; no trial is pruned before.
    Auto,
    /// This many steps (at least 1) before the first rung.
    Fixed(i64),
}

/// Optuna's `SuccessiveHalvingPruner`: prunes a trial that reaches a rung
/// outside the top `1 / reduction_factor` of the values recorded there.
#[derive(Debug, Clone)]
pub struct SuccessiveHalvingPruner {
    min_resource: Option<i64>,
    reduction_factor: i64,
    min_early_stopping_rate: i64,
    bootstrap_count: usize,
}

impl Default for SuccessiveHalvingPruner {
    /// Optuna's defaults: `min_resource="auto"`, `reduction_factor=4`,
    /// `min_early_stopping_rate=0`, `bootstrap_count=0`.
    fn default() -> Self {
        Self::new(MinResource::Auto, 4, 0, 0).expect("defaults are valid")
    }
}

pub(crate) fn rung_key(rung: i64) -> String {
    format!("completed_rung_{rung}")
}

impl SuccessiveHalvingPruner {
    /// Optuna's `SuccessiveHalvingPruner(min_resource, reduction_factor,
    /// min_early_stopping_rate, bootstrap_count)`: `reduction_factor >= 2`,
    /// and `bootstrap_count > 0` (trials a rung needs before it promotes
    /// any) only with a fixed `min_resource`.
    pub fn new(
        min_resource: MinResource,
        reduction_factor: i64,
        min_early_stopping_rate: i64,
        bootstrap_count: usize,
    ) -> Result<Self> {
        let min_resource = match min_resource {
            MinResource::Auto => None,
            MinResource::Fixed(r) => {
                require(r >= 1, "min_resource", || {
                    format!("must be >= 1 or auto, got {r}")
                })?;
                Some(r)
            }
        };
        require(reduction_factor >= 2, "reduction_factor", || {
            format!("must be >= 2, got {reduction_factor}")
        })?;
        require(
            min_early_stopping_rate >= 0,
            "min_early_stopping_rate",
            || format!("must be >= 0, got {min_early_stopping_rate}"),
        )?;
        require(
            bootstrap_count == 0 || min_resource.is_some(),
            "bootstrap_count",
            || "bootstrap_count > 0 and min_resource auto are incompatible".to_string(),
        )?;
        Ok(SuccessiveHalvingPruner {
            min_resource,
            reduction_factor,
            min_early_stopping_rate,
            bootstrap_count,
        })
    }

    /// The decision against `trials` (the study's, or a Hyperband bracket's).
    pub(crate) fn prune_among(
        &mut self,
        trials: &[&FrozenTrial],
        direction: StudyDirection,
        trial: &FrozenTrial,
    ) -> PruneDecision {
        let mut decision = PruneDecision::keep();
        let Some(step) = trial.last_step() else {
            return decision;
        };
        let mut rung = 0;
        while trial.system_attrs.contains_key(&rung_key(rung)) {
            rung += 1;
        }
        let value = trial.intermediate_values[&step];
        loop {
            let min_resource = match self.min_resource {
                Some(r) => r,
                None => match estimate_min_resource(trials) {
                    Some(r) => *self.min_resource.insert(r),
                    None => return decision,
                },
            };
            let exponent = u32::try_from(self.min_early_stopping_rate.saturating_add(rung))
                .unwrap_or(u32::MAX);
            let promotion_step = self
                .reduction_factor
                .checked_pow(exponent)
                .and_then(|p| p.checked_mul(min_resource));
            match promotion_step {
                Some(p) if step >= p => {}
                _ => return decision,
            }
            if value.is_nan() {
                decision.prune = true;
                return decision;
            }
            let key = rung_key(rung);
            decision.system_attrs.push((key.clone(), value));
            let mut competing: Vec<f64> = trials
                .iter()
                .filter(|t| t.number != trial.number)
                .filter_map(|t| t.system_number(&key))
                .collect();
            competing.push(value);
            if competing.len() <= self.bootstrap_count
                || !promotable(value, &mut competing, self.reduction_factor, direction)
            {
                decision.prune = true;
                return decision;
            }
            rung += 1;
        }
    }
}

fn estimate_min_resource(trials: &[&FrozenTrial]) -> Option<i64> {
    trials
        .iter()
        .filter(|t| t.state == TrialState::Complete)
        .filter_map(|t| t.last_step())
        .max()
        .map(|last| (last.div_euclid(100)).max(1))
}

fn promotable(
    value: f64,
    competing: &mut [f64],
    reduction_factor: i64,
    direction: StudyDirection,
) -> bool {
    let idx = (competing.len() as i64 / reduction_factor - 1).max(0) as usize;
    competing.sort_by(f64::total_cmp);
    match direction {
        StudyDirection::Maximize => value >= competing[competing.len() - 1 - idx],
        StudyDirection::Minimize | StudyDirection::NotSet => value <= competing[idx],
    }
}

impl Pruner for SuccessiveHalvingPruner {
    fn prune(&mut self, study: &StudyView<'_>, trial: &FrozenTrial) -> PruneDecision {
        let trials: Vec<&FrozenTrial> = study.trials.iter().collect();
        self.prune_among(&trials, study.direction, trial)
    }
}
