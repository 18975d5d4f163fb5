//! Optuna's JSON for distributions and search spaces: the project's one
//! reader and writer of it.
//!
//! A distribution is written as `optuna.distributions.distribution_to_json`
//! writes it, byte for byte (`{"name": "FloatDistribution", "attributes":
//! {"step": null, "low": 1e-05, "high": 0.01, "log": true}}`), and read as
//! `json_to_distribution` reads it: the current classes, the pre-3.0 ones
//! (`UniformDistribution`, `LogUniformDistribution`,
//! `DiscreteUniformDistribution`, `IntUniformDistribution`,
//! `IntLogUniformDistribution`) and the short `{"type": "float", ...}`
//! form. A search space, as `optuna ask --search-space` takes it, is an
//! object of distributions by name.
//!
//! Reading checks the JSON's shape (names, attributes and their types) and
//! names the field at fault; whether the numbers make a valid range
//! (`low <= high`, a positive step...) and the choices are scalars is the
//! sampler's rule, checked where a sampler's distribution is built.

use crate::distribution::Distribution;
use crate::error::StoreError;
use crate::python_json;
use serde::Serialize;
use serde_json::{Map, Value as Json};
use std::collections::BTreeMap;
use std::fmt;

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

    /// Parse a `distribution_json` (any form [`Distribution::from_json_value`]
    /// reads); the error quotes the text and names the field at fault.
    pub fn from_json(text: &str) -> Result<Distribution, StoreError> {
        let bad = |reason: String| StoreError::BadDistribution {
            json: text.to_string(),
            reason,
        };
        let v: Json = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        parse(&v, "").map_err(|e| bad(e.to_string()))
    }

    /// Parse one distribution already read as JSON, as Optuna's
    /// `json_to_distribution` does: the current and the pre-3.0 class
    /// names, or the short `{"type": "float" | "int" | "categorical", ...}`
    /// form. `path` names the value in errors (for example `lr`, giving
    /// `lr.attributes.low`).
    pub fn from_json_value(v: &Json, path: &str) -> Result<Distribution, StoreError> {
        parse(v, path).map_err(FieldError::into_store_error)
    }
}

/// A search space as `optuna ask --search-space` takes it: a JSON object of
/// distributions by parameter name. Errors name the parameter and field
/// (`lr.attributes.low`).
pub fn search_space_from_json(text: &str) -> Result<BTreeMap<String, Distribution>, StoreError> {
    let bad = |reason: String| StoreError::BadOptunaJson {
        path: "search space".into(),
        reason,
    };
    let v: Json = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let obj = v
        .as_object()
        .ok_or_else(|| bad("expected an object of distributions by name".into()))?;
    obj.iter()
        .map(|(name, d)| {
            crate::trial::check_param_name(name)?;
            Ok((name.clone(), Distribution::from_json_value(d, name)?))
        })
        .collect()
}

/// A field that does not read, and why; `path` is empty for the whole value.
#[derive(Debug)]
struct FieldError {
    path: String,
    reason: String,
}

impl FieldError {
    fn into_store_error(self) -> StoreError {
        StoreError::BadOptunaJson {
            path: self.path,
            reason: self.reason,
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "{}: {}", self.path, self.reason)
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The keys of one JSON object, read with errors naming `path.key`.
struct Fields<'a> {
    map: &'a Map<String, Json>,
    path: String,
}

impl Fields<'_> {
    fn bad(&self, key: &str, reason: impl Into<String>) -> FieldError {
        FieldError {
            path: join(&self.path, key),
            reason: reason.into(),
        }
    }

    fn present(&self, key: &str) -> Option<&Json> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn float(&self, key: &str) -> Result<f64, FieldError> {
        match self.present(key) {
            None => Err(self.bad(key, "missing")),
            Some(v) => v.as_f64().ok_or_else(|| self.bad(key, "expected a number")),
        }
    }

    fn opt_float(&self, key: &str) -> Result<Option<f64>, FieldError> {
        self.present(key).map(|_| self.float(key)).transpose()
    }

    fn int(&self, key: &str) -> Result<i64, FieldError> {
        self.opt_int(key)?.ok_or_else(|| self.bad(key, "missing"))
    }

    /// Python's `int()` also takes integral floats such as `16.0`.
    fn opt_int(&self, key: &str) -> Result<Option<i64>, FieldError> {
        let Some(v) = self.present(key) else {
            return Ok(None);
        };
        let integral = |f: f64| f.fract() == 0.0 && f >= i64::MIN as f64 && f < i64::MAX as f64;
        v.as_i64()
            .or_else(|| v.as_f64().filter(|f| integral(*f)).map(|f| f as i64))
            .map(Some)
            .ok_or_else(|| self.bad(key, "expected an integer"))
    }

