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
    /// Whether the history passed [`StudyView::check`] (done before the
    /// sampler first reads it, so `new` stays infallible).
    history_checked: bool,
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
            history_checked: false,
        }
    }

    /// Refuses a history the samplers cannot rely on ([`StudyView::check`]:
    /// a value that is not a finite number or a categorical index out of
    /// range, a NaN value or constraint, two trials of one number), once
    /// per trial; [`Trial::suggest`] calls it before sampling.
    pub fn check_history(&mut self) -> Result<()> {
        if !self.history_checked {
            match self.sampler.checked_trials() {
                Some(checked) => checked.check(&self.study)?,
                None => self.study.check()?,
            }
            self.history_checked = true;
        }
        Ok(())
    }

    /// The trial's number in its study (Optuna's `trial.number`).
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
        self.check_history()?;
        let internal = if distribution.single() {
            distribution.single_value()
        } else {
            distribution.check_drawable().map_err(|e| named(e, name))?;
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
        // As Optuna's `_is_relative_param`: a range or step that changed
        // since the history (memtune's depend on the model) takes the joint
        // value if it contains it, else draws independently. An
        // incompatible one (another kind, log or choices), which Optuna
        // raises on, draws independently too ([`ask`] refuses one the
        // history contradicts).
        if !space.get(name)?.compatible_with(distribution) {
            return None;
        }
        values
            .get(name)
            .copied()
            .filter(|v| distribution.contains(*v))
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
    trial.check_history()?;
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

    fn finished(number: u64, name: &str, d: &Distribution, internal: f64) -> FrozenTrial {
        let mut t = holding(number, name, d);
        t.params.get_mut(name).expect("held").internal = internal;
        t.state = crate::TrialState::Complete;
        t.values = Some(vec![number as f64]);
        t
    }

    /// A float range whose span overflows is read (Optuna stores it) but
    /// an ask from it is an error naming the parameter, from every sampler.
    #[test]
    fn a_range_wider_than_floats_is_not_drawn_from() {
        use crate::{GpSampler, RandomSampler, StudyDirection, TpeSampler};
        let wide = Distribution::float(-1e308, 1e308, false, None).unwrap();
        let space = SearchSpace::from([("y".to_string(), wide)]);
        let view = StudyView::new("s", StudyDirection::Minimize, &[]);
        let samplers: [Box<dyn Sampler>; 3] = [
            Box::new(RandomSampler::new(Some(0))),
            Box::new(TpeSampler::with_seed(0)),
            Box::new(GpSampler::new(crate::GpConfig::default())),
        ];
        for mut sampler in samplers {
            let e = ask(sampler.as_mut(), view, 0, &space).unwrap_err();
            assert!(
                e.to_string().contains("`y`") || e.to_string().contains("'y'"),
                "{e}"
            );
            assert!(e.to_string().contains("high - low"), "{e}");
        }
    }

    /// A stored value the samplers cannot use (a categorical index out of
    /// range, NaN, a NaN value or constraint, a number two trials share)
    /// is an error naming the trial
    /// and what is wrong, from `ask` and from a `Trial`, never a panic or
    /// a NaN suggestion.
    #[test]
    fn a_history_the_samplers_cannot_use_is_refused() {
        use crate::{StudyDirection, TpeSampler};
        let choice = |s: &str| CategoricalChoice::Str(s.into());
        let cat = Distribution::categorical(vec![choice("a"), choice("b"), choice("c")]).unwrap();
        let x = Distribution::float(0.0, 1.0, false, None).unwrap();
        let space = SearchSpace::from([("c".to_string(), cat.clone())]);
        let xspace = SearchSpace::from([("x".to_string(), x.clone())]);
        let good = |n| finished(n, "c", &cat, (n % 3) as f64);
        let mut cases: Vec<(Vec<FrozenTrial>, &SearchSpace, &str)> = Vec::new();
        for bad in [5.0, 3.0, f64::NAN] {
            let mut trials: Vec<FrozenTrial> = (0..12).map(good).collect();
            trials[4] = finished(4, "c", &cat, bad);
            cases.push((trials, &space, "`c`"));
        }
        let mut trials: Vec<FrozenTrial> = (0..12).map(|n| finished(n, "x", &x, 0.5)).collect();
        trials[6].params.get_mut("x").unwrap().internal = f64::NAN;
        cases.push((trials, &xspace, "`x`"));
        let mut trials: Vec<FrozenTrial> = (0..12).map(|n| finished(n, "x", &x, 0.5)).collect();
        trials[7].values = Some(vec![f64::NAN]);
        cases.push((trials, &xspace, "NaN"));
        let mut trials: Vec<FrozenTrial> = (0..12).map(|n| finished(n, "x", &x, 0.5)).collect();
        trials[8]
            .system_attrs
            .insert(crate::CONSTRAINTS_KEY.into(), serde_json::json!(["NaN"]));
        cases.push((trials, &xspace, "constraints"));
        // Two trials of one number, in number order and not.
        let mut trials: Vec<FrozenTrial> = (0..12).map(|n| finished(n, "x", &x, 0.5)).collect();
        trials[5].number = 4;
        cases.push((trials.clone(), &xspace, "trial 4: two trials"));
        trials.swap(1, 9);
        cases.push((trials, &xspace, "trial 4: two trials"));
        for (trials, space, what) in &cases {
            let view = StudyView::new("s", StudyDirection::Minimize, trials);
            let e = ask(&mut TpeSampler::with_seed(0), view, 12, space)
                .unwrap_err()
                .to_string();
            assert!(e.contains("trial ") && e.contains(what), "{e}");
            let mut sampler = TpeSampler::with_seed(0);
            let mut trial = Trial::new(&mut sampler, view, 12);
            let (name, d) = space.iter().next().unwrap();
            assert!(trial.suggest(name, d).is_err(), "{what}");
        }
    }

    /// A number outside its distribution, as Optuna stores an enqueued
    /// value it ran with a warning (5.0 for a float in [0, 1], 2.5 for an
    /// int), is read by every sampler as a parameter the trial does not
    /// have: each asks a value in the distribution. NSGA-II would
    /// otherwise copy a parent's value into the child.
    #[test]
    fn a_number_outside_its_distribution_is_read_as_missing() {
        use crate::{
            GpSampler, NsgaIIConfig, NsgaIISampler, RandomSampler, StudyDirection, TpeSampler,
        };
        let x = Distribution::float(0.0, 1.0, false, None).unwrap();
        let k = Distribution::int(0, 3, false, 1).unwrap();
        let space = SearchSpace::from([("x".to_string(), x.clone()), ("k".to_string(), k.clone())]);
        let dirs = [StudyDirection::Minimize; 2];
        let mut trials: Vec<FrozenTrial> = (0..30)
            .map(|n| {
                let mut t = finished(n, "x", &x, (n % 10) as f64 / 10.0);
                let internal = (n % 4) as f64;
                let param = Param {
                    distribution: k.clone(),
                    internal,
                };
                t.params.insert("k".into(), param);
                t
            })
            .collect();
        for t in &mut trials {
            t.values = Some(vec![t.number as f64, 30.0 - t.number as f64]);
        }
        trials[0].params.get_mut("x").unwrap().internal = 5.0;
        trials[1].params.get_mut("k").unwrap().internal = 2.5;
        trials[2].params.get_mut("x").unwrap().internal = -7.0;
        for n in 0..30 {
            let view = StudyView::with_directions("s", &dirs, &trials[..n]);
            let samplers: [Box<dyn Sampler>; 4] = [
                Box::new(RandomSampler::new(Some(n as u64))),
                Box::new(TpeSampler::with_seed(n as u64)),
                Box::new(GpSampler::new(crate::GpConfig {
                    seed: Some(n as u64),
                    ..crate::GpConfig::default()
                })),
                Box::new(NsgaIISampler::new(NsgaIIConfig {
                    population_size: 2,
                    seed: Some(n as u64),
                    ..NsgaIIConfig::default()
                })),
            ];
            for mut sampler in samplers {
                let params = ask(sampler.as_mut(), view, n as u64, &space).unwrap();
                assert!(x.contains(params["x"].internal), "{n}: {params:?}");
                assert!(k.contains(params["k"].internal), "{n}: {params:?}");
            }
        }
    }

    /// A range that changed since the history (memtune's ranges depend on
    /// the model) still takes the joint values it contains, as Optuna's
    /// `_is_relative_param` does: without mutation NSGA-II's children of
    /// x in [0, 1] asked in [0, 2] copy a parent's x. Asked in [0, 0.3],
    /// the parents' x above it are drawn in the range instead.
    #[test]
    fn a_changed_range_takes_the_joint_values_it_contains() {
        use crate::sampler::nsga2::GENERATION_KEY;
        use crate::{NsgaIIConfig, NsgaIISampler, StudyDirection};
        let dirs = [StudyDirection::Minimize; 2];
        let unit = Distribution::float(0.0, 1.0, false, None).unwrap();
        let xs = [0.11, 0.22, 0.33, 0.44];
        let trials: Vec<FrozenTrial> = (0..4)
            .map(|n| {
                let mut t = finished(n as u64, "x", &unit, xs[n]);
                t.values = Some(vec![xs[n], 1.0 - xs[n]]);
                t.system_attrs.insert(GENERATION_KEY.into(), 0.into());
                t
            })
            .collect();
        let view = StudyView::with_directions("s", &dirs, &trials);
        let asks = |high: f64| -> Vec<f64> {
            let mut sampler = NsgaIISampler::new(NsgaIIConfig {
                population_size: 4,
                mutation_prob: Some(0.0),
                seed: Some(1),
                ..NsgaIIConfig::default()
            });
            let d = Distribution::float(0.0, high, false, None).unwrap();
            let space = SearchSpace::from([("x".to_string(), d)]);
            (4..34)
                .map(|n| ask(&mut sampler, view, n, &space).unwrap()["x"].internal)
                .collect()
        };
        for x in asks(2.0) {
            assert!(xs.contains(&x), "{x}");
        }
        let narrow = asks(0.3);
        assert!(narrow.iter().all(|x| (0.0..=0.3).contains(x)), "{narrow:?}");
        assert!(narrow.iter().any(|x| xs.contains(x)), "{narrow:?}");
        assert!(narrow.iter().any(|x| !xs.contains(x)), "{narrow:?}");
        // Another kind is drawn independently, not refused, by a `Trial`.
        let mut sampler = NsgaIISampler::new(NsgaIIConfig {
            population_size: 4,
            seed: Some(1),
            ..NsgaIIConfig::default()
        });
        let k = Trial::new(&mut sampler, view, 4).suggest_int("x", 0, 3);
        assert!(matches!(k, Ok(0..=3)), "{k:?}");
    }

    /// A long-lived sampler checks a finished trial once, and again when
    /// it changed.
    #[test]
    fn checked_trials_recheck_a_changed_trial() {
        use crate::{CheckedTrials, StudyDirection};
        let x = Distribution::float(0.0, 1.0, false, None).unwrap();
        let mut trials: Vec<FrozenTrial> = (0..5).map(|n| finished(n, "x", &x, 0.5)).collect();
        let mut checked = CheckedTrials::default();
        checked
            .check(&StudyView::new("s", StudyDirection::Minimize, &trials))
            .unwrap();
        trials[3].values = Some(vec![f64::NAN]);
        let e = checked
            .check(&StudyView::new("s", StudyDirection::Minimize, &trials))
            .unwrap_err();
        assert!(e.to_string().contains("trial 3"), "{e}");
        // A sliding history (the oldest trial gone) still matches.
        trials[3].values = Some(vec![1.0]);
        checked
            .check(&StudyView::new("s", StudyDirection::Minimize, &trials[1..]))
            .unwrap();
        trials[4].system_attrs.insert(
            crate::CONSTRAINTS_KEY.into(),
            serde_json::json!([f64::NAN.to_string()]),
        );
        assert!(
            checked
                .check(&StudyView::new("s", StudyDirection::Minimize, &trials[1..]))
                .is_err()
        );
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
