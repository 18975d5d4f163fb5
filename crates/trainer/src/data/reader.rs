//! Loading a file: pick the format, parse, apply the bad-record policy.

use std::path::Path;

use super::error::DataError;
use super::json::{Parsed, looks_like_json_lines, read_json_array, read_json_lines};
use super::lines::LineStarts;
use super::options::{BadRecordPolicy, DataFormat, FieldSpec, LabelSpec, LoadOptions};
use super::record::{BadRecordReason, Dataset, Example, LoadReport, Records};
use super::table::{csv_header_end, read_csv};

/// Loads a data file. The format is `options.format`, or else the one the
/// extension implies; the file name in messages is the path as given.
pub fn load_file(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Dataset, DataError> {
    let text = read_data_file(path.as_ref(), options.format)?;
    load_decoded(
        &text.file,
        &text.contents,
        text.format,
        options,
        &text.not_utf8,
    )
}

/// The byte order mark some editors (and Excel's "CSV UTF-8") put first.
const BOM: &str = "\u{FEFF}";

/// A data file read for parsing.
pub(crate) struct DataText {
    /// The path as given, for messages.
    pub file: String,
    /// The text, without a leading byte order mark, bytes that are not
    /// UTF-8 decoded lossily.
    pub contents: String,
    pub format: DataFormat,
    /// The bytes that are not UTF-8 (see [`decode`]).
    pub not_utf8: Vec<NotUtf8>,
}

/// Reads a data file: its format is `format`, else the extension's (a
/// `.json` file that holds JSON Lines, as `datasets`' `to_json` writes by
/// default, is read as JSON Lines).
pub(crate) fn read_data_file(
    path: &Path,
    format: Option<DataFormat>,
) -> Result<DataText, DataError> {
    let file = path.display().to_string();
    let implied = DataFormat::from_path(path);
    if format.is_none() && implied.is_none() {
        return Err(DataError::UnknownFormat { file });
    }
    let bytes = std::fs::read(path).map_err(|source| DataError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let bytes = bytes.strip_prefix(BOM.as_bytes()).unwrap_or(&bytes);
    let (contents, not_utf8) = decode(bytes);
    let format = match (format, implied) {
        (Some(given), _) => given,
        (None, Some(DataFormat::JsonArray)) if looks_like_json_lines(&contents) => {
            DataFormat::JsonLines
        }
        (None, implied) => implied.expect("checked above"),
    };
    Ok(DataText {
        file,
        contents,
        format,
        not_utf8,
    })
}

/// A byte that is not UTF-8: its byte offset in the decoded text (where its
/// U+FFFD is), its 1-based line and byte column in the file, and the byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NotUtf8 {
    offset: usize,
    line: usize,
    column: usize,
    byte: u8,
}

/// The file as text, each run of bytes that are not UTF-8 decoded lossily
/// (U+FFFD) and listed, so the record holding it can be refused or skipped
/// rather than the whole file refused.
fn decode(bytes: &[u8]) -> (String, Vec<NotUtf8>) {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return (text.to_string(), Vec::new());
    }
    let lines = LineStarts::new(bytes);
    let mut text = String::with_capacity(bytes.len());
    let mut bad = Vec::new();
    let mut in_file = 0;
    for chunk in bytes.utf8_chunks() {
        text.push_str(chunk.valid());
        in_file += chunk.valid().len();
        if let Some(&byte) = chunk.invalid().first() {
            bad.push(NotUtf8 {
                offset: text.len(),
                line: lines.line(in_file),
                column: lines.column(in_file),
                byte,
            });
            text.push(char::REPLACEMENT_CHARACTER);
            in_file += chunk.invalid().len();
        }
    }
    (text, bad)
}

/// Loads records from text already in memory; `file` names it in messages.
pub fn load_str(
    file: &str,
    contents: &str,
    format: DataFormat,
    options: &LoadOptions,
) -> Result<Dataset, DataError> {
    let contents = contents.strip_prefix(BOM).unwrap_or(contents);
    load_decoded(file, contents, format, options, &[])
}

