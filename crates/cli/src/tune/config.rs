//! The study file: one TOML document that says what `memtune tune` runs.
//!
//! [`StudyConfig::from_path`] reads, checks and converts the whole file
//! before anything runs: unknown keys (at any depth), wrong types,
//! impossible ranges, unknown hyperparameters, conditions on unknown or
//! later params and two params that could set the same hyperparameter in
//! one trial are all errors ([`ConfigError::Invalid`]) that name the file,
//! the key path (`param[2].low`) and the line:
//!
//! ```text
//! study.toml:14:7: `param[1].low`: param `lr`: log = true needs low > 0, got low = 0
//! ```
//!
//! # The format
//!
//! ```toml
//! [study]
//! name = "sentiment"                  # default "memtune"
//! storage = "sqlite:///memtune.db"    # Optuna's URL form (relative to the working directory), or postgresql://USER@HOST/DB
//!                                     # (--storage or MEMTUNE_STORAGE replaces it)
//! n_trials = 12                       # >= 1; trials of a resumed study count
//! timeout = "15m"                     # optional: no new trial starts after this
//! trial_timeout = "2h"                # optional: a trial running longer is ended, FAIL ("timeout")
//! seed = 42                           # optional: seeds the sampler and every trial's training
//! report = true                      # default: write NAME-report.html beside the storage at the end
//!
//! [data]                              # default: the embedded sentiment set
//! source = "embedded"                 # or "files":
//! # files = ["train.csv"]             #   relative to this file
//! # format = "csv"                    #   csv | json_lines | json_array; default from the extension
//! # text = "sentence"                 #   default "text"; text_pair = "..." for pair tasks
//! # label = "label"                   #   default "label"
//! # num_classes = 2                   #   integer labels 0..n, or label_names = ["neg", "pos"]
//! # bad_records = "skip"              #   skip | reject
//! validation_fraction = 0.2           # default 0.2
//! split_seed = 42                     # default 42
//!
//! [objective]
//! metric = "accuracy"                 # accuracy | f1_macro | loss (validation set, best epoch)
//! direction = "maximize"              # default from the metric; a contradiction is an error
//! # metrics = ["accuracy", "peak_memory"]   # instead of metric: several objectives (below)
//! # directions = ["maximize", "minimize"]   #   optional, one per metric, as each metric says
//! # inference_batch = 1               # sequences a prediction batch holds (inference_memory)
//!
//! # [[constraint]]                    # optional, any number: a trial is feasible while
//! # metric = "peak_memory"            #   metric <= max; peak_memory or inference_memory
//! # max = "8GiB"                      #   (a size), params (a number) or train_seconds
//! #                                   #   (a duration, "30m")
//!
//! [models.minilm]                     # one table per model; exactly one of:
//! builtin = "minilm-l6"               #   a model the runner provides,
//! # dir = "models/bert"               #   a Hugging Face directory (relative to this file),
//! # preset = "roberta-large"          #   a preset architecture with random weights,
//! # sim = "bert-base"                 #   a simulated preset for device = "sim"
//!
//! [[param]]                           # one per searched parameter, in order
//! name = "learning_rate"              # stored name (Optuna's param name)
//! type = "float"                      # float | int | categorical
//! low = 1e-5
//! high = 2e-4
//! log = true                          # optional; `step = ...` for a grid (not with log)
//!
//! [[param]]
//! name = "lr_large"
//! sets = "learning_rate"              # the hyperparameter it sets (default: its name)
//! type = "float"
//! low = 5e-6
//! high = 5e-5
//! log = true
//! when = { param = "model", in = ["bert-large"] }   # only then is it sampled
//!
//! [fixed]                             # hyperparameters not searched
//! epochs = 2
//!
//! [sampler]
//! kind = "tpe"                        # tpe | random | gp | auto | nsga2; options default to
//!                                     # Optuna 5.0's (gp: GPSampler; auto: gp below 200 finished
//!                                     # trials while at most half the parameters are categorical,
//!                                     # tpe beyond; nsga2: NSGAIISampler, population_size = 50)
//! n_startup_trials = 10
//!
//! [pruner]
//! kind = "median"                     # none | median | percentile | successive_halving |
//!                                     # hyperband | patient | threshold; Optuna's defaults
//!                                     # (several objectives: none, the only kind allowed)
//!
//! [runner]
//! device = "auto"                     # auto | cpu | cuda | cuda:N | cuda:* (every visible
//!                                     # device) | sim
//! # devices = ["cuda:0", "cuda:2"]    # instead of device: these CUDA devices (numbered as
//!                                     # CUDA_VISIBLE_DEVICES leaves them)
//! # sim_devices = ["24GiB", "80GiB"]  # device = "sim": one simulated device per size
//! precision = "auto"                  # matrix products: auto | fp32 | bf16 | fp16 (auto: bf16
//!                                     # on a CUDA device that has it, else fp32)
//! kernels = "auto"                    # auto | reference | fused (fused attention, layer body
//!                                     # and AdamW; 16-bit activations with 16-bit products;
//!                                     # auto: fused on a CUDA device, reference elsewhere)
//! recompute = "auto"                  # auto | always | never: recompute each layer's
//!                                     # activations in backward (same gradients, less memory,
//!                                     # about a third more arithmetic); auto: only for a trial
//!                                     # whose micro-batch 1 would not fit otherwise
//! safety_margin = 0.05                # fraction of the device, or a size such as "1GiB"
//!                                     # (on the CPU at least 10% of its memory)
//! # memory_limit = "24GiB"            # use the device as a card of this size
//! # min_micro_tokens = 4096           # a trial waits for memory rather than start with fewer
//!                                     # tokens (rows x max_length) per micro-batch, unless the
//!                                     # empty device fits no more (default: 4096 on CUDA, whose
//!                                     # worker processes take turns on the device; 0 elsewhere)
//! recycle_after = 50                  # trials per worker process
//! heartbeat = "5s"                   # at least 100ms: each beat writes to the storage
//! stale_after = "60s"                 # at least two heartbeats
//! systematic_failures = 3             # stop when the first 3 trials fail alike (0: never)
//! ```
//!
//! Hyperparameters (what `sets` and `[fixed]` name, with their defaults):
//! `model` (a `[models]` key; needed unless there is one model),
//! `learning_rate` (5e-5, in (0, 1]), `batch_size` (32, the *effective*
//! batch: the runner fits micro-batches and accumulation), `max_length`
//! (128), `warmup_ratio` (0.1), `weight_decay` (0.01), `dropout` (the
//! model's own), `head_layers` (0, at most 3), `head_width` (256, every head
//! layer) and `head_width_1..3` (one layer each), `epochs` (3), `patience`
//! (0: no early stopping).
//!
//! A param with `when` is active only when the earlier param it names is
//! active and has one of the listed values; an inactive param is not
//! sampled and not stored. Two params setting the same hyperparameter must
//! both have a `when` on the same param with disjoint values.
//!
//! # Several objectives and constraints
//!
//! `metrics = [...]` lists two or more of: `accuracy`, `f1_macro`, `loss`
//! (validation set, maximised, maximised, minimised) and the trial's costs,
//! all minimised: `peak_memory` (bytes its training step peaks at: the
//! peak of requested bytes its worker measured, which the memory plan
//! predicts before it starts), `inference_memory` (bytes predicting one
//! batch of `inference_batch` sequences, default 1, of its `max_length`
//! peaks at: fp32 weights and a forward pass, what `memtune predict`
//! holds for a batch of its longest texts, planned by
//! `trainer::memory::inference_peak`), `train_seconds` (the wall time of
//! its epochs, training and evaluation; on the simulated device, the
//! simulation's own) and `params` (the model's parameters, head
//! included). The study then has one value per metric and a Pareto front
//! (`memtune best`); the validation metrics are those of the best epoch by
//! the first validation metric listed (accuracy when none is). There is no
//! pruner, as Optuna has none for such studies; `kind = "tpe"` is Optuna's
//! multi-objective TPE, `"gp"` fits one random scalarisation per trial,
//! `"auto"` is the GP for the first 30 finished trials per parameter (at
//! least 100, at most 300) of a mostly numeric space, TPE beyond, NSGA-II
//! from 1,000 COMPLETE trials on.
//! With `peak_memory` among the objectives a trial waits for the
//! micro-batch that fits its device empty rather than start smaller on a
//! busy one, so its peak depends on its configuration, not on what else
//! runs. It does depend on the device where devices differ in size (a
//! larger one fits a larger micro-batch), unless a `peak_memory` max well
//! below the smallest device's memory caps the micro-batch alike on all.
//!
//! Each `[[constraint]]` adds one entry to every COMPLETE or PRUNED
//! trial's `constraints` system attribute, in file order: `measured - max`
//! in the metric's unit (bytes, seconds, parameters), so above 0 is
//! violated, as Optuna's samplers and `best_trials` read it. `peak_memory`,
//! `inference_memory` and `params` are known before a trial trains: one
//! whose micro-batch 1 would peak above the `peak_memory` max (even
//! recomputing its layers), whose prediction would peak above the
//! `inference_memory` max, or whose model is larger than the `params` max,
//! is never trained; it is PRUNED with its predicted
//! values in `constraints` and `error_kind = "constraint"`. A trial that
//! fits trains with the largest micro-batch whose peak stays within the
//! max (gradient accumulation does the rest). `train_seconds` is measured
//! after training; a trial that never trained records 0 for it (not
//! known: neither violated nor with room). A study of `[[constraint]]`s
//! records them in place of the single device-fit value a trial that fits
//! no device gets otherwise.
//!
//! Durations are written with a unit (`"250ms"`, `"5s"`, `"15m"`,
//! `"1h30m"`); sizes as `"24GiB"`, `"512MiB"`, `"1.5GB"` or an integer of
//! bytes.
//!
//! The full reference, every key commented, is `crates/cli/examples/study.toml`;
//! the default study ([`DEFAULT_STUDY`]) is what `cargo xtask tune` runs.
//!
//! This module does not run anything, open storage or read models and data:
//! it only says what to run. `builtin` models are resolved by the runner.

