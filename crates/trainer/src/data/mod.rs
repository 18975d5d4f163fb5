//! Labelled text examples: loading, validation, splitting and batching.
//!
//! - [`load_file`] / [`load_str`] read CSV, JSON Lines or a JSON array with
//!   configurable text field(s) and label field ([`LoadOptions`]); a leading
//!   byte order mark is ignored, and a `.json` file of JSON Lines is read as
//!   such. Every bad record is reported with its file and line (lines end at
//!   `\n`, `\r\n` or a lone `\r`; JSON array records also carry their
//!   index; a byte that is not UTF-8 is placed in its record by its byte
//!   offset) and either skipped, counted and listed in the [`LoadReport`], or
//!   makes the whole load fail ([`BadRecordPolicy`]). Labels are validated
//!   here, on the host, so a bad label can never reach a loss kernel.
//! - [`load_texts`] reads the same formats without labels: the texts a
//!   trained classifier is asked about, every record kept in order (a file
//!   without any record is [`DataError::Empty`]).
//! - [`DataSource`] is a config's data section: the embedded set or files.
//! - [`embedded`] is the vendored Sentiment Labelled Sentences set, compiled
//!   into the binary.
//! - [`split`] makes a seeded, stratified train/validation split that keeps
//!   duplicate texts on one side.
//! - [`batcher`] tokenizes once and yields [`crate::batch::Batch`]es padded
//!   to the longest sequence of each micro-batch, in a seeded shuffled
//!   order per epoch (a fine-tuning run cuts its training batches anew each
//!   epoch: [`crate::train::TrainBatches`]).

pub mod batcher;
pub mod embedded;
mod error;
mod json;
mod label;
mod lines;
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
