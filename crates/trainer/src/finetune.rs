//! One fine-tuning run from files on disk: the work of one trial.
//!
//! Wires the seams together in the order a trial needs them: load and
//! validate the data, split it, tokenise with the model's tokenizer, build
//! the classifier from the pretrained weights, and train, reporting each
//! epoch to the caller's observer (where a pruner can stop the trial).
//!
//! The memory a run may hold is a lease: [`FinetuneSpec::memory_limit`]
//! caps the tensor bytes the backend's tracker allows; a step that would go
//! over is retried with half the micro-batch (see [`crate::train`]), and a
//! run that cannot fit at all is [`FinetuneError::OutOfMemory`]. Fault
//! injection ([`FinetuneSpec::fail_nth_allocation`]) makes one allocation
//! fail the same way, for tests of everything above.

use std::path::{Path, PathBuf};

use crate::backend::cpu::CpuBackend;
use crate::backend::sim::SimBackend;
use crate::batch::Batch;
use crate::config::{BertConfig, ConfigError};
use crate::data::{BatchOrder, DataError, DataSource, TokenizedDataset, stratified_split};
use crate::memory::{OutOfMemory, catch_oom};
use crate::model::{BertClassifier, HeadConfig, LoadError, ModelError};
use crate::tokenize::{TextTokenizer, TokenizerError};
use crate::train::{Control, EpochMetrics, OomRetry, TrainConfig, TrainError, TrainReport, train};
use crate::weights::{WeightsError, load_safetensors};

