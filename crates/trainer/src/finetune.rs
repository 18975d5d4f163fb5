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
//! run that cannot fit at all is [`FinetuneError::OutOfMemory`]. With the
//! `testing` feature, `finetune_cpu_with_faults` and
//! `finetune_sim_with_faults` make one allocation fail the same way, or
//! the device fail, for tests of everything above.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

#[cfg(feature = "cuda")]
mod cuda;
mod tokenized;
#[cfg(feature = "cuda")]
pub use cuda::{CudaOutcome, finetune_cuda};

use crate::backend::cpu::CpuBackend;
#[cfg(feature = "testing")]
use crate::backend::faulty::{Faults, FaultyBackend};
use crate::backend::sim::SimBackend;
use crate::backend::{Backend, Failure, Kernels, MatmulPrecision};
use crate::batch::Batch;
use crate::config::{BertConfig, ConfigError};
use crate::data::{BatchOrder, DataError, DataSource, TokenizedDataset, stratified_split};
use crate::memory::{MemTracker, OutOfMemory, StepBackend};
use crate::model::deberta::{DebertaClassifier, DebertaConfig, DebertaError};
use crate::model::{
    BertClassifier, BuildError, Classifier, HeadConfig, LoadError, ModelConfig, ModelError,
};
use crate::tokenize::{TextTokenizer, TokenizerError};
use crate::train::{
    Control, EpochMetrics, OomRetry, TrainBatches, TrainConfig, TrainError, TrainReport, train,
};
use crate::weights::{NamedTensors, WeightsError, load_safetensors};

/// Everything one run needs besides the observer.
#[derive(Clone, Debug)]
pub struct FinetuneSpec {
    /// A Hugging Face model directory: config.json, model.safetensors and
    /// tokenizer.json (or vocab.txt).
    pub model_dir: PathBuf,
    /// The labelled examples to train and validate on.
    pub data: DataSource,
    /// Share of the examples held out for validation, stratified by class;
    /// strictly between 0 and 1.
    pub validation_fraction: f64,
    /// Seeds the train/validation split, independently of `train.seed`.
    pub split_seed: u64,
    /// Sequences are truncated to this many tokens (special tokens included).
    pub max_length: usize,
    /// Most examples per forward/backward pass.
    pub micro_batch: usize,
    /// Examples per optimiser step, each step cut into micro-batches of at
    /// most `micro_batch` whose sizes differ by at most one (32 at
    /// micro-batch 11: 11, 11 and 10); `None`: `micro_batch` times
    /// `train.accumulation_steps`.
    pub batch_size: Option<usize>,
    /// Widths of the classifier head's hidden layers (0-3).
    pub head_hidden: Vec<usize>,
    /// Overrides the model config's hidden and attention dropout (in
    /// `[0, 1)`). Weight decay is `train.optimizer`'s.
    pub dropout: Option<f64>,
    /// Bytes the backend may hold at once (the trial's lease): its
    /// tensors, and on CUDA everything its allocator reserves, the
    /// backend's own buffers (cuBLAS workspace) included.
    pub memory_limit: Option<usize>,
    /// The operand format of matrix products (fp16 turns on loss scaling).
    /// On the CPU, 16-bit formats are emulated: the same numbers as a GPU's
    /// tensor cores, more slowly.
    pub matmul_precision: MatmulPrecision,
    /// Which implementation runs the step ([`Kernels`]): the fused one
    /// stores activations in 16 bits when the products are.
    pub kernels: Kernels,
    /// The training loop's settings; `train.seed` also seeds which
    /// examples share a training batch (drawn anew each epoch, as
    /// [`TrainBatches::Redrawn`]), their order, and the initialisation of a head the
    /// checkpoint lacks (of every weight, for a [`crate::preset`]
    /// directory).
    pub train: TrainConfig,
}

