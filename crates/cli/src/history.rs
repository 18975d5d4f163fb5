//! The bridge from what the store keeps to what the sampler reads:
//! `store::FrozenTrial` (Optuna's rows: params as internal value plus
//! distribution JSON, attributes as JSON) becomes `hpo_sampler::FrozenTrial`;
//! a `store::Distribution` (read from Optuna's JSON by the store, which is
//! the one reader of it) becomes an `hpo_sampler::Distribution`, validated,
//! and its JSON values `ParamValue`s; and back, a sampled parameter's
//! distribution becomes the store's, whose JSON is the bytes Optuna writes.
//!
//! The two crates deliberately do not know each other; this module is the
//! only place their types meet. It converts, it does not sample or write.

use hpo_sampler::ParamValue;
use serde_json::Value as Json;
use std::collections::BTreeMap;

pub use hpo_sampler::CONSTRAINTS_KEY;

/// A stored trial that the sampler cannot read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HistoryError {
    #[error(
        "trial {number}, parameter `{param}`: stored distribution_json is not usable: {reason}"
    )]
    Distribution {
        number: i64,
        param: String,
        reason: String,
    },
    #[error("trial {number}, parameter `{param}`: {reason}")]
    Param {
        number: i64,
        param: String,
        reason: String,
    },
    #[error(
        "trial {number}: system attribute `{CONSTRAINTS_KEY}` must be a list of numbers, found {found}"
    )]
    Constraints { number: i64, found: String },
}

/// The sampler's view of a study direction (the first objective's; the
/// sampler is single-objective).
pub fn direction(d: store::StudyDirection) -> hpo_sampler::StudyDirection {
    match d {
        store::StudyDirection::Maximize => hpo_sampler::StudyDirection::Maximize,
        // NOT_SET is Optuna's placeholder; Optuna treats it as minimise.
        store::StudyDirection::Minimize | store::StudyDirection::NotSet => {
            hpo_sampler::StudyDirection::Minimize
        }
    }
}

/// The store's form of a sampled parameter's distribution.
pub fn stored_distribution(d: &hpo_sampler::Distribution) -> store::Distribution {
    match d {
        &hpo_sampler::Distribution::Float {
            low,
            high,
            log,
            step,
        } => store::Distribution::Float {
            low,
            high,
            log,
            step,
        },
        &hpo_sampler::Distribution::Int {
            low,
            high,
            log,
            step,
        } => store::Distribution::Int {
            low,
            high,
            log,
            step,
        },
        hpo_sampler::Distribution::Categorical { choices } => store::Distribution::Categorical {
            choices: choices.iter().map(value_json).collect(),
        },
    }
}

/// The sampler's form of a stored or given distribution, validated as
/// Optuna validates it (`low <= high`, a positive step, some choices...);
/// errors name `param`.
pub fn sampler_distribution(
    d: &store::Distribution,
    param: &str,
) -> Result<hpo_sampler::Distribution, hpo_sampler::Error> {
    let invalid = |reason: String| hpo_sampler::Error::InvalidDistribution {
        param: param.to_string(),
        reason,
    };
    let built = match d {
        &store::Distribution::Float {
            low,
            high,
            log,
            step,
        } => hpo_sampler::Distribution::float(low, high, log, step),
        &store::Distribution::Int {
            low,
            high,
            log,
            step,
        } => hpo_sampler::Distribution::int(low, high, log, step),
        store::Distribution::Categorical { choices } => {
            let choices = choices
                .iter()
                .enumerate()
                .map(|(i, c)| param_value(c).map_err(|e| invalid(format!("choices[{i}]: {e}"))))
                .collect::<Result<_, _>>()?;
            hpo_sampler::Distribution::categorical(choices)
        }
    };
    built.map_err(|e| match e {
        hpo_sampler::Error::InvalidDistribution { reason, .. } => invalid(reason),
        other => other,
    })
}

