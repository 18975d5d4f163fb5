//! DeBERTa's memory plan: one training step on the allocation-only backend.

use super::DebertaClassifier;
use super::batch::DebertaBatch;
use super::config::DebertaConfig;
use crate::backend::Backend;
use crate::backend::plan::PlanBackend;
use crate::batch::Batch;
use crate::memory::{PlanError, PlanRequest, Precision};
use crate::model::{BuildError, HeadConfig, Mode};
use crate::train::{Optimizer, OptimizerConfig};

/// The peak bytes of one AdamW training step (weights, gradients, optimiser
/// state, activations) of `config` at `micro_batch` x `seq_len`, from the
/// same code on the allocation-only [`PlanBackend`]: what the memory plan
/// says for BERT, for DeBERTa. A step that cannot run is a [`PlanError`]
/// naming the field (see [`planned_step`]).
pub fn plan_peak(
    config: &DebertaConfig,
    num_labels: usize,
    micro_batch: usize,
    seq_len: usize,
    precision: Precision,
    dropout: bool,
) -> Result<usize, PlanError> {
    let be = PlanBackend::counting(precision.bytes());
    planned_step(&be, config, num_labels, micro_batch, seq_len, dropout)?;
    Ok(be.tracker().peak_bytes())
}

/// Builds the model and AdamW state on `be` and runs one training step on
/// a synthetic batch (every token real). The model and optimiser state are
/// freed when it returns. A step that cannot run (no rows, a sequence
/// longer than the model's positions, no vocabulary, fewer than two
/// labels) is a [`PlanError`] naming the field, before anything is
/// allocated on `be` ([`PlanRequest::check`]).
pub fn planned_step<B: Backend>(
    be: &B,
    config: &DebertaConfig,
    num_labels: usize,
    micro_batch: usize,
    seq_len: usize,
    dropout: bool,
) -> Result<(), PlanError> {
    let head = HeadConfig {
        num_labels,
        hidden: vec![],
    };
    PlanRequest::fp32_adamw(config, &head, micro_batch, seq_len).check()?;
    let mut config = config.clone();
    if !dropout {
        config.hidden_dropout_prob = 0.0;
        config.attention_probs_dropout_prob = 0.0;
        config.pooler_dropout = 0.0;
        config.cls_dropout = 0.0;
    }
    let mut model =
        DebertaClassifier::new_random(be, &config, num_labels, 0).map_err(BuildError::from)?;
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
        false,
    );
    if optimizer.clips(be) {
        optimizer.step(be, &mut model.params, 1e-5, Some(1.0));
    } else {
        crate::backend::clip_global_norm(be, &mut model.params.grads, 1.0);
        optimizer.step(be, &mut model.params, 1e-5, None);
    }
    Ok(())
}