pub mod error;
pub mod objective;
pub(crate) mod raw;
pub mod units;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use hpo_sampler::pruner::MinResource;
use hpo_sampler::{
    AutoConfig, AutoSampler, GpConfig, GpSampler, HyperbandPruner, MedianPruner, NopPruner,
    NsgaIIConfig, NsgaIISampler, ParamValue, PatientPruner, PercentilePruner, Pruner,
    RandomSampler, Sampler, StudyDirection, SuccessiveHalvingPruner, ThresholdPruner, TpeConfig,
    TpeSampler, Trial,
};
use serde::Deserialize;
use trainer::backend::{Kernels, MatmulPrecision};
use trainer::data::{BadRecordPolicy, DataSource, FieldSpec, LabelSpec, LoadOptions};
use trainer::model::ModelConfig;
use trainer::train::{Metrics, Monitor};

pub use self::error::ConfigError;
use self::error::{SpanIndex, join};
pub use self::objective::{Constraint, Objective, TrialMetric};
use self::raw::{DataSourceKind, RawFile, RawPruner, Scalar};
use self::units::{MAX_SIZE, parse_duration, parse_size};

/// The most threads a study file may give one worker: more than the
/// largest machines' hardware threads.
const MAX_THREADS_PER_WORKER: usize = 4096;
/// The shortest `study.trial_timeout`.
const MIN_TRIAL_TIMEOUT: Duration = Duration::from_secs(1);
use super::space::{self, Resolve};
pub use super::space::{Condition, Hyperparameter, ParamSpec, ParamType, TrialSettings};

/// The study `cargo xtask tune` runs: embedded data, MiniLM-L6, on the CPU.
pub const DEFAULT_STUDY: &str = include_str!("default_study.toml");

/// A checked study file.
#[derive(Clone, Debug)]
pub struct StudyConfig {
    pub study: StudySection,
    pub data: DataSection,
    pub objective: Objective,
    /// `[[constraint]]`s, in file order (the order of a trial's
    /// `constraints` system attribute).
    pub constraints: Vec<Constraint>,
    /// Models by key (the values a `model` param chooses from).
    pub models: BTreeMap<String, ModelSource>,
    /// The searched params, in file order (a `when` names an earlier one).
    pub params: Vec<ParamSpec>,
    pub fixed: BTreeMap<Hyperparameter, ParamValue>,
    pub sampler: SamplerSpec,
    pub pruner: PrunerSpec,
    pub runner: RunnerSection,
    /// The file it came from, as errors name it.
    pub origin: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct StudySection {
    pub name: String,
    /// `sqlite:///path.db` or `postgresql://user[:password]@host[:port]/db`.
    pub storage: String,
    /// Whether the file names `storage` (else it is the default).
    pub storage_given: bool,
    pub n_trials: u64,
    pub timeout: Option<Duration>,
    /// A trial running longer than this is ended and recorded FAIL
    /// (`error_kind` "timeout"): a worker stuck in a driver call or stopped
    /// holds its device share until then, not forever.
    pub trial_timeout: Option<Duration>,
    pub seed: Option<u64>,
    /// Write `memtune report`'s HTML page beside the storage when a run ends.
    pub report: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct DataSection {
    /// What to load (file paths already resolved against the study file).
    pub source: DataSource,
    pub validation_fraction: f64,
    pub split_seed: u64,
}

/// The validation metric a trial is scored by (its best epoch's value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Accuracy,
    F1Macro,
    Loss,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::Accuracy => "accuracy",
            Metric::F1Macro => "f1_macro",
            Metric::Loss => "loss",
        }
    }

    /// The direction that makes sense for the metric.
    pub fn natural_direction(self) -> StudyDirection {
        match self {
            Metric::Loss => StudyDirection::Minimize,
            Metric::Accuracy | Metric::F1Macro => StudyDirection::Maximize,
        }
    }

    /// The metric's value in one evaluation.
    pub fn value(self, metrics: &Metrics) -> f64 {
        match self {
            Metric::Accuracy => metrics.accuracy,
            Metric::F1Macro => metrics.f1_macro,
            Metric::Loss => metrics.loss,
        }
    }

    /// What the trainer's early stopping and best epoch should watch.
    pub fn monitor(self) -> Monitor {
        match self {
            Metric::Accuracy => Monitor::Accuracy,
            Metric::F1Macro => Monitor::F1Macro,
            Metric::Loss => Monitor::Loss,
        }
    }
}

/// A model the runner provides by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum BuiltinModel {
    /// all-MiniLM-L6-v2 (`$MEMTUNE_MINILM_DIR` or the cache `cargo xtask
    /// fetch-model minilm` fills).
    #[serde(rename = "minilm-l6")]
    MiniLmL6,
}

/// A preset architecture: one of the trainer's presets of any family
/// ([`ModelConfig::PRESETS`]: BERT-shaped and DeBERTa-v3), so a new preset
/// is usable here without a change. `sim = ...` runs it on the simulated
/// device (memory and time only), `preset = ...` trains it from random
/// weights on any device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimPreset(&'static str);

impl SimPreset {
    /// The preset called `name`, if the trainer has it.
    pub fn new(name: &str) -> Option<Self> {
        ModelConfig::PRESETS
            .iter()
            .find(|&&p| p == name)
            .map(|&p| SimPreset(p))
    }

