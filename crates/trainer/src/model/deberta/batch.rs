//! A DeBERTa batch on the device: ids, mask, labels and the bucket tables
//! of its sequence length.

use super::config::DebertaConfig;
use super::positions;
use crate::backend::Backend;
use crate::batch::Batch;
use crate::model::device_batch::{BatchError, validate_against};

/// A batch on the device, with the bucket tables of its sequence length.
pub struct DebertaBatch<B: Backend> {
    pub batch: usize,
    pub seq: usize,
    pub input_ids: B::Ids,
    pub position_ids: B::Ids,
    pub token_type_ids: B::Ids,
    pub mask: B::Ids,
    pub labels: B::Ids,
    pub c2p_idx: B::Ids,
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
        let up = |name: &str, data: &[u32]| {
            let mut ids = be.alloc_ids(name, data.len());
            be.upload_ids(&mut ids, data);
            ids
        };
        let positions: Vec<u32> = (0..n).map(|t| (t % s) as u32).collect();
        let mask: Vec<u32> = batch
            .attention_mask
            .iter()
            .map(|&m| (m != 0) as u32)
            .collect();
        let types: Vec<u32> = if config.type_vocab_size > 0 {
            batch.token_type_ids.clone()
        } else {
            vec![0; n]
        };
        let labels: Vec<u32> = batch.labels.iter().map(|&l| l as u32).collect();
        Ok(Self {
            batch: b,
            seq: s,
            input_ids: up("batch.input_ids", &batch.input_ids),
            position_ids: up("batch.position_ids", &positions),
            token_type_ids: up("batch.token_type_ids", &types),
            mask: up("batch.mask", &mask),
            labels: up("batch.labels", &labels),
            c2p_idx: up("batch.c2p_buckets", &c2p),
            p2c_idx: up("batch.p2c_buckets", &p2c),
        })
    }
}
