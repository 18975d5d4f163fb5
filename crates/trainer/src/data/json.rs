//! JSON Lines and JSON-array records.

use std::borrow::Cow;

use serde_json::Value;
use serde_json::value::RawValue;

use super::error::DataError;
use super::label::{Field, to_example};
use super::lines::{LineStarts, lines};
use super::options::{FieldSpec, LabelSpec};
use super::record::{BadRecordReason, Example, RecordLocation};

/// A record as a reader parsed it, with the byte offset where it starts in
/// the text, which places a byte that is not UTF-8 in its record.
pub(crate) struct ParsedRecord {
    pub start: usize,
    pub location: RecordLocation,
    pub example: Result<Example, BadRecordReason>,
}

/// Every record of a text in file order.
pub(crate) type Parsed = Vec<ParsedRecord>;

/// Whether a text meant as a JSON array holds JSON Lines instead: an array
/// never starts with `{`.
pub(crate) fn looks_like_json_lines(contents: &str) -> bool {
    contents.trim_start().starts_with('{')
}

/// One JSON object per non-blank line. Lines end as everywhere else in
/// the data readers (`\n`, `\r\n` or a lone `\r`): JSON text holds no raw
/// `\r` inside a string, so a lone one can only end a line.
pub(crate) fn read_json_lines(
    file: &str,
    contents: &str,
    fields: &FieldSpec,
    labels: Option<&LabelSpec>,
) -> Parsed {
    let mut parsed = Vec::new();
    for (number, (line_start, line)) in lines(contents).enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let location = RecordLocation {
            file: file.into(),
            line: number + 1,
            index: None,
        };
        let example = match serde_json::from_str::<Value>(&quote_non_finite(line).0) {
            Ok(value) => from_value(&value, fields, labels),
            Err(e) => Err(BadRecordReason::Malformed {
                message: format!("invalid JSON: {e}"),
            }),
        };
        parsed.push(ParsedRecord {
            start: line_start,
            location,
            example,
        });
    }
    parsed
}

/// A JSON array of objects. The array itself must parse (an error in it
/// leaves no record trustworthy; one that starts with `{` is said to look
/// like JSON Lines); each element is then checked on its own, located by its
/// index and the line it starts on.
pub(crate) fn read_json_array(
    file: &str,
    contents: &str,
    fields: &FieldSpec,
    labels: Option<&LabelSpec>,
) -> Result<Parsed, DataError> {
    let lines = LineStarts::new(contents.as_bytes());
    let (quoted, quoted_at) = quote_non_finite(contents);
    // Each token quoted before an offset in `quoted` moved it
    // `NON_FINITE_GROWTH` bytes from the file's.
    let in_file = |in_quoted: usize| {
        in_quoted
            .saturating_sub(NON_FINITE_GROWTH * quoted_at.partition_point(|&at| at < in_quoted))
    };
    let elements: Vec<&RawValue> = serde_json::from_str(&quoted).map_err(|e| {
        let at = in_file(offset_of(&quoted, e.line(), e.column()));
        let (line, column) = (lines.line(at), lines.column(at));
        DataError::Parse {
            file: file.into(),
            line,
            message: parse_error_message(&e, contents, (line, column)),
        }
    })?;
    let base = quoted.as_ptr() as usize;
    let mut parsed = Vec::with_capacity(elements.len());
    for (index, raw) in elements.into_iter().enumerate() {
        // `raw` borrows from `quoted`, so its address gives its offset there.
        let start = in_file(raw.get().as_ptr() as usize - base);
        let location = RecordLocation {
            file: file.into(),
            line: lines.line(start),
            index: Some(index),
        };
        let example = match serde_json::from_str::<Value>(raw.get()) {
            Ok(value) => from_value(&value, fields, labels),
            Err(e) => Err(BadRecordReason::Malformed {
                message: e.to_string(),
            }),
        };
        parsed.push(ParsedRecord {
            start,
            location,
            example,
        });
    }
    Ok(parsed)
}

/// The byte offset in `text` of serde_json's 1-based line and column, which
/// count lines by `\n` alone (the file's may also end at a lone `\r`).
fn offset_of(text: &str, line: usize, column: usize) -> usize {
    let line_start = match line {
        0 | 1 => 0,
        _ => text
            .match_indices('\n')
            .nth(line - 2)
            .map_or(text.len(), |(at, _)| at + 1),
    };
    (line_start + column.saturating_sub(1)).min(text.len())
}

/// serde's message at the file's `(line, column)` (counted as the records'
/// lines are), and the way out when the text is JSON Lines.
fn parse_error_message(
    error: &serde_json::Error,
    contents: &str,
    (line, column): (usize, usize),
) -> String {
    let serde_at = format!(" at line {} column {}", error.line(), error.column());
    let message = error.to_string();
    let message = match message.strip_suffix(&serde_at) {
        Some(what) => format!("{what} at line {line} column {column}"),
        None => message,
    };
    if looks_like_json_lines(contents) {
        format!(
            "{message} (the text starts with `{{`, as JSON Lines do: name the file .jsonl or set the format to json_lines)"
        )
    } else {
        message
    }
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

/// What a bare non-finite token becomes in the JSON text: a string of this
/// escape (a NUL, which no text to classify starts with) and the token, so
/// that a record is told from one whose text is the word "NaN"
/// ([`non_finite`]).
const NON_FINITE_MARK: &str = "\\u0000";
/// The bytes each quoted token adds: the mark and two quotes.
const NON_FINITE_GROWTH: usize = NON_FINITE_MARK.len() + 2;

/// The token (`NaN`, `Infinity`, `-Infinity`) a string of a parsed record
/// stands for, when the file had the bare token there ([`quote_non_finite`]).
pub(crate) fn non_finite(s: &str) -> Option<&str> {
    s.strip_prefix('\0')
        .filter(|t| ["-Infinity", "Infinity", "NaN"].contains(t))
}

/// Bare `NaN`, `Infinity` and `-Infinity` (what Python's `json` writes for
/// non-finite floats, and invalid JSON) turned into marked strings, so such
/// a record is reported as a bad label or text instead of making the line,
/// or a whole JSON array, unreadable. Nothing else changes, line breaks
/// included. Also returns where each opening quote went in the new text
/// (each token quoted moves what follows it [`NON_FINITE_GROWTH`] bytes on).
fn quote_non_finite(text: &str) -> (Cow<'_, str>, Vec<usize>) {
    const TOKENS: [&str; 3] = ["-Infinity", "Infinity", "NaN"];
    if !TOKENS[1..].iter().any(|t| text.contains(t)) {
        return (Cow::Borrowed(text), Vec::new());
    }
    let mut quoted_at = Vec::new();
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
            quoted_at.push(out.len());
            out.push('"');
            out.push_str(NON_FINITE_MARK);
            out.push_str(token);
            out.push('"');
            i += token.len();
            copied = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&text[copied..]);
    (Cow::Owned(out), quoted_at)
}