    pub fn name(self) -> &'static str {
        self.0
    }
}

impl<'de> Deserialize<'de> for SimPreset {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        SimPreset::new(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown preset `{name}`, expected one of {}",
                ModelConfig::PRESETS.join(", ")
            ))
        })
    }
}

/// Where a model comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelSource {
    /// A Hugging Face directory (resolved against the study file).
    Dir(PathBuf),
    Builtin(BuiltinModel),
    /// A preset architecture with random weights and a tokenizer the runner
    /// builds from the data (`trainer::preset`); on the simulated device,
    /// the same as `Sim`.
    Preset(SimPreset),
    Sim(SimPreset),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SamplerKind {
    Tpe,
    Random,
    /// Optuna's GPSampler ([`GpConfig`]).
    Gp,
    /// GP while the study is small and mostly numeric, TPE beyond; on
    /// several objectives NSGA-II from 1,000 COMPLETE trials on
    /// ([`AutoConfig`]).
    Auto,
    /// Optuna's NSGAIISampler ([`NsgaIIConfig`]).
    Nsga2,
}

/// The sampler to build: its kind, seed and (for TPE) options, which
/// default to [`TpeConfig::default`] (Optuna 5.0's `TPESampler()` but on
/// continuous and integer spaces of one objective).
#[derive(Clone, Debug)]
pub struct SamplerSpec {
    pub kind: SamplerKind,
    /// `[sampler] seed`, else `[study] seed`, else from entropy.
    pub seed: Option<u64>,
    /// The TPE options (`seed` unset: see `seed`).
    pub tpe: TpeConfig,
    /// The GP options (`seed` unset), for kind = "gp" and "auto".
    pub gp: GpConfig,
    /// The NSGA-II options (`seed` unset), for kind = "nsga2" and "auto".
    pub nsga2: NsgaIIConfig,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrunerKind {
    None,
    Median,
    Percentile,
    SuccessiveHalving,
    Hyperband,
    Patient,
    Threshold,
}

/// The pruner to build, with every option resolved (Optuna 5.0's defaults).
#[derive(Clone, Debug, PartialEq)]
pub enum PrunerSpec {
    None,
    Median {
        n_startup_trials: usize,
        n_warmup_steps: i64,
        interval_steps: i64,
        n_min_trials: usize,
    },
    Percentile {
        percentile: f64,
        n_startup_trials: usize,
        n_warmup_steps: i64,
        interval_steps: i64,
        n_min_trials: usize,
    },
    SuccessiveHalving {
        /// `None`: "auto".
        min_resource: Option<i64>,
        reduction_factor: i64,
        min_early_stopping_rate: i64,
        bootstrap_count: usize,
    },
    Hyperband {
        min_resource: i64,
        /// `None`: "auto".
        max_resource: Option<i64>,
        reduction_factor: i64,
        bootstrap_count: usize,
    },
    Patient {
        wrapped: Option<Box<PrunerSpec>>,
        patience: usize,
        min_delta: f64,
    },
    Threshold {
        lower: Option<f64>,
        upper: Option<f64>,
        n_warmup_steps: i64,
        interval_steps: i64,
    },
}

impl PrunerSpec {
    /// Builds the pruner (the options were checked when the file was read).
    pub fn build(&self) -> hpo_sampler::Result<Box<dyn Pruner + Send>> {
        Ok(match self {
            PrunerSpec::None => Box::new(NopPruner),
            PrunerSpec::Median {
                n_startup_trials,
                n_warmup_steps,
                interval_steps,
                n_min_trials,
            } => Box::new(MedianPruner::new(
                *n_startup_trials,
                *n_warmup_steps,
                *interval_steps,
                *n_min_trials,
            )?),
            PrunerSpec::Percentile {
                percentile,
                n_startup_trials,
                n_warmup_steps,
                interval_steps,
                n_min_trials,
            } => Box::new(PercentilePruner::new(
                *percentile,
                *n_startup_trials,
                *n_warmup_steps,
                *interval_steps,
                *n_min_trials,
            )?),
            PrunerSpec::SuccessiveHalving {
                min_resource,
                reduction_factor,
                min_early_stopping_rate,
                bootstrap_count,
            } => Box::new(SuccessiveHalvingPruner::new(
                min_resource.map_or(MinResource::Auto, MinResource::Fixed),
                *reduction_factor,
                *min_early_stopping_rate,
                *bootstrap_count,
            )?),
            PrunerSpec::Hyperband {
                min_resource,
                max_resource,
                reduction_factor,
                bootstrap_count,
            } => Box::new(HyperbandPruner::new(
                *min_resource,
                *max_resource,
                *reduction_factor,
                *bootstrap_count,
            )?),
            PrunerSpec::Patient {
                wrapped,
                patience,
                min_delta,
            } => {
                let wrapped = match wrapped {
                    Some(w) => Some(w.build()?),
                    None => None,
                };
                Box::new(PatientPruner::new(wrapped, *patience, *min_delta)?)
            }
            PrunerSpec::Threshold {
                lower,
                upper,
                n_warmup_steps,
                interval_steps,
            } => Box::new(ThresholdPruner::new(
                *lower,
                *upper,
                *n_warmup_steps,
                *interval_steps,
            )?),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum DeviceKind {
    /// CUDA device 0 when the driver and a device are there, else the CPU
    /// (with a one-line notice saying why).
    Auto,
    Cpu,
    /// CUDA device N (`"cuda"` is `"cuda:0"`); an error without one.
    Cuda(usize),
    /// Every CUDA device the driver shows (`"cuda:*"`: those that
    /// `CUDA_VISIBLE_DEVICES` leaves), or the list of `[runner] devices`;
    /// trials are placed over them ([`super::placement`]).
    CudaAll,
    /// `gpu-mem`'s simulated device of `sim_memory` bytes.
    Sim,
}

impl TryFrom<String> for DeviceKind {
    type Error = String;
    fn try_from(value: String) -> Result<Self, String> {
        match value.as_str() {
            "auto" => Ok(DeviceKind::Auto),
            "cpu" => Ok(DeviceKind::Cpu),
            "sim" => Ok(DeviceKind::Sim),
            "cuda" => Ok(DeviceKind::Cuda(0)),
            "cuda:*" => Ok(DeviceKind::CudaAll),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceKind::Cuda)
                .ok_or_else(|| {
                    format!(
                        "unknown device `{other}`: expected \"auto\", \"cpu\", \"cuda\", \"cuda:N\", \"cuda:*\" or \"sim\""
                    )
                }),
        }
    }
}

impl std::fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceKind::Auto => write!(f, "auto"),
            DeviceKind::Cpu => write!(f, "cpu"),
            DeviceKind::Cuda(n) => write!(f, "cuda:{n}"),
            DeviceKind::CudaAll => write!(f, "cuda:*"),
            DeviceKind::Sim => write!(f, "sim"),
        }
    }
}

/// When trials recompute each layer's activations in backward instead of
/// keeping them (`[runner] recompute`): the same loss and gradients (the
/// layers run again with the same dropout masks), keeping each layer's
/// input and one layer's activations at a time instead of every layer's,
/// for about one more forward pass a step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Recompute {
    /// Only a trial that could not start otherwise: its micro-batch 1 fits
    /// no device, or is over a `peak_memory` constraint, while recomputing
    /// it fits.
    #[default]
    Auto,
    Always,
    Never,
}

impl std::str::FromStr for Recompute {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Recompute::Auto),
            "always" => Ok(Recompute::Always),
            "never" => Ok(Recompute::Never),
            other => Err(format!(
                "`{other}`: expected \"auto\", \"always\" or \"never\""
            )),
        }
    }
}

