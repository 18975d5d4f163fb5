//! `memtune worker`: the process one trial at a time runs in.
//!
//! A trial that panics, aborts or poisons its device context takes only
//! this process with it; the runner records the trial and starts a fresh
//! worker. The worker reads [`Job`]s from stdin and speaks
//! [`WorkerMsg`]/[`RunnerMsg`] lines (see [`super::protocol`]).

use std::io::{BufRead, Write};

use trainer::finetune::{FinetuneError, FinetuneSpec, SimSpec, StartupSeconds};
use trainer::memory::{OutOfMemory, StepBackend};
use trainer::model::{HeadConfig, ModelConfig};
use trainer::train::{Control, EpochMetrics, TrainConfig, TrainReport};

use super::protocol::{FailureKind, Fault, Job, ModelSource, RunnerMsg, WorkerMsg, encode};
use super::synthetic;

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("reading from the runner: {0}")]
    Io(#[from] std::io::Error),
    #[error("runner sent a line that is not a job: {0}")]
    BadJob(serde_json::Error),
    #[error("runner sent `{0}` where a continue/prune answer was expected")]
    BadAnswer(String),
    #[error("the runner went away mid-trial")]
    RunnerGone,
    #[error("{0}")]
    Cuda(String),
}

/// Dies with the runner: a worker left behind by a killed runner would hold
/// its lease of memory (and a core) while a resumed runner starts others.
/// Outlives the signals the runner takes as "stop": Ctrl-C and a closed
/// terminal's SIGHUP, which reach the whole process group, and SIGTERM,
/// which service managers send to every process of the service: the
/// runner decides what an interrupt means for the trial (failed and
/// re-enqueued), and stops its workers itself (SIGKILL).
pub fn die_with_parent() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    // A flag nobody reads: the signal is caught and has no effect.
    let ignored = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        if let Err(e) = signal_hook::flag::register(signal, std::sync::Arc::clone(&ignored)) {
            eprintln!("memtune worker: cannot catch signal {signal}: {e}");
        }
    }
    #[cfg(target_os = "linux")]
    {
        let runner = std::env::var("MEMTUNE_RUNNER_PID")
            .ok()
            .and_then(|p| p.parse::<i32>().ok());
        // SAFETY: prctl with PR_SET_PDEATHSIG and a signal number has no
        // memory effects; getppid cannot fail.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if runner.is_some_and(|pid| libc::getppid() != pid) {
                // The runner died before the line above took effect.
                std::process::exit(1);
            }
        }
    }
}

/// Serves jobs until stdin closes.
pub fn serve(
    input: &mut (dyn BufRead + Send),
    output: &mut (dyn Write + Send),
) -> Result<(), WorkerError> {
    send(
        output,
        &WorkerMsg::Ready {
            pid: std::process::id(),
        },
    )?;
    let mut line = String::new();
    let mut stray_line = None;
    loop {
        line.clear();
        if input.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if line.trim().is_empty() {
            continue;
        }
        let job: Job = serde_json::from_str(&line).map_err(WorkerError::BadJob)?;
        if let Some(stray) = stray_line.take() {
            writeln!(output, "{stray}")?;
        }
        if job.fault == Some(Fault::ExitBeforeStart) {
            std::process::exit(1);
        }
        if job.fault == Some(Fault::StrayLineAfterEnd) {
            stray_line = Some(format!("{{\"after trial\": {}", job.trial_number));
        }
        send(
            output,
            &WorkerMsg::Started {
                trial_number: job.trial_number,
            },
        )?;
        run_job(&job, input, output)?;
    }
}

fn send(output: &mut (dyn Write + Send), msg: &WorkerMsg) -> Result<(), WorkerError> {
    writeln!(output, "{}", encode(msg))?;
    output.flush()?;
    Ok(())
}