/// A search space as `optuna ask --search-space` takes it (Optuna's JSON
/// object of distributions by name), each distribution validated; errors
/// name the parameter and, for bad JSON, the field.
pub fn search_space(text: &str) -> Result<hpo_sampler::SearchSpace, String> {
    store::search_space_from_json(text)
        .map_err(|e| e.to_string())?
        .iter()
        .map(|(name, d)| {
            let d = sampler_distribution(d, name).map_err(|e| e.to_string())?;
            Ok((name.clone(), d))
        })
        .collect()
}

/// An external value as JSON (`null`, `true`, `3`, `0.5`, `"adam"`); a
/// non-finite float, which JSON cannot hold, is `null`.
pub fn value_json(v: &ParamValue) -> Json {
    match v {
        ParamValue::None => Json::Null,
        ParamValue::Bool(b) => Json::Bool(*b),
        ParamValue::Int(i) => Json::from(*i),
        ParamValue::Float(f) => serde_json::Number::from_f64(*f)
            .map(Json::Number)
            .unwrap_or(Json::Null),
        ParamValue::Str(s) => Json::String(s.clone()),
    }
}

/// An external value from JSON (a categorical choice, a fixed parameter's
/// value); lists and objects are not parameter values.
pub fn param_value(v: &Json) -> Result<ParamValue, String> {
    Ok(match v {
        Json::Null => ParamValue::None,
        Json::Bool(b) => ParamValue::Bool(*b),
        Json::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => ParamValue::Int(i),
            (None, Some(f)) => ParamValue::Float(f),
            (None, None) => return Err(format!("{n} is out of range")),
        },
        Json::String(s) => ParamValue::Str(s.clone()),
        Json::Array(_) | Json::Object(_) => {
            return Err(format!(
                "{v} is not a parameter value (null, a bool, a number or a string)"
            ));
        }
    })
}

pub fn state(s: store::TrialState) -> hpo_sampler::TrialState {
    match s {
        store::TrialState::Running => hpo_sampler::TrialState::Running,
        store::TrialState::Waiting => hpo_sampler::TrialState::Waiting,
        store::TrialState::Complete => hpo_sampler::TrialState::Complete,
        store::TrialState::Pruned => hpo_sampler::TrialState::Pruned,
        store::TrialState::Fail => hpo_sampler::TrialState::Fail,
    }
}

/// Convert one stored trial. Params are decoded from their
/// `distribution_json`; a stored internal value outside its distribution is
/// an error rather than something the sampler would silently model.
pub fn frozen_trial(t: &store::FrozenTrial) -> Result<hpo_sampler::FrozenTrial, HistoryError> {
    let mut params = BTreeMap::new();
    for p in &t.params {
        let unusable = |reason: String| HistoryError::Distribution {
            number: t.number,
            param: p.name.clone(),
            reason,
        };
        let stored = store::Distribution::from_json(&p.distribution_json)
            .map_err(|e| unusable(e.to_string()))?;
        let distribution =
            sampler_distribution(&stored, &p.name).map_err(|e| unusable(e.to_string()))?;
        if !distribution.contains(p.internal_value) {
            return Err(HistoryError::Param {
                number: t.number,
                param: p.name.clone(),
                reason: format!(
                    "stored value {} is outside {distribution}",
                    p.internal_value
                ),
            });
        }
        params.insert(
            p.name.clone(),
            hpo_sampler::Param {
                distribution,
                internal: p.internal_value,
            },
        );
    }
    let converted = hpo_sampler::FrozenTrial {
        number: t.number as u64,
        trial_id: t.trial_id,
        state: state(t.state),
        params,
        values: t.values.clone(),
        intermediate_values: t.intermediate_values.clone(),
        datetime_start: t.datetime_start.clone(),
        datetime_complete: t.datetime_complete.clone(),
        user_attrs: t.user_attrs.clone(),
        system_attrs: t.system_attrs.clone(),
    };
    converted.check().map_err(|_| HistoryError::Constraints {
        number: t.number,
        found: t.system_attrs[CONSTRAINTS_KEY].to_string(),
    })?;
    Ok(converted)
}

