//! JSON Lines and JSON-array records.

use std::borrow::Cow;

use serde_json::Value;
use serde_json::value::RawValue;

use super::error::DataError;
use super::label::{Field, to_example};
use super::options::{FieldSpec, LabelSpec};
use super::record::{BadRecordReason, Example, RecordLocation, Records};

pub(crate) type Parsed = Records<Example>;

/// One JSON object per non-blank line.
pub(crate) fn read_json_lines(
    file: &str,
    contents: &str,
    fields: &FieldSpec,
    labels: Option<&LabelSpec>,
) -> Parsed {
    contents
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(number, line)| {
            let location = RecordLocation {
                file: file.into(),
                line: number + 1,
                index: None,
            };
            let example = match serde_json::from_str::<Value>(&quote_non_finite(line)) {
                Ok(value) => from_value(&value, fields, labels),
                Err(e) => Err(BadRecordReason::Malformed {
                    message: format!("invalid JSON: {e}"),
                }),
            };
            (location, example)
        })
        .collect()
}

/// A JSON array of objects. The array itself must parse (an error in it
/// leaves no record trustworthy); each element is then checked on its own,
/// located by its index and the line it starts on.
pub(crate) fn read_json_array(
    file: &str,
    contents: &str,
    fields: &FieldSpec,
    labels: Option<&LabelSpec>,
) -> Result<Parsed, DataError> {
    let contents = quote_non_finite(contents);
    let contents = contents.as_ref();
    let elements: Vec<&RawValue> =
        serde_json::from_str(contents).map_err(|e| DataError::Parse {
            file: file.into(),
            line: e.line(),
            message: e.to_string(),
        })?;
    let base = contents.as_ptr() as usize;
    let mut line = 1;
    let mut scanned = 0;
    let mut parsed = Vec::with_capacity(elements.len());
    for (index, raw) in elements.into_iter().enumerate() {
        // `raw` borrows from `contents`, so its address gives its offset.
        let offset = raw.get().as_ptr() as usize - base;
        line += contents[scanned..offset].matches('\n').count();
        scanned = offset;
        let location = RecordLocation {
            file: file.into(),
            line,
            index: Some(index),
        };
        let example = match serde_json::from_str::<Value>(raw.get()) {
            Ok(value) => from_value(&value, fields, labels),
            Err(e) => Err(BadRecordReason::Malformed {
                message: e.to_string(),
            }),
        };
        parsed.push((location, example));
    }
    Ok(parsed)
}

fn from_value(
    value: &Value,
    fields: &FieldSpec,
    labels: Option<&LabelSpec>,
) -> Result<Example, BadRecordReason> {
    let Value::Object(object) = value else {
        return Err(BadRecordReason::NotAnObject);
    };
    to_example(
        |name| object.get(name).map_or(Field::Absent, Field::Json),
        fields,
        labels,
    )
}

/// Bare `NaN`, `Infinity` and `-Infinity` (what Python's `json` writes for
/// non-finite floats, and invalid JSON) turned into strings, so such a record
/// is reported as a bad label or text instead of making the line, or a whole
/// JSON array, unreadable. Nothing else changes, line breaks included.
fn quote_non_finite(text: &str) -> Cow<'_, str> {
    const TOKENS: [&str; 3] = ["-Infinity", "Infinity", "NaN"];
    if !TOKENS[1..].iter().any(|t| text.contains(t)) {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 16);
    let (mut copied, mut i) = (0, 0);
    let (mut in_string, mut escaped) = (false, false);
    while i < bytes.len() {
        let byte = bytes[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            i += 1;
        } else if byte == b'"' {
            in_string = true;
            i += 1;
        } else if let Some(token) = TOKENS.iter().find(|t| bytes[i..].starts_with(t.as_bytes())) {
            out.push_str(&text[copied..i]);
            out.push('"');
            out.push_str(token);
            out.push('"');
            i += token.len();
            copied = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}
