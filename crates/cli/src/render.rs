//! How trials are shown: parameters by their external values, non-finite
//! numbers spelled as Python spells them, attributes as compact JSON, and
//! names and strings with control characters escaped (`\n`, `\t`,
//! `\u{1b}`), so one trial is one line of a table and no stored string can
//! move the terminal's cursor.

use serde_json::Value as Json;
use store::FrozenTrial;

/// A float as Optuna users read it: `inf`, `-inf`, `nan`, else the
/// shortest digits that read back as `v`, in scientific notation where
/// Python's `repr` uses it (exponent below -4 or from 16: `1e+300`,
/// `1e-05`), so no number prints as hundreds of digits.
pub fn float(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` has an exponent");
    let exp: i32 = exp.parse().expect("`{:e}` has an integer exponent");
    if v == 0.0 || (-4..16).contains(&exp) {
        format!("{v}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

/// A float for JSON output: a number, or as a string the token Python's
/// `json.dumps` writes for it (`NaN`, `Infinity`, `-Infinity`), which is
/// how a non-finite number in an attribute Optuna stored reads too, so one
/// export spells each one way.
pub fn float_json(v: f64) -> Json {
    if v.is_nan() {
        Json::from("NaN")
    } else if v.is_infinite() {
        Json::from(if v > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        Json::from(v)
    }
}

/// The trial's objective values, comma-separated; `-` when none.
pub fn values(t: &FrozenTrial) -> String {
    match &t.values {
        Some(v) => v.iter().map(|&x| float(x)).collect::<Vec<_>>().join(","),
        None => "-".into(),
    }
}

/// A parameter's external value as JSON.
pub fn param_json(p: &store::Param) -> Json {
    store::value_to_json(&p.value())
}

/// A JSON value as one short token: strings bare, the rest compact JSON.
pub fn json_token(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `s` with its control characters and bidirectional formatting marks
/// escaped as Rust escapes them (`\u{202e}`): a right-to-left override in
/// a study or parameter name would reverse the rest of a printed row.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() || is_bidi_format(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// Unicode's invisible bidirectional marks, embeddings, overrides and
/// isolates (U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069).
pub fn is_bidi_format(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `name=value` pairs of every parameter, sorted by name.
pub fn params(t: &FrozenTrial) -> String {
    t.params
        .iter()
        .map(|(name, p)| {
            format!(
                "{}={}",
                printable(name),
                printable(&json_token(&param_json(p)))
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A user attribute, or else a system attribute, of this key.
pub fn attr<'a>(t: &'a FrozenTrial, key: &str) -> Option<&'a Json> {
    t.user_attrs.get(key).or_else(|| t.system_attrs.get(key))
}

#[cfg(test)]
mod tests {
    use super::{float, float_json, printable};
    use serde_json::json;

    /// Control characters and the invisible bidirectional marks are
    /// escaped: a right-to-left override in a name would reverse the
    /// rest of a printed row.
    #[test]
    fn printable_escapes_controls_and_bidirectional_marks() {
        assert_eq!(printable("a\nb\u{1b}"), "a\\nb\\u{1b}");
        for mark in ['\u{200e}', '\u{202e}', '\u{2066}', '\u{2069}'] {
            let shown = printable(&format!("x{mark}y"));
            assert_eq!(shown, format!("x\\u{{{:x}}}y", mark as u32));
        }
        assert_eq!(printable("é日本"), "é日本");
    }

    #[test]
    fn json_spells_non_finite_floats_as_python_json_does() {
        assert_eq!(float_json(f64::NAN), json!("NaN"));
        assert_eq!(float_json(f64::INFINITY), json!("Infinity"));
        assert_eq!(float_json(f64::NEG_INFINITY), json!("-Infinity"));
        assert_eq!(float_json(0.25), json!(0.25));
    }

    #[test]
    fn floats_read_as_python_prints_them() {
        for (v, shown) in [
            (1e300, "1e+300"),
            (-2.5e-7, "-2.5e-07"),
            (1e-5, "1e-05"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000"),
            (0.0001, "0.0001"),
            (0.5, "0.5"),
            (0.0, "0"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(float(v), shown, "{v}");
        }
    }
}