/// Convert a whole study history (in number order, as the store returns it).
pub fn frozen_trials(
    trials: &[store::FrozenTrial],
) -> Result<Vec<hpo_sampler::FrozenTrial>, HistoryError> {
    trials.iter().map(frozen_trial).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hpo_sampler::Distribution;
    use proptest::prelude::*;
    use serde_json::json;

    fn stored(params: Vec<store::Param>, sys: BTreeMap<String, Json>) -> store::FrozenTrial {
        store::FrozenTrial {
            trial_id: 7,
            study_id: 1,
            number: 3,
            state: store::TrialState::Pruned,
            values: Some(vec![0.5]),
            datetime_start: None,
            datetime_complete: None,
            params,
            intermediate_values: BTreeMap::from([(1, 0.9), (4, 0.7)]),
            user_attrs: BTreeMap::new(),
            system_attrs: sys,
            heartbeat: None,
        }
    }

    fn param(name: &str, v: f64, dist: &str) -> store::Param {
        store::Param {
            name: name.into(),
            internal_value: v,
            distribution_json: dist.into(),
        }
    }

    #[test]
    fn converts_params_states_values_and_constraints() {
        let t = stored(
            vec![
                param(
                    "lr",
                    1e-3,
                    r#"{"name": "FloatDistribution", "attributes": {"step": null, "low": 1e-05, "high": 0.1, "log": true}}"#,
                ),
                param(
                    "opt",
                    1.0,
                    r#"{"name": "CategoricalDistribution", "attributes": {"choices": ["adam", "sgd"]}}"#,
                ),
            ],
            BTreeMap::from([
                (CONSTRAINTS_KEY.to_string(), json!([0.5, -1.0])),
                ("completed_rung_0".to_string(), json!(0.7)),
                ("note".to_string(), json!("text is not numeric")),
            ]),
        );
        let f = frozen_trial(&t).unwrap();
        assert_eq!(f.number, 3);
        assert_eq!(f.state, hpo_sampler::TrialState::Pruned);
        assert_eq!(f.values, Some(vec![0.5]));
        assert_eq!(f.last_step(), Some(4));
        assert_eq!(f.params["lr"].internal, 1e-3);
        assert_eq!(
            f.params["opt"].value(),
            hpo_sampler::ParamValue::Str("sgd".into())
        );
        assert_eq!(f.violation(), 0.5);
        assert_eq!(f.system_number("completed_rung_0"), Some(0.7));
    }

    #[test]
    fn bad_rows_name_the_trial_and_parameter() {
        let t = stored(
            vec![param("x", 0.5, r#"{"name": "Nope"}"#)],
            BTreeMap::new(),
        );
        let e = frozen_trial(&t).unwrap_err().to_string();
        assert!(e.contains("trial 3") && e.contains("`x`"), "{e}");
        let t = stored(
            vec![param(
                "x",
                5.0,
                r#"{"name": "IntDistribution", "attributes": {"log": false, "step": 1, "low": 0, "high": 3}}"#,
            )],
            BTreeMap::new(),
        );
        assert!(
            frozen_trial(&t)
                .unwrap_err()
                .to_string()
                .contains("outside")
        );
        let t = stored(
            vec![],
            BTreeMap::from([(CONSTRAINTS_KEY.to_string(), json!("x"))]),
        );
        assert!(matches!(
            frozen_trial(&t),
            Err(HistoryError::Constraints { .. })
        ));
    }

    #[test]
    fn search_spaces_become_validated_sampler_distributions() {
        // Deprecated classes and the short form, adjusted as Optuna adjusts them.
        let space = search_space(
            r#"{"q": {"name": "DiscreteUniformDistribution", "attributes": {"low": 0, "high": 0.95, "q": 0.1}},
                "n": {"type": "int", "low": 16, "high": 250, "step": 16},
                "c": {"name": "CategoricalDistribution", "attributes": {"choices": ["a", 1, 1.0, null]}}}"#,
        )
        .unwrap();
        assert_eq!(
            space["q"],
            Distribution::float(0.0, 0.9, false, Some(0.1)).unwrap()
        );
        assert_eq!(space["n"], Distribution::int(16, 240, false, 16).unwrap());
        assert_eq!(
            space["c"],
            Distribution::categorical(vec![
                ParamValue::Str("a".into()),
                ParamValue::Int(1),
                ParamValue::Float(1.0),
                ParamValue::None,
            ])
            .unwrap()
        );
        for (bad, words) in [
            (
                r#"{"x": {"name": "FloatDistribution", "attributes": {"low": 2.0, "high": 1.0}}}"#,
                ["parameter 'x'", "`low <= high`"],
            ),
            (
                r#"{"c": {"name": "CategoricalDistribution", "attributes": {"choices": []}}}"#,
                ["parameter 'c'", "one or more"],
            ),
            (
                r#"{"x": {"name": "FloatDistribution", "attributes": {"low": "a", "high": 1.0}}}"#,
                ["x.attributes.low", "expected a number"],
            ),
            (
                r#"{"x": {"name": "GaussDistribution", "attributes": {}}}"#,
                ["x.name", "GaussDistribution"],
            ),
            (
                r#"{"c": {"name": "CategoricalDistribution", "attributes": {"choices": ["a", [1]]}}}"#,
                ["parameter 'c'", "choices[1]: [1] is not a parameter value"],
            ),
        ] {
            let e = search_space(bad).unwrap_err();
            assert!(words.iter().all(|w| e.contains(w)), "{e}");
        }
    }

    #[test]
    fn values_keep_their_json_type() {
        for v in [json!(null), json!(true), json!(3), json!(3.0), json!("x")] {
            assert_eq!(value_json(&param_value(&v).unwrap()), v);
        }
        assert_eq!(param_value(&json!(2.5)), Ok(ParamValue::Float(2.5)));
        assert_eq!(value_json(&ParamValue::Float(f64::NAN)), Json::Null);
        assert!(param_value(&json!([1])).unwrap_err().contains("[1]"));
        assert!(param_value(&json!({"a": 1})).is_err());
    }

    /// Any valid sampler distribution: ranges drawn freely and kept when
    /// the sampler accepts them, choices of every scalar type.
    fn distribution() -> impl Strategy<Value = Distribution> {
        let choice = prop_oneof![
            "[a-zé😀\"]{0,4}".prop_map(ParamValue::Str),
            any::<i64>().prop_map(ParamValue::Int),
            (-1e6f64..1e6).prop_map(ParamValue::Float),
            any::<bool>().prop_map(ParamValue::Bool),
            Just(ParamValue::None),
        ];
        let range = (-100.0f64..100.0, 0.0f64..1e4, any::<bool>(), 0.0f64..3.0);
        prop_oneof![
            range
                .clone()
                .prop_filter_map("not a float range", |(low, w, log, step)| {
                    let step = (step > 0.01 && !log).then_some(step);
                    Distribution::float(low, low + w, log, step).ok()
                }),
            range.prop_filter_map("not an int range", |(low, w, log, step)| {
                let step = if log { 1 } else { 1 + step as i64 };
                Distribution::int(low as i64, (low + w) as i64, log, step).ok()
            }),
            proptest::collection::vec(choice, 1..5)
                .prop_map(|choices| Distribution::categorical(choices).unwrap()),
        ]
    }

    proptest! {
        #[test]
        fn distributions_round_trip_through_optunas_json(d in distribution()) {
            let text = stored_distribution(&d).to_json();
            let read = store::Distribution::from_json(&text).unwrap();
            prop_assert_eq!(sampler_distribution(&read, "p").unwrap(), d);
        }
    }
}
