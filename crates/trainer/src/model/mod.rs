//! The sequence classifier of every BERT-shaped family (BERT, RoBERTa,
//! XLM-RoBERTa, CamemBERT, DistilBERT, ELECTRA): embeddings, post-LN encoder
//! layers and the family's classification head on the first token, with
//! 0-3 optional hidden layers, written over [`Backend`] calls. What the
//! families do differently is data ([`family::Family`]), read by the one
//! model code.
//!
//! Parameters live in one store (values, and gradients once training
//! starts) in a fixed order, named with Hugging Face names, so loading,
//! the optimiser, gradient checks and the memory plan all walk the same list.

mod classifier;
pub mod deberta;
pub mod device_batch;
pub(crate) mod encoder;
pub mod family;
mod flops;
mod head;
pub(crate) mod layer;
mod linear;
mod load;
mod params;
mod presets;

pub use classifier::{BuildError, Classifier, ModelConfig};
pub use device_batch::{BatchError, DeviceBatch};
pub use encoder::{LayerActs, Tape};
pub use flops::TokenFlops;
pub use linear::Dense;
pub use load::{LoadError, LoadReport};
pub use params::{ParamInfo, Params, SparseGrad};

use crate::backend::{Backend, LossTargets};
use crate::config::BertConfig;
use crate::memory::BufKind;
use crate::rng::RngKey;

/// The classifier head on top of the pooled `[CLS]` vector.
#[derive(Clone, Debug, PartialEq)]
pub struct HeadConfig {
    /// Number of classes, hence of logits per sequence; at least 2.
    pub num_labels: usize,
    /// Widths of 0-3 hidden layers (each dense + GELU + dropout).
    pub hidden: Vec<usize>,
}

/// Training (dropout on, keyed by seed and step) or evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Evaluation: every dropout off.
    Eval,
    /// Training: dropout on, its masks drawn from `seed` and `step`.
    Train {
        /// The run's seed.
        seed: u64,
        /// Index of this micro-batch among those the run has trained on
        /// (not the optimiser step), so each draws its own dropout masks;
        /// a step retried after running out of memory counts again from
        /// where it started.
        step: u64,
    },
}