fn run_job(
    job: &Job,
    input: &mut (dyn BufRead + Send),
    output: &mut (dyn Write + Send),
) -> Result<(), WorkerError> {
    let mut io_error = None;
    let mut observer = |m: &EpochMetrics, value: f64| -> Control {
        match epoch_exchange(job, m, value, input, output) {
            Ok(control) => control,
            Err(e) => {
                io_error = Some(e);
                Control::Stop
            }
        }
    };
    let result = match &job.model {
        ModelSource::Dir { path } => {
            let spec = finetune_spec(job, path.clone());
            let mut observe = |m: &EpochMetrics| observer(m, job.metric.value(&m.valid));
            match job.cuda_device {
                Some(ordinal) => finetune_on_cuda(&spec, ordinal, &mut observe),
                None => with_threads(job.threads, || finetune_cpu_job(job, &spec, &mut observe))
                    .map(|o| {
                        // The CPU backend allocates exactly what is requested.
                        let peak = o.peak_bytes as u64;
                        (o.report, peak, peak, Some(o.startup))
                    }),
            }
        }
        ModelSource::Sim { .. } => {
            let spec = sim_spec(job);
            match spec {
                Ok(spec) => finetune_sim_job(job, &spec, &mut |m| {
                    observer(m, synthetic::metric_value(job, m.epoch))
                })
                .map(|o| {
                    let (peak, requested) = (o.peak_reserved, o.peak_requested);
                    let mut report = o.report;
                    // The simulated device computes nothing, so its metrics
                    // mean nothing: the objective, and with it the best
                    // epoch, is the synthetic one.
                    let objective = |e: &usize| synthetic::objective(job, *e);
                    report.best_epoch = (0..report.epochs.len())
                        .max_by(|a, b| objective(a).total_cmp(&objective(b)))
                        .unwrap_or(0);
                    (report, peak, requested, None)
                }),
                Err(message) => {
                    return send(
                        output,
                        &WorkerMsg::Failed {
                            kind: FailureKind::Error,
                            message,
                            needed_bytes: None,
                            limit_bytes: None,
                        },
                    );
                }
            }
        }
    };
    if let Some(e) = io_error {
        return Err(e);
    }
    match result {
        Ok((report, peak_bytes, requested_peak_bytes, startup)) => {
            for r in &report.oom_retries {
                send(
                    output,
                    &WorkerMsg::OomRetry {
                        step: r.step,
                        from_micro_batch: r.from_micro_batch,
                        to_micro_batch: r.to_micro_batch,
                        message: r.error.to_string(),
                    },
                )?;
            }
            let best = &report.epochs[report.best_epoch];
            let (value, (accuracy, f1_macro, valid_loss)) = match &job.model {
                ModelSource::Sim { .. } => (
                    synthetic::metric_value(job, best.epoch),
                    synthetic::validation(job, best.epoch),
                ),
                ModelSource::Dir { .. } => (
                    job.metric.value(&best.valid),
                    (best.valid.accuracy, best.valid.f1_macro, best.valid.loss),
                ),
            };
            send(
                output,
                &WorkerMsg::Finished {
                    value,
                    best_epoch: report.best_epoch,
                    epochs_run: report.epochs.len(),
                    pruned: report.stopped_by_observer,
                    peak_bytes,
                    requested_peak_bytes,
                    skipped_steps: report.skipped_steps,
                    accuracy,
                    f1_macro,
                    valid_loss,
                    train_seconds: report.epochs.iter().map(|e| e.seconds).sum(),
                    startup,
                },
            )
        }
        Err(e) => {
            send(output, &failure(&e))?;
            if is_sticky(&e) {
                // A poisoned context cannot be recovered in-process.
                std::process::exit(3);
            }
            Ok(())
        }
    }
}

