//! Our side: timed training steps on the CPU or CUDA backend, matrix
//! products in bf16.

use std::time::Instant;

use trainer::backend::{Backend, HostCounters, Kernels, MatmulPrecision};
use trainer::memory::plan::{build_planned_model, synthetic_batch};
use trainer::train::train_step;

use crate::Error;
use crate::report::{HostRun, Run, Timing};
use crate::workload::Workload;

/// Where our steps run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda,
}

impl Device {
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        }
    }
}

/// Per step of a run of `steps` steps, the host's counts over that run.
fn per_step(run: &HostCounters, steps: usize) -> HostRun {
    let per_step = |count: u64| count as f64 / steps as f64;
    HostRun {
        sync_wait_seconds: per_step(run.sync_wait_ns) / 1e9,
        syncs: per_step(run.syncs),
        kernel_launches: per_step(run.kernel_launches),
        blas_calls: per_step(run.blas_calls),
    }
}

/// What the backend needs around the steps: waiting for queued work (and
/// surfacing its errors), its allocator's peak, and its host counters.
trait Probe<B> {
    fn sync(&self, be: &B) -> Result<(), Error>;
    fn reset_peak(&self, be: &B);
    fn peak_bytes(&self, be: &B) -> Option<u64>;
    fn counters(&self, be: &B) -> Option<HostCounters>;
}

/// Trains `w` for `warmup` untimed steps, then `repeats` timed runs of
/// `steps` steps (the loss read after each step waits for it); returns
/// each run's mean step time and host counts, the last loss and the peak
/// memory of the timed runs.
fn time_steps<B: Backend>(
    be: &B,
    probe: &dyn Probe<B>,
    w: &Workload,
    plan: &Plan,
) -> Result<Timing, Error> {
    let req = w.request();
    let (mut model, mut ctx) =
        build_planned_model(be, &req).map_err(|e| Error::Model(e.to_string()))?;
    let batch = synthetic_batch(&req);
    let mut step = || -> Result<f64, Error> {
        let loss = train_step(be, &mut *model, &mut ctx, &[&batch], 1e-5)
            .map_err(|e| Error::Model(e.to_string()))?
            .loss;
        Ok(loss)
    };
    for _ in 0..plan.warmup {
        step()?;
    }
    probe.sync(be)?;
    probe.reset_peak(be);
    let mut runs = Vec::with_capacity(plan.repeats);
    let mut loss = f64::NAN;
    for _ in 0..plan.repeats {
        let before = probe.counters(be);
        let start = Instant::now();
        for _ in 0..plan.steps {
            loss = step()?;
        }
        probe.sync(be)?;
        let seconds = start.elapsed().as_secs_f64();
        let host = before
            .zip(probe.counters(be))
            .map(|(before, after)| per_step(&after.since(&before), plan.steps));
        runs.push(Run {
            seconds_per_step: seconds / plan.steps as f64,
            host,
        });
    }
    Ok(Timing {
        runs,
        loss,
        peak_bytes: probe.peak_bytes(be),
    })
}

/// How many steps each model trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub steps: usize,
    pub warmup: usize,
    pub repeats: usize,
}

/// Runs every workload on `device`; returns the device's name and the
/// timings, in the workloads' order.
pub fn run(
    device: Device,
    kernels: Kernels,
    workloads: &[Workload],
    plan: &Plan,
) -> Result<(String, Vec<Timing>), Error> {
    match device {
        Device::Cpu => cpu(kernels, workloads, plan),
        Device::Cuda => cuda::run(kernels, workloads, plan),
    }
}

struct CpuProbe;

impl<B> Probe<B> for CpuProbe {
    fn sync(&self, _: &B) -> Result<(), Error> {
        Ok(())
    }
    fn reset_peak(&self, _: &B) {}
    fn peak_bytes(&self, _: &B) -> Option<u64> {
        None
    }
    fn counters(&self, _: &B) -> Option<HostCounters> {
        None
    }
}