impl Mode {
    /// The dropout key of stream `stream`, or `None` when dropout is off.
    pub fn key(&self, p: f64, stream: u32) -> Option<RngKey> {
        match *self {
            Mode::Train { seed, step } if p > 0.0 => Some(RngKey { seed, step, stream }),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct LayerNormIdx {
    pub gamma: usize,
    pub beta: usize,
}

pub(crate) use layer::LayerIdx;

#[derive(Clone, Debug)]
pub(crate) struct Indices {
    pub word: usize,
    pub position: usize,
    /// `None` for families without token type embeddings.
    pub token_type: Option<usize>,
    pub emb_ln: LayerNormIdx,
    /// ELECTRA's `embeddings_project` when `embedding_size != hidden_size`.
    pub emb_project: Option<Dense>,
    pub layers: Vec<LayerIdx>,
    /// The head's dense layer on the first token (BERT's pooler,
    /// `classifier.dense`, DistilBERT's `pre_classifier`).
    pub pooler: Dense,
    pub head_hidden: Vec<Dense>,
    pub classifier: Dense,
}

/// BERT encoder + pooler + classifier head over backend `B`.
pub struct BertClassifier<B: Backend> {
    /// The architecture, as read from `config.json`.
    pub config: BertConfig,
    /// The classification head's label count and hidden widths.
    pub head: HeadConfig,
    /// Every parameter under its Hugging Face name, in declaration order,
    /// with its gradient once allocated.
    pub params: Params<B>,
    pub(crate) idx: Indices,
}

/// Why a [`BertClassifier`] could not be built, or why an architecture
/// cannot carry a head ([`ModelConfig::check_head`]).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ModelError {
    /// A head that cannot be built: fewer than 2 labels, more than 3 hidden
    /// layers, a hidden width of 0, or hidden layers on `deberta-v2`; the
    /// message says which.
    #[error("classifier head: {0}")]
    Head(String),
    /// A config built by hand with sizes no encoder has
    /// ([`ModelConfig::shape_problem`]).
    #[error("model config: `{field}` {problem}")]
    Shape {
        /// The config field at fault, as `config.json` spells it.
        field: &'static str,
        /// What is wrong with its value.
        problem: String,
    },
}

impl<B: Backend> BertClassifier<B> {
    /// A model with HF's initialisation: normal(0, 0.02) weights and
    /// embeddings (padding row zeroed), zero biases, LayerNorm ones/zeros.
    pub fn new_random(
        be: &B,
        config: &BertConfig,
        head: &HeadConfig,
        seed: u64,
    ) -> Result<Self, ModelError> {
        if head.num_labels < 2 {
            return Err(ModelError::Head(format!(
                "num_labels {} must be at least 2",
                head.num_labels
            )));
        }
        if head.hidden.len() > 3 || head.hidden.contains(&0) {
            return Err(ModelError::Head(format!(
                "hidden widths {:?}: at most 3, each positive",
                head.hidden
            )));
        }
        if let Some((field, problem)) = ModelConfig::from(config).shape_problem() {
            return Err(ModelError::Shape { field, problem });
        }
        let (mut params, idx) = params::declare(be, config, head);
        params.init_random(
            be,
            seed,
            config.initializer_range,
            config.pad_token_id as usize,
            idx.word,
        );
        Ok(Self {
            config: config.clone(),
            head: head.clone(),
            params,
            idx,
        })
    }

    /// Allocates dense gradient buffers (zeroed) unless present; a
    /// row-sparse word-embedding gradient is replaced by a dense one.
    pub fn alloc_grads(&mut self, be: &B) {
        self.params.alloc_grads(be, false);
    }

    /// Zeroes every gradient (allocated by `alloc_grads`); a row-sparse
    /// one gives its slots back.
    pub fn zero_grads(&mut self, be: &B) {
        self.params.zero_grads(be);
    }

    /// Sum over the batch of the weighted loss divided by `denom`, with all
    /// gradients accumulated into the store (`alloc_grads` first).
    #[allow(clippy::too_many_arguments)]
    pub fn forward_backward(
        &mut self,
        be: &B,
        batch: &DeviceBatch<B>,
        class_weights: Option<&B::Buf>,
        denom: f64,
        mode: Mode,
        recompute: bool,
    ) -> f64 {
        assert!(
            !self.params.grads.is_empty(),
            "forward_backward needs alloc_grads first"
        );
        let tape = self.forward(be, batch, mode, recompute);
        let targets = LossTargets::new(&batch.labels, class_weights, self.head.num_labels, denom);
        let (loss, dlogits) = head::loss_and_dlogits(be, tape.logits(), &targets, batch.batch);
        self.backward(be, batch, tape, dlogits, mode);
        loss
    }

    /// Logits `[batch, classes]` in evaluation mode.
    pub fn logits(&self, be: &B, batch: &DeviceBatch<B>) -> Vec<f64> {
        let tape = self.forward(be, batch, Mode::Eval, true);
        be.download(tape.logits())
    }

    /// Logits and the weighted loss (divided by `denom`) in eval mode, from
    /// one forward pass.
    pub fn eval_batch(
        &self,
        be: &B,
        batch: &DeviceBatch<B>,
        class_weights: Option<&B::Buf>,
        denom: f64,
    ) -> (Vec<f64>, f64) {
        let tape = self.forward(be, batch, Mode::Eval, true);
        let targets = LossTargets::new(&batch.labels, class_weights, self.head.num_labels, denom);
        let loss = be.cross_entropy_forward(tape.logits(), &targets);
        (be.download(tape.logits()), loss)
    }

    /// The weighted loss (eval mode or a fixed training mode) without
    /// gradients: for evaluation and finite differences.
    pub fn loss(
        &self,
        be: &B,
        batch: &DeviceBatch<B>,
        class_weights: Option<&B::Buf>,
        denom: f64,
        mode: Mode,
    ) -> f64 {
        let tape = self.forward(be, batch, mode, true);
        let targets = LossTargets::new(&batch.labels, class_weights, self.head.num_labels, denom);
        be.cross_entropy_forward(tape.logits(), &targets)
    }

    /// Mean-pooled last hidden states `[batch, hidden]` (sentence-transformers
    /// embeddings, before any normalisation), in evaluation mode.
    pub fn sentence_embeddings(&self, be: &B, batch: &DeviceBatch<B>) -> Vec<f64> {
        let (_emb, outputs) = self.encode(be, batch, Mode::Eval);
        let h = self.config.hidden_size;
        let mut pooled = be.alloc("mean_pool", BufKind::Workspace, batch.batch * h);
        be.mean_pool(
            outputs.last().unwrap(),
            &batch.mask,
            batch.batch,
            batch.seq,
            &mut pooled,
        );
        be.download(&pooled)
    }

    /// Number of scalar parameters.
    pub fn num_parameters(&self) -> usize {
        self.params
            .info
            .iter()
            .map(|p| p.shape.iter().product::<usize>())
            .sum()
    }
}