/// A record whose lines hold a byte that is not UTF-8 is a bad record (the
/// policy decides); such a byte outside every record (a CSV header) fails
/// the file.
fn load_decoded(
    file: &str,
    contents: &str,
    format: DataFormat,
    options: &LoadOptions,
    not_utf8: &[NotUtf8],
) -> Result<Dataset, DataError> {
    if options.labels.num_classes() < 2 {
        return Err(DataError::NoClasses);
    }
    let parsed = parse(
        file,
        contents,
        format,
        &options.fields,
        Some(&options.labels),
        not_utf8,
    )?;
    let mut examples = Vec::with_capacity(parsed.len());
    let mut report = LoadReport::default();
    for (location, result) in parsed {
        match result {
            Ok(example) => examples.push(example),
            Err(reason) => report.skipped.push(super::BadRecord { location, reason }),
        }
    }
    report.loaded = examples.len();
    if options.bad_records == BadRecordPolicy::Reject && !report.skipped.is_empty() {
        return Err(DataError::Rejected {
            file: file.into(),
            bad: report.skipped,
        });
    }
    if examples.is_empty() {
        return Err(DataError::Empty {
            file: file.into(),
            bad: report.skipped,
        });
    }
    let label_names = match &options.labels {
        LabelSpec::Names(names) => Some(names.clone()),
        LabelSpec::Integer { .. } => None,
    };
    Ok(Dataset {
        examples,
        num_classes: options.labels.num_classes(),
        label_names,
        report,
    })
}

impl Dataset {
    /// Appends another load's examples and report; both must have the same
    /// classes.
    pub fn append(&mut self, other: Dataset) -> Result<(), DataError> {
        if other.num_classes != self.num_classes || other.label_names != self.label_names {
            return Err(DataError::ClassMismatch {
                ours: self.num_classes,
                theirs: other.num_classes,
            });
        }
        self.examples.extend(other.examples);
        self.report.merge(other.report);
        Ok(())
    }
}

/// Every record of `contents` in file order, each with its location; a
/// record holding a byte that is not UTF-8 is bad (the policy then decides),
/// and such a byte outside every record (a CSV header) fails the file.
/// Without `labels`, only the text fields are read.
pub(crate) fn parse(
    file: &str,
    contents: &str,
    format: DataFormat,
    fields: &FieldSpec,
    labels: Option<&LabelSpec>,
    not_utf8: &[NotUtf8],
) -> Result<Records<Example>, DataError> {
    let parsed = match format {
        DataFormat::Csv => {
            // Checked first: a header cell with such a byte would otherwise
            // read as a missing column.
            let header_end = csv_header_end(contents);
            if let Some(bad) = not_utf8.iter().find(|bad| bad.offset < header_end) {
                return Err(not_utf8_outside_records(file, bad));
            }
            read_csv(file, contents, fields, labels)?
        }
        DataFormat::JsonLines => read_json_lines(file, contents, fields, labels),
        DataFormat::JsonArray => read_json_array(file, contents, fields, labels)?,
    };
    mark_not_utf8(file, parsed, not_utf8)
}

/// Marks each record holding a byte that is not UTF-8 as bad, by the first
/// such byte in it. The owner is found by byte offset, not line: a JSON
/// array on one line holds many records.
fn mark_not_utf8(
    file: &str,
    mut parsed: Parsed,
    not_utf8: &[NotUtf8],
) -> Result<Records<Example>, DataError> {
    for bad in not_utf8 {
        // The record this byte belongs to: the last one starting at or before it.
        let owner = parsed.partition_point(|record| record.start <= bad.offset);
        if owner == 0 {
            return Err(not_utf8_outside_records(file, bad));
        }
        let record = &mut parsed[owner - 1];
        if !matches!(record.example, Err(BadRecordReason::NotUtf8 { .. })) {
            record.example = Err(BadRecordReason::NotUtf8 {
                line: bad.line,
                column: bad.column,
                byte: bad.byte,
            });
        }
    }
    Ok(parsed
        .into_iter()
        .map(|record| (record.location, record.example))
        .collect())
}

fn not_utf8_outside_records(file: &str, bad: &NotUtf8) -> DataError {
    DataError::NotUtf8 {
        file: file.into(),
        line: bad.line,
        column: bad.column,
        byte: bad.byte,
    }
}
