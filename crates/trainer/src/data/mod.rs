//! Labelled text examples: loading, validation, splitting and batching.
//!
//! - [`load_file`] / [`load_str`] read CSV, JSON Lines or a JSON array with
//!   configurable text field(s) and label field ([`LoadOptions`]). Every bad
//!   record is reported with its file and line (and record index for JSON
//!   arrays) and either skipped, counted and listed in the [`LoadReport`], or
//!   makes the whole load fail ([`BadRecordPolicy`]). Labels are validated
//!   here, on the host, so a bad label can never reach a loss kernel.
//! - [`load_texts`] reads the same formats without labels: the texts a
//!   trained classifier is asked about, every record kept in order.
//! - [`DataSource`] is a config's data section: the embedded set or files.
//! - [`embedded`] is the vendored Sentiment Labelled Sentences set, compiled
//!   into the binary.
//! - [`split`] makes a seeded, stratified train/validation split that keeps
//!   duplicate texts on one side.
//! - [`batcher`] tokenizes once and yields [`crate::batch::Batch`]es padded
//!   to the longest sequence of each micro-batch, shuffled per epoch.

pub mod batcher;
pub mod embedded;
mod error;
mod json;
mod label;
mod options;
mod reader;
mod record;
mod source;
pub mod split;
mod table;
mod texts;

pub use batcher::{BatchOrder, TokenizedDataset};
pub use error::DataError;
pub use options::{BadRecordPolicy, DataFormat, FieldSpec, LabelSpec, LoadOptions};
pub use reader::{load_file, load_str};
pub use record::{
    BadRecord, BadRecordReason, Dataset, Example, LoadReport, RecordLocation, Records,
};
pub use source::DataSource;
pub use split::{TrainValidationSplit, stratified_split};
pub use texts::{TextRecord, TextRecords, load_texts};
