//! What to read from a data file and what to do with bad records.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The layout of a data file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataFormat {
    /// Comma-separated, with a header row naming the columns.
    Csv,
    /// One JSON object per line (blank lines are ignored).
    JsonLines,
    /// One JSON array of objects. A `.json` file read by its extension
    /// whose text starts with `{` is read as JSON Lines instead (what
    /// `datasets`' `to_json` writes by default).
    JsonArray,
}

impl DataFormat {
    /// The format a file name's extension implies: `.csv`, `.jsonl` /
    /// `.ndjson`, `.json`.
    pub fn from_path(path: &Path) -> Option<Self> {
        let extension = path.extension()?.to_str()?.to_ascii_lowercase();
        match extension.as_str() {
            "csv" => Some(Self::Csv),
            "jsonl" | "ndjson" => Some(Self::JsonLines),
            "json" => Some(Self::JsonArray),
            _ => None,
        }
    }
}

/// Which fields (JSON keys or CSV columns) hold the text(s) and the label.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldSpec {
    /// The field holding the text (default `text`).
    pub text: String,
    /// The second text of a pair task (e.g. NLI), if any.
    #[serde(default)]
    pub text_pair: Option<String>,
    /// The field holding the label (default `label`).
    pub label: String,
}

impl Default for FieldSpec {
    fn default() -> Self {
        Self {
            text: "text".into(),
            text_pair: None,
            label: "label".into(),
        }
    }
}

/// How labels are written and how many classes there are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LabelSpec {
    /// Integer class indices `0..num_classes` (a JSON number, or a string /
    /// CSV cell holding one; an integral float such as `1.0`, as pandas
    /// writes, is accepted).
    Integer {
        /// Number of classes (at least 2 to load).
        num_classes: usize,
    },
    /// Class names; a record's label is the index of its name in this list.
    /// A label written as an integer (a JSON number, `1.0` too) is the name
    /// of that text when the list has it (`["1", "2", "3"]` for star
    /// ratings), else an index into the list; where some names are
    /// integers, an integer that names no class is a bad record.
    Names(Vec<String>),
}

impl LabelSpec {
    /// The class count: `num_classes`, or the number of names.
    pub fn num_classes(&self) -> usize {
        match self {
            Self::Integer { num_classes } => *num_classes,
            Self::Names(names) => names.len(),
        }
    }
}

/// What a load does with a bad record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadRecordPolicy {
    /// Leave it out; it is counted and described in the `LoadReport`.
    #[default]
    Skip,
    /// Fail the load, listing every bad record of the file.
    Reject,
}

/// Everything a load needs besides the file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadOptions {
    /// `None`: from the file's extension.
    #[serde(default)]
    pub format: Option<DataFormat>,
    /// Which fields hold the text(s) and the label (default `text` and
    /// `label`, no pair).
    #[serde(default)]
    pub fields: FieldSpec,
    /// How labels are written and how many classes there are (required).
    pub labels: LabelSpec,
    /// What to do with a bad record (default: skip it).
    #[serde(default)]
    pub bad_records: BadRecordPolicy,
}

impl LoadOptions {
    /// `text` / `label` fields, integer labels, bad records skipped.
    pub fn new(num_classes: usize) -> Self {
        Self {
            format: None,
            fields: FieldSpec::default(),
            labels: LabelSpec::Integer { num_classes },
            bad_records: BadRecordPolicy::Skip,
        }
    }
}
