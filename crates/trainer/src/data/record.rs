//! Examples, bad records and what a load reports.

use std::fmt;

/// One labelled example, validated: non-empty text(s), `label < num_classes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Example {
    /// The (first) text, never empty nor only whitespace.
    pub text: String,
    /// The second text of a pair task.
    pub text_pair: Option<String>,
    /// Class index, below the data set's `num_classes`.
    pub label: usize,
}

/// Every record of a file in file order, each with where it is; a bad
/// record is its reason, never left out.
pub type Records<T> = Vec<(RecordLocation, Result<T, BadRecordReason>)>;

/// Where a record is: always a file and a 1-based line; for a JSON array also
/// the 0-based index of the record in the array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordLocation {
    /// The file name as given to the loader (a path or an embedded name).
    pub file: String,
    /// 1-based line where the record starts.
    pub line: usize,
    /// 0-based record index, for JSON arrays.
    pub index: Option<usize>,
}

impl fmt::Display for RecordLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(index) => write!(f, "{}:{} (record {index})", self.file, self.line),
            None => write!(f, "{}:{}", self.file, self.line),
        }
    }
}

/// What is wrong with a record.
#[derive(Clone, Debug, PartialEq)]
pub enum BadRecordReason {
    /// The line is not valid JSON / CSV, or the CSV row has the wrong number
    /// of fields.
    Malformed {
        /// The parser's own message.
        message: String,
    },
    /// A JSON record that is not an object.
    NotAnObject,
    /// The text field is absent, null or not a string.
    MissingText {
        /// The text (or pair) field.
        field: String,
    },
    /// The text is empty or only whitespace.
    EmptyText {
        /// The text (or pair) field.
        field: String,
    },
    /// The label field is absent (or an empty CSV cell).
    MissingLabel {
        /// The label field.
        field: String,
    },
    /// The label is JSON `null`.
    NullLabel {
        /// The label field.
        field: String,
    },
    /// The label is NaN (`"NaN"`, `"nan"`: how pandas writes a missing value).
    NanLabel {
        /// The label field.
        field: String,
    },
    /// The label is not an integer (`1.5`, `true`, an unknown word).
    NonIntegerLabel {
        /// The label field.
        field: String,
        /// The label as read: JSON text, or a label string in quotes.
        value: String,
    },
    /// An integer label outside `0..num_classes`.
    LabelOutOfRange {
        /// The label field.
        field: String,
        /// The label read (negative values included).
        value: i128,
        /// Classes the label spec declares.
        num_classes: usize,
    },
    /// A label name not in the label list.
    UnknownLabelName {
        /// The label field.
        field: String,
        /// The label as written, trimmed.
        value: String,
        /// The label names of the `LabelSpec`, in class order.
        names: Vec<String>,
    },
    /// A line of the record holds a byte that is not UTF-8: the first such
    /// byte, at a 1-based line of the file and byte column of that line (a
    /// quoted CSV field can span lines, so it need not be the record's
    /// first line).
    NotUtf8 {
        /// 1-based line of the byte in the file.
        line: usize,
        /// 1-based byte column of the byte in its line.
        column: usize,
        /// The first byte that is not UTF-8.
        byte: u8,
    },
}

impl fmt::Display for BadRecordReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed { message } => write!(f, "malformed record: {message}"),
            Self::NotAnObject => write!(f, "record is not a JSON object"),
            Self::MissingText { field } => {
                write!(f, "text field `{field}` is missing or not a string")
            }
            Self::EmptyText { field } => write!(f, "text field `{field}` is empty"),
            Self::MissingLabel { field } => write!(f, "label field `{field}` is missing"),
            Self::NullLabel { field } => write!(f, "label field `{field}` is null"),
            Self::NanLabel { field } => write!(f, "label field `{field}` is NaN"),
            Self::NonIntegerLabel { field, value } => {
                write!(f, "label field `{field}` is not an integer: {value}")
            }
            Self::LabelOutOfRange {
                field,
                value,
                num_classes,
            } => write!(
                f,
                "label field `{field}` is {value}, outside 0..{num_classes}"
            ),
            Self::UnknownLabelName {
                field,
                value,
                names,
            } => write!(
                f,
                "label field `{field}` is {value:?}, not one of {names:?}"
            ),
            Self::NotUtf8 { line, column, byte } => {
                write!(
                    f,
                    "byte 0x{byte:02X} at line {line}, column {column} is not UTF-8"
                )
            }
        }
    }
}

