//! Loading a file: pick the format, parse, apply the bad-record policy.

use std::path::Path;

use super::error::DataError;
use super::json::{read_json_array, read_json_lines};
use super::options::{BadRecordPolicy, DataFormat, LabelSpec, LoadOptions};
use super::record::{Dataset, LoadReport};
use super::table::read_csv;

/// Loads a data file. The format is `options.format`, or else the one the
/// extension implies; the file name in messages is the path as given.
pub fn load_file(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Dataset, DataError> {
    let (file, contents, format) = read_data_file(path.as_ref(), options.format)?;
    load_str(&file, &contents, format, options)
}

/// A data file's name (for messages), text and format (`format`, else from
/// the extension).
pub(crate) fn read_data_file(
    path: &Path,
    format: Option<DataFormat>,
) -> Result<(String, String, DataFormat), DataError> {
    let file = path.display().to_string();
    let format = format
        .or_else(|| DataFormat::from_path(path))
        .ok_or_else(|| DataError::UnknownFormat { file: file.clone() })?;
    let contents = std::fs::read_to_string(path).map_err(|source| DataError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((file, contents, format))
}

/// Loads records from text already in memory; `file` names it in messages.
pub fn load_str(
    file: &str,
    contents: &str,
    format: DataFormat,
    options: &LoadOptions,
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
        return Err(DataError::Empty { file: file.into() });
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
