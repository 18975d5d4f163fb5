//! Optuna's JSON forms: a distribution is
//! `{"name": "FloatDistribution", "attributes": {"step": null, "low": 0.0, "high": 1.0, "log": false}}`
//! (`optuna.distributions.distribution_to_json`), and a search space, as
//! `optuna ask --search-space` takes it, is an object of those by name.
//! Parsing also accepts the deprecated classes (`UniformDistribution`,
//! `LogUniformDistribution`, `DiscreteUniformDistribution`,
//! `IntUniformDistribution`, `IntLogUniformDistribution`) and the short
//! `{"type": "float", ...}` form, as `json_to_distribution` does.

use crate::distribution::{Distribution, ParamValue};
use crate::error::{Error, Result};
use crate::trial::SearchSpace;
use serde::Serialize;
use serde_json::{Map, Value};

/// An external value as JSON (`null`, `true`, `3`, `0.5`, `"adam"`).
pub fn value_to_json(v: &ParamValue) -> Value {
    match v {
        ParamValue::None => Value::Null,
        ParamValue::Bool(b) => Value::Bool(*b),
        ParamValue::Int(i) => Value::from(*i),
        ParamValue::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        ParamValue::Str(s) => Value::String(s.clone()),
    }
}

/// An external value from JSON; arrays and objects are not parameter values.
pub fn value_from_json(v: &Value, path: &str) -> Result<ParamValue> {
    Ok(match v {
        Value::Null => ParamValue::None,
        Value::Bool(b) => ParamValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => ParamValue::Int(i),
            None => ParamValue::Float(n.as_f64().ok_or_else(|| bad(path, "number out of range"))?),
        },
        Value::String(s) => ParamValue::Str(s.clone()),
        Value::Array(_) | Value::Object(_) => {
            return Err(bad(path, "expected null, bool, number or string"));
        }
    })
}

fn bad(path: &str, reason: impl Into<String>) -> Error {
    Error::InvalidJson {
        path: path.to_string(),
        reason: reason.into(),
    }
}

// Field order matches Optuna's output exactly.
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
    choices: Vec<Value>,
}
#[derive(Serialize)]
struct Named<A> {
    name: &'static str,
    attributes: A,
}

/// The distribution as Optuna's `distribution_to_json` writes it
/// (same key order).
pub fn distribution_to_json(d: &Distribution) -> String {
    let out = match d {
        Distribution::Float {
            low,
            high,
            log,
            step,
        } => serde_json::to_string(&Named {
            name: "FloatDistribution",
            attributes: FloatAttrs {
                step: *step,
                low: *low,
                high: *high,
                log: *log,
            },
        }),
        Distribution::Int {
            low,
            high,
            log,
            step,
        } => serde_json::to_string(&Named {
            name: "IntDistribution",
            attributes: IntAttrs {
                log: *log,
                step: *step,
                low: *low,
                high: *high,
            },
        }),
        Distribution::Categorical { choices } => serde_json::to_string(&Named {
            name: "CategoricalDistribution",
            attributes: CategoricalAttrs {
                choices: choices.iter().map(value_to_json).collect(),
            },
        }),
    };
    out.expect("plain structs always serialize")
}

/// The distribution as a JSON value (keys sorted; same content).
pub fn distribution_to_value(d: &Distribution) -> Value {
    serde_json::from_str(&distribution_to_json(d)).expect("our own JSON parses")
}

fn get_f64(attrs: &Map<String, Value>, key: &str, path: &str) -> Result<f64> {
    match attrs.get(key) {
        Some(v) => v
            .as_f64()
            .ok_or_else(|| bad(&format!("{path}.{key}"), "expected a number")),
        None => Err(bad(&format!("{path}.{key}"), "missing")),
    }
}

fn get_i64(attrs: &Map<String, Value>, key: &str, path: &str) -> Result<Option<i64>> {
    match attrs.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let p = format!("{path}.{key}");
            if let Some(i) = v.as_i64() {
                return Ok(Some(i));
            }
            // Python's int() accepts integral floats such as 16.0.
            match v.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Some(f as i64)),
                _ => Err(bad(&p, "expected an integer")),
            }
        }
    }
}

fn get_opt_f64(attrs: &Map<String, Value>, key: &str, path: &str) -> Result<Option<f64>> {
    match attrs.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => get_f64(attrs, key, path).map(Some),
    }
}

fn get_bool(attrs: &Map<String, Value>, key: &str, path: &str) -> Result<bool> {
    match attrs.get(key) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(bad(&format!("{path}.{key}"), "expected true or false")),
    }
}

