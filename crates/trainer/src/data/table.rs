//! CSV records (a header row names the columns).

use super::error::DataError;
use super::json::Parsed;
use super::label::{Field, to_example};
use super::options::{FieldSpec, LabelSpec};
use super::record::{BadRecordReason, RecordLocation};

pub(crate) fn read_csv(
    file: &str,
    contents: &str,
    fields: &FieldSpec,
    labels: Option<&LabelSpec>,
) -> Result<Parsed, DataError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(contents.as_bytes());
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| DataError::Parse {
            file: file.into(),
            line: 1,
            message: e.to_string(),
        })?
        .iter()
        .map(str::to_string)
        .collect();
    // Texts to classify (no `labels`) need only the text column.
    let mut columns = vec![fields.text.as_str()];
    if labels.is_some() {
        columns.push(fields.label.as_str());
        columns.extend(fields.text_pair.as_deref());
    }
    for column in columns {
        if !header.iter().any(|h| h == column) {
            return Err(DataError::MissingColumn {
                file: file.into(),
                column: column.into(),
                header,
            });
        }
    }
    let mut parsed = Vec::new();
    for result in reader.records() {
        let (line, example) = match result {
            Ok(record) => {
                let line = record.position().map_or(0, |p| p.line() as usize);
                let example = if record.len() != header.len() {
                    Err(BadRecordReason::Malformed {
                        message: format!(
                            "expected {} fields as in the header, found {}",
                            header.len(),
                            record.len()
                        ),
                    })
                } else {
                    to_example(
                        |name| {
                            header
                                .iter()
                                .position(|h| h == name)
                                .and_then(|i| record.get(i))
                                .map_or(Field::Absent, Field::Cell)
                        },
                        fields,
                        labels,
                    )
                };
                (line, example)
            }
            Err(e) => {
                let line = e.position().map_or(0, |p| p.line() as usize);
                let message = e.to_string();
                (line, Err(BadRecordReason::Malformed { message }))
            }
        };
        let location = RecordLocation {
            file: file.into(),
            line,
            index: None,
        };
        parsed.push((location, example));
    }
    Ok(parsed)
}
