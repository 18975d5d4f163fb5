//! Optuna's JSON for distributions, parameter values and search spaces:
//! the project's one reader and writer of it.
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
//! names the field at fault, then builds the distribution as Optuna's
//! constructors do (`hpo_sampler::Distribution::float` and its siblings:
//! `low <= high`, a positive step, `high` lowered onto the step's grid,
//! scalar choices).

use crate::error::StoreError;
use crate::python_json;
use hpo_sampler::{Distribution, ParamValue, SearchSpace};
use serde::Serialize;
use serde_json::{Map, Value as Json};
use std::fmt;

/// Optuna's JSON of a distribution, the bytes
/// `optuna.distributions.distribution_to_json` writes: `{"name":
/// "FloatDistribution", "attributes": {"step": null, "low": 1e-05, "high":
/// 0.01, "log": true}}`.
pub fn distribution_to_json(d: &Distribution) -> String {
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
    struct CategoricalAttrs {
        choices: Vec<Json>,
    }
    match d {
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
            attributes: CategoricalAttrs {
                choices: choices.iter().map(value_to_json).collect(),
            },
        }),
    }
}

/// A `distribution_json` as Optuna's `json_to_distribution` reads it (any
/// form [`json_value_to_distribution`] reads); the error quotes the text
/// and names the field at fault.
pub fn json_to_distribution(text: &str) -> Result<Distribution, StoreError> {
    let bad = |reason: String| StoreError::BadDistribution {
        json: text.to_string(),
        reason,
    };
    // Python's json.dumps writes an infinite bound as `Infinity`, and
    // Optuna reads it back.
    let v: Json = crate::python_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    let read = parse(&v, "").map_err(|e| bad(e.to_string()))?;
    validated(read).map_err(bad)
}

/// One distribution already read as JSON, as Optuna's
/// `json_to_distribution` reads it: the current and the pre-3.0 class
/// names, or the short `{"type": "float" | "int" | "categorical", ...}`
/// form. `path` names the value in errors (for example `lr`, giving
/// `lr.attributes.low`).
pub fn json_value_to_distribution(v: &Json, path: &str) -> Result<Distribution, StoreError> {
    let read = parse(v, path).map_err(FieldError::into_store_error)?;
    validated(read).map_err(|reason| {
        StoreError::InvalidDistribution(hpo_sampler::Error::InvalidDistribution {
            param: path.to_string(),
            reason,
        })
    })
}

