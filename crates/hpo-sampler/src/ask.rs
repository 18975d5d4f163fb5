//! Asking for parameters: a define-by-run [`Trial`] (Optuna's
//! `trial.suggest_*`, so a parameter may exist only when another has some
//! value) and [`ask`] for a fixed search space (what `optuna ask
//! --search-space` does).

use crate::distribution::{CategoricalChoice, Distribution, ParamValue};
use crate::error::{Error, Result};
use crate::sampler::Sampler;
use crate::trial::{FrozenTrial, Param, SearchSpace, StudyView};
use std::collections::BTreeMap;

/// A trial being defined: suggest parameters one by one. The relative
/// (jointly sampled) values are drawn lazily at the first suggestion, as
/// Optuna does.
pub struct Trial<'s, S: Sampler + ?Sized> {
    sampler: &'s mut S,
    study: StudyView<'s>,
    number: u64,
    relative: Option<(SearchSpace, BTreeMap<String, f64>)>,
    params: BTreeMap<String, Param>,
}

impl<'s, S: Sampler + ?Sized> Trial<'s, S> {
    /// Trial `number` of `study` (its history excludes or includes this
    /// trial as RUNNING; the sampler skips it either way).
    pub fn new(sampler: &'s mut S, study: StudyView<'s>, number: u64) -> Self {
        sampler.before_trial(&study, number);
        Trial {
            sampler,
            study,
            number,
            relative: None,
            params: BTreeMap::new(),
        }
    }

    pub fn number(&self) -> u64 {
        self.number
    }

    /// The parameters suggested so far.
    pub fn params(&self) -> &BTreeMap<String, Param> {
        &self.params
    }

    /// The suggested parameters, to store with the trial.
    pub fn into_params(self) -> BTreeMap<String, Param> {
        self.params
    }

    /// Suggest a value of `name` from `distribution`, in external form.
    pub fn suggest(&mut self, name: &str, distribution: &Distribution) -> Result<ParamValue> {
        distribution.validate().map_err(|e| named(e, name))?;
        if let Some(p) = self.params.get(name) {
            if !p.distribution.compatible_with(distribution) {
                return Err(Error::IncompatibleDistribution {
                    param: name.to_string(),
                    previous: p.distribution.to_string(),
                    requested: distribution.to_string(),
                });
            }
            // Optuna returns the value already chosen for this trial.
            return Ok(p.value());
        }
        // A sampler's bad option is refused before it draws, and what a
        // user function of it returned, once it has drawn.
        self.sampler.check()?;
        let internal = if distribution.single() {
            distribution.single_value()
        } else {
            let internal = self.relative_value(name, distribution).unwrap_or_else(|| {
                self.sampler
                    .sample_independent(&self.study, self.number, name, distribution)
            });
            self.sampler.check()?;
            internal
        };
        let param = Param {
            distribution: distribution.clone(),
            internal,
        };
        let value = param.value();
        self.params.insert(name.to_string(), param);
        Ok(value)
    }

    fn relative_value(&mut self, name: &str, distribution: &Distribution) -> Option<f64> {
        if self.relative.is_none() {
            let space = self
                .sampler
                .infer_relative_search_space(&self.study, self.number);
            let values = self
                .sampler
                .sample_relative(&self.study, self.number, &space);
            self.relative = Some((space, values));
        }
        let (space, values) = self.relative.as_ref().expect("just set");
        if space.get(name) != Some(distribution) {
            return None;
        }
        values.get(name).copied()
    }

    /// `suggest_float(name, low, high)`.
    pub fn suggest_float(&mut self, name: &str, low: f64, high: f64) -> Result<f64> {
        self.suggest_float_with(name, low, high, false, None)
    }

    /// `suggest_float(name, low, high, log=.., step=..)`.
    pub fn suggest_float_with(
        &mut self,
        name: &str,
        low: f64,
        high: f64,
        log: bool,
        step: Option<f64>,
    ) -> Result<f64> {
        let d = Distribution::float(low, high, log, step).map_err(|e| named(e, name))?;
        match self.suggest(name, &d)? {
            ParamValue::Float(v) => Ok(v),
            other => Ok(other.as_f64().unwrap_or(f64::NAN)),
        }
    }

    /// `suggest_int(name, low, high)`.
    pub fn suggest_int(&mut self, name: &str, low: i64, high: i64) -> Result<i64> {
        self.suggest_int_with(name, low, high, false, 1)
    }

