//! JSON spelled byte for byte as Python's `json.dumps` spells it with its
//! defaults (`", "` and `": "` separators, `ensure_ascii`, floats as
//! `repr(float)`), because Optuna writes its rows and its CLI output that
//! way: a `distribution_json` or an `optuna ask` line that memtune writes is
//! then the same bytes Optuna would write.
//!
//! serde_json keeps the serialization (structs in field order, escapes);
//! [`PythonFormatter`] only changes how separators, non-ASCII characters
//! and floats are written. A `serde_json::Value` object sorts its keys, so
//! output whose key order matters goes through structs or [`Object`].
//!
//! ```
//! use store::python_json;
//! let line = python_json::to_string(&serde_json::json!({"lr": 5e-5, "big": 1e16, "one": 1.0}));
//! assert_eq!(line, r#"{"big": 1e+16, "lr": 5e-05, "one": 1.0}"#);
//! ```

use serde::{Serialize, Serializer, ser::SerializeMap};
use serde_json::Value as Json;
use serde_json::ser::Formatter;
use std::io::{self, Write};

/// A `serde_json` formatter that writes what Python's `json.dumps` writes.
/// Non-finite floats are written as `null` (serde_json's rule; Python would
/// write `NaN`, which is not JSON).
#[derive(Clone, Copy, Debug, Default)]
pub struct PythonFormatter;

impl Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn write_f64<W: ?Sized + Write>(&mut self, w: &mut W, value: f64) -> io::Result<()> {
        w.write_all(float_repr(value).as_bytes())
    }

    fn write_f32<W: ?Sized + Write>(&mut self, w: &mut W, value: f32) -> io::Result<()> {
        // Python has no f32: the value as the double it widens to.
        self.write_f64(w, f64::from(value))
    }

    /// serde_json escapes quotes, backslashes and control characters itself
    /// (the same escapes Python uses); `ensure_ascii` also escapes
    /// everything outside printable ASCII, DEL included, as UTF-16 units.
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        for (i, c) in fragment.char_indices() {
            if (' '..='~').contains(&c) {
                w.write_all(&fragment.as_bytes()[i..i + 1])?;
            } else {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    write!(w, "\\u{unit:04x}")?;
                }
            }
        }
        Ok(())
    }
}

/// `value` as Python's `json.dumps(value)` writes it.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
    // Serializing into memory fails only for a map with non-string keys,
    // which neither `Json` nor this crate's types have.
    if value.serialize(&mut ser).is_err() {
        return "null".into();
    }
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// A JSON object whose keys keep the given order, as a Python dict does.
#[derive(Clone, Copy, Debug)]
pub struct Object<'a>(pub &'a [(String, Json)]);

impl Serialize for Object<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// `repr(x)` of a float: the fewest significant digits that read back as
/// `x`, and of those the nearest to `x` with ties to even (Rust's shortest
/// form breaks such ties the other way, e.g. `...458.813` for Python's
/// `...458.812`); fixed notation from 1e-4 up to 1e16, else an exponent
/// with a sign and at least two digits. Non-finite values as Python spells
/// them (`nan`, `inf`, `-inf`).
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    let shortest = format!("{:e}", x.abs());
    let n = shortest
        .split('e')
        .next()
        .unwrap_or("")
        .chars()
        .filter(char::is_ascii_digit)
        .count();
    // Fixed precision is correctly rounded, ties to even.
    let rounded = format!("{:.*e}", n.saturating_sub(1), x.abs());
    let (mantissa, exp) = rounded.split_once('e').unwrap_or((&rounded, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    match exp {
        0..16 => {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                format!("{sign}{digits}{}.0", "0".repeat(int_len - digits.len()))
            } else {
                format!("{sign}{}.{}", &digits[..int_len], &digits[int_len..])
            }
        }
        -4..0 => format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize)),
        _ => {
            let (head, tail) = digits.split_at(1);
            let dot = if tail.is_empty() { "" } else { "." };
            let exp_sign = if exp < 0 { '-' } else { '+' };
            format!("{sign}{head}{dot}{tail}e{exp_sign}{:02}", exp.abs())
        }
    }
}

/// JSON as Python's `json.loads` reads it: besides strict JSON, the
/// `NaN`, `Infinity` and `-Infinity` that `json.dumps` writes for
/// non-finite floats, anywhere in a value; each is read as that string,
/// which `hpo_sampler::json_f64` reads as the float.
pub(crate) fn from_str(text: &str) -> serde_json::Result<Json> {
    serde_json::from_str(text)
        .or_else(|e| serde_json::from_str(&quote_python_floats(text)).map_err(|_| e))
}

