//! Reading and writing Optuna's `distribution_json`, and converting between a
//! parameter's internal value (what `trial_params.param_value` holds) and its
//! external value (what the user's objective saw).
//!
//! The store itself keeps the JSON opaque; these helpers exist so callers
//! (the CLI, the study runner) need not know Optuna's spelling. They do not
//! sample anything.

use crate::error::StoreError;
use crate::python_json;
use serde::Serialize;
use serde_json::{Value as Json, json};

/// One of Optuna's parameter distributions.
#[derive(Clone, Debug, PartialEq)]
pub enum Distribution {
    Float {
        low: f64,
        high: f64,
        log: bool,
        step: Option<f64>,
    },
    Int {
        low: i64,
        high: i64,
        log: bool,
        step: i64,
    },
    Categorical {
        /// JSON scalars: null, bool, number or string, as Optuna allows.
        choices: Vec<Json>,
    },
}

impl Distribution {
    /// Optuna's JSON, the bytes `optuna.distributions.distribution_to_json`
    /// writes: `{"name": "FloatDistribution", "attributes": {"step": null,
    /// "low": 1e-05, "high": 0.01, "log": true}}`.
    pub fn to_json(&self) -> String {
        #[derive(Serialize)]
        struct Named<A> {
            name: &'static str,
            attributes: A,
        }
        // Field order is the attribute order of Optuna's classes.
        #[derive(Serialize)]
        struct FloatAttrs {
            step: Option<f64>,
            low: f64,
            high: f64,
            log: bool,
        }
        #[derive(Serialize)]
        struct IntAttrs {
            log: bool,
            step: i64,
            low: i64,
            high: i64,
        }
        #[derive(Serialize)]
        struct CategoricalAttrs<'a> {
            choices: &'a [Json],
        }
        match self {
            &Distribution::Float {
                low,
                high,
                log,
                step,
            } => python_json::to_string(&Named {
                name: "FloatDistribution",
                attributes: FloatAttrs {
                    step,
                    low,
                    high,
                    log,
                },
            }),
            &Distribution::Int {
                low,
                high,
                log,
                step,
            } => python_json::to_string(&Named {
                name: "IntDistribution",
                attributes: IntAttrs {
                    log,
                    step,
                    low,
                    high,
                },
            }),
            Distribution::Categorical { choices } => python_json::to_string(&Named {
                name: "CategoricalDistribution",
                attributes: CategoricalAttrs { choices },
            }),
        }
    }

    /// Parse Optuna's JSON, including the pre-3.0 names
    /// (Uniform, LogUniform, DiscreteUniform, IntUniform, IntLogUniform).
    pub fn from_json(text: &str) -> Result<Distribution, StoreError> {
        let bad = |reason: &str| StoreError::BadDistribution {
            json: text.to_string(),
            reason: reason.to_string(),
        };
        let v: Json = serde_json::from_str(text).map_err(|e| bad(&e.to_string()))?;
        let name = v["name"].as_str().ok_or_else(|| bad("no `name`"))?;
        let a = &v["attributes"];
        let f = |k: &str| {
            a[k].as_f64()
                .ok_or_else(|| bad(&format!("`{k}` is not a number")))
        };
        let i = |k: &str| {
            a[k].as_i64()
                .or_else(|| a[k].as_f64().filter(|x| x.fract() == 0.0).map(|x| x as i64))
                .ok_or_else(|| bad(&format!("`{k}` is not an integer")))
        };
        let flag = |k: &str| a[k].as_bool().unwrap_or(false);
        Ok(match name {
            "FloatDistribution" => Distribution::Float {
                low: f("low")?,
                high: f("high")?,
                log: flag("log"),
                step: if a["step"].is_null() {
                    None
                } else {
                    Some(f("step")?)
                },
            },
            "UniformDistribution" | "LogUniformDistribution" => Distribution::Float {
                low: f("low")?,
                high: f("high")?,
                log: name == "LogUniformDistribution",
                step: None,
            },
            "DiscreteUniformDistribution" => Distribution::Float {
                low: f("low")?,
                high: f("high")?,
                log: false,
                step: Some(f("q")?),
            },
            "IntDistribution" | "IntUniformDistribution" | "IntLogUniformDistribution" => {
                Distribution::Int {
                    low: i("low")?,
                    high: i("high")?,
                    log: flag("log") || name == "IntLogUniformDistribution",
                    step: if a["step"].is_null() { 1 } else { i("step")? },
                }
            }
            "CategoricalDistribution" => Distribution::Categorical {
                choices: a["choices"]
                    .as_array()
                    .cloned()
                    .ok_or_else(|| bad("`choices` is not a list"))?,
            },
            other => return Err(bad(&format!("unknown distribution `{other}`"))),
        })
    }

    /// The value the objective saw, from the stored internal value.
    pub fn to_external(&self, internal: f64) -> Result<Json, StoreError> {
        match self {
            Distribution::Float { .. } => Ok(json!(internal)),
            Distribution::Int { .. } => Ok(json!(internal.round() as i64)),
            Distribution::Categorical { choices } => {
                let idx = internal as i64;
                if internal.fract() != 0.0 || idx < 0 || idx as usize >= choices.len() {
                    return Err(StoreError::BadDistribution {
                        json: self.to_json(),
                        reason: format!("choice index {internal} out of range"),
                    });
                }
                Ok(choices[idx as usize].clone())
            }
        }
    }

    /// The stored internal value of an external one (a categorical choice
    /// becomes its index); `None` if the value is not in the distribution.
    pub fn to_internal(&self, external: &Json) -> Option<f64> {
        match self {
            Distribution::Float { .. } | Distribution::Int { .. } => external.as_f64(),
            Distribution::Categorical { choices } => choices
                .iter()
                .position(|c| same_choice(c, external))
                .map(|i| i as f64),
        }
    }
}

