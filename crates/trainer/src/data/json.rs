//! JSON Lines and JSON-array records.

use serde_json::Value;
use serde_json::value::RawValue;

use super::error::DataError;
use super::label::{Field, to_example};
use super::options::LoadOptions;
use super::record::{BadRecordReason, Example, RecordLocation};

pub(crate) type Parsed = Vec<(RecordLocation, Result<Example, BadRecordReason>)>;

/// One JSON object per non-blank line.
pub(crate) fn read_json_lines(file: &str, contents: &str, options: &LoadOptions) -> Parsed {
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
            let example = match serde_json::from_str::<Value>(line) {
                Ok(value) => from_value(&value, options),
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
    options: &LoadOptions,
) -> Result<Parsed, DataError> {
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
            Ok(value) => from_value(&value, options),
            Err(e) => Err(BadRecordReason::Malformed {
                message: e.to_string(),
            }),
        };
        parsed.push((location, example));
    }
    Ok(parsed)
}

fn from_value(value: &Value, options: &LoadOptions) -> Result<Example, BadRecordReason> {
    let Value::Object(object) = value else {
        return Err(BadRecordReason::NotAnObject);
    };
    to_example(
        |name| object.get(name).map_or(Field::Absent, Field::Json),
        &options.fields,
        &options.labels,
    )
}
