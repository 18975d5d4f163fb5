//! `AutoSampler`: the GP sampler while a study is small and its space
//! mostly numeric, TPE beyond; on several objectives, NSGA-II once the
//! study is large.
//!
//! The rule, per ask: GP when the study has fewer than
//! [`AutoConfig::max_gp_trials`] finished trials (200) and at most half of
//! the parameters seen in them are categorical; TPE otherwise. Below 200
//! trials a GP ask costs milliseconds and finds better optima than TPE on
//! numeric spaces; its cost grows with the cube of the trials, TPE's
//! linearly, and TPE models categoricals directly (docs/benchmarks.md).
//!
//! Several objectives follow the same rule with TPE from 30 finished trials
//! per parameter, at least 100 and at most 300
//! ([`AutoConfig::gp_trials_multi_objective`]), and NSGA-II from
//! [`AutoConfig::nsga2_after`] COMPLETE trials (1,000) on, as OptunaHub's
//! `AutoSampler` (the one Optuna's documentation points to) does. The GP
//! fits one random ParEGO scalarisation per ask: its first 100 trials find
//! a larger hypervolume than Optuna's multi-objective samplers on each
//! named problem of `cargo xtask bench sampler --multi` and in two of
//! three bbob-biobj cells. TPE's split by non-domination rank then fills
//! the front in more than the GP would on bbob-biobj at dimension 2 (after
//! 300 trials at least Optuna's best in 40 of its 55 cells where the GP
//! kept to 300 is in 27); at dimension 5 the handover at 150 is in 38,
//! at 100 in 34 and at 300 in 35; on the 10-parameter ZDT problems the GP
//! kept to 300 trials finds the larger front (docs/benchmarks.md): the
//! GP's lead grows with the dimension, and so does its share of the trials
//! here. A GP ask at 300 trials of 10 parameters costs about 0.16 s. Every
//! trial the GP or TPE samples is stored as NSGA-II's generation 0
//! ([`Sampler::system_attrs`]), so NSGA-II's first parents are the elite of
//! everything found before it. OptunaHub's picks NSGA-III from 4 objectives
//! on, which this crate does not have; NSGA-II serves there too.

use super::{GpConfig, GpSampler};
use crate::distribution::Distribution;
use crate::sampler::nsga2::GENERATION_KEY;
use crate::sampler::{NsgaIIConfig, NsgaIISampler, Sampler, TpeConfig, TpeSampler};
use crate::trial::{SearchSpace, StudyView, TrialState};
use std::collections::BTreeMap;

/// When [`AutoSampler`] switches from GP to TPE (and to NSGA-II).
#[derive(Debug, Clone, Copy)]
pub struct AutoConfig {
    /// One objective: finished trials from which TPE takes over from the
    /// GP.
    pub max_gp_trials: usize,
    /// Several objectives: finished trials per parameter from which TPE
    /// takes over from the GP, between the next two bounds.
    pub gp_trials_per_parameter_multi_objective: usize,
    /// Several objectives: the GP samples at least this many trials...
    pub min_gp_trials_multi_objective: usize,
    /// ...and at most this many (the bound that wins if the two cross).
    pub max_gp_trials_multi_objective: usize,
    /// Largest share of categorical parameters for the GP.
    pub max_categorical_share: f64,
    /// Several objectives: COMPLETE trials from which NSGA-II takes over
    /// from TPE.
    pub nsga2_after: usize,
}

impl Default for AutoConfig {
    fn default() -> Self {
        AutoConfig {
            max_gp_trials: 200,
            gp_trials_per_parameter_multi_objective: 30,
            min_gp_trials_multi_objective: 100,
            max_gp_trials_multi_objective: 300,
            max_categorical_share: 0.5,
            nsga2_after: 1000,
        }
    }
}

impl AutoConfig {
    /// Several objectives: finished trials from which TPE takes over from
    /// the GP on a space of `parameters` parameters.
    pub fn gp_trials_multi_objective(&self, parameters: usize) -> usize {
        self.gp_trials_per_parameter_multi_objective
            .saturating_mul(parameters)
            .max(self.min_gp_trials_multi_objective)
            .min(self.max_gp_trials_multi_objective)
    }
}