/// Optuna's choice equality, Python's `==`: numbers and bools by value (so
/// `1 == 1.0 == true`), strings by content, `null` only with `null`.
fn same_choice(a: &Json, b: &Json) -> bool {
    let number = |v: &Json| match v {
        Json::Bool(b) => Some(f64::from(u8::from(*b))),
        v => v.as_f64(),
    };
    match (a, b) {
        (Json::Null, Json::Null) => true,
        (Json::String(x), Json::String(y)) => x == y,
        _ => matches!((number(a), number(b)), (Some(x), Some(y)) if x == y),
    }
}

/// The external value of a stored parameter, decoding its distribution JSON.
pub fn external_value(param: &crate::Param) -> Result<Json, StoreError> {
    Distribution::from_json(&param.distribution_json)?.to_external(param.internal_value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_optuna_writes() {
        let f = r#"{"name": "FloatDistribution", "attributes": {"step": null, "low": 1e-05, "high": 0.1, "log": true}}"#;
        assert_eq!(
            Distribution::from_json(f).unwrap(),
            Distribution::Float {
                low: 1e-5,
                high: 0.1,
                log: true,
                step: None
            }
        );
        let i = r#"{"name": "IntDistribution", "attributes": {"log": false, "step": 8, "low": 8, "high": 64}}"#;
        let d = Distribution::from_json(i).unwrap();
        assert_eq!(d.to_external(16.0).unwrap(), json!(16));
        let c = r#"{"name": "CategoricalDistribution", "attributes": {"choices": ["adam", "sgd", null, 1.5]}}"#;
        let d = Distribution::from_json(c).unwrap();
        assert_eq!(d.to_external(2.0).unwrap(), Json::Null);
        assert_eq!(d.to_internal(&json!("sgd")), Some(1.0));
        // Python's `==` and `list.index`: 1.0 is the choice 1, the first equal one.
        let n = Distribution::from_json(
            r#"{"name": "CategoricalDistribution", "attributes": {"choices": [1, 2.0, true, "1"]}}"#,
        )
        .unwrap();
        assert_eq!(n.to_internal(&json!(1.0)), Some(0.0));
        assert_eq!(n.to_internal(&json!(2)), Some(1.0));
        assert_eq!(n.to_internal(&json!("1")), Some(3.0));
        assert_eq!(n.to_internal(&json!(null)), None);
        assert!(d.to_external(4.0).is_err());
        assert_eq!(Distribution::from_json(&d.to_json()).unwrap(), d);
    }

    #[test]
    fn writes_the_bytes_optuna_writes() {
        for optuna in [
            r#"{"name": "FloatDistribution", "attributes": {"step": null, "low": 1e-05, "high": 0.1, "log": true}}"#,
            r#"{"name": "FloatDistribution", "attributes": {"step": 0.25, "low": 0.0, "high": 1.0, "log": false}}"#,
            r#"{"name": "IntDistribution", "attributes": {"log": false, "step": 8, "low": 8, "high": 64}}"#,
            r#"{"name": "CategoricalDistribution", "attributes": {"choices": ["adam", "\u00e9t\u00e9", null, 1.0, 2, true]}}"#,
        ] {
            assert_eq!(Distribution::from_json(optuna).unwrap().to_json(), optuna);
        }
    }

    #[test]
    fn bad_json_is_an_error() {
        assert!(Distribution::from_json("{").is_err());
        assert!(Distribution::from_json(r#"{"name": "Nope", "attributes": {}}"#).is_err());
        assert!(
            Distribution::from_json(r#"{"name": "FloatDistribution", "attributes": {}}"#).is_err()
        );
    }
}
