//! The memory of prediction: a classifier's weights and one forward pass
//! in evaluation mode (no gradients, optimiser state or dropout), in fp32
//! on the CPU backend, as [`crate::export::HfClassifier`] predicts. Planned
//! as the training step is ([`super::plan`]): the real forward runs on a
//! backend that only allocates, so the CPU backend's tensors reach exactly
//! this peak (a loaded checkpoint's model allocates what a random one
//! does: loading writes into the buffers it has).
//!
//! Not planned here: the checkpoint's tensors while they are read (a
//! load-time transient of about the weights' size, not what serving
//! holds), a tokenizer's tables, and other backends' own buffers.

use super::plan::{PlanError, PlanRequest, synthetic_batch};
use crate::backend::plan::PlanBackend;
use crate::model::{HeadConfig, ModelConfig};

/// Peak bytes of predicting one batch of `batch` sequences of `seq_len`
/// tokens with `config` and `head`: the fp32 weights and the forward's
/// activations. An error names a request that cannot run (no rows, a
/// sequence beyond the model's positions, a head the model refuses).
///
/// ```
/// use trainer::memory::inference_peak;
/// use trainer::config::BertConfig;
/// use trainer::model::HeadConfig;
///
/// let head = HeadConfig { num_labels: 2, hidden: vec![] };
/// let config = BertConfig::tiny(32, 2, 4, 64, 100).into();
/// let one = inference_peak(&config, &head, 1, 16).unwrap();
/// let eight = inference_peak(&config, &head, 8, 16).unwrap();
/// // The weights are held either way; only the activations grow.
/// assert!(one < eight && eight < 8 * one);
/// ```
pub fn inference_peak(
    config: &ModelConfig,
    head: &HeadConfig,
    batch: usize,
    seq_len: usize,
) -> Result<usize, PlanError> {
    let req = PlanRequest::fp32_adamw(config.clone(), head, batch, seq_len);
    req.check()?;
    let be = PlanBackend::for_step(req.storage(), req.kernels, false);
    let model = config.build_random(&be, head, 0)?;
    model.logits(&be, &synthetic_batch(&req))?;
    Ok(be.tracker().peak_bytes())
}
