//! A tokenised, padded batch: the seam between data loading and the model.

/// `batch` sequences padded to `seq` tokens, row-major `[batch, seq]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub batch: usize,
    pub seq: usize,
    pub input_ids: Vec<u32>,
    pub token_type_ids: Vec<u32>,
    /// 1 for a real token, 0 for padding.
    pub attention_mask: Vec<u8>,
    /// One class index per sequence, validated against the class count on
    /// the host before any loss is computed.
    pub labels: Vec<usize>,
}
