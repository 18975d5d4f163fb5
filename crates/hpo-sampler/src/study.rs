//! An in-memory study: the ask/report/tell loop over a sampler and a
//! pruner, for callers that keep their trials in memory (tests, notebooks,
//! a process that owns the whole study). Callers that persist trials build a
//! [`StudyView`] from their own storage and call [`crate::ask()`] and
//! [`Pruner::prune`] directly, as this type does.

use crate::{
    Distribution, Error, FrozenTrial, ParamValue, Pruner, Result, Sampler, SearchSpace,
    StudyDirection, StudyView, TrialState,
};
use std::collections::BTreeMap;

/// A study held in memory, trials numbered from 0.
pub struct Study<S, P> {
    name: String,
    direction: StudyDirection,
    /// Every objective's direction when there are several (else empty).
    directions: Vec<StudyDirection>,
    sampler: S,
    pruner: P,
    trials: Vec<FrozenTrial>,
}

impl<S: Sampler, P: Pruner> Study<S, P> {
    /// A study of one objective (Optuna's `create_study(direction=...)`).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for [`StudyDirection::NotSet`], which only
    /// old storages hold: a new study minimises or maximises.
    pub fn new(
        name: impl Into<String>,
        direction: StudyDirection,
        sampler: S,
        pruner: P,
    ) -> Result<Self> {
        check_direction(direction)?;
        Ok(Study {
            name: name.into(),
            direction,
            directions: Vec::new(),
            sampler,
            pruner,
            trials: Vec::new(),
        })
    }

    /// A study of several objectives (Optuna's `create_study(directions=...)`),
    /// told with [`Study::tell_values`].
    ///
    /// ```
    /// use hpo_sampler::study::space_of;
    /// use hpo_sampler::{Distribution, NopPruner, Study, StudyDirection, TpeSampler, TrialState};
    ///
    /// # fn main() -> hpo_sampler::Result<()> {
    /// let directions = vec![StudyDirection::Minimize; 2];
    /// let mut study = Study::with_directions("front", directions, TpeSampler::with_seed(1), NopPruner)?;
    /// let space = space_of("x", Distribution::float(0.0, 1.0, false, None)?);
    /// for _ in 0..30 {
    ///     let n = study.ask(&space)?;
    ///     let x = study.param(n, "x")?.as_f64().unwrap();
    ///     study.tell_values(n, TrialState::Complete, Some(vec![x, (1.0 - x).powi(2)]))?;
    /// }
    /// // Every trial lies on this problem's front.
    /// assert_eq!(study.best_trials().len(), 30);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for no directions (Optuna: "The number of
    /// objectives must be greater than 0") or a [`StudyDirection::NotSet`].
    pub fn with_directions(
        name: impl Into<String>,
        directions: Vec<StudyDirection>,
        sampler: S,
        pruner: P,
    ) -> Result<Self> {
        let Some(&first) = directions.first() else {
            return Err(Error::InvalidOption {
                option: "directions".into(),
                reason: "the number of objectives must be greater than 0".into(),
            });
        };
        for &d in &directions {
            check_direction(d)?;
        }
        let mut study = Study::new(name, first, sampler, pruner)?;
        if directions.len() > 1 {
            study.directions = directions;
        }
        Ok(study)
    }