/// Which sampler an [`AutoSampler`] uses for the trial being asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoPick {
    /// The [`GpSampler`].
    Gp,
    /// The [`TpeSampler`].
    Tpe,
    /// The [`NsgaIISampler`].
    NsgaII,
}

/// GP, TPE or NSGA-II by [`AutoConfig`]'s rule, decided at each trial's
/// start.
pub struct AutoSampler {
    rule: AutoConfig,
    gp: GpSampler,
    tpe: TpeSampler,
    nsga2: NsgaIISampler,
    pick: AutoPick,
}

impl AutoSampler {
    /// NSGA-II (several objectives only) takes Optuna's defaults and a
    /// seed derived from the TPE's.
    pub fn new(rule: AutoConfig, gp: GpConfig, tpe: TpeConfig) -> Self {
        let nsga2 = NsgaIIConfig {
            seed: tpe.seed.map(|s| s ^ 0x0a57_0a5a_2000_0002),
            ..NsgaIIConfig::default()
        };
        AutoSampler {
            rule,
            gp: GpSampler::new(gp),
            tpe: TpeSampler::new(tpe),
            nsga2: NsgaIISampler::new(nsga2),
            pick: AutoPick::Gp,
        }
    }

    /// The rule's pick for the next trial of `study`.
    pub fn picks(rule: &AutoConfig, study: &StudyView<'_>) -> AutoPick {
        if study.is_multi_objective() {
            let complete = study
                .trials
                .iter()
                .filter(|t| t.state == TrialState::Complete)
                .count();
            if complete >= rule.nsga2_after {
                return AutoPick::NsgaII;
            }
        }
        if Self::picks_gp(rule, study) {
            AutoPick::Gp
        } else {
            AutoPick::Tpe
        }
    }

    /// Whether the rule picks the GP for `study`.
    pub fn picks_gp(rule: &AutoConfig, study: &StudyView<'_>) -> bool {
        let finished: Vec<_> = study
            .trials
            .iter()
            .filter(|t| t.state.is_finished())
            .collect();
        let mut seen: BTreeMap<&str, bool> = BTreeMap::new();
        for t in &finished {
            for (name, p) in &t.params {
                seen.insert(
                    name,
                    matches!(p.distribution, Distribution::Categorical { .. }),
                );
            }
        }
        let max_gp_trials = if study.is_multi_objective() {
            rule.gp_trials_multi_objective(seen.len())
        } else {
            rule.max_gp_trials
        };
        if finished.len() >= max_gp_trials {
            return false;
        }
        let categorical = seen.values().filter(|c| **c).count();
        categorical as f64 <= rule.max_categorical_share * seen.len() as f64
    }

    /// Which sampler the last trial used.
    pub fn last_pick(&self) -> AutoPick {
        self.pick
    }

    /// Whether the last trial used the GP.
    pub fn last_was_gp(&self) -> bool {
        self.pick == AutoPick::Gp
    }

    fn current(&mut self) -> &mut dyn Sampler {
        match self.pick {
            AutoPick::Gp => &mut self.gp,
            AutoPick::Tpe => &mut self.tpe,
            AutoPick::NsgaII => &mut self.nsga2,
        }
    }
}

impl Sampler for AutoSampler {
    /// The first error of its GP's, TPE's or NSGA-II's options: all three
    /// are checked, whichever it picks.
    fn check(&self) -> crate::Result<()> {
        self.gp.check()?;
        self.tpe.check()?;
        self.nsga2.check()
    }

    fn checked_trials(&mut self) -> Option<&mut crate::CheckedTrials> {
        // One study's trials, whichever sampler reads them.
        self.tpe.checked_trials()
    }

    fn before_trial(&mut self, study: &StudyView<'_>, trial_number: u64) {
        self.gp.before_trial(study, trial_number);
        self.tpe.before_trial(study, trial_number);
        self.nsga2.before_trial(study, trial_number);
    }

    fn infer_relative_search_space(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
    ) -> SearchSpace {
        self.pick = Self::picks(&self.rule, study);
        self.current()
            .infer_relative_search_space(study, trial_number)
    }

    fn sample_relative(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
        space: &SearchSpace,
    ) -> BTreeMap<String, f64> {
        self.current().sample_relative(study, trial_number, space)
    }

