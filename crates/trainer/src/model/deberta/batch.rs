//! A DeBERTa batch on the device: ids, mask, labels and the bucket tables
//! of its sequence length.

use super::config::DebertaConfig;
use super::positions;
use crate::backend::Backend;
use crate::batch::Batch;
use crate::model::device_batch::{BatchError, DeviceBatch, upload_new, validate_against};

/// A batch on the device, with the bucket tables of its sequence length.
pub struct DebertaBatch<B: Backend> {
    /// Ids, mask and labels, as every family has them.
    pub ids: DeviceBatch<B>,
    /// The `[seq, seq]` table of content-to-position columns the c2p
    /// gather reads (`c2p` of [`positions::bucket_tables`]).
    pub c2p_idx: B::Ids,
    /// The `[seq, seq]` table of position-to-content columns the p2c
    /// gather reads (`p2c` of [`positions::bucket_tables`]).
    pub p2c_idx: B::Ids,
}

impl<B: Backend> DebertaBatch<B> {
    /// Validates the batch against the config on the host (a clear error,
    /// never a panic in an op) and uploads.
    pub fn upload(
        be: &B,
        config: &DebertaConfig,
        classes: usize,
        batch: &Batch,
    ) -> Result<Self, BatchError> {
        validate_against(&config.batch_limits(classes), batch)?;
        let (b, s) = (batch.batch, batch.seq);
        let n = b * s;
        let span = config.span();
        let (c2p, p2c) = positions::bucket_tables(
            s,
            span,
            config.position_buckets,
            config.max_relative_positions,
        );
        let positions: Vec<u32> = (0..n).map(|t| (t % s) as u32).collect();
        let types: Vec<u32> = if config.type_vocab_size > 0 {
            batch.token_type_ids.clone()
        } else {
            vec![0; n]
        };
        Ok(Self {
            ids: DeviceBatch::from_host(be, batch, &positions, &types),
            c2p_idx: upload_new(be, "batch.c2p_buckets", &c2p),
            p2c_idx: upload_new(be, "batch.p2c_buckets", &p2c),
        })
    }
}