/// The simulated device of a `device = "sim"` study file that sizes none:
/// a 24 GiB card, the kind the legacy setup ran on.
pub const DEFAULT_SIM_MEMORY: u64 = 24 << 30;

/// The safety margin of a study file that sets none: 5% of the device.
pub const DEFAULT_SAFETY_MARGIN: SafetyMargin = SafetyMargin::Fraction(0.05);

/// Memory kept free on the device: bytes, or a fraction of its capacity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SafetyMargin {
    Bytes(u64),
    Fraction(f64),
}

impl SafetyMargin {
    pub fn bytes(self, capacity: u64) -> u64 {
        match self {
            SafetyMargin::Bytes(b) => b,
            SafetyMargin::Fraction(f) => (capacity as f64 * f).ceil() as u64,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct RunnerSection {
    pub device: DeviceKind,
    /// The operand format of matrix products; `None` ("auto"): bf16 on a
    /// CUDA device whose tensor cores take it, else fp32.
    pub precision: Option<MatmulPrecision>,
    /// Which implementation of the training step runs (the memory plan and
    /// every price follow it); `None` ("auto"): the fused kernels on a CUDA
    /// device, the reference ones elsewhere.
    pub kernels: Option<Kernels>,
    /// When trials recompute their layers' activations in backward.
    pub recompute: Recompute,
    /// Capacity of the simulated device (`device = "sim"`; default 24 GiB;
    /// `None` with `sim_devices`).
    pub sim_memory: Option<u64>,
    /// `device = "sim"` with several simulated devices: one per size.
    pub sim_devices: Option<Vec<u64>>,
    /// `[runner] devices`: the CUDA ordinals trials are placed over
    /// (`device` is then [`DeviceKind::CudaAll`]); `None`: as `device` says.
    pub cuda_devices: Option<Vec<usize>>,
    pub safety_margin: SafetyMargin,
    /// Per-process overhead (the CUDA context) to assume instead of
    /// measuring it; `None`: measured (0 on the CPU).
    pub process_overhead: Option<u64>,
    /// The device as a card of this many bytes: what trials may lease (a
    /// share of a larger or shared device). `None`: the whole device.
    pub memory_limit: Option<u64>,
    /// Trials at once on each device; `None`: as many as memory and cores
    /// allow.
    pub max_workers: Option<usize>,
    /// A trial whose micro-batch would hold fewer tokens waits for memory,
    /// unless the empty device fits no more; `None`: the device kind's
    /// default (`crate::tune::packing::CUDA_MIN_MICRO_TOKENS` on CUDA, 0
    /// elsewhere).
    pub min_micro_tokens: Option<usize>,
    /// `None`: the runner divides the cores.
    pub threads_per_worker: Option<usize>,
    /// A worker process is replaced after this many trials.
    pub recycle_after: usize,
    pub heartbeat: Duration,
    /// A RUNNING trial without a heartbeat for this long is failed.
    pub stale_after: Duration,
    /// The study stops when this run's first this-many trials all fail
    /// with one and the same error (0: never); trials ended by
    /// `trial_timeout` or found infeasible are not such failures.
    pub systematic_failures: usize,
    /// `None`: the runner's default (resolved against the study file otherwise).
    pub log_file: Option<PathBuf>,
}

impl StudyConfig {
    /// Reads and checks a study file; relative paths in it (data files,
    /// model directories, the log file) are relative to the file.
    pub fn from_path(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new(""));
        Self::parse_in(&text, &path.display().to_string(), base)
    }

    /// Checks a study given as text; `origin` names it in errors. Relative
    /// paths stay relative to the working directory.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        Self::parse_in(text, origin, Path::new(""))
    }

    /// The embedded default study ([`DEFAULT_STUDY`]).
    pub fn default_study() -> Self {
        Self::parse(DEFAULT_STUDY, "default_study.toml")
            .expect("the embedded default study is valid (tested)")
    }

    fn parse_in(text: &str, origin: &str, base: &Path) -> Result<Self, ConfigError> {
        let index = SpanIndex::new(text, origin);
        let raw: RawFile = toml::from_str(text).map_err(|e| index.toml_error(&e))?;
        Check {
            index: &index,
            base,
        }
        .study(raw, origin)
    }

    /// Suggests every active param, in file order, through the define-by-run
    /// `trial` (a param whose `when` does not hold is skipped).
    pub fn sample<S: Sampler + ?Sized>(&self, trial: &mut Trial<'_, S>) -> Result<(), ConfigError> {
        space::sample(&self.params, trial, &self.origin)
    }

    /// A trial's params (as stored: name -> external value), then `[fixed]`,
    /// then the defaults, as the settings a worker trains with. Errors name
    /// the param (a value outside its hyperparameter's range, a param that
    /// should or should not be active, one not in this study).
    pub fn settings(
        &self,
        params: &BTreeMap<String, ParamValue>,
    ) -> Result<TrialSettings, ConfigError> {
        let models: BTreeSet<String> = self.models.keys().cloned().collect();
        Resolve {
            params: &self.params,
            fixed: &self.fixed,
            models: &models,
            seed: self.study.seed.unwrap_or(0),
            origin: &self.origin,
        }
        .settings(params)
    }

    /// [`StudyConfig::settings`] of the params a [`Trial`] suggested
    /// (`trial.into_params()`).
    pub fn settings_of_params(
        &self,
        params: &BTreeMap<String, hpo_sampler::Param>,
    ) -> Result<TrialSettings, ConfigError> {
        let values = params
            .iter()
            .map(|(name, p)| (name.clone(), p.value()))
            .collect();
        self.settings(&values)
    }

    /// The configured sampler, for a study starting at trial 0.
    pub fn make_sampler(&self) -> Box<dyn Sampler + Send> {
        self.make_sampler_at(0)
    }

    /// The configured sampler for a study that already has `first_trial`
    /// trials (a resume): the seed is mixed with that count, so a seeded
    /// study that resumes does not replay the random draws of its first
    /// trials.
    pub fn make_sampler_at(&self, first_trial: u64) -> Box<dyn Sampler + Send> {
        let seed = self.sampler.seed.map(|s| {
            if first_trial == 0 {
                s
            } else {
                s ^ first_trial.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            }
        });
        match self.sampler.kind {
            SamplerKind::Random => Box::new(RandomSampler::new(seed)),
            SamplerKind::Tpe => Box::new(TpeSampler::new(TpeConfig {
                seed,
                ..self.sampler.tpe.clone()
            })),
            SamplerKind::Gp => Box::new(GpSampler::new(GpConfig {
                seed,
                ..self.sampler.gp.clone()
            })),
            SamplerKind::Auto => Box::new(AutoSampler::new(
                AutoConfig::default(),
                GpConfig {
                    seed,
                    ..self.sampler.gp.clone()
                },
                TpeConfig {
                    seed,
                    ..self.sampler.tpe.clone()
                },
            )),
            SamplerKind::Nsga2 => Box::new(NsgaIISampler::new(NsgaIIConfig {
                seed,
                ..self.sampler.nsga2.clone()
            })),
        }
    }

    /// The configured pruner.
    pub fn make_pruner(&self) -> Box<dyn Pruner + Send> {
        self.pruner
            .build()
            .expect("pruner options were checked when the study file was read")
    }
}

/// The shortest `[runner] heartbeat`: each beat is a write to the storage
/// for every running trial (and wakes the runner's stale check), so a
/// shorter one loads a shared database for nothing; `stale_after` is at
/// least two of them.
const MIN_HEARTBEAT: Duration = Duration::from_millis(100);

/// The checks and conversions of one file.
struct Check<'a> {
    index: &'a SpanIndex<'a>,
    base: &'a Path,
}

