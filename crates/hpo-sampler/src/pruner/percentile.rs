//! Optuna's `PercentilePruner` and `MedianPruner` (its 50th percentile).

use super::{PruneDecision, Pruner, StepGrid, require};
use crate::error::Result;
use crate::trial::{FrozenTrial, StudyDirection, StudyView, TrialState};

/// Prunes a trial whose best value so far is worse than the given
/// percentile of COMPLETE trials' values at the same step.
#[derive(Debug, Clone)]
pub struct PercentilePruner {
    percentile: f64,
    n_startup_trials: usize,
    grid: StepGrid,
    n_min_trials: usize,
}

impl PercentilePruner {
    /// Optuna's `PercentilePruner(percentile, n_startup_trials=5,
    /// n_warmup_steps=0, interval_steps=1, n_min_trials=1)`.
    pub fn new(
        percentile: f64,
        n_startup_trials: usize,
        n_warmup_steps: i64,
        interval_steps: i64,
        n_min_trials: usize,
    ) -> Result<Self> {
        require((0.0..=100.0).contains(&percentile), "percentile", || {
            format!("must be in [0, 100], got {percentile}")
        })?;
        let grid = StepGrid::new(n_warmup_steps, interval_steps)?;
        require(n_min_trials >= 1, "n_min_trials", || {
            format!("must be at least 1, got {n_min_trials}")
        })?;
        Ok(PercentilePruner {
            percentile,
            n_startup_trials,
            grid,
            n_min_trials,
        })
    }
}

/// numpy's `nanpercentile` with linear interpolation; NaN when all are NaN.
fn nan_percentile(values: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let pos = q / 100.0 * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    // The next value even at an exact position, as numpy takes it: an
    // infinite neighbour then makes the percentile NaN (inf * 0), and the
    // pruner keeps the trial, as Optuna's does.
    let hi = (lo + 1).min(v.len() - 1);
    let frac = pos - lo as f64;
    // numpy's lerp: a + (b - a) * t, switched to b - (b - a) * (1 - t) for t >= 0.5.
    let (a, b) = (v[lo], v[hi]);
    if frac >= 0.5 {
        b - (b - a) * (1.0 - frac)
    } else {
        a + (b - a) * frac
    }
}

impl Pruner for PercentilePruner {
    fn prune(&mut self, study: &StudyView<'_>, trial: &FrozenTrial) -> PruneDecision {
        let completed: Vec<&FrozenTrial> = study
            .trials
            .iter()
            .filter(|t| t.state == TrialState::Complete)
            .collect();
        if completed.is_empty() || completed.len() < self.n_startup_trials {
            return PruneDecision::keep();
        }
        let Some(step) = self.grid.due_step(trial) else {
            return PruneDecision::keep();
        };
        let direction = study.direction;
        let own = trial
            .intermediate_values
            .values()
            .copied()
            .filter(|v| !v.is_nan());
        let best = match direction {
            StudyDirection::Maximize => own.fold(f64::NAN, f64::max),
            StudyDirection::Minimize | StudyDirection::NotSet => own.fold(f64::NAN, f64::min),
        };
        if best.is_nan() {
            return PruneDecision::prune();
        }
        let at_step: Vec<f64> = completed
            .iter()
            .filter_map(|t| t.intermediate_values.get(&step).copied())
            .collect();
        if at_step.len() < self.n_min_trials {
            return PruneDecision::keep();
        }
        let q = match direction {
            StudyDirection::Maximize => 100.0 - self.percentile,
            StudyDirection::Minimize | StudyDirection::NotSet => self.percentile,
        };
        let p = nan_percentile(&at_step, q);
        if p.is_nan() {
            return PruneDecision::keep();
        }
        let prune = match direction {
            StudyDirection::Maximize => best < p,
            StudyDirection::Minimize | StudyDirection::NotSet => best > p,
        };
        PruneDecision {
            prune,
            system_attrs: Vec::new(),
        }
    }
}

/// Optuna's `MedianPruner`: the 50th percentile.
#[derive(Debug, Clone)]
pub struct MedianPruner(PercentilePruner);

impl MedianPruner {
    /// Optuna's `MedianPruner(n_startup_trials=5, n_warmup_steps=0,
    /// interval_steps=1, n_min_trials=1)`.
    pub fn new(
        n_startup_trials: usize,
        n_warmup_steps: i64,
        interval_steps: i64,
        n_min_trials: usize,
    ) -> Result<Self> {
        PercentilePruner::new(
            50.0,
            n_startup_trials,
            n_warmup_steps,
            interval_steps,
            n_min_trials,
        )
        .map(MedianPruner)
    }
}

impl Default for MedianPruner {
    fn default() -> Self {
        Self::new(5, 0, 1, 1).expect("defaults are valid")
    }
}

impl Pruner for MedianPruner {
    fn prune(&mut self, study: &StudyView<'_>, trial: &FrozenTrial) -> PruneDecision {
        self.0.prune(study, trial)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn percentile_interpolates_like_numpy() {
        let v = [1.0, 2.0, 4.0, f64::NAN, 8.0];
        assert_eq!(super::nan_percentile(&v, 50.0), 3.0);
        assert_eq!(super::nan_percentile(&v, 25.0), 1.75);
        assert!(super::nan_percentile(&[f64::NAN], 50.0).is_nan());
    }
}
