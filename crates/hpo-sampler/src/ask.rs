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
        let internal = if distribution.single() {
            distribution.single_value()
        } else {
            self.relative_value(name, distribution).unwrap_or_else(|| {
                self.sampler
                    .sample_independent(&self.study, self.number, name, distribution)
            })
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
    for (name, requested) in space {
        let first = trials
            .iter()
            .filter_map(|t| t.params.get(name).map(|p| (t.number, &p.distribution)))
            .min_by_key(|(number, _)| *number);
        if let Some((trial, stored)) = first
            && let Some(reason) = stored.incompatibility(requested)
        {
            return Err(Error::ConflictsWithHistory {
                param: name.clone(),
                conflict: format!(
                    "is stored with {stored} (trial {trial}) and cannot now use {requested}: {reason}"
                ),
            });
        }
    }
    Ok(())
}