/// `text` with each `NaN`, `Infinity` and `-Infinity` outside a string
/// quoted, so that strict JSON reads it as a string. (The trainer's data
/// reader does the same for JSON Lines records, `quote_non_finite` in
/// trainer's `data/json.rs`; the two crates share no dependency.)
fn quote_python_floats(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let (mut in_string, mut escaped) = (false, false);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_string {
            (in_string, escaped) = (escaped || c != '"', !escaped && c == '\\');
        } else if c == '"' {
            in_string = true;
        } else if let Some(token) = ["NaN", "Infinity", "-Infinity"]
            .into_iter()
            .find(|t| rest.starts_with(t))
        {
            out.push('"');
            out.push_str(token);
            out.push('"');
            rest = &rest[token.len()..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The first integer literal outside a string in `text` that fits
/// neither i64 nor u64. serde_json (without `arbitrary_precision`) reads
/// one as the nearest float, where Python keeps every digit; a value that
/// memtune would store rounded is found here and refused instead.
pub(crate) fn wide_integer(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let (mut i, mut in_string, mut escaped) = (0, false, false);
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            (in_string, escaped) = (escaped || b != b'"', !escaped && b == b'\\');
        } else if b == b'"' {
            in_string = true;
        } else if b == b'-' || b.is_ascii_digit() {
            let end = bytes[i..]
                .iter()
                .position(|c| !matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                .map_or(bytes.len(), |n| i + n);
            let token = &text[i..end];
            let integer = token.bytes().any(|c| c.is_ascii_digit())
                && !token.contains(['.', 'e', 'E'])
                && token.parse::<i64>().is_err()
                && token.parse::<u64>().is_err();
            if integer {
                return Some(token);
            }
            i = end;
            continue;
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_like_python_repr() {
        for (x, python) in [
            ("0.00001", "1e-05"),
            ("0.0001", "0.0001"),
            ("1.0", "1.0"),
            ("-0.0", "-0.0"),
            ("12.5", "12.5"),
            ("1e16", "1e+16"),
            ("1.5e300", "1.5e+300"),
            ("123456789012345.0", "123456789012345.0"),
            ("-26474598524458.8125", "-26474598524458.812"),
            ("5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("9999999999999998.0", "9999999999999998.0"),
            ("0.1", "0.1"),
            ("inf", "inf"),
        ] {
            assert_eq!(float_repr(x.parse().unwrap()), python, "{x}");
        }
    }

    #[test]
    fn writes_like_json_dumps() {
        let v = json!({"number": 3, "params": {"a": [1, "x", null, true], "b": 0.5, "c": -7}});
        assert_eq!(
            to_string(&v),
            r#"{"number": 3, "params": {"a": [1, "x", null, true], "b": 0.5, "c": -7}}"#
        );
        assert_eq!(to_string(&json!([])), "[]");
        assert_eq!(to_string(&json!({})), "{}");
        assert_eq!(to_string(&f64::NAN), "null");
    }

    #[test]
    fn strings_are_ascii_escaped_as_python_does() {
        assert_eq!(
            to_string("a,b:\"c\\\n\t\u{1}\u{7f}é€😀"),
            r#""a,b:\"c\\\n\t\u0001\u007f\u00e9\u20ac\ud83d\ude00""#
        );
    }

    #[test]
    fn objects_keep_their_key_order() {
        let entries = [("z".to_string(), json!(1)), ("a".to_string(), json!(1e-5))];
        assert_eq!(to_string(&Object(&entries)), r#"{"z": 1, "a": 1e-05}"#);
    }

    #[test]
    fn wide_integers_are_found_outside_strings_only() {
        assert_eq!(
            wide_integer(r#"{"a": [1, -9223372036854775808, 18446744073709551615]}"#),
            None
        );
        assert_eq!(
            wide_integer(r#"{"a": 1e400, "b": 123456789012345678901234567890.0}"#),
            None
        );
        assert_eq!(
            wide_integer(r#"{"a": "123456789012345678901234567890", "b": -Infinity}"#),
            None
        );
        assert_eq!(
            wide_integer(r#"{"s\"": 1, "a": [2, 18446744073709551616]}"#),
            Some("18446744073709551616")
        );
        assert_eq!(
            wide_integer("[-9223372036854775809]"),
            Some("-9223372036854775809")
        );
    }
}
