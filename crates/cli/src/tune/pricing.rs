//! What a trial costs on the runner's device, asked of the trainer: the
//! [`Job`] a worker would run, replayed without computing anything.
//!
//! A trial's memory is decided by what its worker runs: the model, its
//! head and dropout, the data's batches (each padded to its own longest
//! sequence, so the longest example of the training split, not
//! `max_length`, sets the largest step), the micro-batch and accumulation,
//! the epochs and their batch orders, the backend's own buffers (the CUDA
//! backend's cuBLAS workspace and kernel scratch) and the allocator's
//! rounding and fragmentation as batches change length. The trainer's
//! [`replay_run`](trainer::finetune::replay_run) runs exactly that
//! allocation sequence through `gpu-mem` on a simulated device, so the
//! price is the run's own figures:
//! - [`Price::peak`]: the peak of requested bytes (the memory plan of the
//!   run's largest step with the backend's buffers), which a CUDA run's
//!   allocator reports as its requested peak;
//! - [`Price::limit`]: the peak the allocator reserves over the run, the
//!   lease a CUDA worker's allocator gets (on the CPU, which allocates
//!   exactly, the peak itself).
//!
//! On the simulated device the worker's run *is* such a simulation
//! ([`finetune_sim`]), so its price is that run without a limit. Replays
//! are cached per job (less what does not change memory: learning rate,
//! warmup, weight decay, patience, the CUDA device's ordinal). A replay
//! gives up between epochs once the runner is told to stop
//! ([`Pricer::stopped_by`]), so a long run's price does not delay Ctrl-C.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use trainer::finetune::{SimSpec, finetune_sim, replay_run_unless};
use trainer::memory::StepBackend;
use trainer::train::Control;

use super::packing::Price;
use super::protocol::{Job, ModelSource};
use super::worker::{finetune_spec, sim_spec};

/// How the runner's device allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PricedDevice {
    /// The CPU backend: exactly what is requested.
    Cpu,
    /// A CUDA device through `gpu-mem`, with expandable segments where it
    /// has virtual memory management (the worker's allocator).
    Cuda { expandable_segments: bool },
    /// `gpu-mem`'s simulated device (its trials say so in their job).
    Sim,
}

/// Why a job cannot be priced.
#[derive(Debug, Clone)]
pub struct PriceError {
    pub message: String,
    /// The study's data or model became unreadable or changed under it:
    /// not the trial's fault, so the study stops and the trial is retried
    /// later, as when a worker meets it.
    pub environment: bool,
    /// The runner was told to stop before the replay finished: the trial
    /// is not at fault and waits for the next run.
    pub interrupted: bool,
}

impl PriceError {
    fn interrupted() -> Self {
        PriceError {
            message: "the runner was told to stop before this trial could be priced".into(),
            environment: false,
            interrupted: true,
        }
    }
}

impl std::fmt::Display for PriceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<String> for PriceError {
    fn from(message: String) -> Self {
        PriceError {
            message,
            environment: false,
            interrupted: false,
        }
    }
}

impl From<trainer::finetune::FinetuneError> for PriceError {
    fn from(e: trainer::finetune::FinetuneError) -> Self {
        PriceError {
            message: e.to_string(),
            environment: super::worker::is_environment(&e),
            interrupted: false,
        }
    }
}

/// Prices jobs, remembering each.
#[derive(Debug)]
pub struct Pricer {
    device: PricedDevice,
    known: HashMap<String, Result<Price, PriceError>>,
    stop: Option<Arc<AtomicBool>>,
}

impl Pricer {
    pub fn new(device: PricedDevice) -> Self {
        Self {
            device,
            known: HashMap::new(),
            stop: None,
        }
    }

    /// Replays give up once `stop` is set, with an error whose
    /// `interrupted` is true (not remembered: the next run prices again).
    pub fn stopped_by(self, stop: Arc<AtomicBool>) -> Self {
        Self {
            stop: Some(stop),
            ..self
        }
    }

    pub fn device(&self) -> PricedDevice {
        self.device
    }

    /// The price of running `job`; an error says why the run cannot be
    /// replayed (the trainer's error: a head the model refuses, a sequence
    /// it cannot take, ...), which is the trial's own failure.
    pub fn price(&mut self, job: &Job) -> Result<Price, PriceError> {
        let key = memory_key(job);
        if let Some(known) = self.known.get(&key) {
            return known.clone();
        }
        let stop = self.stop.as_deref();
        let stopped = || stop.is_some_and(|s| s.load(Ordering::SeqCst));
        let price = price_of(job, self.device, &stopped);
        if !price.as_ref().is_err_and(|e| e.interrupted) {
            self.known.insert(key, price.clone());
        }
        price
    }
}

/// The price of `job` on `device`, replayed now unless `stop` says so.
fn price_of(job: &Job, device: PricedDevice, stop: &dyn Fn() -> bool) -> Result<Price, PriceError> {
    let job = Job {
        memory_limit: None,
        fault: None,
        ..job.clone()
    };
    match &job.model {
        ModelSource::Dir { path } => {
            let spec = finetune_spec(&job, path.clone());
            let (backend, allocator) = match device {
                PricedDevice::Cuda {
                    expandable_segments,
                } => (
                    StepBackend::Cuda,
                    gpu_mem::Config {
                        expandable_segments,
                        ..gpu_mem::Config::default()
                    },
                ),
                PricedDevice::Cpu | PricedDevice::Sim => {
                    (StepBackend::Host, gpu_mem::Config::default())
                }
            };
            let Some(run) = replay_run_unless(&spec, backend, allocator, stop)? else {
                return Err(PriceError::interrupted());
            };
            Ok(match backend {
                StepBackend::Cuda => Price {
                    peak: run.peak_requested,
                    limit: run.peak_reserved,
                },
                // The CPU's tracker counts requested bytes, and its limit
                // is on them.
                StepBackend::Host => Price {
                    peak: run.peak_requested,
                    limit: run.peak_requested,
                },
            })
        }
        ModelSource::Sim { .. } => {
            // On a device larger than any, so nothing is refused.
            let spec = SimSpec {
                device_capacity: 1 << 42,
                ..sim_spec(&job)?
            };
            if stop() {
                return Err(PriceError::interrupted());
            }
            let mut stopped = false;
            let run = finetune_sim(&spec, &mut |_| {
                stopped = stop();
                Control::stop_if(stopped)
            })?;
            if stopped {
                return Err(PriceError::interrupted());
            }
            Ok(Price {
                peak: run.peak_requested,
                limit: run.peak_reserved,
            })
        }
    }
}

/// `job` less what does not change its memory, as a cache key.
fn memory_key(job: &Job) -> String {
    let mut settings = job.settings.clone();
    settings.learning_rate = 0.0;
    settings.warmup_ratio = 0.0;
    settings.weight_decay = 0.0;
    settings.patience = None;
    // Which device of the pricer's kind runs it changes nothing either: a
    // runner with several devices prices a trial once per kind.
    let key = Job {
        trial_number: 0,
        settings,
        memory_limit: None,
        fault: None,
        threads: 0,
        cuda_device: None,
        ..job.clone()
    };
    serde_json::to_string(&key).expect("a job serialises")
}
