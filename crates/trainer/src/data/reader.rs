//! Loading a file: pick the format, parse, apply the bad-record policy.

use std::path::Path;

use super::error::DataError;
use super::json::{read_json_array, read_json_lines};
use super::options::{BadRecordPolicy, DataFormat, LabelSpec, LoadOptions};
use super::record::{BadRecordReason, Dataset, LoadReport, Records};
use super::table::read_csv;

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

/// A data file read for parsing.
pub(crate) struct DataText {
    /// The path as given, for messages.
    pub file: String,
    /// The text, lines that are not UTF-8 decoded lossily.
    pub contents: String,
    pub format: DataFormat,
    /// The lines that are not UTF-8 (see [`mark_not_utf8`]).
    pub not_utf8: Vec<NotUtf8>,
}

/// Reads a data file: its format is `format`, else the extension's.
pub(crate) fn read_data_file(
    path: &Path,
    format: Option<DataFormat>,
) -> Result<DataText, DataError> {
    let file = path.display().to_string();
    let format = format
        .or_else(|| DataFormat::from_path(path))
        .ok_or_else(|| DataError::UnknownFormat { file: file.clone() })?;
    let bytes = std::fs::read(path).map_err(|source| DataError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let (contents, not_utf8) = decode_lines(&bytes);
    Ok(DataText {
        file,
        contents,
        format,
        not_utf8,
    })
}

/// A line holding bytes that are not UTF-8: its 1-based number, the 1-based
/// byte column of the first bad byte, and that byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NotUtf8 {
    line: usize,
    column: usize,
    byte: u8,
}

/// The file as text, with each line that is not UTF-8 decoded lossily
/// (U+FFFD) and listed, so its record can be refused or skipped by line
/// rather than the whole file refused.
fn decode_lines(bytes: &[u8]) -> (String, Vec<NotUtf8>) {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return (text.to_string(), Vec::new());
    }
    let mut bad = Vec::new();
    let mut text = String::with_capacity(bytes.len());
    for (i, line) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
        match std::str::from_utf8(line) {
            Ok(l) => text.push_str(l),
            Err(e) => {
                bad.push(NotUtf8 {
                    line: i + 1,
                    column: e.valid_up_to() + 1,
                    byte: line[e.valid_up_to()],
                });
                text.push_str(&String::from_utf8_lossy(line));
            }
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
    let parsed = match format {
        DataFormat::Csv => read_csv(file, contents, &options.fields, Some(&options.labels))?,
        DataFormat::JsonLines => {
            read_json_lines(file, contents, &options.fields, Some(&options.labels))
        }
        DataFormat::JsonArray => {
            read_json_array(file, contents, &options.fields, Some(&options.labels))?
        }
    };
    let parsed = mark_not_utf8(file, parsed, not_utf8)?;
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

/// Marks each record holding a line that is not UTF-8 as bad (the policy
/// then decides); such a line outside every record (a CSV header) fails the
/// file.
pub(crate) fn mark_not_utf8<T>(
    file: &str,
    mut parsed: Records<T>,
    not_utf8: &[NotUtf8],
) -> Result<Records<T>, DataError> {
    for bad in not_utf8 {
        // The record this line belongs to: the last one starting at or before it.
        let owner = parsed.partition_point(|(at, _)| at.line <= bad.line);
        if owner == 0 {
            return Err(DataError::NotUtf8 {
                file: file.into(),
                line: bad.line,
                column: bad.column,
                byte: bad.byte,
            });
        }
        parsed[owner - 1].1 = Err(BadRecordReason::NotUtf8 {
            column: bad.column,
            byte: bad.byte,
        });
    }
    Ok(parsed)
}