    fn flag(&self, key: &str) -> Result<bool, FieldError> {
        match self.present(key) {
            None => Ok(false),
            Some(Json::Bool(b)) => Ok(*b),
            Some(_) => Err(self.bad(key, "expected true or false")),
        }
    }

    /// Choices as stored. Optuna only warns about choices that are not
    /// scalars, so a stored row may hold one; whoever samples refuses it.
    fn choices(&self) -> Result<Vec<Json>, FieldError> {
        self.map
            .get("choices")
            .and_then(Json::as_array)
            .cloned()
            .ok_or_else(|| self.bad("choices", "missing or not a list"))
    }
}

fn parse(v: &Json, path: &str) -> Result<Distribution, FieldError> {
    let top = Fields {
        map: v.as_object().ok_or_else(|| FieldError {
            path: path.to_string(),
            reason: "expected an object".into(),
        })?,
        path: path.to_string(),
    };
    match top.map.get("name") {
        Some(name) => {
            let name = name
                .as_str()
                .ok_or_else(|| top.bad("name", "expected a string"))?;
            named(name, &top)
        }
        None => short(&top),
    }
}

/// `{"name": ..., "attributes": {...}}`: the class is checked first, so an
/// unknown one is named as such whatever its attributes.
fn named(name: &str, top: &Fields<'_>) -> Result<Distribution, FieldError> {
    // The class's attributes, none beyond `allowed` (Python's
    // `cls(**attributes)` refuses keywords the class lacks).
    let attributes = |allowed: &[&str]| -> Result<Fields<'_>, FieldError> {
        let a = Fields {
            map: top
                .map
                .get("attributes")
                .and_then(Json::as_object)
                .ok_or_else(|| top.bad("attributes", "missing or not an object"))?,
            path: join(&top.path, "attributes"),
        };
        match a.map.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(key) => Err(a.bad(key, "unexpected attribute")),
            None => Ok(a),
        }
    };
    Ok(match name {
        "FloatDistribution" => {
            let a = attributes(&["low", "high", "log", "step"])?;
            Distribution::Float {
                low: a.float("low")?,
                high: a.float("high")?,
                log: a.flag("log")?,
                step: a.opt_float("step")?,
            }
        }
        "UniformDistribution" | "LogUniformDistribution" => {
            let a = attributes(&["low", "high"])?;
            Distribution::Float {
                low: a.float("low")?,
                high: a.float("high")?,
                log: name == "LogUniformDistribution",
                step: None,
            }
        }
        "DiscreteUniformDistribution" => {
            let a = attributes(&["low", "high", "q"])?;
            Distribution::Float {
                low: a.float("low")?,
                high: a.float("high")?,
                log: false,
                step: Some(a.float("q")?),
            }
        }
        "IntDistribution" => {
            let a = attributes(&["low", "high", "log", "step"])?;
            int(&a, a.flag("log")?)?
        }
        "IntUniformDistribution" | "IntLogUniformDistribution" => {
            let a = attributes(&["low", "high", "step"])?;
            int(&a, name == "IntLogUniformDistribution")?
        }
        "CategoricalDistribution" => {
            let a = attributes(&["choices"])?;
            Distribution::Categorical {
                choices: a.choices()?,
            }
        }
        other => {
            return Err(top.bad("name", format!("unknown distribution class '{other}'")));
        }
    })
}

fn int(a: &Fields<'_>, log: bool) -> Result<Distribution, FieldError> {
    Ok(Distribution::Int {
        low: a.int("low")?,
        high: a.int("high")?,
        log,
        step: a.opt_int("step")?.unwrap_or(1),
    })
}

