//! Optuna's `HyperbandPruner`: several successive-halving brackets with
//! increasing early-stopping rates; a trial's bracket is
//! `crc32("{study_name}_{number}") mod total_budget` walked over the
//! brackets' budgets, exactly as Optuna assigns it, and each bracket only
//! competes against its own trials.

use super::successive_halving::{MinResource, SuccessiveHalvingPruner};
use super::{PruneDecision, Pruner, require};
use crate::error::Result;
use crate::trial::{FrozenTrial, StudyView, TrialState};

/// Optuna's `HyperbandPruner`: each trial is judged by the successive
/// halving of its bracket, against that bracket's trials only.
#[derive(Debug, Clone)]
pub struct HyperbandPruner {
    min_resource: i64,
    /// `None` until known: "auto" takes the first COMPLETE trials' last step + 1.
    max_resource: Option<i64>,
    reduction_factor: i64,
    bootstrap_count: usize,
    pruners: Vec<SuccessiveHalvingPruner>,
    budgets: Vec<u64>,
    total_budget: u64,
}

impl Default for HyperbandPruner {
    /// Optuna's defaults: `min_resource=1`, `max_resource="auto"`,
    /// `reduction_factor=3`, `bootstrap_count=0`.
    fn default() -> Self {
        Self::new(1, None, 3, 0).expect("defaults are valid")
    }
}

impl HyperbandPruner {
    /// `max_resource: None` is Optuna's `"auto"`.
    pub fn new(
        min_resource: i64,
        max_resource: Option<i64>,
        reduction_factor: i64,
        bootstrap_count: usize,
    ) -> Result<Self> {
        require(min_resource >= 1, "min_resource", || {
            format!("must be >= 1, got {min_resource}")
        })?;
        require(reduction_factor >= 2, "reduction_factor", || {
            format!("must be >= 2, got {reduction_factor}")
        })?;
        require(
            bootstrap_count == 0 || max_resource.is_some(),
            "bootstrap_count",
            || "bootstrap_count > 0 and max_resource auto are incompatible".to_string(),
        )?;
        let max = max_resource.unwrap_or(min_resource);
        require(max >= min_resource, "max_resource", || {
            format!("must be >= min_resource, got {max}")
        })?;
        Ok(HyperbandPruner {
            min_resource,
            max_resource,
            reduction_factor,
            bootstrap_count,
            pruners: Vec::new(),
            budgets: Vec::new(),
            total_budget: 0,
        })
    }

    fn try_initialise(&mut self, study: &StudyView<'_>) {
        let max_resource = match self.max_resource {
            Some(m) => m,
            None => {
                let Some(last) = study
                    .trials
                    .iter()
                    .filter(|t| t.state == TrialState::Complete)
                    .filter_map(|t| t.last_step())
                    .max()
                else {
                    return;
                };
                *self.max_resource.insert(last.saturating_add(1))
            }
        };
        let ratio = max_resource as f64 / self.min_resource as f64;
        // None where max_resource < min_resource (an automatic max_resource
        // below it): the pruner then never prunes, as Optuna's.
        let n_brackets =
            ((ratio.ln() / (self.reduction_factor as f64).ln()).floor() as i64 + 1).max(0) as usize;
        for bracket in 0..n_brackets {
            let s = (n_brackets - 1 - bracket) as i32;
            let budget = (n_brackets as f64 * (self.reduction_factor as f64).powi(s)
                / (s + 1) as f64)
                .ceil() as u64;
            self.budgets.push(budget);
            // Python's integers do not overflow; past u64 every trial's
            // crc32 falls in the first bracket either way.
            self.total_budget = self.total_budget.saturating_add(budget);
            self.pruners.push(
                SuccessiveHalvingPruner::new(
                    MinResource::Fixed(self.min_resource),
                    self.reduction_factor,
                    bracket as i64,
                    self.bootstrap_count,
                )
                .expect("options validated in new"),
            );
        }
    }

    /// The bracket of trial `number` in study `name`.
    pub fn bracket_id(&self, name: &str, number: u64) -> usize {
        if self.pruners.is_empty() {
            return 0;
        }
        let mut n = crc32(format!("{name}_{number}").as_bytes()) as u64 % self.total_budget;
        for (bracket, &budget) in self.budgets.iter().enumerate() {
            if n < budget {
                return bracket;
            }
            n -= budget;
        }
        unreachable!("the budgets sum to total_budget")
    }
}

impl Pruner for HyperbandPruner {
    fn prune(&mut self, study: &StudyView<'_>, trial: &FrozenTrial) -> PruneDecision {
        if self.pruners.is_empty() {
            self.try_initialise(study);
            if self.pruners.is_empty() {
                return PruneDecision::keep();
            }
        }
        let bracket = self.bracket_id(study.name, trial.number);
        let in_bracket: Vec<&FrozenTrial> = study
            .trials
            .iter()
            .filter(|t| self.bracket_id(study.name, t.number) == bracket)
            .collect();
        self.pruners[bracket].prune_among(&in_bracket, study.direction, trial)
    }
}

/// CRC-32 (IEEE, as Python's `binascii.crc32`).
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    #[test]
    fn crc32_matches_binascii() {
        // binascii.crc32(b"123456789") == 0xcbf43926; b"study_0" from Python.
        assert_eq!(super::crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(super::crc32(b""), 0);
    }
}