    fn view(&self) -> StudyView<'_> {
        StudyView {
            name: &self.name,
            direction: self.direction,
            directions: &self.directions,
            trials: &self.trials,
        }
    }

    /// Start a trial with every parameter of `space` sampled (Optuna's
    /// `study.ask(fixed_distributions)`); it stays RUNNING until told.
    /// Returns its number.
    pub fn ask(&mut self, space: &SearchSpace) -> Result<u64> {
        let number = self.trials.len() as u64;
        let view = StudyView {
            name: &self.name,
            direction: self.direction,
            directions: &self.directions,
            trials: &self.trials,
        };
        let params = crate::ask(&mut self.sampler, view, number, space)?;
        let system_attrs = self.sampler.system_attrs(&view, number);
        let mut trial = FrozenTrial::new(number);
        trial.params = params;
        trial.system_attrs = system_attrs.into_iter().collect();
        self.trials.push(trial);
        Ok(number)
    }

    /// The external value of parameter `name` of trial `number`.
    pub fn param(&self, number: u64, name: &str) -> Result<ParamValue> {
        let trial = self.trial(number)?;
        trial
            .params
            .get(name)
            .map(|p| p.value())
            .ok_or_else(|| told(number, &format!("no parameter `{name}`")))
    }

    /// Record `value` at `step` of a RUNNING trial and ask the pruner;
    /// `true` means stop the trial and tell it [`TrialState::Pruned`].
    /// A step already reported keeps its first value, as in Optuna (which
    /// warns).
    ///
    /// # Errors
    /// A trial that is not RUNNING, a negative step, or a study of several
    /// objectives (Optuna's `Trial.report` supports one objective only).
    pub fn report(&mut self, number: u64, step: i64, value: f64) -> Result<bool> {
        let index = self.running(number)?;
        if !self.directions.is_empty() {
            return Err(told(
                number,
                "intermediate values are not supported for a study of several objectives",
            ));
        }
        if step < 0 {
            return Err(told(number, &format!("step {step} cannot be negative")));
        }
        self.trials[index]
            .intermediate_values
            .entry(step)
            .or_insert(value);
        let view = StudyView {
            name: &self.name,
            direction: self.direction,
            directions: &self.directions,
            trials: &self.trials,
        };
        let decision = self.pruner.prune(&view, &self.trials[index]);
        for (key, value) in decision.system_attrs {
            self.trials[index].system_attrs.insert(key, value.into());
        }
        Ok(decision.prune)
    }

    /// Finish a RUNNING trial. A COMPLETE trial needs its objective value;
    /// a PRUNED or FAIL one is told none, and a PRUNED one keeps its last
    /// reported value unless that is NaN, as Optuna does.
    pub fn tell(&mut self, number: u64, state: TrialState, value: Option<f64>) -> Result<()> {
        if !self.directions.is_empty() {
            return Err(told(number, "a study of several objectives is told values"));
        }
        let index = self.running(number)?;
        let trial = &mut self.trials[index];
        let value = match (state, value) {
            (TrialState::Complete, None) => {
                return Err(told(number, "a COMPLETE trial needs a value"));
            }
            (TrialState::Pruned | TrialState::Fail, Some(_)) => {
                return Err(told(number, NO_VALUES_UNLESS_COMPLETE));
            }
            (TrialState::Pruned, None) => trial
                .last_step()
                .and_then(|s| trial.intermediate_values.get(&s).copied())
                .filter(|v| !v.is_nan()),
            (TrialState::Running | TrialState::Waiting, _) => {
                return Err(told(number, "a trial can only be told a finished state"));
            }
            (_, value) => value,
        };
        if value.is_some_and(f64::is_nan) && state == TrialState::Complete {
            return Err(told(number, "a COMPLETE trial's value must not be NaN"));
        }
        trial.state = state;
        trial.values = value.map(|v| vec![v]);
        Ok(())
    }

    /// Finish a RUNNING trial of any study with one value per objective
    /// (a COMPLETE trial needs them, none NaN; infinities are kept, as Optuna
    /// keeps them).
    pub fn tell_values(
        &mut self,
        number: u64,
        state: TrialState,
        values: Option<Vec<f64>>,
    ) -> Result<()> {
        let index = self.running(number)?;
        let objectives = self.view().objectives().len();
        match (state, &values) {
            (TrialState::Running | TrialState::Waiting, _) => {
                return Err(told(number, "a trial can only be told a finished state"));
            }
            (TrialState::Complete, None) => {
                return Err(told(number, "a COMPLETE trial needs its values"));
            }
            (TrialState::Pruned | TrialState::Fail, Some(_)) => {
                return Err(told(number, NO_VALUES_UNLESS_COMPLETE));
            }
            (_, Some(v)) if v.len() != objectives => {
                return Err(told(
                    number,
                    &format!("{} values for {objectives} objectives", v.len()),
                ));
            }
            (TrialState::Complete, Some(v)) if v.iter().any(|x| x.is_nan()) => {
                return Err(told(number, "a COMPLETE trial's values must not be NaN"));
            }
            _ => {}
        }
        let trial = &mut self.trials[index];
        trial.state = state;
        trial.values = values;
        Ok(())
    }

    /// The Pareto front of the COMPLETE trials (Optuna's
    /// `study.best_trials`: only feasible trials when any trial has
    /// constraints), in number order.
    pub fn best_trials(&self) -> Vec<&FrozenTrial> {
        let constrained = self.trials.iter().any(|t| t.has_constraints());
        crate::multi::pareto_front(&self.trials, self.view().objectives(), constrained)
    }

    /// Every trial, in number order.
    pub fn trials(&self) -> &[FrozenTrial] {
        &self.trials
    }

    /// Trial `number`.
    pub fn trial(&self, number: u64) -> Result<&FrozenTrial> {
        self.trials
            .get(number as usize)
            .ok_or_else(|| told(number, "no such trial"))
    }

    /// The COMPLETE trial with the best value (the lowest number among equals).
    pub fn best_trial(&self) -> Option<&FrozenTrial> {
        self.direction.best_trial(&self.trials)
    }

    fn running(&self, number: u64) -> Result<usize> {
        let trial = self.trial(number)?;
        if trial.state != TrialState::Running {
            return Err(told(
                number,
                &format!("the trial is already {:?}", trial.state),
            ));
        }
        Ok(number as usize)
    }
}