/// A parameter value as JSON (`null`, `true`, `3`, `0.5`, `"adam"`), as
/// Optuna's rows and CLI lines hold it; a non-finite float, which JSON
/// cannot hold, is `null`.
pub fn value_to_json(v: &ParamValue) -> Json {
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

/// A parameter value from JSON (a categorical choice, a fixed parameter's
/// value), keeping its type (`3` an int, `3.0` a float); lists and objects
/// are not parameter values.
pub fn value_from_json(v: &Json) -> Result<ParamValue, String> {
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

/// A search space as `optuna ask --search-space` takes it: a JSON object of
/// distributions by parameter name. Errors name the parameter and field
/// (`lr.attributes.low`).
pub fn search_space_from_json(text: &str) -> Result<SearchSpace, StoreError> {
    let bad = |reason: String| StoreError::BadOptunaJson {
        path: "search space".into(),
        reason,
    };
    let v: Json = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    if let Some(integer) = crate::python_json::wide_integer(text) {
        return Err(bad(format!(
            "the integer {integer} does not fit 64 bits, and would be stored rounded"
        )));
    }
    let obj = v
        .as_object()
        .ok_or_else(|| bad("expected an object of distributions by name".into()))?;
    obj.iter()
        .map(|(name, d)| {
            crate::trial::check_param_name(name)?;
            Ok((name.clone(), json_value_to_distribution(d, name)?))
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
            Some(v) => hpo_sampler::json_f64(v).ok_or_else(|| self.bad(key, "expected a number")),
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

    /// The choices, each a parameter value. Optuna only warns about a
    /// choice that is not a scalar (a list, a dict); memtune refuses it,
    /// naming it.
    fn choices(&self) -> Result<Vec<ParamValue>, FieldError> {
        let list = self
            .map
            .get("choices")
            .and_then(Json::as_array)
            .ok_or_else(|| self.bad("choices", "missing or not a list"))?;
        list.iter()
            .enumerate()
            .map(|(i, c)| value_from_json(c).map_err(|e| self.bad(&format!("choices[{i}]"), e)))
            .collect()
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

/// The distribution as Optuna's constructor makes it from the attributes
/// read: checked (`low <= high`, a positive step, some choices...) and with
/// `high` on the step's grid; the error is the constructor's reason.
fn validated(read: Distribution) -> Result<Distribution, String> {
    match read {
        Distribution::Float {
            low,
            high,
            log,
            step,
        } => Distribution::float(low, high, log, step),
        Distribution::Int {
            low,
            high,
            log,
            step,
        } => Distribution::int(low, high, log, step),
        Distribution::Categorical { choices } => Distribution::categorical(choices),
    }
    .map_err(|e| match e {
        hpo_sampler::Error::InvalidDistribution { reason, .. } => reason,
        other => other.to_string(),
    })
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

    fn cat(choices: Vec<Json>) -> Distribution {
        let choices = choices
            .iter()
            .map(|c| value_from_json(c).unwrap())
            .collect();
        Distribution::categorical(choices).unwrap()
    }

    fn read(v: Json) -> Result<Distribution, String> {
        json_value_to_distribution(&v, "p").map_err(|e| e.to_string())
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
                cat(vec![
                    json!("a"),
                    json!(1),
                    json!(2.5),
                    json!(true),
                    Json::Null,
                ]),
                r#"{"name": "CategoricalDistribution", "attributes": {"choices": ["a", 1, 2.5, true, null]}}"#,
            ),
            (
                cat(vec![
                    json!("adam"),
                    json!("été"),
                    Json::Null,
                    json!(1.0),
                    json!(2),
                    json!(true),
                ]),
                r#"{"name": "CategoricalDistribution", "attributes": {"choices": ["adam", "\u00e9t\u00e9", null, 1.0, 2, true]}}"#,
            ),
        ] {
            assert_eq!(distribution_to_json(&d), optuna);
            assert_eq!(json_to_distribution(optuna).unwrap(), d);
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
            Ok(cat(vec![json!("a"), Json::Null]))
        );
        // Optuna stores a list choice with only a warning; it is refused here.
        assert_eq!(
            read(json!({"name": "CategoricalDistribution", "attributes": {"choices": ["a", [1]]}})),
            Err("invalid Optuna JSON at p.attributes.choices[1]: [1] is not a parameter value (null, a bool, a number or a string)".into())
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
        let err = json_to_distribution(text).unwrap_err().to_string();
        assert!(
            err.contains(text) && err.contains("attributes.low: missing"),
            "{err}"
        );
        assert!(json_to_distribution("{").is_err());
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
        // Python keeps every digit of a choice; we would store a float.
        let err = search_space_from_json(
            r#"{"c": {"name": "CategoricalDistribution", "attributes": {"choices": [1, 123456789012345678901]}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("123456789012345678901 does not fit 64 bits"),
            "{err}"
        );
    }

    #[test]
    fn search_spaces_are_validated_as_optunas_constructors_validate() {
        // Deprecated classes and the short form, `high` on the step's grid.
        let space = search_space_from_json(
            r#"{"q": {"name": "DiscreteUniformDistribution", "attributes": {"low": 0, "high": 0.95, "q": 0.1}},
                "n": {"type": "int", "low": 16, "high": 250, "step": 16},
                "c": {"name": "CategoricalDistribution", "attributes": {"choices": ["a", 1, 1.0, null]}}}"#,
        )
        .unwrap();
        assert_eq!(space["q"], float(0.0, 0.9, false, Some(0.1)));
        assert_eq!(space["n"], int(16, 240, false, 16));
        let Distribution::Categorical { choices } = &space["c"] else {
            panic!("{:?}", space["c"]);
        };
        assert_eq!(
            choices,
            &[
                ParamValue::Str("a".into()),
                ParamValue::Int(1),
                ParamValue::Float(1.0),
                ParamValue::None
            ]
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
                r#"{"x": {"name": "IntDistribution", "attributes": {"low": 0, "high": 4, "log": true}}}"#,
                ["parameter 'x'", "`low >= 1`"],
            ),
        ] {
            let e = search_space_from_json(bad).unwrap_err().to_string();
            assert!(words.iter().all(|w| e.contains(w)), "{e}");
        }
    }

    #[test]
    fn values_keep_their_json_type() {
        for v in [json!(null), json!(true), json!(3), json!(3.0), json!("x")] {
            assert_eq!(value_to_json(&value_from_json(&v).unwrap()), v);
        }
        assert_eq!(value_from_json(&json!(2.5)), Ok(ParamValue::Float(2.5)));
        assert_eq!(value_to_json(&ParamValue::Float(f64::NAN)), Json::Null);
        assert!(value_from_json(&json!([1])).unwrap_err().contains("[1]"));
        assert!(value_from_json(&json!({"a": 1})).is_err());
        // A stored choice index reads back as the value Optuna's
        // `list.index` finds: the first equal choice, by Python's `==`.
        let d = json_to_distribution(
            r#"{"name": "CategoricalDistribution", "attributes": {"choices": [1, 2.0, true, "1"]}}"#,
        )
        .unwrap();
        let index = |v: Json| d.to_internal(&value_from_json(&v).unwrap()).ok();
        assert_eq!(index(json!(1.0)), Some(0.0));
        assert_eq!(index(json!(2)), Some(1.0));
        assert_eq!(index(json!("1")), Some(3.0));
        assert_eq!(index(json!(null)), None);
    }

    /// Any valid distribution: ranges drawn freely and kept when Optuna's
    /// rules accept them, choices of every scalar type.
    fn distribution() -> impl proptest::strategy::Strategy<Value = Distribution> {
        use proptest::prelude::*;
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

    proptest::proptest! {
        #[test]
        fn distributions_round_trip_through_optunas_json(d in distribution()) {
            let read = json_to_distribution(&distribution_to_json(&d)).unwrap();
            // Structurally equal, not only by Optuna's `==`: every choice
            // keeps its JSON type.
            proptest::prop_assert_eq!(format!("{read:?}"), format!("{d:?}"));
        }
    }
}