/// Everything one run needs besides the observer.
#[derive(Clone, Debug)]
pub struct FinetuneSpec {
    /// A Hugging Face model directory: config.json, model.safetensors and
    /// tokenizer.json (or vocab.txt).
    pub model_dir: PathBuf,
    pub data: DataSource,
    pub validation_fraction: f64,
    pub split_seed: u64,
    /// Sequences are truncated to this many tokens (special tokens included).
    pub max_length: usize,
    /// Examples per forward/backward; `train.accumulation_steps` of them make
    /// one optimiser step.
    pub micro_batch: usize,
    /// Widths of the classifier head's hidden layers (0-3).
    pub head_hidden: Vec<usize>,
    /// Overrides the model config's hidden and attention dropout (in
    /// `[0, 1)`). Weight decay is `train.optimizer`'s.
    pub dropout: Option<f64>,
    /// Tensor bytes the backend may hold at once (the trial's lease).
    pub memory_limit: Option<usize>,
    /// Fault injection: the n-th buffer allocation of the run (1 = the
    /// first) fails as if out of memory, once.
    pub fail_nth_allocation: Option<u64>,
    pub train: TrainConfig,
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct FinetuneOutcome {
    pub report: TrainReport,
    pub train_examples: usize,
    pub validation_examples: usize,
    /// Records the loader skipped, as `file:line: reason` lines.
    pub skipped_records: Vec<String>,
    /// Peak tensor bytes the backend held (weights included).
    pub peak_bytes: usize,
    /// Buffer allocations the run made (a range for
    /// `fail_nth_allocation`).
    pub allocation_requests: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum FinetuneError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Weights(#[from] WeightsError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("{0}")]
    Train(TrainError),
    /// The simulated device or its allocator could not be set up.
    #[error("simulated device: {0}")]
    SimDevice(#[from] gpu_mem::AllocError),
    /// The run did not fit its memory: `micro_batch` 0 while building the
    /// model, gradients or optimiser state, 1 when even one example per
    /// micro-batch did not fit.
    #[error("{error} (micro-batch {micro_batch})")]
    OutOfMemory {
        micro_batch: usize,
        #[source]
        error: OutOfMemory,
    },
}

impl From<TrainError> for FinetuneError {
    fn from(e: TrainError) -> Self {
        match e {
            TrainError::OutOfMemory { micro_batch, error } => {
                FinetuneError::OutOfMemory { micro_batch, error }
            }
            other => FinetuneError::Train(other),
        }
    }
}

impl FinetuneError {
    /// The out-of-memory report, if the run failed for lack of memory.
    pub fn out_of_memory(&self) -> Option<&OutOfMemory> {
        match self {
            FinetuneError::OutOfMemory { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// `config` with its dropout probabilities replaced by `dropout`.
pub(crate) fn with_dropout(
    mut config: BertConfig,
    dropout: Option<f64>,
    config_path: PathBuf,
) -> Result<BertConfig, ConfigError> {
    if let Some(p) = dropout {
        if !(0.0..1.0).contains(&p) {
            return Err(ConfigError::Invalid {
                path: config_path,
                field: "dropout",
                problem: format!("override {p} is not in [0, 1)"),
            });
        }
        config.hidden_dropout_prob = p;
        config.attention_probs_dropout_prob = p;
        config.classifier_dropout = Some(p);
    }
    Ok(config)
}

/// A model directory's config (with `dropout` applied) and its tokenizer
/// (truncating to `max_length`), checked against each other.
fn open_model_dir(
    dir: &Path,
    dropout: Option<f64>,
    max_length: usize,
) -> Result<(BertConfig, TextTokenizer), FinetuneError> {
    let config_path = dir.join("config.json");
    let config = with_dropout(BertConfig::from_file(&config_path)?, dropout, config_path)?;
    let tokenizer = TextTokenizer::from_model_dir(dir, max_length)?;
    tokenizer.check_model(config.vocab_size, config.max_sequence())?;
    Ok((config, tokenizer))
}

fn weights_path(dir: &Path) -> PathBuf {
    dir.join("model.safetensors")
}

/// Checks a model directory as [`finetune_cpu`] would load it, without
/// training: `config.json` parses, the tokenizer loads and fits the
/// config, `model.safetensors` reads whole (header, lengths, dtypes, finite
/// values) and every tensor has the shape the config gives its parameter,
/// for a head of `num_labels`. The parameters are built on a simulated
/// device, so no memory is held beyond the checkpoint's own values while
/// checking. A study runs this once per model before its first trial, so a
/// broken model is one error, not a failed trial each.
pub fn check_model_dir(dir: &Path, num_labels: usize) -> Result<BertConfig, FinetuneError> {
    let config_path = dir.join("config.json");
    let config = BertConfig::from_file(&config_path)?;
    open_model_dir(dir, None, config.max_sequence().min(512))?;
    let tensors = load_safetensors(weights_path(dir))?;
    let be = SimBackend::with_limit(1 << 42, None, true, 4)?;
    let head = HeadConfig {
        num_labels,
        hidden: vec![],
    };
    let mut model = BertClassifier::new_random(&be, &config, &head, 0)?;
    model.load(&be, &tensors)?;
    Ok(config)
}

/// Fine-tunes on the CPU backend (f32).
pub fn finetune_cpu(
    spec: &FinetuneSpec,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<FinetuneOutcome, FinetuneError> {
    finetune_cpu_trained(spec, observer).map(|trained| trained.outcome)
}

/// A finished CPU run with its model, as the last epoch left it.
pub struct TrainedCpu {
    pub outcome: FinetuneOutcome,
    pub backend: CpuBackend<f32>,
    pub model: BertClassifier<CpuBackend<f32>>,
    /// The class names, when the data gave its labels as names.
    pub label_names: Option<Vec<String>>,
}

/// [`finetune_cpu`], keeping the trained model (to save it: see
/// [`crate::export`]). An observer that stops after epoch `k` leaves the
/// weights of epoch `k`.
pub fn finetune_cpu_trained(
    spec: &FinetuneSpec,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<TrainedCpu, FinetuneError> {
    let dataset = spec.data.load()?;
    let num_classes = dataset.num_classes;
    let split = stratified_split(
        &dataset.examples,
        num_classes,
        spec.validation_fraction,
        spec.split_seed,
    )?;

    let (config, tokenizer) = open_model_dir(&spec.model_dir, spec.dropout, spec.max_length)?;
    let train_set = TokenizedDataset::new(&tokenizer, &split.train, num_classes)?;
    let valid_set = TokenizedDataset::new(&tokenizer, &split.validation, num_classes)?;
    let order = BatchOrder::Shuffled {
        seed: spec.train.seed,
        epoch: 0,
    };
    let train_batches: Vec<_> = train_set.batches(spec.micro_batch, order)?.collect();
    let valid_batches: Vec<_> = valid_set
        .batches(spec.micro_batch, BatchOrder::Sequential)?
        .collect();

    let tensors = load_safetensors(weights_path(&spec.model_dir))?;
    let be = CpuBackend::<f32>::new();
    be.tracker().set_limit(spec.memory_limit);
    if let Some(n) = spec.fail_nth_allocation {
        be.tracker().fail_nth_allocation(n);
    }
    let head = HeadConfig {
        num_labels: num_classes,
        hidden: spec.head_hidden.clone(),
    };
    let built = catch_oom(|| -> Result<_, FinetuneError> {
        let mut model = BertClassifier::new_random(&be, &config, &head, spec.train.seed)?;
        model.load(&be, &tensors)?;
        Ok(model)
    });
    let mut model = built.map_err(|error| FinetuneError::OutOfMemory {
        micro_batch: 0,
        error,
    })??;
    drop(tensors);
    let report = train(
        &be,
        &mut model,
        &train_batches,
        &valid_batches,
        &spec.train,
        observer,
    )?;
    let outcome = FinetuneOutcome {
        report,
        train_examples: train_set.len(),
        validation_examples: valid_set.len(),
        skipped_records: dataset
            .report
            .skipped
            .iter()
            .map(ToString::to_string)
            .collect(),
        peak_bytes: be.tracker().peak_bytes(),
        allocation_requests: be.tracker().allocation_requests(),
    };
    Ok(TrainedCpu {
        outcome,
        backend: be,
        model,
        label_names: dataset.label_names,
    })
}

/// A simulated trial: the real training loop on synthetic batches over
/// [`SimBackend`], so the real allocation sequence goes through `gpu-mem`'s
/// real allocator on a simulated device. Metrics are meaningless (nothing is
/// computed); the memory figures are the point.
#[derive(Clone, Debug)]
pub struct SimSpec {
    /// The architecture, e.g. [`BertConfig::bert_base`] or a
    /// [`BertConfig::preset`].
    pub config: BertConfig,
    pub head: HeadConfig,
    /// Overrides the config's dropout (as [`FinetuneSpec::dropout`]); zero
    /// dropout allocates no dropout buffers.
    pub dropout: Option<f64>,
    pub micro_batch: usize,
    pub accumulation_steps: usize,
    /// Every sequence is this long (all tokens real).
    pub seq_len: usize,
    pub train_examples: usize,
    pub validation_examples: usize,
    pub epochs: usize,
    /// Bytes of the simulated device.
    pub device_capacity: usize,
    /// The lease: bytes the allocator may reserve.
    pub memory_limit: Option<usize>,
    /// Use `gpu-mem`'s expandable segments (what the study runner uses).
    pub expandable_segments: bool,
    /// Fault injection, as [`FinetuneSpec::fail_nth_allocation`].
    pub fail_nth_allocation: Option<u64>,
    pub seed: u64,
}

impl Default for SimSpec {
    /// BERT-base, binary head, micro-batch 8 of 128 tokens, one epoch of 64
    /// examples (16 for validation) on a 24 GiB device without a lease.
    fn default() -> Self {
        Self {
            config: BertConfig::bert_base(),
            head: HeadConfig {
                num_labels: 2,
                hidden: vec![],
            },
            dropout: None,
            micro_batch: 8,
            accumulation_steps: 1,
            seq_len: 128,
            train_examples: 64,
            validation_examples: 16,
            epochs: 1,
            device_capacity: 24 << 30,
            memory_limit: None,
            expandable_segments: true,
            fail_nth_allocation: None,
            seed: 0,
        }
    }
}

/// What a simulated trial measured.
#[derive(Clone, Debug)]
pub struct SimOutcome {
    pub report: TrainReport,
    /// Peak bytes the allocator reserved from the device (what a lease
    /// must cover).
    pub peak_reserved: u64,
    /// Peak bytes in allocated blocks (requests after rounding).
    pub peak_allocated: u64,
    /// Peak bytes requested (the memory plan's figure).
    pub peak_requested: u64,
    /// Same as `report.oom_retries`.
    pub oom_retries: Vec<OomRetry>,
    /// Buffer allocations the run made.
    pub allocation_requests: u64,
    /// The allocator's counters at the end (before teardown).
    pub stats: gpu_mem::MemoryStats,
}

/// `examples` synthetic rows in batches of at most `micro_batch`, every
/// token real, ids and labels cycling.
fn synthetic_batches(
    examples: usize,
    micro_batch: usize,
    seq: usize,
    vocab: usize,
    classes: usize,
) -> Vec<Batch> {
    let micro_batch = micro_batch.max(1);
    (0..examples)
        .step_by(micro_batch)
        .map(|start| {
            let rows = micro_batch.min(examples - start);
            Batch {
                batch: rows,
                seq,
                input_ids: (0..rows * seq).map(|i| (i % vocab) as u32).collect(),
                token_type_ids: vec![0; rows * seq],
                attention_mask: vec![1; rows * seq],
                labels: (0..rows).map(|i| (start + i) % classes).collect(),
            }
        })
        .collect()
}

/// Runs a simulated trial (see [`SimSpec`]); out of memory is retried with
/// half the micro-batch as on a device, and a run that cannot fit is
/// [`FinetuneError::OutOfMemory`].
pub fn finetune_sim(
    spec: &SimSpec,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<SimOutcome, FinetuneError> {
    let config = with_dropout(spec.config.clone(), spec.dropout, PathBuf::from("<sim>"))?;
    let be = SimBackend::with_limit(
        spec.device_capacity,
        spec.memory_limit,
        spec.expandable_segments,
        4,
    )?;
    if let Some(n) = spec.fail_nth_allocation {
        be.tracker().fail_nth_allocation(n);
    }
    let classes = spec.head.num_labels;
    let batches = |n| {
        synthetic_batches(
            n,
            spec.micro_batch,
            spec.seq_len,
            config.vocab_size,
            classes,
        )
    };
    let (train_batches, valid_batches) = (
        batches(spec.train_examples),
        batches(spec.validation_examples),
    );
    let mut model = catch_oom(|| BertClassifier::new_random(&be, &config, &spec.head, spec.seed))
        .map_err(|error| FinetuneError::OutOfMemory {
            micro_batch: 0,
            error,
        })??;
    let cfg = TrainConfig {
        epochs: spec.epochs,
        accumulation_steps: spec.accumulation_steps,
        seed: spec.seed,
        ..TrainConfig::default()
    };
    let report = train(
        &be,
        &mut model,
        &train_batches,
        &valid_batches,
        &cfg,
        observer,
    )?;
    let stats = be.allocator().stats();
    Ok(SimOutcome {
        peak_reserved: stats.reserved_bytes.all.peak,
        peak_allocated: stats.allocated_bytes.all.peak,
        peak_requested: stats.requested_bytes.all.peak,
        oom_retries: report.oom_retries.clone(),
        allocation_requests: be.tracker().allocation_requests(),
        stats,
        report,
    })
}
