//! The bridge from what the store keeps to what the sampler reads:
//! `store::FrozenTrial` (Optuna's rows: params as internal value plus
//! distribution JSON, attributes as JSON) becomes `hpo_sampler::FrozenTrial`;
//! and back, a sampled parameter's distribution becomes the store's, whose
//! JSON is the bytes Optuna writes.
//!
//! The two crates deliberately do not know each other; this module is the
//! only place their types meet. It converts, it does not sample or write.

use hpo_sampler::json::distribution_from_json;
use serde_json::Value as Json;
use std::collections::BTreeMap;

/// Optuna's system attribute holding a trial's constraint values
/// (`optuna.samplers._base._CONSTRAINTS_KEY`): a list of floats, feasible
/// when all are `<= 0`.
pub const CONSTRAINTS_KEY: &str = "constraints";

/// A stored trial that the sampler cannot read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HistoryError {
    #[error(
        "trial {number}, parameter `{param}`: stored distribution_json is not usable: {source}"
    )]
    Distribution {
        number: i64,
        param: String,
        source: hpo_sampler::Error,
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
            choices: choices
                .iter()
                .map(hpo_sampler::json::value_to_json)
                .collect(),
        },
    }
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
        let json: Json =
            serde_json::from_str(&p.distribution_json).map_err(|e| HistoryError::Param {
                number: t.number,
                param: p.name.clone(),
                reason: format!("distribution_json is not JSON: {e}"),
            })?;
        let distribution = distribution_from_json(&json, &p.name).map_err(|source| {
            HistoryError::Distribution {
                number: t.number,
                param: p.name.clone(),
                source,
            }
        })?;
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
    let constraints = match t.system_attrs.get(CONSTRAINTS_KEY) {
        None | Some(Json::Null) => BTreeMap::new(),
        Some(Json::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| v.as_f64().map(|f| (i.to_string(), f)))
            .collect::<Option<_>>()
            .ok_or_else(|| HistoryError::Constraints {
                number: t.number,
                found: Json::Array(items.clone()).to_string(),
            })?,
        Some(other) => {
            return Err(HistoryError::Constraints {
                number: t.number,
                found: other.to_string(),
            });
        }
    };
    let system_attrs = t
        .system_attrs
        .iter()
        .filter(|(k, _)| k.as_str() != CONSTRAINTS_KEY)
        .filter_map(|(k, v)| v.as_f64().map(|f| (k.clone(), f)))
        .collect();
    Ok(hpo_sampler::FrozenTrial {
        number: t.number as u64,
        state: state(t.state),
        params,
        values: t.values.clone(),
        intermediate_values: t.intermediate_values.clone(),
        constraints,
        system_attrs,
    })
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
        assert_eq!(
            f.system_attrs,
            BTreeMap::from([("completed_rung_0".to_string(), 0.7)])
        );
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
}
