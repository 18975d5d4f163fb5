//! DeBERTa's memory plan: one training step on the allocation-only backend.

use super::DebertaClassifier;
use super::batch::DebertaBatch;
use super::config::{DebertaConfig, DebertaError};
use crate::backend::Backend;
use crate::backend::plan::PlanBackend;
use crate::batch::Batch;
use crate::memory::Precision;
use crate::model::Mode;
use crate::train::{Optimizer, OptimizerConfig};

/// The peak bytes of one AdamW training step (weights, gradients, optimiser
/// state, activations) of `config` at `micro_batch` x `seq_len`, from the
/// same code on the allocation-only [`PlanBackend`]: what the memory plan
/// says for BERT, for DeBERTa.
pub fn plan_peak(
    config: &DebertaConfig,
    num_labels: usize,
    micro_batch: usize,
    seq_len: usize,
    precision: Precision,
    dropout: bool,
) -> Result<usize, DebertaError> {
    let be = PlanBackend::counting(precision.bytes());
    planned_step(&be, config, num_labels, micro_batch, seq_len, dropout)?;
    Ok(be.tracker().peak_bytes())
}

/// Builds the model and AdamW state on `be` and runs one training step on
/// a synthetic batch (every token real). The model and optimiser state are
/// freed when it returns.
pub fn planned_step<B: Backend>(
    be: &B,
    config: &DebertaConfig,
    num_labels: usize,
    micro_batch: usize,
    seq_len: usize,
    dropout: bool,
) -> Result<(), DebertaError> {
    let mut config = config.clone();
    if !dropout {
        config.hidden_dropout_prob = 0.0;
        config.attention_probs_dropout_prob = 0.0;
        config.pooler_dropout = 0.0;
        config.cls_dropout = 0.0;
    }
    let mut model = DebertaClassifier::new_random(be, &config, num_labels, 0)?;
    model.alloc_grads(be);
    let mut optimizer = Optimizer::new(be, &model.params, OptimizerConfig::default());
    let (b, s) = (micro_batch, seq_len);
    let batch = Batch {
        batch: b,
        seq: s,
        input_ids: (0..b * s).map(|i| (i % config.vocab_size) as u32).collect(),
        token_type_ids: vec![0; b * s],
        attention_mask: vec![1; b * s],
        labels: (0..b).map(|i| i % num_labels).collect(),
    };
    let device_batch = DebertaBatch::upload(be, &config, num_labels, &batch)?;
    model.forward_backward(
        be,
        &device_batch,
        None,
        b as f64,
        Mode::Train { seed: 0, step: 1 },
    );
    crate::backend::clip_global_norm(be, &mut model.params.grads, 1.0);
    optimizer.step(be, &mut model.params, 1e-5);
    Ok(())
}