/// Reports one epoch and reads the runner's answer; stages injected faults.
fn epoch_exchange(
    job: &Job,
    m: &EpochMetrics,
    value: f64,
    input: &mut (dyn BufRead + Send),
    output: &mut (dyn Write + Send),
) -> Result<Control, WorkerError> {
    let value = match job.fault {
        Some(Fault::NanEpoch { epoch }) if epoch == m.epoch => f64::NAN,
        _ => value,
    };
    send(
        output,
        &WorkerMsg::Epoch {
            epoch: m.epoch,
            value,
            train_loss: m.train_loss,
            accuracy: m.valid.accuracy,
            f1_macro: m.valid.f1_macro,
            valid_loss: m.valid.loss,
            seconds: m.seconds,
        },
    )?;
    let mut line = String::new();
    if input.read_line(&mut line)? == 0 {
        return Err(WorkerError::RunnerGone);
    }
    let answer: RunnerMsg =
        serde_json::from_str(line.trim()).map_err(|_| WorkerError::BadAnswer(line.clone()))?;
    match &job.fault {
        Some(Fault::Abort { after_epoch }) if *after_epoch == m.epoch => std::process::abort(),
        Some(Fault::Hang { after_epoch }) if *after_epoch == m.epoch => loop {
            std::thread::park();
        },
        Some(Fault::DeviceAssert { after_epoch }) if *after_epoch == m.epoch => {
            // On the CPU and the simulated device the trainer stages it
            // (`trainer_faults`).
            if let Some(ordinal) = job.cuda_device {
                match trainer::backend::cuda::device_assert::trigger(ordinal) {
                    Ok(lost) => tracing::info!("device assert staged: {lost}"),
                    Err(e) => tracing::warn!("the device assert could not be staged: {e}"),
                }
            }
        }
        Some(Fault::StickyError { after_epoch }) if *after_epoch == m.epoch => {
            send(
                output,
                &WorkerMsg::Failed {
                    kind: FailureKind::CudaError,
                    message: "CUDA_ERROR_ILLEGAL_ADDRESS (injected): an illegal memory access \
                              was encountered; the context is unusable"
                        .into(),
                    needed_bytes: None,
                    limit_bytes: None,
                },
            )?;
            // A poisoned context cannot be recovered in-process.
            std::process::exit(3);
        }
        _ => {}
    }
    Ok(match answer {
        RunnerMsg::Continue => Control::Continue,
        RunnerMsg::Prune => Control::Stop,
    })
}

/// The trainer's spec for a job on a model directory (also what `memtune
/// train` retrains a recorded trial with).
pub fn finetune_spec(job: &Job, model_dir: std::path::PathBuf) -> FinetuneSpec {
    FinetuneSpec {
        model_dir,
        data: job.data.clone(),
        validation_fraction: job.validation_fraction,
        split_seed: job.split_seed,
        max_length: job.settings.max_length,
        micro_batch: job.micro_batch,
        batch_size: Some(job.settings.batch_size),
        head_hidden: job.settings.head_hidden.clone(),
        train: TrainConfig {
            recompute: job.recompute,
            ..job
                .settings
                .train_config(job.metric.monitor(), job.accumulation_steps)
        },
        memory_limit: job.memory_limit.map(|b| b as usize),
        matmul_precision: job.matmul_precision,
        kernels: job.kernels,
        dropout: job.settings.dropout,
    }
}

/// The trainer's faults a job stages (`MEMTUNE_FAULT`'s `oom@N:alloc=K`).
#[cfg(feature = "fault-injection")]
fn trainer_faults(job: &Job) -> trainer::backend::faulty::Faults {
    trainer::backend::faulty::Faults {
        fail_nth_allocation: match job.fault {
            Some(Fault::OomAtAllocation { n }) => Some(n),
            _ => None,
        },
        fail_nth_check: match job.fault {
            Some(Fault::DeviceError { check }) => Some((
                check,
                trainer::backend::DeviceFailure {
                    message: "CUDA_ERROR_INVALID_VALUE (injected): invalid argument".into(),
                    sticky: false,
                },
            )),
            _ => None,
        },
        lose_context_after_epoch: match job.fault {
            Some(Fault::DeviceAssert { after_epoch }) if job.cuda_device.is_none() => {
                Some(after_epoch)
            }
            _ => None,
        },
    }
}

/// A CPU run of `job`, with its staged faults in builds that inject them.
fn finetune_cpu_job(
    job: &Job,
    spec: &FinetuneSpec,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<trainer::finetune::FinetuneOutcome, FinetuneError> {
    #[cfg(feature = "fault-injection")]
    return trainer::finetune::finetune_cpu_with_faults(spec, &trainer_faults(job), observer);
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = job;
        trainer::finetune::finetune_cpu(spec, observer)
    }
}

