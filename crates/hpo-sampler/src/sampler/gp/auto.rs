//! `AutoSampler`: the GP sampler while a study is small and its space
//! mostly numeric, TPE beyond.
//!
//! The rule, per ask: GP when the study has fewer than
//! [`AutoConfig::max_gp_trials`] finished trials (200) and at most half of
//! the parameters seen in them are categorical; TPE otherwise. Below 200
//! trials a GP ask costs milliseconds and finds better optima than TPE on
//! numeric spaces; its cost grows with the cube of the trials, TPE's
//! linearly, and TPE models categoricals directly (docs/benchmarks.md).

use super::{GpConfig, GpSampler};
use crate::distribution::Distribution;
use crate::sampler::{Sampler, TpeConfig, TpeSampler};
use crate::trial::{SearchSpace, StudyView};
use std::collections::BTreeMap;

/// When [`AutoSampler`] switches from GP to TPE.
#[derive(Debug, Clone, Copy)]
pub struct AutoConfig {
    pub max_gp_trials: usize,
    /// Largest share of categorical parameters for the GP.
    pub max_categorical_share: f64,
}

impl Default for AutoConfig {
    fn default() -> Self {
        AutoConfig {
            max_gp_trials: 200,
            max_categorical_share: 0.5,
        }
    }
}

/// GP or TPE by [`AutoConfig`]'s rule, decided at each trial's start.
pub struct AutoSampler {
    rule: AutoConfig,
    gp: GpSampler,
    tpe: TpeSampler,
    use_gp: bool,
}

impl AutoSampler {
    pub fn new(rule: AutoConfig, gp: GpConfig, tpe: TpeConfig) -> Self {
        AutoSampler {
            rule,
            gp: GpSampler::new(gp),
            tpe: TpeSampler::new(tpe),
            use_gp: true,
        }
    }

    /// Whether the rule picks the GP for `study`.
    pub fn picks_gp(rule: &AutoConfig, study: &StudyView<'_>) -> bool {
        let finished: Vec<_> = study
            .trials
            .iter()
            .filter(|t| t.state.is_finished())
            .collect();
        if finished.len() >= rule.max_gp_trials {
            return false;
        }
        let mut seen: BTreeMap<&str, bool> = BTreeMap::new();
        for t in &finished {
            for (name, p) in &t.params {
                seen.insert(
                    name,
                    matches!(p.distribution, Distribution::Categorical { .. }),
                );
            }
        }
        let categorical = seen.values().filter(|c| **c).count();
        categorical as f64 <= rule.max_categorical_share * seen.len() as f64
    }

    /// Which sampler the last trial used.
    pub fn last_was_gp(&self) -> bool {
        self.use_gp
    }
}

impl Sampler for AutoSampler {
    fn infer_relative_search_space(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
    ) -> SearchSpace {
        self.use_gp = Self::picks_gp(&self.rule, study);
        if self.use_gp {
            self.gp.infer_relative_search_space(study, trial_number)
        } else {
            self.tpe.infer_relative_search_space(study, trial_number)
        }
    }

    fn sample_relative(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
        space: &SearchSpace,
    ) -> BTreeMap<String, f64> {
        if self.use_gp {
            self.gp.sample_relative(study, trial_number, space)
        } else {
            self.tpe.sample_relative(study, trial_number, space)
        }
    }

    fn sample_independent(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
        name: &str,
        distribution: &Distribution,
    ) -> f64 {
        if self.use_gp {
            self.gp
                .sample_independent(study, trial_number, name, distribution)
        } else {
            self.tpe
                .sample_independent(study, trial_number, name, distribution)
        }
    }
}
