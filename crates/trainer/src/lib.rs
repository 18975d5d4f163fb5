//! Fine-tuning of BERT-family text classifiers, with a memory plan that
//! predicts a training step's peak memory before the step runs.
//!
//! The model code calls backend operations (matmul, layernorm, masked
//! softmax, gelu, dropout, embeddings, cross-entropy, AdamW), each with a
//! forward and a backward; a CPU backend is the reference for every kernel of
//! the CUDA backend.
//!
//! Seams:
//! - [`backend::Backend`]: every numeric operation, forward and backward, and
//!   every buffer allocation (named, with a kind). [`backend::cpu::CpuBackend`]
//!   is the reference (f32/f64, rayon); a CUDA backend implements the same
//!   trait over device buffers.
//! - [`memory::MemoryPlan`]: runs the real model code on
//!   [`backend::plan::PlanBackend`], which only allocates, so the plan lists
//!   exactly the buffers a backend will allocate, in order, and their peak.
//! - [`model::BertClassifier`]: built from a [`config::BertConfig`] with random
//!   init, or loaded from [`weights::NamedTensors`].
//! - [`train::train`]: trains on slices of [`batch::Batch`] and reports each
//!   epoch's metrics to an observer that may stop the trial.
//!
//! It deliberately does not choose hyperparameters or store results: one call
//! trains one configuration and reports metrics to an observer.

pub mod backend;
pub mod batch;
pub mod config;
pub mod float;
pub mod memory;
pub mod model;
pub mod rng;
pub mod train;
pub mod weights;
