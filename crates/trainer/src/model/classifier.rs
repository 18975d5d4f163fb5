//! What the training loop, the memory plan and a fine-tuning run need of a
//! sequence classifier, so one loop serves every architecture: the shared
//! BERT-shaped encoder ([`BertClassifier`]) and DeBERTa's disentangled
//! attention ([`DebertaClassifier`]). Host batches go in, so each model
//! validates and uploads them its own way (DeBERTa adds bucket tables).

use super::deberta::{DebertaBatch, DebertaClassifier, DebertaConfig, DebertaError};
use super::family::{BERT, DEBERTA_V2, ModelType, TokenTypes};
use super::{BatchError, BertClassifier, DeviceBatch, HeadConfig, Mode, ModelError, Params};
use crate::backend::Backend;
use crate::batch::Batch;
use crate::config::{BertConfig, ConfigError};
use crate::weights::NamedTensors;
use std::path::Path;

/// A sequence classifier the training loop can train (see the module doc).
pub trait Classifier<B: Backend> {
    /// Number of classes, hence of logits per sequence.
    fn num_labels(&self) -> usize;

    /// The architecture, as `config.json` gives it (with the dropout the
    /// model trains with).
    fn model_config(&self) -> ModelConfig;

    /// Widths of memtune's hidden head layers (empty for a head as
    /// transformers has it).
    fn head_hidden(&self) -> &[usize];

    /// The parameter store: values, and gradients once allocated.
    fn params(&self) -> &Params<B>;

    /// The parameter store, for allocating and zeroing gradients and for
    /// the optimiser's update.
    fn params_mut(&mut self) -> &mut Params<B>;

    /// Checks shapes, ids and labels on the host, before any kernel runs.
    fn check_batch(&self, batch: &Batch) -> Result<(), BatchError>;

    /// Uploads `batch`, runs forward and backward, and accumulates the
    /// gradients into `params().grads` (allocated first); returns the
    /// weighted cross-entropy summed over the batch and divided by `denom`.
    /// With `recompute`, forward keeps each encoder layer's input only and
    /// backward runs the layer again before its backward (every family).
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

    /// Logits `[batch, classes]` in evaluation mode (labels unread).
    fn logits(&self, be: &B, batch: &Batch) -> Result<Vec<f64>, BatchError>;

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

    fn model_config(&self) -> ModelConfig {
        ModelConfig::Bert(self.config.clone())
    }

    fn head_hidden(&self) -> &[usize] {
        &self.head.hidden
    }

    fn params(&self) -> &Params<B> {
        &self.params
    }

    fn params_mut(&mut self) -> &mut Params<B> {
        &mut self.params
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
        self.params.reserve_rows(be, batch.input_ids.len());
        let device = DeviceBatch::upload(be, &self.config, self.head.num_labels, batch)?;
        Ok(self.forward_backward(be, &device, class_weights, denom, mode, recompute))
    }

