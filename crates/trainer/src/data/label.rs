//! Turning one record's fields into a validated [`Example`], shared by the
//! JSON and CSV readers.

use serde_json::Value;

use super::json::non_finite;
use super::options::{FieldSpec, LabelSpec};
use super::record::{BadRecordReason, Example};

/// A field of a record as the file has it.
pub(crate) enum Field<'a> {
    /// The key (or column) is not there.
    Absent,
    /// A JSON value.
    Json(&'a Value),
    /// A CSV cell.
    Cell(&'a str),
}

/// The example a record holds, or why it is bad. Without `labels` (texts to
/// classify, see [`super::load_texts`]) the label field is not read (the
/// example's label is 0) and the pair text may be absent, null or an empty
/// cell.
pub(crate) fn to_example<'a>(
    field: impl Fn(&str) -> Field<'a>,
    fields: &FieldSpec,
    labels: Option<&LabelSpec>,
) -> Result<Example, BadRecordReason> {
    let text = text(field(&fields.text), &fields.text)?;
    let text_pair = match (&fields.text_pair, labels) {
        (None, _) => None,
        (Some(name), None) if is_blank(&field(name)) => None,
        (Some(name), _) => Some(self::text(field(name), name)?),
    };
    let label = match labels {
        Some(spec) => label(field(&fields.label), &fields.label, spec)?,
        None => 0,
    };
    Ok(Example {
        text,
        text_pair,
        label,
    })
}

/// An optional field that is not there.
fn is_blank(value: &Field<'_>) -> bool {
    match value {
        Field::Absent | Field::Json(Value::Null) => true,
        Field::Cell(cell) => cell.is_empty(),
        Field::Json(_) => false,
    }
}

fn text(value: Field<'_>, field: &str) -> Result<String, BadRecordReason> {
    let text = match value {
        // A bare `NaN` or `Infinity` is a number, not a text.
        Field::Json(Value::String(s)) if non_finite(s).is_none() => s.as_str(),
        Field::Cell(s) => s,
        Field::Absent | Field::Json(_) => {
            return Err(BadRecordReason::MissingText {
                field: field.into(),
            });
        }
    };
    if text.trim().is_empty() {
        return Err(BadRecordReason::EmptyText {
            field: field.into(),
        });
    }
    Ok(text.to_string())
}

fn label(value: Field<'_>, field: &str, spec: &LabelSpec) -> Result<usize, BadRecordReason> {
    let field_name = || field.to_string();
    match value {
        Field::Absent => Err(BadRecordReason::MissingLabel {
            field: field_name(),
        }),
        Field::Json(Value::Null) => Err(BadRecordReason::NullLabel {
            field: field_name(),
        }),
        Field::Json(Value::Number(number)) => {
            let integer = if let Some(i) = number.as_i64() {
                Some(i128::from(i))
            } else if let Some(u) = number.as_u64() {
                Some(i128::from(u))
            } else {
                number
                    .as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 1e18)
                    .map(|f| f as i128)
            };
            match integer {
                Some(i) => name_or_index(i, field, spec),
                None => Err(BadRecordReason::NonIntegerLabel {
                    field: field_name(),
                    value: number.to_string(),
                }),
            }
        }
        Field::Json(Value::String(s)) => from_text(non_finite(s).unwrap_or(s), field, spec),
        Field::Json(other) => Err(BadRecordReason::NonIntegerLabel {
            field: field_name(),
            value: other.to_string(),
        }),
        Field::Cell(cell) if cell.trim().is_empty() => Err(BadRecordReason::MissingLabel {
            field: field_name(),
        }),
        Field::Cell(cell) => from_text(cell, field, spec),
    }
}

/// A label written as text: a class name, an integer, or NaN.
fn from_text(text: &str, field: &str, spec: &LabelSpec) -> Result<usize, BadRecordReason> {
    let text = text.trim();
    if let LabelSpec::Names(names) = spec
        && let Some(index) = names.iter().position(|name| name == text)
    {
        return Ok(index);
    }
    if text.eq_ignore_ascii_case("nan") {
        return Err(BadRecordReason::NanLabel {
            field: field.into(),
        });
    }
    if let Ok(integer) = text.parse::<i128>() {
        return name_or_index(integer, field, spec);
    }
    if let Ok(float) = text.parse::<f64>()
        && float.fract() == 0.0
        && float.abs() < 1e18
    {
        return name_or_index(float as i128, field, spec);
    }
    match spec {
        LabelSpec::Names(names) => Err(BadRecordReason::UnknownLabelName {
            field: field.into(),
            value: text.into(),
            names: names.clone(),
        }),
        LabelSpec::Integer { .. } => Err(BadRecordReason::NonIntegerLabel {
            field: field.into(),
            value: format!("{text:?}"),
        }),
    }
}

/// An integer label: the class of that name when the names list it (star
/// ratings named `"1"` to `"5"` are names, not positions), else an index.
/// Where some names are integers, every integer label must be one: a `0`
/// read as the position of `"1"` would share its class with the label `1`.
fn name_or_index(value: i128, field: &str, spec: &LabelSpec) -> Result<usize, BadRecordReason> {
    if let LabelSpec::Names(names) = spec {
        let text = value.to_string();
        if let Some(index) = names.iter().position(|name| name.trim() == text) {
            return Ok(index);
        }
        if names.iter().any(|name| name.trim().parse::<i128>().is_ok()) {
            return Err(BadRecordReason::UnknownLabelName {
                field: field.into(),
                value: text,
                names: names.clone(),
            });
        }
    }
    in_range(value, field, spec)
}

fn in_range(value: i128, field: &str, spec: &LabelSpec) -> Result<usize, BadRecordReason> {
    let num_classes = spec.num_classes();
    if value >= 0 && (value as u128) < num_classes as u128 {
        Ok(value as usize)
    } else {
        Err(BadRecordReason::LabelOutOfRange {
            field: field.into(),
            value,
            num_classes,
        })
    }
}
