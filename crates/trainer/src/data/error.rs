//! Why a data set could not be loaded.

use std::path::PathBuf;

use super::record::BadRecord;

/// How many bad records a `Rejected` error's message lists before "and N more".
const LISTED_BAD_RECORDS: usize = 20;

/// Why a data set (or a file of texts to classify) could not be loaded,
/// split or batched.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The data file could not be read from disk.
    #[error("cannot read data file {}: {source}", path.display())]
    Read {
        /// The file, as given.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// No format was set and the file name's extension implies none.
    #[error(
        "cannot tell the format of {file}: use a .csv, .jsonl or .json name, or set the format"
    )]
    UnknownFormat {
        /// The file name as given to the loader.
        file: String,
    },
    /// The file as a whole cannot be parsed (a JSON array that is not valid
    /// JSON, a CSV header that cannot be read): no record can be trusted.
    #[error("{file}:{line}: cannot parse: {message}")]
    Parse {
        /// The file name as given to the loader.
        file: String,
        /// 1-based line of the fault (1 for a CSV header).
        line: usize,
        /// The parser's own message.
        message: String,
    },
    /// A column that `FieldSpec` names (the text, and when loading
    /// labelled data the label and pair columns) is not in the CSV header.
    #[error("{file}: no column `{column}` in the CSV header {header:?}")]
    MissingColumn {
        /// The file name as given to the loader.
        file: String,
        /// The column looked for.
        column: String,
        /// The header's column names, in file order.
        header: Vec<String>,
    },
    /// A column that `FieldSpec` names is in the CSV header more than once.
    #[error("{file}:1: column `{column}` is in the CSV header more than once: {header:?}")]
    DuplicateColumn {
        /// The file name as given to the loader.
        file: String,
        /// The column named twice.
        column: String,
        /// The header's column names, in file order.
        header: Vec<String>,
    },
    /// A `DataSource::Files` with an empty `paths` list.
    #[error("the data source lists no files")]
    NoFiles,
    /// The `LabelSpec` declares fewer than 2 classes (`num_classes` below 2,
    /// or fewer than 2 label names).
    #[error("the label spec has fewer than 2 classes: a classifier needs at least 2")]
    NoClasses,
    /// The file has bad records and the policy is
    /// `BadRecordPolicy::Reject`; nothing of it is loaded.
    #[error("{file}: {} bad record(s) and the policy is to reject:\n{}", bad.len(), list(bad))]
    Rejected {
        /// The file name as given to the loader.
        file: String,
        /// Every bad record of the file, in file order (the message lists
        /// the first 20).
        bad: Vec<BadRecord>,
    },
    /// Two loads appended into one data set have different class counts or
    /// label names (e.g. the files of one `DataSource::Files`).
    #[error(
        "cannot combine data sets with different classes ({ours} and {theirs} classes, or other names)"
    )]
    ClassMismatch {
        /// Class count of the data set appended to.
        ours: usize,
        /// Class count of the data set being appended.
        theirs: usize,
    },
    /// A byte that is not UTF-8 outside every record (in a CSV header, or
    /// before the first record), so no record can be blamed for it and
    /// the file fails.
    #[error(
        "{file}:{line}: byte 0x{byte:02X} at column {column} is not UTF-8 (outside any record)"
    )]
    NotUtf8 {
        /// The file name as given to the loader.
        file: String,
        /// 1-based line of the byte in the file.
        line: usize,
        /// 1-based byte column of the byte in its line.
        column: usize,
        /// The first byte that is not UTF-8.
        byte: u8,
    },
    /// No record is valid; `bad` is every record, each with its reason.
    #[error("{file}: no valid record{}", every_record_bad(bad))]
    Empty {
        /// The file name as given to the loader.
        file: String,
        /// Every record of the file, each bad (empty when the file has no
        /// record at all).
        bad: Vec<BadRecord>,
    },
    /// A declared class that no example has: it could never be learnt nor
    /// scored (its F1 is 0 in every trial), and a count far beyond the
    /// data's (a typo) would size the head and the split by it.
    #[error("{}", class_without_examples(*num_classes, *with_examples, *missing, missing_name.as_deref()))]
    ClassWithoutExamples {
        /// Classes the label spec declares.
        num_classes: usize,
        /// Distinct labels the examples have.
        with_examples: usize,
        /// The first class index without an example.
        missing: usize,
        /// Its name, when the labels are given as names.
        missing_name: Option<String>,
    },
    /// An example given to the split or the batcher has a label that is not
    /// a class index (examples from a loader never do).
    #[error("example {index} has label {label}, outside 0..{num_classes}")]
    LabelOutOfRange {
        /// 0-based position of the first such example in the slice given.
        index: usize,
        /// Its label.
        label: usize,
        /// The class count the labels were checked against.
        num_classes: usize,
    },
    /// The validation fraction given to `stratified_split` is not in the
    /// open interval (0, 1) (NaN included).
    #[error("cannot split: the validation fraction {fraction} is not strictly between 0 and 1")]
    InvalidSplit {
        /// The fraction given.
        fraction: f64,
    },
    /// One side of the split has no example: nothing to train on, or no
    /// score (a validation set of none would score every trial 0).
    #[error(
        "the split leaves the {side} set empty: {examples} examples in {groups} groups of distinct text, validation fraction {fraction}; give more distinct examples or another fraction"
    )]
    EmptySplit {
        /// The empty side: `"training"` or `"validation"`.
        side: &'static str,
        /// Examples given to the split.
        examples: usize,
        /// Groups of distinct text (after whitespace collapsing and case
        /// folding) among them, each kept whole on one side.
        groups: usize,
        /// The validation fraction given.
        fraction: f64,
    },
    /// `TokenizedDataset::batches` was asked for micro-batches of 0
    /// examples.
    #[error("micro-batch size must be at least 1")]
    ZeroBatchSize,
    /// An example could not be tokenized.
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
