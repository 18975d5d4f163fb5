//! CSV records (a header row names the columns).

use super::error::DataError;
use super::json::{Parsed, ParsedRecord};
use super::label::{Field, to_example};
use super::lines::LineStarts;
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
        match header.iter().filter(|h| *h == column).count() {
            0 => {
                return Err(DataError::MissingColumn {
                    file: file.into(),
                    column: column.into(),
                    header,
                });
            }
            1 => {}
            // Which of the two is meant cannot be told.
            _ => {
                return Err(DataError::DuplicateColumn {
                    file: file.into(),
                    column: column.into(),
                    header,
                });
            }
        }
    }
    // csv counts only `\n` as a line break; lines are counted here from
    // each record's byte offset, so a file of lone `\r`s is placed too.
    let lines = LineStarts::new(contents.as_bytes());
    let mut parsed: Parsed = Vec::new();
    let mut records = reader.records().peekable();
    while let Some(result) = records.next() {
        // Without a position (never for text in memory), the previous start.
        let previous = parsed.last().map_or(0, |r| r.start);
        let (start, example) = match result {
            Ok(record) => {
                let start = record
                    .position()
                    .map_or(previous, |p| past_line_breaks(contents, p.byte() as usize));
                let end = match records.peek() {
                    Some(Ok(next)) => next.position().map(|p| p.byte() as usize),
                    Some(Err(e)) => e.position().map(|p| p.byte() as usize),
                    None => Some(contents.len()),
                };
                let raw = end
                    .and_then(|end| contents.as_bytes().get(start..end))
                    .unwrap_or_default();
                let example = if let Some(fault) = quoting_fault(raw, start, &lines) {
                    Err(BadRecordReason::Malformed { message: fault })
                } else if record.len() != header.len() {
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
                (start, example)
            }
            Err(e) => {
                let start = e
                    .position()
                    .map_or(previous, |p| past_line_breaks(contents, p.byte() as usize));
                let message = e.to_string();
                (start, Err(BadRecordReason::Malformed { message }))
            }
        };
        let location = RecordLocation {
            file: file.into(),
            line: lines.line(start),
            index: None,
        };
        parsed.push(ParsedRecord {
            start,
            location,
            example,
        });
    }
    Ok(parsed)
}

/// Why a record's raw text breaks RFC 4180's quoting, which the csv crate
/// reads leniently: a quoted field runs on to the next quote, whatever
/// lines lie between, so one missing quote would silently merge the rows up
/// to the next quote of the file into one text. A quoted field must close
/// at a comma, the line's end or the file's. `start` is the record's offset
/// in the file, for the line of the opening quote.
fn quoting_fault(raw: &[u8], start: usize, lines: &LineStarts) -> Option<String> {
    let mut i = 0;
    let mut field_start = true;
    while i < raw.len() {
        if field_start && raw[i] == b'"' {
            let open = i;
            i += 1;
            loop {
                match (raw.get(i), raw.get(i + 1)) {
                    (None, _) => {
                        return Some(format!(
                            "the quoted field opened on line {} is never closed",
                            lines.line(start + open)
                        ));
                    }
                    (Some(b'"'), Some(b'"')) => i += 2,
                    (Some(b'"'), _) => break,
                    _ => i += 1,
                }
            }
            i += 1;
            match raw.get(i) {
                None | Some(b',' | b'\r' | b'\n') => {}
                Some(_) => {
                    return Some(format!(
                        "the quoted field opened on line {} closes on line {} before more text, \
                         not at a comma or a line's end: a quote is missing or not doubled",
                        lines.line(start + open),
                        lines.line(start + i - 1)
                    ));
                }
            }
            field_start = false;
            continue;
        }
        field_start = matches!(raw[i], b',' | b'\r' | b'\n');
        i += 1;
    }
    None
}

/// Where the header row ends (it can span lines inside quotes); 0 when it
/// does not parse, which [`read_csv`] then reports.
pub(crate) fn csv_header_end(contents: &str) -> usize {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(contents.as_bytes());
    match reader.headers() {
        Ok(_) => reader.position().byte() as usize,
        Err(_) => 0,
    }
}

/// The offset of the first byte at or after `at` that is not a line break.
/// csv places a record after a `\r\n` at its `\n`, and after blank lines at
/// the first of them; no record starts with a line break.
fn past_line_breaks(contents: &str, at: usize) -> usize {
    let rest = contents.as_bytes().get(at..).unwrap_or_default();
    at + rest
        .iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count()
}
