//! What the training loop, the memory plan and a fine-tuning run need of a
//! sequence classifier, so one loop serves every architecture: the shared
//! BERT-shaped encoder ([`BertClassifier`]) and DeBERTa's disentangled
//! attention ([`DebertaClassifier`]). Host batches go in, so each model
//! validates and uploads them its own way (DeBERTa adds bucket tables).

use super::deberta::{DebertaBatch, DebertaClassifier, DebertaConfig, DebertaError};
use super::{BatchError, BertClassifier, DeviceBatch, HeadConfig, Mode, ModelError, Params};
use crate::backend::Backend;
use crate::batch::Batch;
use crate::config::BertConfig;

/// A sequence classifier the training loop can train (see the module doc).
pub trait Classifier<B: Backend> {
    fn num_labels(&self) -> usize;

    fn params(&self) -> &Params<B>;

    fn params_mut(&mut self) -> &mut Params<B>;

    /// Whether [`Classifier::train_batch`] honours `recompute`; the loop
    /// refuses it for a model that would silently keep its activations.
    fn supports_recompute(&self) -> bool;

    /// Checks shapes, ids and labels on the host, before any kernel runs.
    fn check_batch(&self, batch: &Batch) -> Result<(), BatchError>;

    /// Uploads `batch`, runs forward and backward, and accumulates the
    /// gradients into `params().grads` (allocated first); returns the
    /// weighted cross-entropy summed over the batch and divided by `denom`.
    #[allow(clippy::too_many_arguments)]
    fn train_batch(
        &mut self,
        be: &B,
        batch: &Batch,
        class_weights: Option<&B::Buf>,
        denom: f64,
        mode: Mode,
        recompute: bool,
    ) -> Result<f64, BatchError>;

    /// Logits `[batch, classes]` and the weighted loss divided by `denom`,
    /// in evaluation mode.
    fn evaluate_batch(
        &self,
        be: &B,
        batch: &Batch,
        class_weights: Option<&B::Buf>,
        denom: f64,
    ) -> Result<(Vec<f64>, f64), BatchError>;
}

impl<B: Backend> Classifier<B> for BertClassifier<B> {
    fn num_labels(&self) -> usize {
        self.head.num_labels
    }

    fn params(&self) -> &Params<B> {
        &self.params
    }

    fn params_mut(&mut self) -> &mut Params<B> {
        &mut self.params
    }

    fn supports_recompute(&self) -> bool {
        true
    }

    fn check_batch(&self, batch: &Batch) -> Result<(), BatchError> {
        super::device_batch::validate(&self.config, self.head.num_labels, batch)
    }

    fn train_batch(
        &mut self,
        be: &B,
        batch: &Batch,
        class_weights: Option<&B::Buf>,
        denom: f64,
        mode: Mode,
        recompute: bool,
    ) -> Result<f64, BatchError> {
        let device = DeviceBatch::upload(be, &self.config, self.head.num_labels, batch)?;
        Ok(self.forward_backward(be, &device, class_weights, denom, mode, recompute))
    }

    fn evaluate_batch(
        &self,
        be: &B,
        batch: &Batch,
        class_weights: Option<&B::Buf>,
        denom: f64,
    ) -> Result<(Vec<f64>, f64), BatchError> {
        let device = DeviceBatch::upload(be, &self.config, self.head.num_labels, batch)?;
        Ok(self.eval_batch(be, &device, class_weights, denom))
    }
}

impl<B: Backend> Classifier<B> for DebertaClassifier<B> {
    fn num_labels(&self) -> usize {
        self.num_labels
    }

    fn params(&self) -> &Params<B> {
        &self.params
    }

    fn params_mut(&mut self) -> &mut Params<B> {
        &mut self.params
    }

    fn supports_recompute(&self) -> bool {
        false
    }

    fn check_batch(&self, batch: &Batch) -> Result<(), BatchError> {
        super::device_batch::validate_against(&self.config.batch_limits(self.num_labels), batch)
    }

    fn train_batch(
        &mut self,
        be: &B,
        batch: &Batch,
        class_weights: Option<&B::Buf>,
        denom: f64,
        mode: Mode,
        _recompute: bool,
    ) -> Result<f64, BatchError> {
        let device = DebertaBatch::upload(be, &self.config, self.num_labels, batch)?;
        Ok(self.forward_backward(be, &device, class_weights, denom, mode))
    }

    fn evaluate_batch(
        &self,
        be: &B,
        batch: &Batch,
        class_weights: Option<&B::Buf>,
        denom: f64,
    ) -> Result<(Vec<f64>, f64), BatchError> {
        let device = DebertaBatch::upload(be, &self.config, self.num_labels, batch)?;
        Ok(self.eval_batch(be, &device, class_weights, denom))
    }
}

