//! Fine-tuning of transformer text classifiers of the BERT lineage (BERT,
//! RoBERTa, XLM-RoBERTa, CamemBERT, DistilBERT, ELECTRA, DeBERTa-v2/v3),
//! with a memory plan that predicts a training step's peak memory before
//! the step runs.
//!
//! The model code calls backend operations (matmul, layernorm, masked
//! softmax, gelu, dropout, embeddings, DeBERTa's relative-position gather
//! and scatter, cross-entropy, AdamW), each with a forward and a backward; a
//! CPU backend is the reference for every kernel of the CUDA backend.
//!
//! Seams:
//! - [`backend::Backend`]: every numeric operation, forward and backward, and
//!   every buffer allocation (named, with a kind). [`backend::cpu::CpuBackend`]
//!   is the reference (f32/f64, rayon); a CUDA backend implements the same
//!   trait over device buffers.
//! - [`memory::MemoryPlan`]: runs the real model code on
//!   [`backend::plan::PlanBackend`], which only allocates, so the plan lists
//!   exactly the buffers a backend will allocate, in order, and their peak.
//!   A request that cannot run (no rows, a sequence longer than the model's
//!   positions, a head the model cannot carry) is a
//!   [`memory::PlanError`]. [`memory::PlanPeaks`] prices a step at every
//!   micro-batch from a few plans, exactly, for a study runner's packing.
//! - [`model::Classifier`]: what the training loop, the memory plan and
//!   export need of a model, implemented by the two model codes.
//!   `config.json`'s `model_type` picks one ([`model::ModelConfig`]):
//!   - [`model::BertClassifier`], built from a [`config::BertConfig`], serves
//!     every [`model::family::Family`] (BERT, RoBERTa / XLM-RoBERTa /
//!     CamemBERT, DistilBERT, ELECTRA): names, positions, token types,
//!     embedding projection and classification head are data over one
//!     post-LN encoder;
//!   - [`model::deberta::DebertaClassifier`] (`deberta-v2`: DeBERTa-v2 and
//!     -v3) has its own disentangled attention and config.
//!
//!   Both are built with HF's random initialisation, then loaded from
//!   [`weights::NamedTensors`].
//! - [`train::train`]: trains on a slice of [`batch::Batch`]es, or on
//!   batches cut anew from a tokenised set each epoch
//!   ([`train::TrainBatches`]), and reports each epoch's metrics to an
//!   observer that may stop the trial.
//! - Out of memory is a value, not a `Result` on every operation: a
//!   backend whose allocation is refused (a [`memory::MemTracker`] limit or
//!   `gpu-mem`'s allocator) records [`memory::OutOfMemory`] in its
//!   recorded-failure channel and skips the rest of the step;
//!   [`backend::Backend::take_failure`] hands it to `train` at each step
//!   and evaluation, which retries the step with the micro-batches split in
//!   half ([`batch::Batch::split`]), keeping the smaller size; only
//!   micro-batch 1 failing is an error. Buffers are RAII, so the failed
//!   step's memory is freed when it returns. Fault injection
//!   (`backend::faulty`, feature `testing`) goes through the same channel.
//! - [`backend::sim::SimBackend`] computes nothing and takes every buffer
//!   from `gpu-mem`'s `CachingAllocator` over a `SimDevice`:
//!   [`finetune::finetune_sim`] runs the real loop's allocations through the
//!   real allocator under a lease, for the study runner's simulations.
//! - [`finetune::finetune_cpu`] runs one trial from files on the CPU under
//!   an optional memory lease, for any supported `model_type`;
//!   `testing::write_tiny_model` (feature `testing`) writes a tiny random
//!   BERT directory so tests above the trainer can run real fine-tunes in
//!   seconds (the other families' tiny directories are the parity fixtures
//!   under `tests/fixtures/families/`).
//! - [`finetune::finetune_cpu_trained`] keeps the trained model of any
//!   family, and [`export::save_hf_dir`] writes it as a Hugging Face
//!   directory of that family's `*ForSequenceClassification` (HF's tensor
//!   names, from the family table) that `transformers` loads;
//!   [`export::HfClassifier`] reads such a directory of any family (ours or
//!   transformers') back for prediction.
//! - Data reaches the model through three seams: [`weights`] turns a Hugging
//!   Face `model.safetensors` (f32/f16/bf16) into [`weights::NamedTensors`];
//!   [`tokenize::TextTokenizer`] (WordPiece, byte-level BPE or SentencePiece
//!   Unigram, read from `tokenizer.json`, or BERT's `vocab.txt`) turns text
//!   into truncated, unpadded ids and checks they fit the model; [`data`] loads CSV/JSONL/JSON files or the
//!   embedded Sentiment Labelled Sentences set, validates every record and
//!   label on the host (bad records skipped with `file:line` reasons, or
//!   rejected), splits them stratified and seeded (duplicate texts kept on
//!   one side), and cuts shuffled micro-batches padded per batch.
//!
//! # Example
//!
//! One trial: a tiny random BERT directory (a real checkpoint of any
//! family, such as all-MiniLM-L6-v2 or deberta-v3-base, goes the same way;
//! writing the tiny one needs the `testing` feature), fine-tuned for one epoch on the embedded sentiment
//! sentences, with an observer that could stop it:
//!
//! ```
//! use trainer::finetune::{FinetuneSpec, finetune_cpu};
//! use trainer::testing::{sentiment_words, tiny_config, write_tiny_model};
//! use trainer::train::{Control, EpochMetrics, TrainConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let words = sentiment_words(300);
//! let words: Vec<&str> = words.iter().map(String::as_str).collect();
//! write_tiny_model(dir.path(), &tiny_config(), &words, 1)?;
//!
//! let spec = FinetuneSpec {
//!     model_dir: dir.path().to_path_buf(),
//!     data: Default::default(), // the embedded Sentiment Labelled Sentences
//!     validation_fraction: 0.2,
//!     split_seed: 0,
//!     max_length: 32,
//!     micro_batch: 32,
//!     batch_size: None, // Some(64): steps of 64 in two micro-batches of 32
//!     head_hidden: vec![],
//!     dropout: None,
//!     memory_limit: Some(64 << 20), // the trial's lease: 64 MiB of tensors
//!     matmul_precision: Default::default(), // fp32; bf16 or fp16 suit a GPU
//!     kernels: Default::default(), // the reference step; Kernels::Fused is lighter
//!     train: TrainConfig { epochs: 1, lr: 1e-3, ..TrainConfig::default() },
//! };
//! let outcome = finetune_cpu(&spec, &mut |m: &EpochMetrics| {
//!     println!("epoch {}: accuracy {:.3}", m.epoch, m.valid.accuracy);
//!     Control::Continue // Control::Stop would prune the trial here
//! })?;
//! assert_eq!(outcome.train_examples + outcome.validation_examples, 3000);
//! assert!(outcome.peak_bytes <= 64 << 20);
//! # Ok(())
//! # }
//! ```
//!
//! Determinism: dropout masks come from a counter-based RNG ([`rng`]) keyed by
//! (seed, micro-step, dropout site, element), and every CPU kernel writes
//! disjoint outputs and reduces in a fixed order, so a run gives bit-identical
//! losses for any thread count.
//!
//! It deliberately does not choose hyperparameters or store results: one call
//! trains one configuration and reports metrics to an observer. The CPU
//! backend's tracked allocations are exactly what the plan lists (freed
//! buffers of 64 KiB or more are kept for reuse, bounded by that peak). It does
//! not decide how much memory a trial gets (the runner leases it) and does
//! not survive aborts or sticky device errors: those kill the process, which
//! is why trials run in worker processes.

#![warn(missing_docs)]

pub mod backend;
pub mod batch;
pub mod cache_dir;
pub mod config;
pub mod data;
pub mod export;
pub mod finetune;
pub mod float;
pub mod memory;
pub mod model;
pub mod preset;
pub mod rng;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tokenize;
pub mod train;
pub mod weights;
mod write_whole;