impl BadRecordReason {
    /// A short stable name for counting reasons ("empty_text", ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Malformed { .. } => "malformed",
            Self::NotAnObject => "not_an_object",
            Self::MissingText { .. } => "missing_text",
            Self::EmptyText { .. } => "empty_text",
            Self::MissingLabel { .. } => "missing_label",
            Self::NullLabel { .. } => "null_label",
            Self::NanLabel { .. } => "nan_label",
            Self::NonIntegerLabel { .. } => "non_integer_label",
            Self::LabelOutOfRange { .. } => "label_out_of_range",
            Self::UnknownLabelName { .. } => "unknown_label_name",
            Self::NotUtf8 { .. } => "not_utf8",
        }
    }
}

/// A record that was not loaded, where it is and why.
#[derive(Clone, Debug, PartialEq)]
pub struct BadRecord {
    /// Where the record is in its file.
    pub location: RecordLocation,
    /// Why it was not loaded.
    pub reason: BadRecordReason,
}

impl fmt::Display for BadRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.reason)
    }
}

/// What a load kept and what it skipped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadReport {
    /// Records loaded as examples.
    pub loaded: usize,
    /// Records skipped, in file order (empty under `BadRecordPolicy::Reject`,
    /// which fails instead).
    pub skipped: Vec<BadRecord>,
}

impl LoadReport {
    /// Skipped records per reason kind, e.g. `[("empty_text", 3)]`, sorted
    /// by kind.
    pub fn skipped_by_reason(&self) -> Vec<(&'static str, usize)> {
        let mut counts = std::collections::BTreeMap::new();
        for bad in &self.skipped {
            *counts.entry(bad.reason.kind()).or_insert(0) += 1;
        }
        counts.into_iter().collect()
    }

    /// One line per skipped record, after a count, for logs.
    pub fn summary(&self) -> String {
        let mut text = format!(
            "loaded {} records, skipped {}",
            self.loaded,
            self.skipped.len()
        );
        for (kind, count) in self.skipped_by_reason() {
            text.push_str(&format!(", {kind}: {count}"));
        }
        for bad in &self.skipped {
            text.push_str(&format!("\n  skipped {bad}"));
        }
        text
    }

    pub(crate) fn merge(&mut self, other: LoadReport) {
        self.loaded += other.loaded;
        self.skipped.extend(other.skipped);
    }
}

/// Validated examples with their class count and load report.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// The valid examples, in file order (files in the order given).
    pub examples: Vec<Example>,
    /// Classes the label spec declares (at least 2); every label is below it.
    pub num_classes: usize,
    /// Class names when the labels were given as names.
    pub label_names: Option<Vec<String>>,
    /// What the load kept and skipped, summed over every file.
    pub report: LoadReport,
}

impl Dataset {
    /// Every declared class has at least one example
    /// ([`super::DataError::ClassWithoutExamples`] names the first that has none).
    /// Counted without allocating per declared class, so any count is safe
    /// to check.
    pub fn check_classes_have_examples(&self) -> Result<(), super::DataError> {
        let seen: std::collections::BTreeSet<usize> =
            self.examples.iter().map(|e| e.label).collect();
        if seen.len() >= self.num_classes {
            return Ok(());
        }
        // Fewer distinct labels than classes: one of 0..=seen.len() is absent.
        let missing = (0..=seen.len()).find(|c| !seen.contains(c)).unwrap_or(0);
        Err(super::DataError::ClassWithoutExamples {
            num_classes: self.num_classes,
            with_examples: seen.len(),
            missing,
            missing_name: self
                .label_names
                .as_ref()
                .and_then(|names| names.get(missing).cloned()),
        })
    }

    /// Examples per class, indexed by label.
    pub fn class_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.num_classes];
        for example in &self.examples {
            counts[example.label] += 1;
        }
        counts
    }
}