fn check_keys(attrs: &Map<String, Value>, allowed: &[&str], path: &str) -> Result<()> {
    for key in attrs.keys() {
        if !allowed.contains(&key.as_str()) {
            return Err(bad(&format!("{path}.{key}"), "unexpected attribute"));
        }
    }
    Ok(())
}

fn at(path: &str, e: Error) -> Error {
    match e {
        Error::InvalidDistribution { reason, .. } => bad(path, reason),
        other => other,
    }
}

/// Parse one distribution in Optuna's JSON; `path` names it in errors
/// (for example `search_space.lr`).
pub fn distribution_from_json(v: &Value, path: &str) -> Result<Distribution> {
    let obj = v
        .as_object()
        .ok_or_else(|| bad(path, "expected an object"))?;
    if let Some(name) = obj.get("name") {
        let name = name
            .as_str()
            .ok_or_else(|| bad(&format!("{path}.name"), "expected a string"))?;
        let apath = format!("{path}.attributes");
        let attrs = obj
            .get("attributes")
            .and_then(Value::as_object)
            .ok_or_else(|| bad(&apath, "missing or not an object"))?;
        let lh = || -> Result<(f64, f64)> {
            Ok((
                get_f64(attrs, "low", &apath)?,
                get_f64(attrs, "high", &apath)?,
            ))
        };
        let ilh = || -> Result<(i64, i64)> {
            let low = get_i64(attrs, "low", &apath)?
                .ok_or_else(|| bad(&format!("{apath}.low"), "missing"))?;
            let high = get_i64(attrs, "high", &apath)?
                .ok_or_else(|| bad(&format!("{apath}.high"), "missing"))?;
            Ok((low, high))
        };
        let d = match name {
            "FloatDistribution" => {
                check_keys(attrs, &["low", "high", "log", "step"], &apath)?;
                let (low, high) = lh()?;
                Distribution::float(
                    low,
                    high,
                    get_bool(attrs, "log", &apath)?,
                    get_opt_f64(attrs, "step", &apath)?,
                )
            }
            "UniformDistribution" | "LogUniformDistribution" => {
                check_keys(attrs, &["low", "high"], &apath)?;
                let (low, high) = lh()?;
                Distribution::float(low, high, name == "LogUniformDistribution", None)
            }
            "DiscreteUniformDistribution" => {
                check_keys(attrs, &["low", "high", "q"], &apath)?;
                let (low, high) = lh()?;
                let q = get_f64(attrs, "q", &apath)?;
                Distribution::float(low, high, false, Some(q))
            }
            "IntDistribution" | "IntUniformDistribution" | "IntLogUniformDistribution" => {
                let allowed: &[&str] = if name == "IntDistribution" {
                    &["low", "high", "log", "step"]
                } else {
                    &["low", "high", "step"]
                };
                check_keys(attrs, allowed, &apath)?;
                let (low, high) = ilh()?;
                let step = get_i64(attrs, "step", &apath)?.unwrap_or(1);
                let log = name == "IntLogUniformDistribution" || get_bool(attrs, "log", &apath)?;
                Distribution::int(low, high, log, step)
            }
            "CategoricalDistribution" => {
                check_keys(attrs, &["choices"], &apath)?;
                let cpath = format!("{apath}.choices");
                let choices = attrs
                    .get("choices")
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad(&cpath, "missing or not an array"))?;
                let choices = choices
                    .iter()
                    .enumerate()
                    .map(|(i, c)| value_from_json(c, &format!("{cpath}[{i}]")))
                    .collect::<Result<Vec<_>>>()?;
                Distribution::categorical(choices)
            }
            other => {
                return Err(bad(
                    &format!("{path}.name"),
                    format!("unknown distribution class '{other}'"),
                ));
            }
        };
        return d.map_err(|e| at(&apath, e));
    }
    // The short form: {"type": "float"|"int"|"categorical", ...}.
    let ty = obj
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| bad(path, "expected a \"name\" or \"type\" key"))?;
    let d = match ty {
        "categorical" => {
            let cpath = format!("{path}.choices");
            let choices = obj
                .get("choices")
                .and_then(Value::as_array)
                .ok_or_else(|| bad(&cpath, "missing or not an array"))?;
            let choices = choices
                .iter()
                .enumerate()
                .map(|(i, c)| value_from_json(c, &format!("{cpath}[{i}]")))
                .collect::<Result<Vec<_>>>()?;
            Distribution::categorical(choices)
        }
        "float" => Distribution::float(
            get_f64(obj, "low", path)?,
            get_f64(obj, "high", path)?,
            get_bool(obj, "log", path)?,
            get_opt_f64(obj, "step", path)?,
        ),
        "int" => {
            let low =
                get_i64(obj, "low", path)?.ok_or_else(|| bad(&format!("{path}.low"), "missing"))?;
            let high = get_i64(obj, "high", path)?
                .ok_or_else(|| bad(&format!("{path}.high"), "missing"))?;
            let step = get_i64(obj, "step", path)?.unwrap_or(1);
            Distribution::int(low, high, get_bool(obj, "log", path)?, step)
        }
        other => {
            return Err(bad(
                &format!("{path}.type"),
                format!("unknown distribution type '{other}'"),
            ));
        }
    };
    d.map_err(|e| at(path, e))
}