/// Where a run's time went before its first step, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StartupSeconds {
    /// Reading, splitting and tokenising the data, and cutting the
    /// validation batches (the process keeps recent splits: a repeat costs
    /// only the batches).
    pub data: f64,
    /// Starting the backend: on CUDA the context, kernel modules, cuBLAS
    /// handle and allocator.
    pub device: f64,
    /// Building the model: its weights read and uploaded, or drawn.
    pub model: f64,
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct FinetuneOutcome {
    /// The training loop's report: each epoch's metrics, steps and
    /// out-of-memory retries.
    pub report: TrainReport,
    /// Examples on the training side of the split.
    pub train_examples: usize,
    /// Examples on the validation side of the split.
    pub validation_examples: usize,
    /// Records the loader skipped, as `file:line: reason` lines.
    pub skipped_records: Vec<String>,
    /// Peak tensor bytes the backend held (weights included).
    pub peak_bytes: usize,
    /// Buffer allocations the run made (the range a test injects a fault
    /// in).
    pub allocation_requests: u64,
    /// Seconds spent before the first step, by phase.
    pub startup: StartupSeconds,
}

/// Why a run (or a check of a model directory or of the data) failed.
#[derive(Debug, thiserror::Error)]
pub enum FinetuneError {
    /// The data could not be loaded, split, tokenised or cut into batches.
    #[error(transparent)]
    Data(#[from] DataError),
    /// The model's `config.json` could not be read, describes a model this
    /// trainer cannot build, or the dropout override is not in `[0, 1)`.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The model's tokenizer could not be loaded, or does not fit the
    /// model or the examples.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// `model.safetensors` could not be read, or holds a tensor that
    /// cannot be used.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// The classifier could not be built: a head that does not fit the
    /// architecture, or a BERT-shaped config of sizes no encoder has.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// The checkpoint does not fit the BERT-shaped model its config
    /// describes.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A DeBERTa-v2/v3 config or checkpoint could not be read or used.
    #[error(transparent)]
    Deberta(#[from] DebertaError),
    /// Training stopped with an error other than out of memory.
    #[error("{0}")]
    Train(TrainError),
    /// The simulated device or its allocator could not be set up.
    #[error("simulated device: {0}")]
    SimDevice(#[from] gpu_mem::AllocError),
    /// The CUDA backend could not start, or the device failed outside a
    /// training step.
    #[cfg(feature = "cuda")]
    #[error("CUDA: {0}")]
    Cuda(#[from] crate::backend::cuda::CudaError),
    /// The run did not fit its memory: `micro_batch` 0 while building the
    /// model, gradients or optimiser state, 1 when even one example per
    /// micro-batch did not fit.
    #[error("{error} (micro-batch {micro_batch})")]
    OutOfMemory {
        /// Rows per micro-batch when it failed: 0 or 1, as above.
        micro_batch: usize,
        /// The refused allocation.
        #[source]
        error: OutOfMemory,
    },
}

impl FinetuneError {
    /// Whether the model's config holds a size beyond the limits or one
    /// its checkpoint contradicts (`ConfigError::Size`): bad input, found
    /// before anything of that size was allocated.
    pub fn is_size_error(&self) -> bool {
        match self {
            FinetuneError::Config(e) => e.is_size(),
            FinetuneError::Deberta(DebertaError::Size(e)) => e.is_size(),
            _ => false,
        }
    }
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

impl From<BuildError> for FinetuneError {
    fn from(e: BuildError) -> Self {
        match e {
            BuildError::Bert(e) => FinetuneError::Model(e),
            BuildError::Deberta(e) => FinetuneError::Deberta(e),
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
    config: ModelConfig,
    dropout: Option<f64>,
    config_path: PathBuf,
) -> Result<ModelConfig, ConfigError> {
    match dropout {
        Some(p) if !(0.0..1.0).contains(&p) => Err(ConfigError::Invalid {
            path: config_path,
            field: "dropout",
            problem: format!("override {p} is not in [0, 1)"),
        }),
        Some(p) => Ok(config.with_dropout(p)),
        None => Ok(config),
    }
}

/// A `config.json` read as the architecture its `model_type` names:
/// `deberta-v2` has its own model, every other type is a family of the
/// shared encoder (whose reader reports unknown types).
pub fn read_model_config(path: &Path) -> Result<ModelConfig, FinetuneError> {
    #[derive(serde::Deserialize)]
    struct ModelType {
        model_type: Option<String>,
    }
    let model_type = std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str::<ModelType>(&text).ok())
        .and_then(|t| t.model_type);
    Ok(match model_type.as_deref() {
        Some("deberta-v2") => DebertaConfig::from_file(path)?.into(),
        _ => BertConfig::from_file(path)?.into(),
    })
}

/// A model directory's config (with `dropout` applied) and its tokenizer
/// (truncating to `max_length`), checked against each other.
fn open_model_dir(
    dir: &Path,
    dropout: Option<f64>,
    max_length: usize,
) -> Result<(ModelConfig, TextTokenizer), FinetuneError> {
    let config_path = dir.join("config.json");
    let config = with_dropout(read_model_config(&config_path)?, dropout, config_path)?;
    let tokenizer = TextTokenizer::from_model_dir(dir, max_length)?;
    tokenizer.check_model(config.vocab_size(), config.max_sequence())?;
    Ok((config, tokenizer))
}

fn weights_path(dir: &Path) -> PathBuf {
    dir.join("model.safetensors")
}

/// What every architecture's classifier is built from besides its config.
struct Checkpoint<'a> {
    head: &'a HeadConfig,
    /// Seeds HF's initialisation of a head the checkpoint lacks.
    seed: u64,
    tensors: &'a NamedTensors,
    /// Names the weights file in errors.
    path: &'a Path,
}

/// A classifier built with random weights and loaded from a checkpoint
/// (or left random, for a [`crate::preset`] directory): one builder per
/// architecture; the run around it is the same.
trait Loaded<B: Backend>: Classifier<B> + Sized {
    type Config;
    fn random(
        be: &B,
        config: &Self::Config,
        head: &HeadConfig,
        seed: u64,
    ) -> Result<Self, FinetuneError>;
    fn load_into(&mut self, be: &B, from: &Checkpoint) -> Result<(), FinetuneError>;

    fn build(be: &B, config: &Self::Config, from: &Checkpoint) -> Result<Self, FinetuneError> {
        let mut model = Self::random(be, config, from.head, from.seed)?;
        model.load_into(be, from)?;
        Ok(model)
    }
}

impl<B: Backend> Loaded<B> for BertClassifier<B> {
    type Config = BertConfig;
    fn random(
        be: &B,
        config: &BertConfig,
        head: &HeadConfig,
        seed: u64,
    ) -> Result<Self, FinetuneError> {
        Ok(BertClassifier::new_random(be, config, head, seed)?)
    }
    fn load_into(&mut self, be: &B, from: &Checkpoint) -> Result<(), FinetuneError> {
        self.load(be, from.tensors, from.path)?;
        Ok(())
    }
}

impl<B: Backend> Loaded<B> for DebertaClassifier<B> {
    type Config = DebertaConfig;
    fn random(
        be: &B,
        config: &DebertaConfig,
        head: &HeadConfig,
        seed: u64,
    ) -> Result<Self, FinetuneError> {
        ModelConfig::from(config).check_head(head)?;
        Ok(DebertaClassifier::new_random(
            be,
            config,
            head.num_labels,
            seed,
        )?)
    }
    fn load_into(&mut self, be: &B, from: &Checkpoint) -> Result<(), FinetuneError> {
        self.load(be, from.tensors, from.path)?;
        Ok(())
    }
}

/// Checks a model directory as [`finetune_cpu`] would load it, without
/// training: `config.json` parses, the tokenizer loads and fits the
/// config, `model.safetensors` reads whole (header, lengths, dtypes, finite
/// values) and every tensor has the shape the config gives its parameter,
/// for a head of `num_labels`. The parameters are built on a simulated
/// device, so no memory is held beyond the checkpoint's own values while
/// checking. A study runs this once per model before its first trial, so a
/// broken model is one error, not a failed trial each.
pub fn check_model_dir(dir: &Path, num_labels: usize) -> Result<ModelConfig, FinetuneError> {
    let config = read_model_config(&dir.join("config.json"))?;
    open_model_dir(dir, None, config.max_sequence().min(512))?;
    if crate::preset::has_random_weights(dir) {
        return Ok(config);
    }
    let path = weights_path(dir);
    let tensors = load_safetensors(&path)?;
    check_checkpoint_builds(
        &config,
        &tensors,
        &dir.join("config.json"),
        &path,
        num_labels,
    )?;
    Ok(config)
}

/// Tokenizes `examples` with the tokenizer of the model in `dir` as a
/// trial will, and checks them against the token types the model reads
/// ([`TextTokenizer::check_examples`]), so data a model cannot read stops a
/// study before its first trial instead of failing each.
pub fn check_examples(
    dir: &Path,
    config: &ModelConfig,
    examples: &[crate::data::Example],
) -> Result<(), FinetuneError> {
    let tokenizer = TextTokenizer::from_model_dir(dir, config.max_sequence().min(512))?;
    let texts: Vec<(&str, Option<&str>)> = examples
        .iter()
        .map(|e| (e.text.as_str(), e.text_pair.as_deref()))
        .collect();
    tokenizer.check_examples(&texts, config.token_types_read(), &dir.join("config.json"))?;
    Ok(())
}

/// Checks that `tensors` (read from `weights`) load into the classifier
/// `config` gives, with a head of `num_labels`: every tensor's shape, and
/// every parameter built, on a simulated device, so a config of sizes its
/// checkpoint lacks fails here instead of allocating them for real.
pub(crate) fn check_checkpoint_builds(
    config: &ModelConfig,
    tensors: &NamedTensors,
    config_path: &Path,
    weights: &Path,
    num_labels: usize,
) -> Result<(), FinetuneError> {
    config.check_checkpoint(tensors, config_path)?;
    let be = SimBackend::with_limit(1 << 42, None, true, 4)?;
    let head = HeadConfig {
        num_labels,
        hidden: vec![],
    };
    let from = Checkpoint {
        head: &head,
        seed: 0,
        tensors,
        path: weights,
    };
    match config {
        ModelConfig::Bert(c) => drop(BertClassifier::build(&be, c, &from)?),
        ModelConfig::Deberta(c) => drop(DebertaClassifier::build(&be, c, &from)?),
    }
    Ok(())
}

/// Fine-tunes on the CPU backend (f32), the model chosen by `config.json`'s
/// `model_type`.
pub fn finetune_cpu(
    spec: &FinetuneSpec,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<FinetuneOutcome, FinetuneError> {
    let prepared = prepare(spec)?;
    match prepared.config.clone() {
        ModelConfig::Bert(c) => {
            run_cpu::<BertClassifier<_>>(spec, &c, prepared, observer).map(|t| t.outcome)
        }
        ModelConfig::Deberta(c) => {
            run_cpu::<DebertaClassifier<_>>(spec, &c, prepared, observer).map(|t| t.outcome)
        }
    }
}

/// A finished CPU run with its model, as the last epoch left it.
pub struct TrainedCpu<M = Box<dyn Classifier<CpuBackend<f32>>>> {
    /// The run's figures, as [`finetune_cpu`] returns them.
    pub outcome: FinetuneOutcome,
    /// The backend that holds the model's buffers.
    pub backend: CpuBackend<f32>,
    /// The trained classifier.
    pub model: M,
    /// The class names, when the data gave its labels as names.
    pub label_names: Option<Vec<String>>,
}

/// [`finetune_cpu`], keeping the trained model of whichever architecture
/// `config.json` names (to save it: see [`crate::export`]). An observer
/// that stops after epoch `k` leaves the weights of epoch `k`.
pub fn finetune_cpu_trained(
    spec: &FinetuneSpec,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<TrainedCpu, FinetuneError> {
    fn boxed<M: Classifier<CpuBackend<f32>> + 'static>(t: TrainedCpu<M>) -> TrainedCpu {
        TrainedCpu {
            outcome: t.outcome,
            backend: t.backend,
            model: Box::new(t.model),
            label_names: t.label_names,
        }
    }
    let prepared = prepare(spec)?;
    match prepared.config.clone() {
        ModelConfig::Bert(c) => {
            run_cpu::<BertClassifier<_>>(spec, &c, prepared, observer).map(boxed)
        }
        ModelConfig::Deberta(c) => {
            run_cpu::<DebertaClassifier<_>>(spec, &c, prepared, observer).map(boxed)
        }
    }
}

/// The data of a run, tokenised (the validation set cut into batches),
/// with the model's architecture.
struct Prepared {
    config: ModelConfig,
    dataset_report: Vec<String>,
    label_names: Option<Vec<String>>,
    num_classes: usize,
    train_examples: usize,
    validation_examples: usize,
    /// The tokenised splits, of which the training set is cut into
    /// micro-batches anew each epoch ([`Prepared::train_batches`]).
    splits: Arc<tokenized::Splits>,
    batch_size: usize,
    micro_batch: usize,
    valid_batches: Vec<Batch>,
    /// Seconds preparing took.
    seconds: f64,
}

impl Prepared {
    /// The training set as [`train`] takes it: micro-batches drawn anew
    /// each epoch.
    fn train_batches(&self) -> TrainBatches<'_> {
        TrainBatches::Redrawn {
            data: &self.splits.train,
            batch_size: self.batch_size,
            micro_batch: self.micro_batch,
        }
    }

    /// The run's start-up: this preparation, then `device` seconds starting
    /// the backend and `model` building the model.
    fn startup(&self, device: f64, model: f64) -> StartupSeconds {
        StartupSeconds {
            data: self.seconds,
            device,
            model,
        }
    }
}

fn prepare(spec: &FinetuneSpec) -> Result<Prepared, FinetuneError> {
    let start = Instant::now();
    let splits = tokenized::splits(spec, || {
        let dataset = spec.data.load()?;
        let num_classes = dataset.num_classes;
        let split = stratified_split(
            &dataset.examples,
            num_classes,
            spec.validation_fraction,
            spec.split_seed,
        )?;
        let (_, tokenizer) = open_model_dir(&spec.model_dir, spec.dropout, spec.max_length)?;
        Ok(tokenized::Splits {
            train: TokenizedDataset::new(&tokenizer, &split.train, num_classes)?,
            valid: TokenizedDataset::new(&tokenizer, &split.validation, num_classes)?,
            dataset_report: dataset
                .report
                .skipped
                .iter()
                .map(ToString::to_string)
                .collect(),
            label_names: dataset.label_names,
            num_classes,
        })
    })?;
    let config_path = spec.model_dir.join("config.json");
    let config = with_dropout(read_model_config(&config_path)?, spec.dropout, config_path)?;
    let valid_batches: Vec<_> = splits
        .valid
        .batches(spec.micro_batch, BatchOrder::Sequential)?
        .collect();
    Ok(Prepared {
        config,
        dataset_report: splits.dataset_report.clone(),
        label_names: splits.label_names.clone(),
        num_classes: splits.num_classes,
        train_examples: splits.train.len(),
        validation_examples: splits.valid.len(),
        batch_size: spec
            .batch_size
            .unwrap_or(spec.micro_batch * spec.train.accumulation_steps),
        micro_batch: spec.micro_batch,
        valid_batches,
        splits,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The CPU backend of a run: f32, the spec's products and lease.
fn cpu_backend(spec: &FinetuneSpec) -> CpuBackend<f32> {
    let be = CpuBackend::<f32>::new().for_step(spec.matmul_precision, spec.kernels);
    be.tracker().set_limit(spec.memory_limit);
    be
}

/// What a run on a tracked backend produced.
fn outcome(
    report: TrainReport,
    prepared: Prepared,
    tracker: &MemTracker,
    startup: StartupSeconds,
) -> FinetuneOutcome {
    FinetuneOutcome {
        report,
        train_examples: prepared.train_examples,
        validation_examples: prepared.validation_examples,
        skipped_records: prepared.dataset_report,
        peak_bytes: tracker.peak_bytes(),
        allocation_requests: tracker.allocation_requests(),
        startup,
    }
}

/// Builds the model on a CPU backend under the spec's lease and trains it.
fn run_cpu<M: Loaded<CpuBackend<f32>>>(
    spec: &FinetuneSpec,
    config: &M::Config,
    mut prepared: Prepared,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<TrainedCpu<M>, FinetuneError> {
    let started = Instant::now();
    let be = cpu_backend(spec);
    let device = started.elapsed().as_secs_f64();
    let (report, model, built) = build_and_train::<_, M>(&be, spec, config, &prepared, observer)?;
    let label_names = prepared.label_names.take();
    let startup = prepared.startup(device, built);
    let outcome = outcome(report, prepared, be.tracker(), startup);
    Ok(TrainedCpu {
        outcome,
        backend: be,
        model,
        label_names,
    })
}

/// [`finetune_cpu`] with injected faults (feature `testing`): an
/// allocation refused as out of memory, or a device failure reported, at
/// the chosen moment, for tests of what runs trials.
#[cfg(feature = "testing")]
pub fn finetune_cpu_with_faults(
    spec: &FinetuneSpec,
    faults: &Faults,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<FinetuneOutcome, FinetuneError> {
    let prepared = prepare(spec)?;
    let be = FaultyBackend::new(cpu_backend(spec));
    faults.arm(&be);
    let observer = &mut losing_context(faults, &be, observer);
    // The trained model is dropped here: the figures are what is kept.
    let (report, built) = match prepared.config.clone() {
        ModelConfig::Bert(c) => {
            let (report, _, built) =
                build_and_train::<_, BertClassifier<_>>(&be, spec, &c, &prepared, observer)?;
            (report, built)
        }
        ModelConfig::Deberta(c) => {
            let (report, _, built) =
                build_and_train::<_, DebertaClassifier<_>>(&be, spec, &c, &prepared, observer)?;
            (report, built)
        }
    };
    let startup = prepared.startup(0.0, built);
    Ok(outcome(report, prepared, be.inner().tracker(), startup))
}

/// `observer`, after which `be` loses its context at the epoch `faults`
/// name ([`Faults::lose_context_after_epoch`]).
#[cfg(feature = "testing")]
fn losing_context<'a, B: crate::backend::faulty::Tracked>(
    faults: &'a Faults,
    be: &'a FaultyBackend<B>,
    observer: &'a mut dyn FnMut(&EpochMetrics) -> Control,
) -> impl FnMut(&EpochMetrics) -> Control + 'a {
    move |m| {
        let control = observer(m);
        if faults.lose_context_after_epoch == Some(m.epoch) {
            be.lose_context();
        }
        control
    }
}

/// `value`, built on `be`, unless `be` refused memory for it (micro-batch
/// 0: the model, gradients or optimiser state did not fit) or failed.
fn built<B: Backend, T>(be: &B, value: T) -> Result<T, FinetuneError> {
    match be.take_failure() {
        Ok(()) => Ok(value),
        Err(Failure::OutOfMemory(error)) => Err(FinetuneError::OutOfMemory {
            micro_batch: 0,
            error,
        }),
        Err(Failure::Device(failure)) => Err(TrainError::Device(failure).into()),
    }
}

/// Builds `M` on `be` from the checkpoint in `spec.model_dir` (out of
/// memory while building is micro-batch 0's) and trains it: the part of a
/// run every backend shares. Also the seconds building took.
fn build_and_train<B: Backend, M: Loaded<B>>(
    be: &B,
    spec: &FinetuneSpec,
    config: &M::Config,
    prepared: &Prepared,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<(TrainReport, M, f64), FinetuneError> {
    let start = Instant::now();
    let head = HeadConfig {
        num_labels: prepared.num_classes,
        hidden: spec.head_hidden.clone(),
    };
    let model = if crate::preset::has_random_weights(&spec.model_dir) {
        M::random(be, config, &head, spec.train.seed)
    } else {
        let path = weights_path(&spec.model_dir);
        let tensors = load_safetensors(&path)?;
        prepared
            .config
            .check_checkpoint(&tensors, &spec.model_dir.join("config.json"))?;
        let from = Checkpoint {
            head: &head,
            seed: spec.train.seed,
            tensors: &tensors,
            path: &path,
        };
        M::build(be, config, &from)
    };
    let mut model = built(be, model)??;
    let build_seconds = start.elapsed().as_secs_f64();
    let report = train(
        be,
        &mut model,
        prepared.train_batches(),
        &prepared.valid_batches,
        &spec.train,
        observer,
    )?;
    Ok((report, model, build_seconds))
}

/// A simulated trial: the real training loop on synthetic batches over
/// [`SimBackend`], so the real allocation sequence goes through `gpu-mem`'s
/// real allocator on a simulated device. Metrics are meaningless (nothing is
/// computed); the memory figures are the point.
#[derive(Clone, Debug)]
pub struct SimSpec {
    /// The architecture, e.g. [`BertConfig::bert_base`] or a
    /// [`ModelConfig::preset`] of any family.
    pub config: ModelConfig,
    /// The classification head: its number of labels and hidden widths.
    pub head: HeadConfig,
    /// Overrides the config's dropout (as [`FinetuneSpec::dropout`]); zero
    /// dropout allocates no dropout buffers.
    pub dropout: Option<f64>,
    /// Rows per synthetic batch (the last of a split may be shorter).
    pub micro_batch: usize,
    /// Micro-batches per optimiser step.
    pub accumulation_steps: usize,
    /// Recompute each layer's activations in backward instead of keeping
    /// them ([`TrainConfig::recompute`]).
    pub recompute: bool,
    /// Every sequence is this long (all tokens real).
    pub seq_len: usize,
    /// Synthetic training rows, each epoch.
    pub train_examples: usize,
    /// Synthetic validation rows, evaluated after each epoch.
    pub validation_examples: usize,
    /// Passes over the training rows.
    pub epochs: usize,
    /// Bytes of the simulated device.
    pub device_capacity: usize,
    /// The lease: bytes the allocator may reserve.
    pub memory_limit: Option<usize>,
    /// Use `gpu-mem`'s expandable segments (what the study runner uses).
    pub expandable_segments: bool,
    /// Seeds the random weights, dropout and the order of batches.
    pub seed: u64,
    /// The backend the simulated device stands for: its own buffers (the
    /// CUDA backend's cuBLAS workspace and kernel scratch) are allocated
    /// first and held for the run, under the lease.
    pub backend: StepBackend,
    /// The operand format of matrix products the simulated backend
    /// reports.
    pub matmul_precision: MatmulPrecision,
    /// The kernel set the simulated backend stands for (its stored types).
    pub kernels: Kernels,
}

impl Default for SimSpec {
    /// BERT-base, binary head, micro-batch 8 of 128 tokens, one epoch of 64
    /// examples (16 for validation) on a 24 GiB device without a lease.
    fn default() -> Self {
        Self {
            config: BertConfig::bert_base().into(),
            head: HeadConfig {
                num_labels: 2,
                hidden: vec![],
            },
            dropout: None,
            micro_batch: 8,
            accumulation_steps: 1,
            recompute: false,
            seq_len: 128,
            train_examples: 64,
            validation_examples: 16,
            epochs: 1,
            device_capacity: 24 << 30,
            memory_limit: None,
            expandable_segments: true,
            seed: 0,
            backend: StepBackend::Host,
            matmul_precision: MatmulPrecision::Fp32,
            kernels: Kernels::Reference,
        }
    }
}

/// What a simulated trial measured.
#[derive(Clone, Debug)]
pub struct SimOutcome {
    /// The training loop's report; its metrics mean nothing, its steps and
    /// out-of-memory retries are real.
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

/// The simulated device of a trial.
fn sim_backend(spec: &SimSpec) -> Result<SimBackend, FinetuneError> {
    Ok(SimBackend::with_limit(
        spec.device_capacity,
        spec.memory_limit,
        spec.expandable_segments,
        4,
    )?
    .standing_for(spec.backend, spec.matmul_precision, spec.kernels))
}

/// Runs a simulated trial (see [`SimSpec`]); out of memory is retried with
/// half the micro-batch as on a device, and a run that cannot fit is
/// [`FinetuneError::OutOfMemory`].
pub fn finetune_sim(
    spec: &SimSpec,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<SimOutcome, FinetuneError> {
    let be = sim_backend(spec)?;
    let report = train_sim(spec, &be, observer)?;
    Ok(sim_outcome(report, &be))
}

/// [`finetune_sim`] with injected faults (feature `testing`), as
/// [`finetune_cpu_with_faults`].
#[cfg(feature = "testing")]
pub fn finetune_sim_with_faults(
    spec: &SimSpec,
    faults: &Faults,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<SimOutcome, FinetuneError> {
    let be = FaultyBackend::new(sim_backend(spec)?);
    faults.arm(&be);
    let report = train_sim(spec, &be, &mut losing_context(faults, &be, observer))?;
    Ok(sim_outcome(report, be.inner()))
}

fn sim_outcome(report: TrainReport, be: &SimBackend) -> SimOutcome {
    let stats = be.allocator().stats();
    SimOutcome {
        peak_reserved: stats.reserved_bytes.all.peak,
        peak_allocated: stats.allocated_bytes.all.peak,
        peak_requested: stats.requested_bytes.all.peak,
        oom_retries: report.oom_retries.clone(),
        allocation_requests: be.tracker().allocation_requests(),
        stats,
        report,
    }
}

/// The simulated trial's model and synthetic batches, trained on `be`.
fn train_sim<B: Backend>(
    spec: &SimSpec,
    be: &B,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<TrainReport, FinetuneError> {
    let config = with_dropout(spec.config.clone(), spec.dropout, PathBuf::from("<sim>"))?;
    let classes = spec.head.num_labels;
    let batches = |n| {
        synthetic_batches(
            n,
            spec.micro_batch,
            spec.seq_len,
            config.vocab_size(),
            classes,
        )
    };
    let (train_batches, valid_batches) = (
        batches(spec.train_examples),
        batches(spec.validation_examples),
    );
    let mut model = built(be, config.build_random(be, &spec.head, spec.seed))??;
    let cfg = TrainConfig {
        epochs: spec.epochs,
        accumulation_steps: spec.accumulation_steps,
        recompute: spec.recompute,
        seed: spec.seed,
        ..TrainConfig::default()
    };
    Ok(train(
        be,
        &mut *model,
        &train_batches,
        &valid_batches,
        &cfg,
        observer,
    )?)
}

/// What a run asks of its device, found by replaying it on a simulated one
/// ([`replay_run`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayedRun {
    /// Peak bytes the run asks its allocator for: the memory plan of its
    /// largest step (its longest batch at its micro-batch), the backend's
    /// own buffers included. What the run's `requested` peak will be.
    pub peak_requested: u64,
    /// Peak bytes the allocator reserves from the device over the whole
    /// run (its rounding, and the fragmentation that batches of changing
    /// lengths leave): the lease the run needs.
    pub peak_reserved: u64,
    /// Tokens per row of the longest training batch.
    pub longest_train_batch: usize,
    /// Tokens per row of the longest validation batch.
    pub longest_validation_batch: usize,
}

/// Replays the run `spec` describes (its data, split, tokenizer, batches
/// and their order, epochs, head, dropout and matrix-product precision) on
/// a simulated device standing for `backend`, allocating through `gpu-mem`
/// configured by `allocator` (its limit ignored): the allocation sequence
/// of the run on that backend, byte for byte, without computing anything
/// or reading the weights. Every epoch runs (no pruning, no early stop), so
/// the peaks bound any shorter run.
///
/// A study runner prices a trial with it: a CUDA run's requested peak is
/// `peak_requested`, and a lease of `peak_reserved` bytes is never short,
/// on a device whose virtual-memory page is
/// [`crate::backend::sim::SIM_GRANULARITY`] (2 MiB on NVIDIA GPUs).
pub fn replay_run(
    spec: &FinetuneSpec,
    backend: StepBackend,
    allocator: gpu_mem::Config,
) -> Result<ReplayedRun, FinetuneError> {
    let replayed = replay_run_unless(spec, backend, allocator, &|| false)?;
    Ok(replayed.expect("a replay never told to stop finishes"))
}

/// [`replay_run`], given up (`Ok(None)`) once `stop` says so: it is asked
/// before the data is read and after each replayed epoch, so a replay of
/// many epochs does not hold up whoever waits on it (a study runner told
/// to stop).
pub fn replay_run_unless(
    spec: &FinetuneSpec,
    backend: StepBackend,
    allocator: gpu_mem::Config,
    stop: &dyn Fn() -> bool,
) -> Result<Option<ReplayedRun>, FinetuneError> {
    if stop() {
        return Ok(None);
    }
    let prepared = prepare(spec)?;
    let allocator = gpu_mem::Config {
        limit: None,
        ..allocator
    };
    let be = SimBackend::new(REPLAY_DEVICE_BYTES, allocator, 4)?.standing_for(
        backend,
        spec.matmul_precision,
        spec.kernels,
    );
    let head = HeadConfig {
        num_labels: prepared.num_classes,
        hidden: spec.head_hidden.clone(),
    };
    let mut model = built(
        &be,
        prepared.config.build_random(&be, &head, spec.train.seed),
    )??;
    let train_config = TrainConfig {
        patience: None,
        ..spec.train.clone()
    };
    let mut stopped = false;
    train(
        &be,
        &mut *model,
        prepared.train_batches(),
        &prepared.valid_batches,
        &train_config,
        &mut |_| {
            stopped = stop();
            Control::stop_if(stopped)
        },
    )?;
    if stopped {
        return Ok(None);
    }
    let stats = be.allocator().stats();
    let longest = |batches: &[Batch]| batches.iter().map(|b| b.seq).max().unwrap_or(0);
    Ok(Some(ReplayedRun {
        peak_requested: stats.requested_bytes.all.peak,
        peak_reserved: stats.reserved_bytes.all.peak,
        longest_train_batch: prepared.splits.train.max_sequence_length(),
        longest_validation_batch: longest(&prepared.valid_batches),
    }))
}

/// The simulated device a replay runs on: larger than any GPU, so nothing
/// is refused.
const REPLAY_DEVICE_BYTES: usize = 1 << 42;