    /// `suggest_int(name, low, high, log=.., step=..)`.
    pub fn suggest_int_with(
        &mut self,
        name: &str,
        low: i64,
        high: i64,
        log: bool,
        step: i64,
    ) -> Result<i64> {
        let d = Distribution::int(low, high, log, step).map_err(|e| named(e, name))?;
        match self.suggest(name, &d)? {
            ParamValue::Int(v) => Ok(v),
            other => Ok(other.as_f64().unwrap_or(0.0) as i64),
        }
    }

    /// `suggest_categorical(name, choices)`.
    pub fn suggest_categorical(
        &mut self,
        name: &str,
        choices: &[CategoricalChoice],
    ) -> Result<ParamValue> {
        let d = Distribution::categorical(choices.to_vec()).map_err(|e| named(e, name))?;
        self.suggest(name, &d)
    }
}

fn named(e: Error, name: &str) -> Error {
    match e {
        Error::InvalidDistribution { reason, .. } => Error::InvalidDistribution {
            param: name.to_string(),
            reason,
        },
        other => other,
    }
}

/// Sample every parameter of a fixed `space` for trial `number`
/// (Optuna's `study.ask(fixed_distributions)`).
pub fn ask<S: Sampler + ?Sized>(
    sampler: &mut S,
    study: StudyView<'_>,
    number: u64,
    space: &SearchSpace,
) -> Result<BTreeMap<String, Param>> {
    check_against_history(study.trials, space)?;
    let mut trial = Trial::new(sampler, study, number);
    for (name, d) in space {
        trial.suggest(name, d)?;
    }
    Ok(trial.into_params())
}

/// Refuses a search space the study's history contradicts, as Optuna's
/// storages do when a param is set: each distribution must be compatible
/// ([`Distribution::incompatibility`]) with the one the study's first trial
/// (lowest number) holding that param stored.
pub fn check_against_history(trials: &[FrozenTrial], space: &SearchSpace) -> Result<()> {
    let names: Vec<(&String, &Distribution)> = space.iter().collect();
    let mut first: Vec<Option<(u64, &Distribution)>> = vec![None; names.len()];
    // Histories come in number order, where the first trial holding every
    // param ends the scan (often trial 0); any order gives the same answer.
    let in_order = trials.windows(2).all(|w| w[0].number < w[1].number);
    let mut missing = names.len();
    for t in trials {
        for ((name, _), slot) in names.iter().zip(first.iter_mut()) {
            if in_order && slot.is_some() {
                continue;
            }
            if let Some(p) = t.params.get(*name)
                && slot.is_none_or(|(number, _)| t.number < number)
            {
                missing -= usize::from(slot.is_none());
                *slot = Some((t.number, &p.distribution));
            }
        }
        if in_order && missing == 0 {
            break;
        }
    }
    for ((name, requested), slot) in names.iter().zip(&first) {
        if let Some((trial, stored)) = slot
            && let Some(reason) = stored.incompatibility(requested)
        {
            return Err(Error::ConflictsWithHistory {
                param: (*name).clone(),
                conflict: format!(
                    "is stored with {stored} (trial {trial}) and cannot now use {requested}: {reason}"
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(number: u64, name: &str, d: &Distribution) -> FrozenTrial {
        let mut t = FrozenTrial::new(number);
        t.params.insert(
            name.into(),
            Param {
                distribution: d.clone(),
                internal: 0.0,
            },
        );
        t
    }

    #[test]
    fn a_conflict_names_the_first_trial_holding_the_param_in_any_history_order() {
        let narrow = Distribution::float(0.0, 1.0, false, None).unwrap();
        let int = Distribution::int(0, 3, false, 1).unwrap();
        let mut trials = vec![
            FrozenTrial::new(0),
            holding(1, "x", &int),
            holding(2, "x", &narrow),
            holding(3, "y", &narrow),
        ];
        let mut space = SearchSpace::new();
        space.insert("x".into(), narrow.clone());
        space.insert("y".into(), narrow.clone());
        for reversed in [false, true] {
            if reversed {
                trials.reverse();
            }
            match check_against_history(&trials, &space) {
                Err(Error::ConflictsWithHistory { param, conflict }) => {
                    assert_eq!(param, "x");
                    assert!(conflict.contains("(trial 1)"), "{conflict}");
                }
                other => panic!("reversed {reversed}: {other:?}"),
            }
        }
        // Compatible with every first holder: accepted; an unseen param too.
        space.insert("x".into(), int);
        space.insert("z".into(), narrow);
        assert!(check_against_history(&trials, &space).is_ok());
    }
}
