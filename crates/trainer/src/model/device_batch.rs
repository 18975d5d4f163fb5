//! A [`Batch`] validated on the host and uploaded to a backend.

use crate::backend::Backend;
use crate::batch::Batch;
use crate::config::BertConfig;
use crate::model::family::TokenTypes;

/// Why a host batch was refused before anything was uploaded.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BatchError {
    /// A field's length is not the one `batch` and `seq` imply.
    #[error("batch: {field} has {got} entries, expected {expected}")]
    Shape {
        /// The [`Batch`] field.
        field: &'static str,
        /// Its length.
        got: usize,
        /// `batch * seq`, or `batch` for `labels`.
        expected: usize,
    },
    /// The sequence length exceeds the longest the model takes.
    #[error("batch: sequence length {seq} exceeds the model's {max} positions")]
    TooLong {
        /// The batch's sequence length, in tokens.
        seq: usize,
        /// The model's longest sequence, in tokens.
        max: usize,
    },
    /// An id beyond the rows of its embedding table.
    #[error(
        "batch: {field} value {value} at sequence {row}, token {token} is out of range (< {limit})"
    )]
    IdOutOfRange {
        /// `input_ids` or `token_type_ids`.
        field: &'static str,
        /// The first id out of range.
        value: u32,
        /// Its sequence, 0-based.
        row: usize,
        /// Its position in the sequence, 0-based.
        token: usize,
        /// The table's rows: ids must be below this.
        limit: usize,
    },
    /// A label that is not a class index.
    #[error("batch: label {label} of sequence {row} is out of range for {classes} classes")]
    LabelOutOfRange {
        /// The first label out of range.
        label: usize,
        /// Its sequence, 0-based.
        row: usize,
        /// The model's number of classes.
        classes: usize,
    },
    /// No sequences, or sequences of no tokens.
    #[error("batch is empty")]
    Empty,
}

/// Token ids, position ids, token types, the key mask and labels on the
/// backend. Labels are checked here, on the host, so a bad label can never
/// reach a kernel.
pub struct DeviceBatch<B: Backend> {
    /// Number of sequences.
    pub batch: usize,
    /// Tokens per sequence, padding included.
    pub seq: usize,
    /// Token ids, `[batch, seq]`.
    pub input_ids: B::Ids,
    /// Position ids, `[batch, seq]`, numbered as the model numbers them
    /// (RoBERTa's after the padding id).
    pub position_ids: B::Ids,
    /// Token type ids, `[batch, seq]`: zeros for a model that reads none.
    pub token_type_ids: B::Ids,
    /// 1 for a real token, 0 for padding, `[batch, seq]`.
    pub mask: B::Ids,
    /// One class index per sequence, `[batch]`.
    pub labels: B::Ids,
    /// Host copy of the labels (metrics, loss denominators).
    pub host_labels: Vec<usize>,
}

impl<B: Backend> DeviceBatch<B> {
    /// Validates `batch` on the host against `config` and a head of
    /// `classes` labels, then uploads it with the family's position ids
    /// and token types.
    pub fn upload(
        be: &B,
        config: &BertConfig,
        classes: usize,
        batch: &Batch,
    ) -> Result<Self, BatchError> {
        validate(config, classes, batch)?;
        let s = batch.seq;
        let positions: Vec<u32> = batch
            .attention_mask
            .chunks(s)
            .flat_map(|m| config.position_ids(m))
            .collect();
        // RoBERTa's tokenizers mark a pair's second segment, but its model
        // (one token type) is given zeros, as HF's tokenizers do not return
        // token types for it; DistilBERT has no token type table.
        let zeros;
        let token_types = if config.family().token_types == TokenTypes::Segments {
            &batch.token_type_ids
        } else {
            zeros = vec![0; batch.token_type_ids.len()];
            &zeros
        };
        Ok(Self::from_host(be, batch, &positions, token_types))
    }

    /// Uploads a validated `batch` with the model's own position ids and
    /// token types.
    pub(crate) fn from_host(be: &B, batch: &Batch, positions: &[u32], token_types: &[u32]) -> Self {
        let mask: Vec<u32> = batch
            .attention_mask
            .iter()
            .map(|&m| (m != 0) as u32)
            .collect();
        let labels: Vec<u32> = batch.labels.iter().map(|&l| l as u32).collect();
        let up = |name: &str, data: &[u32]| upload_new(be, name, data);
        Self {
            batch: batch.batch,
            seq: batch.seq,
            input_ids: up("batch.input_ids", &batch.input_ids),
            position_ids: up("batch.position_ids", positions),
            token_type_ids: up("batch.token_type_ids", token_types),
            mask: up("batch.attention_mask", &mask),
            labels: up("batch.labels", &labels),
            host_labels: batch.labels.clone(),
        }
    }
}

/// Checks shapes, id ranges and labels of a batch on the host.
pub fn validate(config: &BertConfig, classes: usize, batch: &Batch) -> Result<(), BatchError> {
    validate_against(
        &Limits {
            vocab: config.vocab_size,
            token_types: config.token_types_read(),
            max_seq: config.max_sequence(),
            classes,
        },
        batch,
    )
}

/// What a model accepts in a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Rows of the word-embedding table: input ids must be below this.
    pub vocab: usize,
    /// `None`: token types are not read (the model is given zeros).
    pub token_types: Option<usize>,
    /// The longest sequence, in tokens.
    pub max_seq: usize,
    /// Number of classes: labels must be below this.
    pub classes: usize,
}

/// Checks shapes, id ranges and labels of a batch against `limits`, on the
/// host, so a bad id or label never reaches a kernel.
pub fn validate_against(limits: &Limits, batch: &Batch) -> Result<(), BatchError> {
    let (b, s) = (batch.batch, batch.seq);
    if b == 0 || s == 0 {
        return Err(BatchError::Empty);
    }
    let n = b * s;
    for (field, got, expected) in [
        ("input_ids", batch.input_ids.len(), n),
        ("token_type_ids", batch.token_type_ids.len(), n),
        ("attention_mask", batch.attention_mask.len(), n),
        ("labels", batch.labels.len(), b),
    ] {
        if got != expected {
            return Err(BatchError::Shape {
                field,
                got,
                expected,
            });
        }
    }
    if s > limits.max_seq {
        return Err(BatchError::TooLong {
            seq: s,
            max: limits.max_seq,
        });
    }
    let mut checked = vec![("input_ids", &batch.input_ids, limits.vocab)];
    if let Some(types) = limits.token_types {
        checked.push(("token_type_ids", &batch.token_type_ids, types));
    }
    for (field, ids, limit) in checked {
        if let Some(i) = ids.iter().position(|&v| v as usize >= limit) {
            return Err(BatchError::IdOutOfRange {
                field,
                value: ids[i],
                row: i / s,
                token: i % s,
                limit,
            });
        }
    }
    let classes = limits.classes;
    if let Some(row) = batch.labels.iter().position(|&l| l >= classes) {
        return Err(BatchError::LabelOutOfRange {
            label: batch.labels[row],
            row,
            classes,
        });
    }
    Ok(())
}

/// New device ids holding `data`.
pub(crate) fn upload_new<B: Backend>(be: &B, name: &str, data: &[u32]) -> B::Ids {
    let mut ids = be.alloc_ids(name, data.len());
    be.upload_ids(&mut ids, data);
    ids
}
