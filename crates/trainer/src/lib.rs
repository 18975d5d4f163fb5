//! Fine-tuning of BERT-family text classifiers, with a memory plan that
//! predicts a training step's peak memory before the step runs.
//!
//! The model code calls backend operations (matmul, layernorm, masked
//! softmax, gelu, dropout, embeddings, cross-entropy, AdamW), each with a
//! forward and a backward; a CPU backend is the reference for every kernel of
//! the CUDA backend.
//!
//! It deliberately does not choose hyperparameters or store results: one call
//! trains one configuration and reports metrics to an observer.

pub mod batch;
pub mod data;
pub mod tokenize;
pub mod weights;