const NO_VALUES_UNLESS_COMPLETE: &str = "values are told only with COMPLETE, not PRUNED or FAIL";

fn check_direction(direction: StudyDirection) -> Result<()> {
    if direction == StudyDirection::NotSet {
        return Err(Error::InvalidOption {
            option: "direction".into(),
            reason: "a study minimises or maximises (NOT_SET is only read from old storages)"
                .into(),
        });
    }
    Ok(())
}

fn told(number: u64, reason: &str) -> Error {
    Error::Trial {
        number,
        reason: reason.to_string(),
    }
}

/// A one-parameter search space, the common case in examples and tests.
pub fn space_of(name: &str, distribution: Distribution) -> SearchSpace {
    BTreeMap::from([(name.to_string(), distribution)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MedianPruner, NopPruner, RandomSampler};

    fn x_space() -> SearchSpace {
        space_of("x", Distribution::float(-1.0, 1.0, false, None).unwrap())
    }

    #[test]
    fn tell_refuses_what_optuna_refuses() {
        let mut study = Study::new(
            "t",
            StudyDirection::Minimize,
            RandomSampler::new(Some(1)),
            NopPruner,
        )
        .unwrap();
        let n = study.ask(&x_space()).unwrap();
        assert!(study.tell(n, TrialState::Complete, None).is_err());
        assert!(study.tell(n, TrialState::Complete, Some(f64::NAN)).is_err());
        assert!(study.tell(n, TrialState::Running, Some(1.0)).is_err());
        study.tell(n, TrialState::Complete, Some(0.5)).unwrap();
        assert!(
            study.tell(n, TrialState::Complete, Some(0.5)).is_err(),
            "told twice"
        );
        // Optuna refuses NaN alone (`_check_values_are_feasible`).
        let m = study.ask(&x_space()).unwrap();
        study
            .tell(m, TrialState::Complete, Some(f64::INFINITY))
            .unwrap();
        assert_eq!(study.trial(m).unwrap().values, Some(vec![f64::INFINITY]));
        assert!(study.report(n, 0, 1.0).is_err(), "reported after the end");
        assert!(
            study.tell(7, TrialState::Fail, None).is_err(),
            "no such trial"
        );
    }

    /// Optuna's `create_study`, `Trial.report` and `tell` refuse these.
    #[test]
    fn study_calls_optuna_refuses_are_errors() {
        let random = || RandomSampler::new(Some(1));
        assert!(Study::new("t", StudyDirection::NotSet, random(), NopPruner).is_err());
        assert!(Study::with_directions("t", vec![], random(), NopPruner).is_err());
        let two = vec![StudyDirection::Minimize, StudyDirection::NotSet];
        assert!(Study::with_directions("t", two, random(), NopPruner).is_err());

        let mut study = Study::new("t", StudyDirection::Minimize, random(), NopPruner).unwrap();
        let n = study.ask(&x_space()).unwrap();
        assert!(study.report(n, -1, 1.0).is_err(), "negative step");
        study.report(n, 0, 1.0).unwrap();
        study.report(n, 0, 2.0).unwrap();
        assert_eq!(
            study.trial(n).unwrap().intermediate_values[&0],
            1.0,
            "first kept"
        );
        assert!(study.tell(n, TrialState::Pruned, Some(1.0)).is_err());
        assert!(study.tell(n, TrialState::Fail, Some(1.0)).is_err());
        study.tell(n, TrialState::Pruned, None).unwrap();
        assert_eq!(study.trial(n).unwrap().values, Some(vec![1.0]));

        let m = study.ask(&x_space()).unwrap();
        study.report(m, 0, f64::NAN).unwrap();
        study.tell(m, TrialState::Pruned, None).unwrap();
        assert_eq!(
            study.trial(m).unwrap().values,
            None,
            "a NaN report is no value"
        );

        let two = vec![StudyDirection::Minimize, StudyDirection::Maximize];
        let mut multi = Study::with_directions("m", two, random(), NopPruner).unwrap();
        let k = multi.ask(&x_space()).unwrap();
        assert!(
            multi.report(k, 0, 1.0).is_err(),
            "report with several objectives"
        );
        assert!(
            multi
                .tell_values(k, TrialState::Fail, Some(vec![1.0, 2.0]))
                .is_err()
        );
        multi.tell_values(k, TrialState::Fail, None).unwrap();
    }

    /// A distribution built from its fields, unchecked, is refused with
    /// the parameter's name by every sampler, never a panic.
    #[test]
    fn a_distribution_built_unchecked_is_refused() {
        use crate::{GpConfig, GpSampler, Sampler, TpeConfig, TpeSampler};
        let bad = crate::distribution::unchecked_bad_distributions();
        fn refused<S: Sampler>(sampler: S, d: &Distribution) {
            let mut study = Study::new("t", StudyDirection::Minimize, sampler, NopPruner).unwrap();
            let e = study.ask(&space_of("x", d.clone())).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidDistribution { param, .. } if param == "x"),
                "{d:?}: {e}"
            );
        }
        for d in bad {
            refused(RandomSampler::new(Some(1)), &d);
            refused(TpeSampler::new(TpeConfig::default()), &d);
            refused(GpSampler::new(GpConfig::default()), &d);
            let mut t = FrozenTrial::new(2);
            t.params.insert(
                "x".into(),
                crate::Param {
                    distribution: d.clone(),
                    internal: 0.0,
                },
            );
            let e = t.check().unwrap_err().to_string();
            assert!(e.contains("trial 2") && e.contains("`x`"), "{d:?}: {e}");
        }
    }

    #[test]
    fn a_pruned_trial_keeps_its_last_report_and_the_best_is_complete() {
        let mut study = Study::new(
            "t",
            StudyDirection::Maximize,
            RandomSampler::new(Some(2)),
            MedianPruner::default(),
        )
        .unwrap();
        let a = study.ask(&x_space()).unwrap();
        study.report(a, 0, 0.25).unwrap();
        study.report(a, 1, 0.75).unwrap();
        study.tell(a, TrialState::Pruned, None).unwrap();
        assert_eq!(study.trial(a).unwrap().value(), Some(0.75));
        let b = study.ask(&x_space()).unwrap();
        study.tell(b, TrialState::Complete, Some(0.5)).unwrap();
        let c = study.ask(&x_space()).unwrap();
        study.tell(c, TrialState::Complete, Some(0.5)).unwrap();
        assert_eq!(
            study.best_trial().unwrap().number,
            b,
            "pruned never best, ties to the first"
        );
    }
}