impl Check<'_> {
    fn err(&self, key: &str, message: impl Into<String>) -> ConfigError {
        self.index.error_at(key, message)
    }

    fn path(&self, p: PathBuf) -> PathBuf {
        if p.is_relative() && !self.base.as_os_str().is_empty() {
            self.base.join(p)
        } else {
            p
        }
    }

    /// `p` resolved against the study file's folder, for a path a trial's
    /// job carries to its worker (or, for the log, a directory beside it):
    /// jobs are JSON text, so the path must be valid UTF-8 (the study
    /// file's folder included).
    fn job_path(&self, key: &str, p: PathBuf) -> Result<PathBuf, ConfigError> {
        let path = self.path(p);
        if path.to_str().is_none() {
            return Err(self.err(
                key,
                format!(
                    "`{}` is not valid UTF-8 (with the study file's folder): a study's paths \
                     are sent to its workers as text; rename the folder or file",
                    path.display()
                ),
            ));
        }
        Ok(path)
    }

    fn study(&self, raw: RawFile, origin: &str) -> Result<StudyConfig, ConfigError> {
        let study = self.study_section(&raw)?;
        let data = self.data(&raw.data)?;
        let objective = self.objective(&raw.objective)?;
        let constraints = self.constraints(&raw.constraint)?;
        let models = self.models(&raw)?;
        let keys: BTreeSet<String> = models.keys().cloned().collect();
        // Builtin and simulated models all have 512 token positions.
        let max_positions = models
            .iter()
            .find(|(_, m)| !matches!(m, ModelSource::Dir(_)))
            .map(|(key, _)| (512, key.as_str()));
        let (params, fixed) =
            space::build(&raw.param, &raw.fixed, &keys, max_positions, self.index)?;
        let sampler = self.sampler(&raw, &study)?;
        let pruner = if objective.is_multi() {
            self.no_pruner(&raw.pruner)?
        } else {
            self.pruner(&raw.pruner, "pruner")?
        };
        let runner = self.runner(&raw, &models)?;
        Ok(StudyConfig {
            study,
            data,
            objective,
            constraints,
            models,
            params,
            fixed,
            sampler,
            pruner,
            runner,
            origin: origin.to_string(),
        })
    }

    fn study_section(&self, raw: &RawFile) -> Result<StudySection, ConfigError> {
        let s = &raw.study;
        if s.n_trials == 0 {
            return Err(self.err("study.n_trials", "must be at least 1"));
        }
        let name = s.name.clone().unwrap_or_else(|| "memtune".into());
        if name.trim().is_empty() {
            return Err(self.err("study.name", "must not be empty or only whitespace"));
        }
        if let Err(e) = store::check_study_name(&name) {
            return Err(self.err("study.name", e.to_string()));
        }
        let storage = s
            .storage
            .clone()
            .unwrap_or_else(|| "sqlite:///memtune.db".into());
        if let Err(e) = store::StorageUrl::parse(&storage) {
            return Err(self.err(
                "study.storage",
                format!(
                    "{e}; write sqlite:///path.db or postgresql://user[:password]@host[:port]/db"
                ),
            ));
        }
        let positive =
            |key: &str, text: &Option<String>| -> Result<Option<Duration>, ConfigError> {
                let Some(t) = text else { return Ok(None) };
                let d = parse_duration(t).map_err(|m| self.err(key, m))?;
                if d.is_zero() {
                    return Err(self.err(key, "must be longer than 0"));
                }
                Ok(Some(d))
            };
        let timeout = positive("study.timeout", &s.timeout)?;
        let trial_timeout = positive("study.trial_timeout", &s.trial_timeout)?;
        // Shorter would end every trial while its worker starts (a
        // mistyped unit: "10ms" for "10m").
        if trial_timeout.is_some_and(|t| t < MIN_TRIAL_TIMEOUT) {
            return Err(self.err(
                "study.trial_timeout",
                format!(
                    "must be at least {}s: a trial's worker takes about that long to start",
                    MIN_TRIAL_TIMEOUT.as_secs()
                ),
            ));
        }
        Ok(StudySection {
            name,
            storage,
            storage_given: s.storage.is_some(),
            n_trials: s.n_trials,
            timeout,
            trial_timeout,
            seed: s.seed,
            report: s.report.unwrap_or(true),
        })
    }

    fn data(&self, d: &raw::RawData) -> Result<DataSection, ConfigError> {
        let kind = d.source.unwrap_or(if d.files.is_some() {
            DataSourceKind::Files
        } else {
            DataSourceKind::Embedded
        });
        let file_keys = [
            ("files", d.files.is_some()),
            ("format", d.format.is_some()),
            ("text", d.text.is_some()),
            ("text_pair", d.text_pair.is_some()),
            ("label", d.label.is_some()),
            ("num_classes", d.num_classes.is_some()),
            ("label_names", d.label_names.is_some()),
        ];
        let bad_records = d.bad_records.unwrap_or(BadRecordPolicy::Skip);
        let source = match kind {
            DataSourceKind::Embedded => {
                if let Some((key, _)) = file_keys.iter().find(|(_, set)| *set) {
                    return Err(self.err(
                        &join("data", key),
                        "only used with source = \"files\" (the embedded set has its own fields)",
                    ));
                }
                DataSource::EmbeddedSentiment { bad_records }
            }
            DataSourceKind::Files => {
                let files = d.files.clone().unwrap_or_default();
                if files.is_empty() {
                    return Err(self.err(
                        "data.files",
                        "source = \"files\" needs at least one file in `files`",
                    ));
                }
                let max_labels = trainer::config::size_limit("num_labels").unwrap_or(u64::MAX);
                let labels = match (&d.num_classes, &d.label_names) {
                    (Some(_), Some(_)) => {
                        return Err(self.err(
                            "data.label_names",
                            "give either num_classes or label_names, not both",
                        ));
                    }
                    (None, None) => {
                        return Err(self.err(
                            "data",
                            "source = \"files\" needs num_classes (integer labels) or label_names",
                        ));
                    }
                    (Some(n), None) if *n < 2 => {
                        return Err(
                            self.err("data.num_classes", format!("must be at least 2, got {n}"))
                        );
                    }
                    // The classifier's num_labels: a count no model's
                    // config.json may hold is refused here, before the
                    // data or a head is sized by it.
                    (Some(n), None) if *n as u64 > max_labels => {
                        return Err(self.err(
                            "data.num_classes",
                            format!("{n} is more than the limit of {max_labels} classes"),
                        ));
                    }
                    (Some(n), None) => LabelSpec::Integer { num_classes: *n },
                    (None, Some(names)) if names.len() < 2 => {
                        return Err(self.err("data.label_names", "needs at least 2 names"));
                    }
                    (None, Some(names)) if names.len() as u64 > max_labels => {
                        return Err(self.err(
                            "data.label_names",
                            format!(
                                "{} names are more than the limit of {max_labels} classes",
                                names.len()
                            ),
                        ));
                    }
                    (None, Some(names)) => {
                        if let Some((i, name)) = names
                            .iter()
                            .enumerate()
                            .find(|(i, n)| names[..*i].contains(n))
                        {
                            return Err(self.err(
                                "data.label_names",
                                format!("`{name}` is listed twice (entry {i}); each class needs its own name"),
                            ));
                        }
                        LabelSpec::Names(names.clone())
                    }
                };
                let defaults = FieldSpec::default();
                let fields = FieldSpec {
                    text: d.text.clone().unwrap_or(defaults.text),
                    text_pair: d.text_pair.clone(),
                    label: d.label.clone().unwrap_or(defaults.label),
                };
                // One field read as two things: a label read as input
                // would score every trial on a leak.
                if fields.label == fields.text {
                    return Err(self.err(
                        "data.label",
                        format!("`{}` is also the text field", fields.label),
                    ));
                }
                if let Some(pair) = &fields.text_pair
                    && (*pair == fields.text || *pair == fields.label)
                {
                    let other = if *pair == fields.text {
                        "text"
                    } else {
                        "label"
                    };
                    return Err(self.err(
                        "data.text_pair",
                        format!("`{pair}` is also the {other} field"),
                    ));
                }
                let paths: Vec<PathBuf> = files
                    .into_iter()
                    .map(|p| self.job_path("data.files", p))
                    .collect::<Result<_, _>>()?;
                // The same file twice would count its records twice.
                let canonical: Vec<PathBuf> =
                    paths.iter().map(|p| super::setup::comparable(p)).collect();
                if let Some((j, path)) = paths
                    .iter()
                    .enumerate()
                    .find(|(j, _)| canonical[..*j].contains(&canonical[*j]))
                {
                    return Err(self.err(
                        &format!("data.files[{j}]"),
                        format!(
                            "`{}` is listed twice: its records would count twice",
                            path.display()
                        ),
                    ));
                }
                DataSource::Files {
                    paths,
                    options: LoadOptions {
                        format: d.format,
                        fields,
                        labels,
                        bad_records,
                    },
                }
            }
        };
        let validation_fraction = d.validation_fraction.unwrap_or(0.2);
        if !(validation_fraction > 0.0 && validation_fraction < 1.0) {
            return Err(self.err(
                "data.validation_fraction",
                format!("must be between 0 and 1 (exclusive), got {validation_fraction}"),
            ));
        }
        Ok(DataSection {
            source,
            validation_fraction,
            split_seed: d.split_seed.unwrap_or(42),
        })
    }

    fn models(&self, raw: &RawFile) -> Result<BTreeMap<String, ModelSource>, ConfigError> {
        if raw.models.is_empty() {
            return Err(self.err(
                "models",
                "define at least one model, e.g. [models.minilm] builtin = \"minilm-l6\"",
            ));
        }
        let mut out = BTreeMap::new();
        for (key, m) in &raw.models {
            let at = join("models", key);
            let source = match (&m.dir, m.builtin, m.preset, m.sim) {
                (Some(dir), None, None, None) => {
                    ModelSource::Dir(self.job_path(&join(&at, "dir"), dir.clone())?)
                }
                (None, Some(b), None, None) => ModelSource::Builtin(b),
                (None, None, Some(p), None) => ModelSource::Preset(p),
                (None, None, None, Some(s)) => ModelSource::Sim(s),
                (None, None, None, None) => {
                    return Err(self.err(&at, "give one of dir, builtin, preset or sim"));
                }
                _ => {
                    return Err(self.err(&at, "give only one of dir, builtin, preset or sim"));
                }
            };
            out.insert(key.clone(), source);
        }
        Ok(out)
    }

    fn sampler(&self, raw: &RawFile, study: &StudySection) -> Result<SamplerSpec, ConfigError> {
        let s = &raw.sampler;
        let kind = s.kind.unwrap_or(SamplerKind::Tpe);
        if matches!(kind, SamplerKind::Random | SamplerKind::Nsga2)
            && let Some(key) = s.tpe_keys().first()
        {
            return Err(self.err(&join("sampler", key), "only used with kind = \"tpe\""));
        }
        if kind == SamplerKind::Gp
            && let Some(key) = s.tpe_keys().into_iter().find(|k| *k != "n_startup_trials")
        {
            return Err(self.err(
                &join("sampler", key),
                "only used with kind = \"tpe\" or \"auto\"",
            ));
        }
        if matches!(
            kind,
            SamplerKind::Tpe | SamplerKind::Random | SamplerKind::Nsga2
        ) && s.deterministic_objective.is_some()
        {
            return Err(self.err(
                "sampler.deterministic_objective",
                "only used with kind = \"gp\" or \"auto\"",
            ));
        }
        let nsga2_base = NsgaIIConfig::default();
        let population_size = match (s.population_size, kind) {
            (None, _) => nsga2_base.population_size,
            (Some(_), k) if k != SamplerKind::Nsga2 => {
                return Err(self.err("sampler.population_size", "only used with kind = \"nsga2\""));
            }
            (Some(n), _) if (2..=NsgaIIConfig::MAX_POPULATION_SIZE).contains(&n) => n,
            (Some(_), _) => {
                return Err(self.err(
                    "sampler.population_size",
                    format!(
                        "must be at least 2 and at most {}",
                        NsgaIIConfig::MAX_POPULATION_SIZE
                    ),
                ));
            }
        };
        let nsga2 = NsgaIIConfig {
            population_size,
            seed: None,
            ..nsga2_base
        };
        let gp_base = GpConfig::default();
        let gp = GpConfig {
            n_startup_trials: s.n_startup_trials.unwrap_or(gp_base.n_startup_trials),
            deterministic_objective: s.deterministic_objective.unwrap_or(false),
            ..gp_base
        };
        let base = TpeConfig::default();
        let tpe = TpeConfig {
            n_startup_trials: s.n_startup_trials.unwrap_or(base.n_startup_trials),
            n_ei_candidates: s.n_ei_candidates.unwrap_or(base.n_ei_candidates),
            // 0: every candidate competes, as when the key is absent.
            ei_finalists: s.ei_finalists.filter(|&k| k > 0).or(base.ei_finalists),
            prior_weight: s.prior_weight.unwrap_or(base.prior_weight),
            consider_magic_clip: s.consider_magic_clip.unwrap_or(base.consider_magic_clip),
            consider_endpoints: s.consider_endpoints.unwrap_or(base.consider_endpoints),
            multivariate: s.multivariate.unwrap_or(base.multivariate),
            group: s.group.unwrap_or(base.group),
            constant_liar: s.constant_liar.unwrap_or(base.constant_liar),
            seed: None,
            ..base
        };
        // Candidates or finalists the file sets hold on every space.
        let tpe = if s.n_ei_candidates.is_some() || s.ei_finalists.is_some() {
            tpe.one_rule_everywhere()
        } else {
            tpe
        };
        // The samplers' own range checks, each error at the file's key.
        let at_key = |e: hpo_sampler::Error| match e {
            hpo_sampler::Error::InvalidOption { option, reason } => {
                self.err(&join("sampler", &option), reason)
            }
            other => self.err("sampler", other.to_string()),
        };
        nsga2.check().map_err(at_key)?;
        gp.check().map_err(at_key)?;
        tpe.check().map_err(at_key)?;
        Ok(SamplerSpec {
            kind,
            gp,
            seed: s.seed.or(study.seed),
            tpe,
            nsga2,
        })
    }

    fn pruner(&self, p: &RawPruner, at: &str) -> Result<PrunerSpec, ConfigError> {
        let kind = p.kind.unwrap_or(PrunerKind::Median);
        let (allowed, kind_name): (&[&str], &str) = match kind {
            PrunerKind::None => (&[], "none"),
            PrunerKind::Median => (
                &[
                    "n_startup_trials",
                    "n_warmup_steps",
                    "interval_steps",
                    "n_min_trials",
                ],
                "median",
            ),
            PrunerKind::Percentile => (
                &[
                    "percentile",
                    "n_startup_trials",
                    "n_warmup_steps",
                    "interval_steps",
                    "n_min_trials",
                ],
                "percentile",
            ),
            PrunerKind::SuccessiveHalving => (
                &[
                    "min_resource",
                    "reduction_factor",
                    "min_early_stopping_rate",
                    "bootstrap_count",
                ],
                "successive_halving",
            ),
            PrunerKind::Hyperband => (
                &[
                    "min_resource",
                    "max_resource",
                    "reduction_factor",
                    "bootstrap_count",
                ],
                "hyperband",
            ),
            PrunerKind::Patient => (&["patience", "min_delta", "wrapped"], "patient"),
            PrunerKind::Threshold => (
                &["lower", "upper", "n_warmup_steps", "interval_steps"],
                "threshold",
            ),
        };
        if let Some(key) = p.set_keys().into_iter().find(|k| !allowed.contains(k)) {
            return Err(self.err(
                &join(at, key),
                format!(
                    "not an option of kind = \"{kind_name}\"{}",
                    if allowed.is_empty() {
                        String::new()
                    } else {
                        format!(" (its options: {})", allowed.join(", "))
                    }
                ),
            ));
        }
        let resource = |key: &str,
                        value: &Option<Scalar>,
                        auto_ok: bool|
         -> Result<Option<Option<i64>>, ConfigError> {
            match value {
                None => Ok(None),
                Some(Scalar::Int(i)) => Ok(Some(Some(*i))),
                Some(Scalar::Str(s)) if s == "auto" && auto_ok => Ok(Some(None)),
                Some(other) => Err(self.err(
                    &join(at, key),
                    format!(
                        "must be an integer{}, got {}",
                        if auto_ok { " or \"auto\"" } else { "" },
                        other.to_param_value()
                    ),
                )),
            }
        };
        let spec = match kind {
            PrunerKind::None => PrunerSpec::None,
            PrunerKind::Median => PrunerSpec::Median {
                n_startup_trials: p.n_startup_trials.unwrap_or(5),
                n_warmup_steps: p.n_warmup_steps.unwrap_or(0),
                interval_steps: p.interval_steps.unwrap_or(1),
                n_min_trials: p.n_min_trials.unwrap_or(1),
            },
            PrunerKind::Percentile => PrunerSpec::Percentile {
                percentile: p.percentile.ok_or_else(|| {
                    self.err(at, "kind = \"percentile\" needs `percentile` (0 to 100)")
                })?,
                n_startup_trials: p.n_startup_trials.unwrap_or(5),
                n_warmup_steps: p.n_warmup_steps.unwrap_or(0),
                interval_steps: p.interval_steps.unwrap_or(1),
                n_min_trials: p.n_min_trials.unwrap_or(1),
            },
            PrunerKind::SuccessiveHalving => PrunerSpec::SuccessiveHalving {
                min_resource: resource("min_resource", &p.min_resource, true)?.unwrap_or(None),
                reduction_factor: p.reduction_factor.unwrap_or(4),
                min_early_stopping_rate: p.min_early_stopping_rate.unwrap_or(0),
                bootstrap_count: p.bootstrap_count.unwrap_or(0),
            },
            PrunerKind::Hyperband => PrunerSpec::Hyperband {
                min_resource: resource("min_resource", &p.min_resource, false)?
                    .flatten()
                    .unwrap_or(1),
                max_resource: resource("max_resource", &p.max_resource, true)?.unwrap_or(None),
                reduction_factor: p.reduction_factor.unwrap_or(3),
                bootstrap_count: p.bootstrap_count.unwrap_or(0),
            },
            PrunerKind::Patient => PrunerSpec::Patient {
                wrapped: match &p.wrapped {
                    None => None,
                    Some(w) => {
                        if w.kind == Some(PrunerKind::Patient) {
                            return Err(self.err(
                                &join(&join(at, "wrapped"), "kind"),
                                "a patient pruner cannot wrap another patient pruner",
                            ));
                        }
                        Some(Box::new(self.pruner(w, &join(at, "wrapped"))?))
                    }
                },
                patience: p
                    .patience
                    .ok_or_else(|| self.err(at, "kind = \"patient\" needs `patience`"))?,
                min_delta: p.min_delta.unwrap_or(0.0),
            },
            PrunerKind::Threshold => PrunerSpec::Threshold {
                lower: p.lower,
                upper: p.upper,
                n_warmup_steps: p.n_warmup_steps.unwrap_or(0),
                interval_steps: p.interval_steps.unwrap_or(1),
            },
        };
        // The pruners check their own options; name the key they reject.
        if let Err(e) = spec.build() {
            let key = match &e {
                hpo_sampler::Error::InvalidOption { option, .. } if option != "lower/upper" => {
                    join(at, option)
                }
                _ => at.to_string(),
            };
            return Err(self.err(&key, e.to_string()));
        }
        Ok(spec)
    }

    /// A study of several objectives has no pruner: Optuna's
    /// `Trial.report` and `should_prune` refuse such studies, so a
    /// `[pruner]` other than kind = "none" is an error.
    fn no_pruner(&self, p: &RawPruner) -> Result<PrunerSpec, ConfigError> {
        let written = p.kind.is_some() || !p.set_keys().is_empty();
        if written && p.kind != Some(PrunerKind::None) {
            let key = if p.kind.is_some() {
                "pruner.kind"
            } else {
                "pruner"
            };
            return Err(self.err(
                key,
                "a study of several objectives cannot be pruned (Optuna refuses Trial.report \
                 and should_prune there): remove [pruner] or set kind = \"none\"",
            ));
        }
        if written {
            // kind = "none": its options are refused as for one objective.
            self.pruner(p, "pruner")
        } else {
            Ok(PrunerSpec::None)
        }
    }

    fn size(&self, key: &str, value: &Scalar) -> Result<u64, ConfigError> {
        match value {
            Scalar::Int(i) if (0..=MAX_SIZE as i64).contains(i) => Ok(*i as u64),
            Scalar::Int(i) if *i > 0 => {
                Err(self.err(key, format!("{i} bytes is larger than 1 PiB")))
            }
            Scalar::Str(s) => parse_size(s).map_err(|m| self.err(key, m)),
            other => Err(self.err(
                key,
                format!(
                    "must be a size such as \"24GiB\" or a number of bytes, got {}",
                    other.to_param_value()
                ),
            )),
        }
    }

    fn duration(
        &self,
        key: &str,
        value: &Option<String>,
        default: Duration,
    ) -> Result<Duration, ConfigError> {
        match value {
            None => Ok(default),
            Some(t) => {
                let d = parse_duration(t).map_err(|m| self.err(key, m))?;
                if d.is_zero() {
                    return Err(self.err(key, "must be longer than 0"));
                }
                Ok(d)
            }
        }
    }

    fn runner(
        &self,
        raw: &RawFile,
        models: &BTreeMap<String, ModelSource>,
    ) -> Result<RunnerSection, ConfigError> {
        let r = &raw.runner;
        let cuda_devices = self.cuda_devices(r.devices.as_deref(), r.device.is_some())?;
        let device = match cuda_devices {
            Some(_) => DeviceKind::CudaAll,
            None => r.device.unwrap_or(DeviceKind::Auto),
        };
        if let Some((key, _)) = models
            .iter()
            .find(|(_, m)| matches!(m, ModelSource::Sim(_)))
            && device != DeviceKind::Sim
        {
            return Err(self.err(
                &join(&join("models", key), "sim"),
                "a simulated model needs [runner] device = \"sim\"",
            ));
        }
        let sim_memory = match (&r.sim_memory, device) {
            (Some(_), d) if d != DeviceKind::Sim => {
                return Err(self.err("runner.sim_memory", "only used with device = \"sim\""));
            }
            (Some(v), _) => {
                let bytes = self.size("runner.sim_memory", v)?;
                if bytes == 0 {
                    return Err(self.err("runner.sim_memory", "must be larger than 0"));
                }
                Some(bytes)
            }
            (None, DeviceKind::Sim) if r.sim_devices.is_none() => Some(DEFAULT_SIM_MEMORY),
            (None, _) => None,
        };
        let sim_devices = match (&r.sim_devices, device) {
            (None, _) => None,
            (Some(_), d) if d != DeviceKind::Sim => {
                return Err(self.err("runner.sim_devices", "only used with device = \"sim\""));
            }
            (Some(_), _) if sim_memory.is_some() => {
                return Err(self.err(
                    "runner.sim_devices",
                    "give either sim_memory (one device) or sim_devices, not both",
                ));
            }
            (Some(sizes), _) if sizes.is_empty() => {
                return Err(self.err("runner.sim_devices", "needs at least one size"));
            }
            (Some(sizes), _) => {
                let mut bytes = Vec::with_capacity(sizes.len());
                for (i, v) in sizes.iter().enumerate() {
                    let key = format!("runner.sim_devices[{i}]");
                    match self.size(&key, v)? {
                        0 => return Err(self.err(&key, "must be larger than 0")),
                        b => bytes.push(b),
                    }
                }
                Some(bytes)
            }
        };
        let safety_margin = match &r.safety_margin {
            None => DEFAULT_SAFETY_MARGIN,
            Some(Scalar::Float(f)) => {
                if !(0.0..1.0).contains(f) {
                    return Err(self.err(
                        "runner.safety_margin",
                        format!("a fraction must be in [0, 1), got {f}"),
                    ));
                }
                SafetyMargin::Fraction(*f)
            }
            // A bare integer is bytes; one below a MiB is far too small to
            // be meant (`1` read as 100% or 1 GiB would be a guess).
            Some(Scalar::Int(i)) if (1..1 << 20).contains(i) => {
                return Err(self.err(
                    "runner.safety_margin",
                    format!(
                        "{i} is a number of bytes; write a fraction such as 0.05 or a size such as \"1GiB\""
                    ),
                ));
            }
            Some(v) => SafetyMargin::Bytes(self.size("runner.safety_margin", v)?),
        };
        let smallest = sim_memory.or(sim_devices.as_ref().and_then(|d| d.iter().copied().min()));
        if let (SafetyMargin::Bytes(b), Some(cap)) = (safety_margin, smallest)
            && b >= cap
        {
            return Err(self.err(
                "runner.safety_margin",
                format!("{b} bytes leaves nothing of the {cap}-byte simulated device"),
            ));
        }
        let precision = match r.precision.as_deref() {
            None | Some("auto") => None,
            Some(name) => Some(
                name.parse::<MatmulPrecision>()
                    .map_err(|e| self.err("runner.precision", format!("{e}, or \"auto\"")))?,
            ),
        };
        let kernels = match r.kernels.as_deref() {
            None | Some("auto") => None,
            Some(name) => Some(name.parse::<Kernels>().map_err(|_| {
                self.err(
                    "runner.kernels",
                    format!("`{name}`: expected \"auto\", \"reference\" or \"fused\""),
                )
            })?),
        };
        let recompute = match r.recompute.as_deref() {
            None => Recompute::default(),
            Some(name) => name
                .parse::<Recompute>()
                .map_err(|e| self.err("runner.recompute", e))?,
        };
        let process_overhead = match &r.process_overhead {
            None => None,
            Some(v) => Some(self.size("runner.process_overhead", v)?),
        };
        let memory_limit = match &r.memory_limit {
            None => None,
            Some(v) => match self.size("runner.memory_limit", v)? {
                0 => return Err(self.err("runner.memory_limit", "must be larger than 0")),
                bytes => Some(bytes),
            },
        };
        let at_least_one = |key: &str, v: Option<usize>| match v {
            Some(0) => Err(self.err(key, "must be at least 1")),
            _ => Ok(v),
        };
        let max_workers = at_least_one("runner.max_workers", r.max_workers)?;
        if r.log_file
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            return Err(self.err("runner.log_file", "must name a file"));
        }
        let threads_per_worker = at_least_one("runner.threads_per_worker", r.threads_per_worker)?;
        // More threads than any machine has cores only contend (a worker
        // given 100,000 spent its time starting them).
        if let Some(n) = threads_per_worker.filter(|n| *n > MAX_THREADS_PER_WORKER) {
            return Err(self.err(
                "runner.threads_per_worker",
                format!("must be at most {MAX_THREADS_PER_WORKER}, got {n}"),
            ));
        }
        let recycle_after = at_least_one("runner.recycle_after", r.recycle_after)?.unwrap_or(50);
        let heartbeat = self.duration("runner.heartbeat", &r.heartbeat, Duration::from_secs(5))?;
        if heartbeat < MIN_HEARTBEAT {
            return Err(self.err(
                "runner.heartbeat",
                format!(
                    "must be at least {MIN_HEARTBEAT:?}: each beat writes to the storage for every running trial; got {heartbeat:?}"
                ),
            ));
        }
        let stale_after = self.duration(
            "runner.stale_after",
            &r.stale_after,
            Duration::from_secs(60),
        )?;
        if stale_after < 2 * heartbeat {
            return Err(self.err(
                "runner.stale_after",
                format!(
                    "must be at least twice the heartbeat ({heartbeat:?}), so one late beat does not fail a live trial; got {stale_after:?}"
                ),
            ));
        }
        // After the runner's own keys, whose errors are more precise.
        if device == DeviceKind::Sim
            && let Some((key, source)) = models
                .iter()
                .find(|(_, m)| matches!(m, ModelSource::Dir(_) | ModelSource::Builtin(_)))
        {
            let field = if matches!(source, ModelSource::Dir(_)) {
                "dir"
            } else {
                "builtin"
            };
            return Err(self.err(
                &join(&join("models", key), field),
                "on the simulated device ([runner] device = \"sim\") every model must be a \
                 preset (`sim` or `preset`)",
            ));
        }
        Ok(RunnerSection {
            device,
            precision,
            kernels,
            recompute,
            sim_memory,
            sim_devices,
            cuda_devices,
            safety_margin,
            process_overhead,
            memory_limit,
            max_workers,
            min_micro_tokens: r.min_micro_tokens,
            threads_per_worker,
            recycle_after,
            heartbeat,
            stale_after,
            systematic_failures: r.systematic_failures.unwrap_or(3),
            // Random-weight presets' directories go beside the log, and
            // trials carry those to their workers.
            log_file: r
                .log_file
                .clone()
                .map(|p| self.job_path("runner.log_file", p))
                .transpose()?,
        })
    }
}

