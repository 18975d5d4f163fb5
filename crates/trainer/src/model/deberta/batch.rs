//! A DeBERTa batch on the device: ids, mask, labels and the bucket tables
//! of its sequence length.

use super::config::DebertaConfig;
use super::positions;
use crate::backend::Backend;
use crate::batch::Batch;

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
    /// Validates ids against the config (a clear error, never a panic in an
    /// op) and uploads.
    pub fn upload(
        be: &B,
        config: &DebertaConfig,
        classes: usize,
        batch: &Batch,
    ) -> Result<Self, String> {
        let (b, s) = (batch.batch, batch.seq);
        let n = b * s;
        if batch.input_ids.len() != n || batch.attention_mask.len() != n || batch.labels.len() != b
        {
            return Err(format!(
                "batch of {b} x {s}: ids, mask or labels have the wrong length"
            ));
        }
        if let Some(id) = batch
            .input_ids
            .iter()
            .find(|&&id| id as usize >= config.vocab_size)
        {
            return Err(format!(
                "token id {id} is not below vocab_size {}",
                config.vocab_size
            ));
        }
        let types = config.type_vocab_size;
        if types > 0
            && let Some(t) = batch.token_type_ids.iter().find(|&&t| t as usize >= types)
        {
            return Err(format!(
                "token type {t} is not below type_vocab_size {types}"
            ));
        }
        if config.position_biased_input && s > config.max_position_embeddings {
            return Err(format!(
                "sequence length {s} exceeds max_position_embeddings {}",
                config.max_position_embeddings
            ));
        }
        if let Some(l) = batch.labels.iter().find(|&&l| l >= classes) {
            return Err(format!("label {l} is not below num_labels {classes}"));
        }
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
