//! Fine-tuning of BERT-family text classifiers (BERT, RoBERTa, XLM-RoBERTa,
//! CamemBERT, DistilBERT, ELECTRA), with a memory plan that
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
//!   init, or loaded from [`weights::NamedTensors`]. `config.json`'s
//!   `model_type` picks a [`model::family::Family`] (BERT, RoBERTa /
//!   XLM-RoBERTa / CamemBERT, DistilBERT, ELECTRA): names, positions, token
//!   types, embedding projection and classification head as data over one
//!   encoder.
//! - [`train::train`]: trains on slices of [`batch::Batch`] and reports each
//!   epoch's metrics to an observer that may stop the trial.
//! - Out of memory is an unwind, not a `Result` on every operation: a
//!   backend whose allocation is refused (a [`memory::MemTracker`] limit, an
//!   injected fault, or `gpu-mem`'s allocator) raises
//!   [`memory::OutOfMemory`] with `panic_any`; [`memory::catch_oom`] catches
//!   it at step boundaries, and `train` retries the step with the
//!   micro-batches split in half ([`batch::Batch::split`]), keeping the
//!   smaller size; only micro-batch 1 failing is an error. Buffers are RAII,
//!   so the unwind frees what the failed step held.
//! - [`backend::sim::SimBackend`] computes nothing and takes every buffer
//!   from `gpu-mem`'s `CachingAllocator` over a `SimDevice`:
//!   [`finetune::finetune_sim`] runs the real loop's allocations through the
//!   real allocator under a lease, for the study runner's simulations.
//! - [`finetune::finetune_cpu`] runs one trial from files on the CPU under
//!   an optional memory lease; [`testing::write_tiny_model`] writes a tiny
//!   random BERT directory so tests above the trainer can run real
//!   fine-tunes in seconds.
//! - [`finetune::finetune_cpu_trained`] keeps the trained model, and
//!   [`export::save_hf_dir`] writes it as a Hugging Face
//!   `BertForSequenceClassification` directory that `transformers` loads;
//!   [`export::HfClassifier`] reads such a directory (ours or
//!   transformers') back for prediction.
//! - Data reaches the model through three seams: [`weights`] turns a Hugging
//!   Face `model.safetensors` (f32/f16/bf16) into [`weights::NamedTensors`];
//!   [`tokenize::TextTokenizer`] turns text into truncated, unpadded ids and
//!   checks they fit the model; [`data`] loads CSV/JSONL/JSON files or the
//!   embedded Sentiment Labelled Sentences set, validates every record and
//!   label on the host (bad records skipped with `file:line` reasons, or
//!   rejected), splits them stratified and seeded (duplicate texts kept on
//!   one side), and cuts shuffled micro-batches padded per batch.
//!
//! Typical use (the study runner):
//!
//! ```no_run
//! # use trainer::{backend::cpu::CpuBackend, config::BertConfig, model::*, train::*, weights::NamedTensors, batch::Batch};
//! # fn run(tensors: NamedTensors, train_set: Vec<Batch>, valid: Vec<Batch>) -> Result<(), Box<dyn std::error::Error>> {
//! let be = CpuBackend::<f32>::new();
//! let config = BertConfig::from_file("minilm/config.json")?;
//! let head = HeadConfig { num_labels: 2, hidden: vec![256] };
//! let mut model = BertClassifier::new_random(&be, &config, &head, 42)?;
//! let report = model.load(&be, &tensors)?; // pooler/classifier may stay random
//! let cfg = TrainConfig { epochs: 3, lr: 3e-5, patience: Some(1), ..TrainConfig::default() };
//! let result = train(&be, &mut model, &train_set, &valid, &cfg, &mut |m: &EpochMetrics| {
//!     if m.valid.f1_macro < 0.5 { Control::Stop } else { Control::Continue }
//! })?;
//! # Ok(()) }
//! ```
//!
//! Determinism: dropout masks come from a counter-based RNG ([`rng`]) keyed by
//! (seed, micro-step, dropout site, element), and every CPU kernel writes
//! disjoint outputs and reduces in a fixed order, so a run gives bit-identical
//! losses for any thread count.
//!
//! It deliberately does not choose hyperparameters or store results: one call
//! trains one configuration and reports metrics to an observer. The CPU backend
//! does not cache memory: it allocates exactly what the plan lists. It does
//! not decide how much memory a trial gets (the runner leases it) and does
//! not survive aborts or sticky device errors: those kill the process, which
//! is why trials run in worker processes.

pub mod backend;
pub mod batch;
pub mod config;
pub mod data;
pub mod export;
pub mod finetune;
pub mod float;
pub mod memory;
pub mod model;
pub mod rng;
pub mod testing;
pub mod tokenize;
pub mod train;
pub mod weights;