/// A simulated run of `job`, as [`finetune_cpu_job`].
fn finetune_sim_job(
    job: &Job,
    spec: &SimSpec,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<trainer::finetune::SimOutcome, FinetuneError> {
    #[cfg(feature = "fault-injection")]
    return trainer::finetune::finetune_sim_with_faults(spec, &trainer_faults(job), observer);
    #[cfg(not(feature = "fault-injection"))]
    {
        let _ = job;
        trainer::finetune::finetune_sim(spec, observer)
    }
}

/// The simulated trial of `job` (a [`ModelSource::Sim`] preset of any
/// family: the trainer's own dispatch by model type) on its simulated
/// device, which stands for a CUDA device: the CUDA backend's own buffers
/// are allocated under the lease, and a staged device assert loses its
/// context.
pub(crate) fn sim_spec(job: &Job) -> Result<SimSpec, String> {
    let ModelSource::Sim {
        preset,
        device_bytes,
    } = &job.model
    else {
        return Err("not a simulated model".into());
    };
    let config =
        ModelConfig::preset(preset).ok_or_else(|| format!("unknown simulated model `{preset}`"))?;
    Ok(SimSpec {
        config,
        head: HeadConfig {
            num_labels: 2,
            hidden: job.settings.head_hidden.clone(),
        },
        micro_batch: job.micro_batch,
        accumulation_steps: job.accumulation_steps,
        recompute: job.recompute,
        dropout: job.settings.dropout,
        seq_len: job.settings.max_length,
        train_examples: synthetic::TRAIN_EXAMPLES,
        validation_examples: synthetic::VALIDATION_EXAMPLES,
        // What the runner leases on a device: gpu-mem with expandable
        // segments (no fragmentation to budget for).
        expandable_segments: true,
        epochs: job.settings.epochs,
        device_capacity: *device_bytes as usize,
        memory_limit: job.memory_limit.map(|b| b as usize),
        seed: job.settings.seed,
        backend: StepBackend::Cuda,
        matmul_precision: job.matmul_precision,
        kernels: job.kernels,
    })
}

/// Failures that do not depend on the trial's settings: the files the
/// study started with became unreadable or changed under it.
pub(crate) fn is_environment(e: &FinetuneError) -> bool {
    use trainer::tokenize::TokenizerError;
    matches!(
        e,
        FinetuneError::Data(_)
            | FinetuneError::Weights(_)
            | FinetuneError::Load(_)
            | FinetuneError::Config(trainer::config::ConfigError::Read { .. })
            | FinetuneError::Config(trainer::config::ConfigError::Parse { .. })
            | FinetuneError::Tokenizer(TokenizerError::Load { .. })
    )
}

fn oom_failure(error: &OutOfMemory) -> WorkerMsg {
    WorkerMsg::Failed {
        kind: FailureKind::Oom,
        // The allocator's report says why the device could not give the
        // bytes (fragmentation, largest free block) and what to change.
        message: match &error.allocator {
            Some(report) => format!("{error}: {report}"),
            None => error.to_string(),
        },
        needed_bytes: Some((error.live + error.requested) as u64),
        limit_bytes: Some(error.limit as u64),
    }
}

/// The allocator a trial's CUDA backend starts with: expandable segments
/// where the device has virtual memory management (gpu-mem falls back to
/// classic segments, and says so, where not).
fn trial_allocator() -> gpu_mem::Config {
    gpu_mem::Config::expandable()
}

/// A CUDA run: its report, the allocator's peak reserved and peak
/// requested bytes, and where its start-up went.
fn finetune_on_cuda(
    spec: &FinetuneSpec,
    ordinal: usize,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<(TrainReport, u64, u64, Option<StartupSeconds>), FinetuneError> {
    trainer::finetune::finetune_cuda(spec, ordinal, trial_allocator(), observer).map(|o| {
        (
            o.outcome.report,
            o.peak_reserved,
            o.peak_requested,
            Some(o.outcome.startup),
        )
    })
}

/// `memtune worker --hold-cuda N`: start the CUDA backend as a trial's
/// process does, say so on stdout (`ready BYTES`, the bytes its allocator
/// reserved for the backend's own buffers), and keep it until stdin closes.
pub fn hold_cuda(ordinal: usize) -> Result<(), WorkerError> {
    let backend = trainer::backend::cuda::CudaBackend::new(ordinal, trial_allocator())
        .map_err(|e| WorkerError::Cuda(e.to_string()))?;
    // What the backend's allocator holds (its own buffers): a trial's lease
    // prices those, so the process overhead is what is left.
    let reserved = backend.allocator().stats().reserved_bytes.all.current;
    println!("ready {reserved}");
    std::io::stdout().flush()?;
    let mut sink = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink)?;
    drop(backend);
    Ok(())
}

/// Whether a failure left the process's CUDA context unusable: the worker
/// must exit after reporting it, and the runner starts a fresh one.
fn is_sticky(e: &FinetuneError) -> bool {
    match e {
        FinetuneError::Train(trainer::train::TrainError::Device(f)) => f.sticky,
        FinetuneError::Cuda(c) => c.is_sticky(),
        _ => false,
    }
}

fn is_device_failure(e: &FinetuneError) -> bool {
    matches!(
        e,
        FinetuneError::Train(trainer::train::TrainError::Device(_)) | FinetuneError::Cuda(_)
    )
}

fn failure(e: &FinetuneError) -> WorkerMsg {
    match e {
        FinetuneError::OutOfMemory { error, .. } => oom_failure(error),
        other if is_device_failure(other) => WorkerMsg::Failed {
            kind: FailureKind::CudaError,
            message: other.to_string(),
            needed_bytes: None,
            limit_bytes: None,
        },
        other => WorkerMsg::Failed {
            kind: if is_environment(other) {
                FailureKind::Environment
            } else {
                FailureKind::Error
            },
            message: other.to_string(),
            needed_bytes: None,
            limit_bytes: None,
        },
    }
}

/// Runs `f` on a pool of `threads` compute threads; 0, or the process's own
/// count, runs it on the process's pool. A pool that cannot be built (no
/// threads left) leaves the trial on the process's pool rather than fail it.
fn with_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    if threads == 0 || threads == rayon::current_num_threads() {
        return f();
    }
    match rayon::ThreadPoolBuilder::new().num_threads(threads).build() {
        Ok(pool) => pool.install(f),
        Err(e) => {
            tracing::warn!("cannot start {threads} compute threads ({e}); using the worker's own");
            f()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainer::backend::DeviceFailure;
    use trainer::backend::cuda::CudaError;
    use trainer::train::TrainError;

    fn kind(e: &FinetuneError) -> FailureKind {
        match failure(e) {
            WorkerMsg::Failed { kind, .. } => kind,
            other => panic!("not a failure: {other:?}"),
        }
    }

    #[test]
    fn device_failures_are_cuda_errors_and_only_sticky_ones_end_the_worker() {
        let missing = FinetuneError::Cuda(CudaError::MissingLibrary("libcuda.so.1".into()));
        assert_eq!(kind(&missing), FailureKind::CudaError);
        assert!(!is_sticky(&missing));
        let lost = FinetuneError::Cuda(CudaError::Sticky {
            call: "cuLaunchKernel",
            code: gpu_mem::cuda::cudarc::driver::sys::CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        });
        assert_eq!(kind(&lost), FailureKind::CudaError);
        assert!(is_sticky(&lost));
        let step = |sticky| {
            FinetuneError::Train(TrainError::Device(DeviceFailure {
                message: "kernel failed".into(),
                sticky,
            }))
        };
        assert_eq!(kind(&step(true)), FailureKind::CudaError);
        assert!(is_sticky(&step(true)) && !is_sticky(&step(false)));
        let config = FinetuneError::Train(TrainError::Config("epochs must be positive".into()));
        assert_eq!(kind(&config), FailureKind::Error);
        assert!(!is_sticky(&config));
    }
}