    fn sample_independent(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
        name: &str,
        distribution: &Distribution,
    ) -> f64 {
        self.current()
            .sample_independent(study, trial_number, name, distribution)
    }

    /// NSGA-II's generation: its own while it samples, 0 for every trial
    /// the GP or TPE samples on several objectives (so NSGA-II starts from
    /// them).
    fn system_attrs(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
    ) -> BTreeMap<String, serde_json::Value> {
        match self.pick {
            AutoPick::NsgaII => self.nsga2.system_attrs(study, trial_number),
            _ if study.is_multi_objective() => {
                BTreeMap::from([(GENERATION_KEY.to_string(), 0.into())])
            }
            _ => BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trial::{FrozenTrial, Param, StudyDirection};

    fn complete(n: u64) -> Vec<FrozenTrial> {
        (0..n)
            .map(|i| {
                let mut t = FrozenTrial::new(i);
                t.state = TrialState::Complete;
                t.values = Some(vec![i as f64, -(i as f64)]);
                t
            })
            .collect()
    }

    #[test]
    fn several_objectives_use_gp_then_tpe_then_nsga2() {
        let rule = AutoConfig {
            min_gp_trials_multi_objective: 3,
            max_gp_trials_multi_objective: 3,
            nsga2_after: 5,
            ..AutoConfig::default()
        };
        let two = [StudyDirection::Minimize, StudyDirection::Maximize];
        let mut sampler = AutoSampler::new(rule, GpConfig::default(), TpeConfig::default());
        let generation_0 = BTreeMap::from([(GENERATION_KEY.to_string(), 0.into())]);
        for (n, pick) in [(2, AutoPick::Gp), (4, AutoPick::Tpe), (5, AutoPick::NsgaII)] {
            let trials = complete(n);
            let view = StudyView::with_directions("s", &two, &trials);
            assert_eq!(AutoSampler::picks(&rule, &view), pick, "{n} trials");
            sampler.infer_relative_search_space(&view, n);
            assert_eq!(sampler.last_pick(), pick);
            if pick != AutoPick::NsgaII {
                assert_eq!(
                    sampler.system_attrs(&view, n),
                    generation_0,
                    "a {pick:?} trial is NSGA-II's generation 0"
                );
            }
        }
        // One objective never leaves GP/TPE, however many trials.
        let one = [StudyDirection::Minimize];
        let trials = complete(5);
        let view = StudyView::with_directions("s", &one, &trials);
        let rule = AutoConfig {
            nsga2_after: 5,
            ..AutoConfig::default()
        };
        assert_eq!(AutoSampler::picks(&rule, &view), AutoPick::Gp);
        let mut sampler = AutoSampler::new(rule, GpConfig::default(), TpeConfig::default());
        sampler.infer_relative_search_space(&view, 5);
        assert!(sampler.system_attrs(&view, 5).is_empty());
    }

    #[test]
    fn several_objectives_keep_the_gp_longer_on_more_parameters() {
        let rule = AutoConfig::default();
        let handover: Vec<usize> = [1, 2, 3, 5, 10, 12, 40]
            .iter()
            .map(|&d| rule.gp_trials_multi_objective(d))
            .collect();
        assert_eq!(handover, [100, 100, 100, 150, 300, 300, 300]);
        // The space is what the finished trials hold.
        let two = [StudyDirection::Minimize, StudyDirection::Minimize];
        let float = Distribution::Float {
            low: 0.0,
            high: 1.0,
            log: false,
            step: None,
        };
        let with_params = |n: u64, d: usize| -> Vec<FrozenTrial> {
            let mut trials = complete(n);
            for t in &mut trials {
                for i in 0..d {
                    let param = Param {
                        distribution: float.clone(),
                        internal: 0.5,
                    };
                    t.params.insert(format!("x{i}"), param);
                }
            }
            trials
        };
        for (n, d, gp) in [
            (120, 2, false),
            (120, 5, true),
            (160, 5, false),
            (299, 10, true),
        ] {
            let trials = with_params(n, d);
            let view = StudyView::with_directions("s", &two, &trials);
            assert_eq!(
                AutoSampler::picks_gp(&rule, &view),
                gp,
                "{n} trials of {d} parameters"
            );
        }
    }
}