impl Check<'_> {
    /// `[runner] devices`: each entry `"cuda"` or `"cuda:N"`, at least one,
    /// none twice, and not beside `device` (`has_device`).
    fn cuda_devices(
        &self,
        devices: Option<&[String]>,
        has_device: bool,
    ) -> Result<Option<Vec<usize>>, ConfigError> {
        let Some(devices) = devices else {
            return Ok(None);
        };
        if has_device {
            return Err(self.err("runner.devices", "give either device or devices, not both"));
        }
        if devices.is_empty() {
            return Err(self.err("runner.devices", "needs at least one device"));
        }
        let mut ordinals = Vec::with_capacity(devices.len());
        for (i, name) in devices.iter().enumerate() {
            let key = format!("runner.devices[{i}]");
            let ordinal = match DeviceKind::try_from(name.clone()) {
                Ok(DeviceKind::Cuda(n)) => n,
                _ => {
                    return Err(self.err(
                        &key,
                        format!("`{name}`: expected a CUDA device, \"cuda:N\""),
                    ));
                }
            };
            if ordinals.contains(&ordinal) {
                return Err(self.err(&key, format!("cuda:{ordinal} is listed twice")));
            }
            ordinals.push(ordinal);
        }
        Ok(Some(ordinals))
    }
}

fn direction_name(d: StudyDirection) -> &'static str {
    match d {
        StudyDirection::Minimize => "minimize",
        StudyDirection::Maximize => "maximize",
        StudyDirection::NotSet => "not set",
    }
}
