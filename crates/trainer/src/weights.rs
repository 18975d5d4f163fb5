//! Named host tensors: what a checkpoint loader produces and the model
//! consumes.
//!
//! Names are Hugging Face BERT names with any `bert.` / `roberta.` prefix
//! removed (`embeddings.word_embeddings.weight`,
//! `encoder.layer.0.attention.self.query.weight`, `pooler.dense.weight`, ...),
//! so a model maps them to parameters without caring where they came from.

use std::collections::BTreeMap;

/// A dense row-major f32 tensor on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// Tensors by canonical name.
pub type NamedTensors = BTreeMap<String, HostTensor>;