fn cpu(
    kernels: Kernels,
    workloads: &[Workload],
    plan: &Plan,
) -> Result<(String, Vec<Timing>), Error> {
    let be =
        trainer::backend::cpu::CpuBackend::<f32>::new().for_step(MatmulPrecision::Bf16, kernels);
    let timings = workloads
        .iter()
        .map(|w| time_steps(&be, &CpuProbe, w, plan))
        .collect::<Result<_, _>>()?;
    let name = format!("cpu ({} threads)", rayon::current_num_threads());
    Ok((name, timings))
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::*;
    use gpu_mem::cuda::cudarc::driver::CudaContext;
    use trainer::backend::cuda::CudaBackend;

    struct CudaProbe;

    impl Probe<CudaBackend> for CudaProbe {
        fn sync(&self, be: &CudaBackend) -> Result<(), Error> {
            be.check().map_err(|e| Error::Backend(e.to_string()))
        }
        fn reset_peak(&self, be: &CudaBackend) {
            be.allocator().reset_peak();
        }
        fn peak_bytes(&self, be: &CudaBackend) -> Option<u64> {
            Some(be.allocator().stats().allocated_bytes.all.peak)
        }
        fn counters(&self, be: &CudaBackend) -> Option<HostCounters> {
            Some(be.host_counters())
        }
    }

    pub fn run(
        kernels: Kernels,
        workloads: &[Workload],
        plan: &Plan,
    ) -> Result<(String, Vec<Timing>), Error> {
        let backend = |e: &dyn std::fmt::Display| Error::Backend(e.to_string());
        let be = CudaBackend::new(0, gpu_mem::Config::default())
            .and_then(|be| be.with_matmul_precision(MatmulPrecision::Bf16))
            .map_err(|e| backend(&e))?
            .with_kernels(kernels);
        let name = CudaContext::new(0)
            .and_then(|ctx| ctx.name())
            .map_err(|e| backend(&format!("cuDeviceGetName: {e:?}")))?;
        let timings = workloads
            .iter()
            .map(|w| time_steps(&be, &CudaProbe, w, plan))
            .collect::<Result<_, _>>()?;
        Ok((name, timings))
    }
}

#[cfg(not(feature = "cuda"))]
mod cuda {
    use super::*;

    pub fn run(_: Kernels, _: &[Workload], _: &Plan) -> Result<(String, Vec<Timing>), Error> {
        Err(Error::NoCuda)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(steps: usize, warmup: usize, repeats: usize) -> Plan {
        Plan {
            steps,
            warmup,
            repeats,
        }
    }

    /// Two timed runs of two steps of the tiny model train on the CPU and
    /// report a finite loss near ln 2 (two balanced classes, random
    /// weights); the CPU counts no host figures.
    #[test]
    fn the_tiny_model_trains_on_the_cpu() {
        let w = Workload::named("tiny").unwrap();
        let (name, timings) = run(Device::Cpu, Kernels::Reference, &[w], &plan(2, 1, 2)).unwrap();
        assert!(name.starts_with("cpu"));
        let t = &timings[0];
        assert_eq!(t.runs.len(), 2);
        assert!(
            t.runs
                .iter()
                .all(|r| r.seconds_per_step > 0.0 && r.host.is_none())
        );
        assert!((t.loss - 2f64.ln()).abs() < 0.2, "{}", t.loss);
        assert_eq!(t.peak_bytes, None);
        assert_eq!(t.host_busy(), None);
    }

    #[test]
    fn host_counts_are_per_step_of_the_run() {
        let before = HostCounters {
            syncs: 10,
            sync_wait_ns: 5_000_000,
            kernel_launches: 1_000,
            blas_calls: 100,
        };
        let after = HostCounters {
            syncs: 90,
            sync_wait_ns: 405_000_000,
            kernel_launches: 39_360,
            blas_calls: 8_980,
        };
        let per_step = per_step(&after.since(&before), 40);
        assert_eq!(per_step.syncs, 2.0);
        assert!((per_step.sync_wait_seconds - 0.010).abs() < 1e-15);
        assert_eq!(per_step.kernel_launches, 959.0);
        assert_eq!(per_step.blas_calls, 222.0);
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_is_a_clear_error() {
        let w = Workload::named("tiny").unwrap();
        let e = run(Device::Cuda, Kernels::Reference, &[w], &plan(1, 0, 1)).unwrap_err();
        assert!(matches!(e, Error::NoCuda));
        assert!(e.to_string().contains("--features cuda"));
    }
}