/// `json_to_distribution`'s abbreviated form: `{"type": "float", "low": 0,
/// "high": 1, "log": false, "step": null}`, `{"type": "int", ...}` or
/// `{"type": "categorical", "choices": [...]}`.
fn short(f: &Fields<'_>) -> Result<Distribution, FieldError> {
    let ty = f
        .map
        .get("type")
        .ok_or_else(|| FieldError {
            path: f.path.clone(),
            reason: "expected a \"name\" or \"type\" key".into(),
        })?
        .as_str()
        .ok_or_else(|| f.bad("type", "expected a string"))?;
    Ok(match ty {
        "float" => Distribution::Float {
            low: f.float("low")?,
            high: f.float("high")?,
            log: f.flag("log")?,
            step: f.opt_float("step")?,
        },
        "int" => int(f, f.flag("log")?)?,
        "categorical" => Distribution::Categorical {
            choices: f.choices()?,
        },
        other => return Err(f.bad("type", format!("unknown distribution type '{other}'"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn float(low: f64, high: f64, log: bool, step: Option<f64>) -> Distribution {
        Distribution::Float {
            low,
            high,
            log,
            step,
        }
    }

    fn int(low: i64, high: i64, log: bool, step: i64) -> Distribution {
        Distribution::Int {
            low,
            high,
            log,
            step,
        }
    }

    fn read(v: Json) -> Result<Distribution, String> {
        Distribution::from_json_value(&v, "p").map_err(|e| e.to_string())
    }

    #[test]
    fn writes_the_bytes_optuna_writes() {
        // Strings produced by optuna 5.0.0's distribution_to_json.
        for (d, optuna) in [
            (
                float(1e-5, 0.1, true, None),
                r#"{"name": "FloatDistribution", "attributes": {"step": null, "low": 1e-05, "high": 0.1, "log": true}}"#,
            ),
            (
                float(0.0, 1.0, false, Some(0.25)),
                r#"{"name": "FloatDistribution", "attributes": {"step": 0.25, "low": 0.0, "high": 1.0, "log": false}}"#,
            ),
            (
                int(8, 64, false, 8),
                r#"{"name": "IntDistribution", "attributes": {"log": false, "step": 8, "low": 8, "high": 64}}"#,
            ),
            (
                int(16, 256, false, 16),
                r#"{"name": "IntDistribution", "attributes": {"log": false, "step": 16, "low": 16, "high": 256}}"#,
            ),
            (
                Distribution::Categorical {
                    choices: vec![json!("a"), json!(1), json!(2.5), json!(true), Json::Null],
                },
                r#"{"name": "CategoricalDistribution", "attributes": {"choices": ["a", 1, 2.5, true, null]}}"#,
            ),
            (
                Distribution::Categorical {
                    choices: vec![
                        json!("adam"),
                        json!("été"),
                        Json::Null,
                        json!(1.0),
                        json!(2),
                        json!(true),
                    ],
                },
                r#"{"name": "CategoricalDistribution", "attributes": {"choices": ["adam", "\u00e9t\u00e9", null, 1.0, 2, true]}}"#,
            ),
        ] {
            assert_eq!(d.to_json(), optuna);
            assert_eq!(Distribution::from_json(optuna).unwrap(), d);
        }
    }

    #[test]
    fn reads_the_pre_3_0_classes_as_optuna_converts_them() {
        let attrs = |name: &str, a: Json| json!({"name": name, "attributes": a});
        for (old, new) in [
            (
                attrs("UniformDistribution", json!({"low": 0.0, "high": 1.0})),
                float(0.0, 1.0, false, None),
            ),
            (
                attrs("LogUniformDistribution", json!({"low": 1e-5, "high": 1.0})),
                float(1e-5, 1.0, true, None),
            ),
            (
                attrs(
                    "DiscreteUniformDistribution",
                    json!({"low": 0, "high": 1, "q": 0.25}),
                ),
                float(0.0, 1.0, false, Some(0.25)),
            ),
            (
                attrs(
                    "IntUniformDistribution",
                    json!({"low": 1, "high": 9, "step": 2}),
                ),
                int(1, 9, false, 2),
            ),
            (
                attrs("IntUniformDistribution", json!({"low": 1, "high": 9})),
                int(1, 9, false, 1),
            ),
            (
                attrs("IntLogUniformDistribution", json!({"low": 1, "high": 64})),
                int(1, 64, true, 1),
            ),
        ] {
            assert_eq!(read(old.clone()), Ok(new), "{old}");
        }
    }

    #[test]
    fn reads_the_short_form_and_lenient_attributes() {
        assert_eq!(
            read(json!({"type": "float", "low": 0, "high": 2, "step": 0.5})),
            Ok(float(0.0, 2.0, false, Some(0.5)))
        );
        assert_eq!(
            read(json!({"type": "int", "low": 1, "high": 8, "log": true})),
            Ok(int(1, 8, true, 1))
        );
        assert_eq!(
            read(json!({"type": "categorical", "choices": ["a", null]})),
            Ok(Distribution::Categorical {
                choices: vec![json!("a"), Json::Null]
            })
        );
        // Optuna stores a list choice with only a warning; it reads back.
        assert_eq!(
            read(json!({"name": "CategoricalDistribution", "attributes": {"choices": ["a", [1]]}})),
            Ok(Distribution::Categorical {
                choices: vec![json!("a"), json!([1])]
            })
        );
        // Omitted `log` and `step`, and integral floats where ints belong,
        // as Python's keyword defaults and `int()` allow.
        assert_eq!(
            read(json!({"name": "FloatDistribution", "attributes": {"low": 0.0, "high": 1.0}})),
            Ok(float(0.0, 1.0, false, None))
        );
        assert_eq!(
            read(
                json!({"name": "IntDistribution", "attributes": {"low": 16.0, "high": 64, "step": 16.0}})
            ),
            Ok(int(16, 64, false, 16))
        );
    }

    #[test]
    fn errors_name_the_field() {
        for (bad, field) in [
            (json!([1]), "p: expected an object"),
            (json!({}), "p: expected a \"name\" or \"type\" key"),
            (
                json!({"name": "Nope", "attributes": {}}),
                "p.name: unknown distribution class 'Nope'",
            ),
            (
                json!({"name": "Nope"}),
                "p.name: unknown distribution class 'Nope'",
            ),
            (json!({"name": 3}), "p.name: expected a string"),
            (
                json!({"name": "FloatDistribution"}),
                "p.attributes: missing or not an object",
            ),
            (
                json!({"name": "FloatDistribution", "attributes": {"low": "a", "high": 1}}),
                "p.attributes.low: expected a number",
            ),
            (
                json!({"name": "FloatDistribution", "attributes": {"low": 0}}),
                "p.attributes.high: missing",
            ),
            (
                json!({"name": "FloatDistribution", "attributes": {"low": 0, "high": 1, "log": 1}}),
                "p.attributes.log: expected true or false",
            ),
            (
                json!({"name": "FloatDistribution", "attributes": {"low": 0, "high": 1, "q": 1}}),
                "p.attributes.q: unexpected attribute",
            ),
            (
                json!({"name": "IntDistribution", "attributes": {"low": 0.5, "high": 1}}),
                "p.attributes.low: expected an integer",
            ),
            (
                json!({"name": "IntDistribution", "attributes": {"low": 0, "high": 1e300}}),
                "p.attributes.high: expected an integer",
            ),
            (
                json!({"name": "DiscreteUniformDistribution", "attributes": {"low": 0, "high": 1}}),
                "p.attributes.q: missing",
            ),
            (
                json!({"name": "CategoricalDistribution", "attributes": {"choices": "ab"}}),
                "p.attributes.choices: missing or not a list",
            ),
            (
                json!({"type": "gauss", "low": 0, "high": 1}),
                "p.type: unknown distribution type 'gauss'",
            ),
            (json!({"type": "int", "low": 0}), "p.high: missing"),
        ] {
            let err = read(bad.clone()).unwrap_err();
            assert!(err.ends_with(field), "{bad}: {err}");
        }
    }

    #[test]
    fn from_json_quotes_the_text_and_names_the_field() {
        let text = r#"{"name": "FloatDistribution", "attributes": {}}"#;
        let err = Distribution::from_json(text).unwrap_err().to_string();
        assert!(
            err.contains(text) && err.contains("attributes.low: missing"),
            "{err}"
        );
        assert!(Distribution::from_json("{").is_err());
    }

    #[test]
    fn reads_a_search_space_and_names_the_parameter() {
        let space = search_space_from_json(
            r#"{"x": {"name": "FloatDistribution", "attributes": {"low": 0.0, "high": 1.0}},
                "n": {"name": "IntDistribution", "attributes": {"low": 1, "high": 8, "log": true}},
                "q": {"name": "DiscreteUniformDistribution", "attributes": {"low": 0, "high": 1, "q": 0.25}}}"#,
        )
        .unwrap();
        assert_eq!(space.len(), 3);
        assert_eq!(space["q"], float(0.0, 1.0, false, Some(0.25)));
        assert_eq!(space["n"], int(1, 8, true, 1));
        let err = search_space_from_json(r#"{"x": {"name": "Nope", "attributes": {}}}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("x.name"), "{err}");
        let err = search_space_from_json("{").unwrap_err().to_string();
        assert!(
            err.contains("search space") && err.contains("line 1"),
            "{err}"
        );
        let err = search_space_from_json("[]").unwrap_err().to_string();
        assert!(err.contains("object of distributions"), "{err}");
    }
}
