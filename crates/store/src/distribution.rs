//! Optuna's parameter distributions, and converting between a parameter's
//! internal value (what `trial_params.param_value` holds) and its external
//! value (what the user's objective saw). Their JSON is in
//! [`crate::optuna_json`].
//!
//! The store itself keeps `distribution_json` opaque; these helpers exist so
//! callers (the CLI, the study runner) need not know Optuna's spelling. They
//! do not sample anything.

use crate::error::StoreError;
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
}
