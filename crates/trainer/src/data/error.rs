//! Why a data set could not be loaded.

use std::path::PathBuf;

use super::record::BadRecord;

/// How many bad records a `Rejected` error's message lists before "and N more".
const LISTED_BAD_RECORDS: usize = 20;

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("cannot read data file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "cannot tell the format of {file}: use a .csv, .jsonl or .json name, or set the format"
    )]
    UnknownFormat { file: String },
    /// The file as a whole cannot be parsed (a JSON array that is not valid
    /// JSON, a CSV header that cannot be read): no record can be trusted.
    #[error("{file}:{line}: cannot parse: {message}")]
    Parse {
        file: String,
        line: usize,
        message: String,
    },
    #[error("{file}: no column `{column}` in the CSV header {header:?}")]
    MissingColumn {
        file: String,
        column: String,
        header: Vec<String>,
    },
    #[error("the data source lists no files")]
    NoFiles,
    #[error("the label spec has fewer than 2 classes: a classifier needs at least 2")]
    NoClasses,
    #[error("{file}: {} bad record(s) and the policy is to reject:\n{}", bad.len(), list(bad))]
    Rejected { file: String, bad: Vec<BadRecord> },
    #[error(
        "cannot combine data sets with different classes ({ours} and {theirs} classes, or other names)"
    )]
    ClassMismatch { ours: usize, theirs: usize },
    #[error(
        "{file}:{line}: byte 0x{byte:02X} at column {column} is not UTF-8 (outside any record)"
    )]
    NotUtf8 {
        file: String,
        line: usize,
        column: usize,
        byte: u8,
    },
    /// No record is valid; `bad` is every record, each with its reason.
    #[error("{file}: no valid record{}", every_record_bad(bad))]
    Empty { file: String, bad: Vec<BadRecord> },
    /// A declared class that no example has: it could never be learnt nor
    /// scored (its F1 is 0 in every trial), and a count far beyond the
    /// data's (a typo) would size the head and the split by it.
    #[error("{}", class_without_examples(*num_classes, *with_examples, *missing, missing_name.as_deref()))]
    ClassWithoutExamples {
        num_classes: usize,
        /// Distinct labels the examples have.
        with_examples: usize,
        /// The first class index without an example.
        missing: usize,
        /// Its name, when the labels are given as names.
        missing_name: Option<String>,
    },
    #[error("example {index} has label {label}, outside 0..{num_classes}")]
    LabelOutOfRange {
        index: usize,
        label: usize,
        num_classes: usize,
    },
    #[error("cannot split: the validation fraction {fraction} is not strictly between 0 and 1")]
    InvalidSplit { fraction: f64 },
    /// One side of the split has no example: nothing to train on, or no
    /// score (a validation set of none would score every trial 0).
    #[error(
        "the split leaves the {side} set empty: {examples} examples in {groups} groups of distinct text, validation fraction {fraction}; give more distinct examples or another fraction"
    )]
    EmptySplit {
        side: &'static str,
        examples: usize,
        groups: usize,
        fraction: f64,
    },
    #[error("micro-batch size must be at least 1")]
    ZeroBatchSize,
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenize::TokenizerError),
}

fn class_without_examples(
    num_classes: usize,
    with_examples: usize,
    missing: usize,
    missing_name: Option<&str>,
) -> String {
    match missing_name {
        Some(name) => format!(
            "label_names lists {num_classes} classes, but no example has label `{name}`; list only the labels the data uses"
        ),
        None => format!(
            "num_classes = {num_classes}, but the examples have {with_examples} distinct labels (none has label {missing}); set num_classes to the number of classes the data has"
        ),
    }
}

fn every_record_bad(bad: &[BadRecord]) -> String {
    match bad.len() {
        0 => String::new(),
        n => format!(": each of its {n} record(s) is bad:\n{}", list(bad)),
    }
}

fn list(bad: &[BadRecord]) -> String {
    let mut text = bad
        .iter()
        .take(LISTED_BAD_RECORDS)
        .map(|b| format!("  {b}"))
        .collect::<Vec<_>>()
        .join("\n");
    if bad.len() > LISTED_BAD_RECORDS {
        text.push_str(&format!(
            "\n  ... and {} more",
            bad.len() - LISTED_BAD_RECORDS
        ));
    }
    text
}