    fn logits(&self, be: &B, batch: &Batch) -> Result<Vec<f64>, BatchError> {
        let device = DeviceBatch::upload(be, &self.config, self.head.num_labels, batch)?;
        Ok(BertClassifier::logits(self, be, &device))
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

    fn model_config(&self) -> ModelConfig {
        ModelConfig::Deberta(self.config.clone())
    }

    fn head_hidden(&self) -> &[usize] {
        &[]
    }

    fn params(&self) -> &Params<B> {
        &self.params
    }

    fn params_mut(&mut self) -> &mut Params<B> {
        &mut self.params
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
        recompute: bool,
    ) -> Result<f64, BatchError> {
        self.params.reserve_rows(be, batch.input_ids.len());
        let device = DebertaBatch::upload(be, &self.config, self.num_labels, batch)?;
        Ok(self.forward_backward(be, &device, class_weights, denom, mode, recompute))
    }

    fn logits(&self, be: &B, batch: &Batch) -> Result<Vec<f64>, BatchError> {
        let device = DebertaBatch::upload(be, &self.config, self.num_labels, batch)?;
        Ok(DebertaClassifier::logits(self, be, &device))
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
    /// A [`BertClassifier`] could not be built, or the head does not fit
    /// the architecture ([`ModelConfig::check_head`]).
    #[error(transparent)]
    Bert(#[from] ModelError),
    /// A [`DebertaClassifier`] could not be built.
    #[error(transparent)]
    Deberta(#[from] DebertaError),
}

impl ModelConfig {
    /// The `model_type` this architecture is read from.
    pub fn model_type(&self) -> &str {
        match self {
            ModelConfig::Bert(c) => &c.model_type,
            ModelConfig::Deberta(_) => DEBERTA_V2.name,
        }
    }

    /// Transformers' `*ForSequenceClassification` class of this
    /// `model_type` (`RobertaForSequenceClassification`, ...).
    pub fn classifier_class(&self) -> &'static str {
        ModelType::of(self.model_type())
            .map_or(BERT.model_types[0].classifier_class, |t| t.classifier_class)
    }

    /// The name transformers' classifier class gives parameter `name`:
    /// the family's prefix added where the base model holds it
    /// ([`super::family::Family::checkpoint_name`]); DeBERTa's parameters already carry
    /// HF's full names.
    pub fn checkpoint_name(&self, name: &str) -> String {
        match self {
            ModelConfig::Bert(c) => c.family().checkpoint_name(name),
            ModelConfig::Deberta(_) => name.to_string(),
        }
    }

    /// The checkpoint name of the classification output layer's weight,
    /// which has one row per class (`classifier.weight`,
    /// `classifier.out_proj.weight`, ...).
    pub fn output_weight_name(&self) -> String {
        match self {
            ModelConfig::Bert(c) => {
                self.checkpoint_name(&format!("{}.weight", c.family().head.out))
            }
            ModelConfig::Deberta(_) => "classifier.weight".into(),
        }
    }

    /// The dropout probabilities under their `config.json` keys; a head
    /// dropout left to the family's default is not listed.
    pub fn dropout_fields(&self) -> Vec<(&'static str, f64)> {
        match self {
            ModelConfig::Bert(c) => {
                let keys = c.family().dropout_keys;
                let mut fields = vec![
                    (keys.hidden, c.hidden_dropout_prob),
                    (keys.attention, c.attention_probs_dropout_prob),
                ];
                fields.extend(c.classifier_dropout.map(|p| (keys.head, p)));
                fields
            }
            ModelConfig::Deberta(c) => vec![
                ("hidden_dropout_prob", c.hidden_dropout_prob),
                (
                    "attention_probs_dropout_prob",
                    c.attention_probs_dropout_prob,
                ),
                ("pooler_dropout", c.pooler_dropout),
                ("cls_dropout", c.cls_dropout),
            ],
        }
    }

    /// Rows of the word-embedding table (`vocab_size`).
    pub fn vocab_size(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.vocab_size,
            ModelConfig::Deberta(c) => c.vocab_size,
        }
    }

    /// What is wrong with the sizes of a config built by hand (those read
    /// from `config.json` are checked as they are read): a size of 0, or
    /// heads that do not divide the hidden size. `(field, problem)`.
    pub fn shape_problem(&self) -> Option<(&'static str, String)> {
        let (hidden, layers, heads, intermediate, positions) = match self {
            ModelConfig::Bert(c) => (
                c.hidden_size,
                c.num_hidden_layers,
                c.num_attention_heads,
                c.intermediate_size,
                c.max_position_embeddings,
            ),
            ModelConfig::Deberta(c) => (
                c.hidden_size,
                c.num_hidden_layers,
                c.num_attention_heads,
                c.intermediate_size,
                c.max_position_embeddings,
            ),
        };
        let sizes = [
            ("hidden_size", hidden),
            ("num_hidden_layers", layers),
            ("num_attention_heads", heads),
            ("intermediate_size", intermediate),
            ("max_position_embeddings", positions),
        ];
        if let Some((field, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Some((field, "must be positive".into()));
        }
        (!hidden.is_multiple_of(heads)).then(|| {
            (
                "num_attention_heads",
                format!("{heads} does not divide hidden_size {hidden}"),
            )
        })
    }

    /// Number of encoder layers.
    pub fn num_hidden_layers(&self) -> usize {
        match self {
            ModelConfig::Bert(c) => c.num_hidden_layers,
            ModelConfig::Deberta(c) => c.num_hidden_layers,
        }
    }

    /// How many token types the model reads from a batch (`type_vocab_size`),
    /// or `None` where it reads none (RoBERTa-style models are given zeros,
    /// DistilBERT and DeBERTa-v3 have no token-type embeddings).
    pub fn token_types_read(&self) -> Option<usize> {
        match self {
            ModelConfig::Bert(c) => c.token_types_read(),
            ModelConfig::Deberta(c) => c.batch_limits(0).token_types,
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

    /// The config's sizes against a checkpoint's tensors (`tensors`, read
    /// from the safetensors header and data), before a model of the
    /// config's sizes is allocated: the word embeddings must be
    /// `[vocab_size, width]`, the position embeddings (where the model has
    /// them) `[max_position_embeddings, ..]`, the token type embeddings
    /// `[type_vocab_size, ..]`, the first layer's feed-forward input
    /// `[intermediate_size, ..]`, and the encoder must have
    /// `num_hidden_layers` layers. A contradiction is a
    /// [`ConfigError::Size`] naming `config_path`, the field as
    /// `config.json` spells it and the tensor's shape.
    pub fn check_checkpoint(
        &self,
        tensors: &NamedTensors,
        config_path: &Path,
    ) -> Result<(), ConfigError> {
        let (vocab, width, positions, layers, type_vocab, inter) = match self {
            ModelConfig::Bert(c) => (
                c.vocab_size,
                c.embedding_size(),
                Some(c.max_position_embeddings),
                c.num_hidden_layers,
                (c.family().token_types != TokenTypes::Absent).then_some(c.type_vocab_size),
                c.intermediate_size,
            ),
            ModelConfig::Deberta(c) => (
                c.vocab_size,
                c.hidden_size,
                c.position_biased_input.then_some(c.max_position_embeddings),
                c.num_hidden_layers,
                (c.type_vocab_size > 0).then_some(c.type_vocab_size),
                c.intermediate_size,
            ),
        };
        // DistilBERT's config.json spells the shared sizes its own way.
        let distilbert = matches!(self, ModelConfig::Bert(c) if c.model_type == "distilbert");
        let key = |field: &'static str| match (distilbert, field) {
            (true, "hidden_size") => "dim",
            (true, "num_hidden_layers") => "n_layers",
            (true, "intermediate_size") => "hidden_dim",
            _ => field,
        };
        let width_field = match self {
            ModelConfig::Bert(c) if c.embedding_size.is_some() => "embedding_size",
            _ => "hidden_size",
        };
        let (layer_prefix, ffn_in) = match self {
            ModelConfig::Bert(c) => (c.family().layer.layers, c.family().layer.ffn_in),
            ModelConfig::Deberta(_) => ("encoder.layer", "intermediate.dense"),
        };
        let ffn_in = format!("{layer_prefix}.0.{ffn_in}.weight");
        // (tensor, axis, field, the size config.json gives it, what the axis is)
        let axes: [(&str, usize, &'static str, Option<usize>, &str); 5] = [
            (
                "embeddings.word_embeddings.weight",
                0,
                "vocab_size",
                Some(vocab),
                "rows: the vocabulary",
            ),
            (
                "embeddings.word_embeddings.weight",
                1,
                width_field,
                Some(width),
                "columns: the width",
            ),
            (
                "embeddings.position_embeddings.weight",
                0,
                "max_position_embeddings",
                positions,
                "rows: the positions",
            ),
            (
                "embeddings.token_type_embeddings.weight",
                0,
                "type_vocab_size",
                type_vocab,
                "rows: the token types",
            ),
            (
                &ffn_in,
                0,
                "intermediate_size",
                Some(inter),
                "rows: the feed-forward width",
            ),
        ];
        for (name, axis, field, value, what) in axes {
            let (Some(value), Some(t)) = (value, tensors.get(name)) else {
                continue;
            };
            if t.shape.get(axis) != Some(&value) {
                return Err(ConfigError::Size {
                    path: config_path.to_path_buf(),
                    field: key(field),
                    value: value as u64,
                    problem: format!(
                        "model.safetensors's {name} has shape {:?} ({what})",
                        t.shape
                    ),
                });
            }
        }
        // `encoder.layer.N.` (`transformer.layer.N.` for DistilBERT).
        let stored_layers = tensors
            .keys()
            .filter_map(|name| {
                let parts: Vec<&str> = name.split('.').collect();
                let at = parts.iter().position(|&p| p == "layer")?;
                parts.get(at + 1)?.parse::<usize>().ok()
            })
            .max()
            .map(|last| last + 1);
        if let Some(stored) = stored_layers
            && stored != layers
        {
            return Err(ConfigError::Size {
                path: config_path.to_path_buf(),
                field: key("num_hidden_layers"),
                value: layers as u64,
                problem: format!("model.safetensors has {stored} encoder layers"),
            });
        }
        Ok(())
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

    /// The number of scalar parameters of this architecture with `head`
    /// (encoder, embeddings and classification head), counted on the
    /// memory plan's backend, which allocates and computes nothing.
    pub fn parameter_count(&self, head: &HeadConfig) -> Result<usize, BuildError> {
        let be = crate::backend::plan::PlanBackend::counting(4);
        let model = self.build_random(&be, head, 0)?;
        Ok(model.params().info.iter().map(|p| p.numel()).sum())
    }
}