/// An architecture a classifier can be built from: what `config.json`'s
/// `model_type` selects.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelConfig {
    /// A family of the shared encoder ([`super::family::FAMILIES`]).
    Bert(BertConfig),
    /// `deberta-v2` (DeBERTa-v2 and -v3).
    Deberta(DebertaConfig),
}

impl From<BertConfig> for ModelConfig {
    fn from(c: BertConfig) -> Self {
        ModelConfig::Bert(c)
    }
}

impl From<DebertaConfig> for ModelConfig {
    fn from(c: DebertaConfig) -> Self {
        ModelConfig::Deberta(c)
    }
}

impl From<&BertConfig> for ModelConfig {
    fn from(c: &BertConfig) -> Self {
        ModelConfig::Bert(c.clone())
    }
}

impl From<&DebertaConfig> for ModelConfig {
    fn from(c: &DebertaConfig) -> Self {
        ModelConfig::Deberta(c.clone())
    }
}

impl From<&ModelConfig> for ModelConfig {
    fn from(c: &ModelConfig) -> Self {
        c.clone()
    }
}

/// Why a classifier could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Bert(#[from] ModelError),
    #[error(transparent)]
    Deberta(#[from] DebertaError),
}

impl ModelConfig {
    /// The `model_type` this architecture is read from.
    pub fn model_type(&self) -> &str {
        match self {
            ModelConfig::Bert(c) => &c.model_type,
            ModelConfig::Deberta(_) => "deberta-v2",
        }
    }

    pub fn vocab_size(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.vocab_size,
            ModelConfig::Deberta(c) => c.vocab_size,
        }
    }

    pub fn num_hidden_layers(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.num_hidden_layers,
            ModelConfig::Deberta(c) => c.num_hidden_layers,
        }
    }

    /// The longest sequence the model takes.
    pub fn max_sequence(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.max_sequence(),
            ModelConfig::Deberta(c) => c.max_sequence(),
        }
    }

    /// The same architecture with `layers` layers and `vocab` vocabulary
    /// rows (the memory plan's reduced copies).
    pub fn resized(&self, layers: usize, vocab: usize) -> Self {
        match self {
            ModelConfig::Bert(c) => ModelConfig::Bert(BertConfig {
                num_hidden_layers: layers,
                vocab_size: vocab,
                ..c.clone()
            }),
            ModelConfig::Deberta(c) => ModelConfig::Deberta(DebertaConfig {
                num_hidden_layers: layers,
                vocab_size: vocab,
                ..c.clone()
            }),
        }
    }

    /// The same architecture with every dropout probability set to `p`.
    pub fn with_dropout(&self, p: f64) -> Self {
        match self {
            ModelConfig::Bert(c) => ModelConfig::Bert(BertConfig {
                hidden_dropout_prob: p,
                attention_probs_dropout_prob: p,
                classifier_dropout: Some(p),
                ..c.clone()
            }),
            ModelConfig::Deberta(c) => ModelConfig::Deberta(DebertaConfig {
                hidden_dropout_prob: p,
                attention_probs_dropout_prob: p,
                pooler_dropout: p,
                cls_dropout: p,
                ..c.clone()
            }),
        }
    }

    /// Checks that this architecture can carry `head`: DeBERTa's head is
    /// HF's pooler and classifier, without memtune's hidden layers.
    pub fn check_head(&self, head: &HeadConfig) -> Result<(), BuildError> {
        match self {
            ModelConfig::Bert(_) => Ok(()),
            ModelConfig::Deberta(_) if head.hidden.is_empty() => Ok(()),
            ModelConfig::Deberta(_) => Err(ModelError::Head(format!(
                "hidden widths {:?}: deberta-v2 has no hidden head layers",
                head.hidden
            ))
            .into()),
        }
    }

    /// A classifier with random weights (HF's initialisation) on `be`.
    pub fn build_random<'m, B: Backend + 'm>(
        &self,
        be: &B,
        head: &HeadConfig,
        seed: u64,
    ) -> Result<Box<dyn Classifier<B> + 'm>, BuildError> {
        self.check_head(head)?;
        Ok(match self {
            ModelConfig::Bert(c) => Box::new(BertClassifier::new_random(be, c, head, seed)?),
            ModelConfig::Deberta(c) => {
                Box::new(DebertaClassifier::new_random(be, c, head.num_labels, seed)?)
            }
        })
    }
}