/// Parse a search space as `optuna ask --search-space` takes it.
pub fn search_space_from_json(text: &str) -> Result<SearchSpace> {
    let v: Value = serde_json::from_str(text).map_err(|e| {
        bad(
            &format!("search space (line {}, column {})", e.line(), e.column()),
            e.to_string(),
        )
    })?;
    let obj = v.as_object().ok_or_else(|| {
        bad(
            "search space",
            "expected an object of distributions by name",
        )
    })?;
    obj.iter()
        .map(|(name, d)| Ok((name.clone(), distribution_from_json(d, name)?)))
        .collect()
}

/// A search space as a JSON object of Optuna distributions by name.
pub fn search_space_to_json(space: &SearchSpace) -> String {
    let parts: Vec<String> = space
        .iter()
        .map(|(name, d)| {
            format!(
                "{}: {}",
                serde_json::to_string(name).expect("a string serializes"),
                distribution_to_json(d)
            )
        })
        .collect();
    format!("{{{}}}", parts.join(", "))
}

impl Serialize for Distribution {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        distribution_to_value(self).serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for Distribution {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        distribution_from_json(&v, "distribution").map_err(serde::de::Error::custom)
    }
}

impl Serialize for ParamValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        value_to_json(self).serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for ParamValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        value_from_json(&v, "value").map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_optunas_exact_json() {
        // Strings produced by optuna 5.0.0's distribution_to_json.
        let cases = [
            (
                Distribution::float(1e-5, 0.1, true, None).unwrap(),
                r#"{"name":"FloatDistribution","attributes":{"step":null,"low":0.00001,"high":0.1,"log":true}}"#,
            ),
            (
                Distribution::int(16, 256, false, 16).unwrap(),
                r#"{"name":"IntDistribution","attributes":{"log":false,"step":16,"low":16,"high":256}}"#,
            ),
            (
                Distribution::categorical(vec![
                    ParamValue::Str("a".into()),
                    ParamValue::Int(1),
                    ParamValue::Float(2.5),
                    ParamValue::Bool(true),
                    ParamValue::None,
                ])
                .unwrap(),
                r#"{"name":"CategoricalDistribution","attributes":{"choices":["a",1,2.5,true,null]}}"#,
            ),
        ];
        for (d, want) in cases {
            let got = distribution_to_json(&d);
            // serde_json writes compactly (Optuna adds spaces and writes 1e-05): same JSON.
            assert_eq!(got, want);
            let back = distribution_from_json(&serde_json::from_str(want).unwrap(), "x").unwrap();
            assert_eq!(back, d);
        }
    }

    #[test]
    fn reads_search_space_and_names_bad_fields() {
        let space = search_space_from_json(
            r#"{"x": {"name": "FloatDistribution", "attributes": {"low": 0.0, "high": 1.0}},
                "n": {"name": "IntDistribution", "attributes": {"low": 1, "high": 8, "log": true}},
                "q": {"name": "DiscreteUniformDistribution", "attributes": {"low": 0, "high": 1, "q": 0.25}}}"#,
        )
        .unwrap();
        assert_eq!(space.len(), 3);
        assert_eq!(
            space["q"],
            Distribution::float(0.0, 1.0, false, Some(0.25)).unwrap()
        );
        let err = search_space_from_json(
            r#"{"x": {"name": "FloatDistribution", "attributes": {"low": 2.0, "high": 1.0}}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("x.attributes"), "{err}");
        let err =
            search_space_from_json(r#"{"x": {"name": "Nope", "attributes": {}}}"#).unwrap_err();
        assert!(err.to_string().contains("x.name"), "{err}");
        assert!(
            search_space_from_json("{")
                .unwrap_err()
                .to_string()
                .contains("line 1")
        );
    }
}
