//! What the runner and a worker process say to each other: one JSON object
//! per line, over the worker's stdin (runner to worker) and stdout (worker to
//! runner).
//!
//! A worker serves trials one after another: it reads a [`Job`], answers
//! with [`WorkerMsg`]s, and after each epoch waits for a [`RunnerMsg`]
//! (whether the pruner stops the trial). Lines rather than a binary format:
//! a dead worker leaves a readable transcript in the log, and the runner
//! can tell "ended cleanly" (a `Finished`/`Failed` line) from "died" (end of
//! file, then the exit status).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use trainer::backend::{Kernels, MatmulPrecision};
use trainer::data::DataSource;

use super::config::{Metric, TrialSettings};

/// Where a trial's model comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelSource {
    /// A Hugging Face model directory (config.json, model.safetensors,
    /// tokenizer.json or vocab.txt), trained on the CPU backend or, with
    /// [`Job::cuda_device`], the CUDA one.
    Dir { path: PathBuf },
    /// A named architecture run on `gpu-mem`'s simulated device: the real
    /// training loop's allocations through the real allocator, no compute.
    Sim {
        preset: String,
        /// The simulated device's memory, bytes.
        device_bytes: u64,
    },
}

/// A failure the runner asks a worker to stage, for fault-injection tests
/// (set through `MEMTUNE_FAULT`, see [`crate::tune::fault`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// `std::process::abort()` after this epoch's report: the worker dies
    /// mid-trial, as a process with a poisoned CUDA context is killed.
    Abort { after_epoch: usize },
    /// Report a sticky device error after this epoch, then exit: the worker
    /// cannot be reused.
    StickyError { after_epoch: usize },
    /// The n-th tensor allocation of the trial fails as out of memory.
    OomAtAllocation { n: u64 },
    /// A real device-side assert after this epoch's report: on a CUDA
    /// device a kernel asserts on the trial's context
    /// (`trainer::backend::cuda::device_assert`), on the simulated device
    /// the trainer loses its context; the trial's next step fails with the
    /// sticky error, and the worker must be replaced.
    DeviceAssert { after_epoch: usize },
    /// The trainer's `check`-th check of the device reports an error that
    /// leaves its context usable (a missing CUDA library, a context that
    /// could not be created, an invalid value): the worker lives on.
    DeviceError { check: u64 },
    /// The worker reports this epoch with a NaN objective, which JSON
    /// cannot carry (serde writes `null`): a line the runner cannot read.
    NanEpoch { epoch: usize },
    /// The worker stops after this epoch's report, as a process stuck in
    /// a driver call or stopped by a signal: alive, and silent.
    Hang { after_epoch: usize },
    /// Once this trial has ended and the worker has read its next job, it
    /// writes a line that looks like a message and is not one before
    /// taking that job: a library printing between trials, read by the
    /// runner after it handed the worker another trial.
    StrayLineAfterEnd,
    /// The worker exits on reading the job, before it says it took it: a
    /// worker that died idle, the job sent to it unread.
    ExitBeforeStart,
}

/// One trial for a worker to run: everything resolved, nothing to look up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub trial_number: i64,
    pub model: ModelSource,
    pub data: DataSource,
    pub validation_fraction: f64,
    pub split_seed: u64,
    pub metric: Metric,
    pub settings: TrialSettings,
    /// The packer's fit: `micro_batch` rows per pass, `accumulation_steps`
    /// passes per optimiser step (covering `settings.batch_size`).
    pub micro_batch: usize,
    pub accumulation_steps: usize,
    /// Recompute each layer's activations in backward instead of keeping
    /// them (the runner's `[runner] recompute`): the same loss and
    /// gradients in less memory, for about one more forward pass a step.
    #[serde(default)]
    pub recompute: bool,
    /// Tensor bytes the trial may hold (the lease's limit).
    pub memory_limit: Option<u64>,
    pub fault: Option<Fault>,
    /// Compute threads for this trial (0: the worker process's pool). The
    /// CPU backend gives the same bits for any number.
    #[serde(default)]
    pub threads: usize,
    /// The CUDA device a model directory trains on; `None`: the CPU.
    #[serde(default)]
    pub cuda_device: Option<usize>,
    /// The operand format of matrix products (resolved: never "auto").
    #[serde(default)]
    pub matmul_precision: MatmulPrecision,
    /// Which implementation of the training step runs.
    #[serde(default)]
    pub kernels: Kernels,
}

/// Worker to runner.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum WorkerMsg {
    /// Sent once when the process is up.
    Ready { pid: u32 },
    /// The worker read the job for this trial: its lines from here on are
    /// that trial's (one written before belongs to no trial).
    Started { trial_number: i64 },
    /// One epoch done; the worker now waits for a [`RunnerMsg`].
    Epoch {
        epoch: usize,
        value: f64,
        train_loss: f64,
        accuracy: f64,
        f1_macro: f64,
        valid_loss: f64,
        seconds: f64,
    },
    /// A step ran out of memory and was retried with a smaller micro-batch.
    OomRetry {
        step: u64,
        from_micro_batch: usize,
        to_micro_batch: usize,
        message: String,
    },
    /// The trial ended normally (possibly stopped by the pruner).
    Finished {
        value: f64,
        best_epoch: usize,
        epochs_run: usize,
        pruned: bool,
        /// Peak bytes the trial held: what its allocator reserved on a
        /// (simulated) device, what it requested on the CPU.
        peak_bytes: u64,
        /// Peak bytes the trial requested: the figure the memory plan
        /// predicts.
        requested_peak_bytes: u64,
        /// Optimiser steps loss scaling skipped (fp16 only).
        #[serde(default)]
        skipped_steps: u64,
        /// The validation metrics of the best epoch (on the simulated
        /// device, the synthetic ones).
        #[serde(default)]
        accuracy: f64,
        #[serde(default)]
        f1_macro: f64,
        #[serde(default)]
        valid_loss: f64,
        /// Seconds the epochs took, training and evaluation.
        #[serde(default)]
        train_seconds: f64,
        /// Seconds before the first step: data, backend, model (`None` on
        /// the simulated device, which computes nothing).
        #[serde(default)]
        startup: Option<trainer::finetune::StartupSeconds>,
    },
    /// The trial could not run; `kind` is one of [`FailureKind`].
    Failed {
        kind: FailureKind,
        message: String,
        /// Bytes the trial needed at micro-batch 1 and the limit it had,
        /// when the failure is memory.
        needed_bytes: Option<u64>,
        limit_bytes: Option<u64>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Out of memory even at micro-batch 1 (the configuration is infeasible
    /// under its lease).
    Oom,
    /// A device error. A sticky one poisoned the worker's context and it
    /// exits after reporting it; the runner ends a worker that another one
    /// left alive too (see `runner::Runner::on_message`).
    CudaError,
    /// Bad configuration or a diverged run: this trial's own failure.
    Error,
    /// The data, model or tokenizer could not be read: every trial would
    /// fail the same way, so the runner stops the study.
    Environment,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Oom => "oom",
            FailureKind::CudaError => "cuda_error",
            FailureKind::Error => "error",
            FailureKind::Environment => "environment",
        }
    }
}

/// Runner to worker, after each epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum RunnerMsg {
    Continue,
    /// The pruner stops the trial.
    Prune,
}

/// One line of JSON, no newline inside.
pub fn encode<T: Serialize>(msg: &T) -> String {
    serde_json::to_string(msg).expect("protocol messages always serialise")
}
