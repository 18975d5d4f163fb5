//! Our side: timed training steps on the CPU or CUDA backend, matrix
//! products in bf16.

use std::time::Instant;

use trainer::backend::{Backend, Kernels, MatmulPrecision};
use trainer::memory::plan::{build_planned_model, synthetic_batch};
use trainer::train::train_step;

use crate::Error;
use crate::report::Timing;
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

/// What the backend needs around the steps: waiting for queued work (and
/// surfacing its errors), and its allocator's peak.
trait Probe<B> {
    fn sync(&self, be: &B) -> Result<(), Error>;
    fn reset_peak(&self, be: &B);
    fn peak_bytes(&self, be: &B) -> Option<u64>;
}

/// Trains `w` for `warmup` untimed and `steps` timed steps (the loss read
/// after each step waits for it) and returns the mean step time, the last
/// loss and the peak memory of the timed steps.
fn time_steps<B: Backend>(
    be: &B,
    probe: &dyn Probe<B>,
    w: &Workload,
    steps: usize,
    warmup: usize,
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
    for _ in 0..warmup {
        step()?;
    }
    probe.sync(be)?;
    probe.reset_peak(be);
    let start = Instant::now();
    let mut loss = f64::NAN;
    for _ in 0..steps {
        loss = step()?;
    }
    probe.sync(be)?;
    Ok(Timing {
        seconds_per_step: start.elapsed().as_secs_f64() / steps as f64,
        loss,
        peak_bytes: probe.peak_bytes(be),
    })
}

/// Runs every workload on `device`; returns the device's name and the
/// timings, in the workloads' order.
pub fn run(
    device: Device,
    kernels: Kernels,
    workloads: &[Workload],
    steps: usize,
    warmup: usize,
) -> Result<(String, Vec<Timing>), Error> {
    match device {
        Device::Cpu => cpu(kernels, workloads, steps, warmup),
        Device::Cuda => cuda::run(kernels, workloads, steps, warmup),
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
}

fn cpu(
    kernels: Kernels,
    workloads: &[Workload],
    steps: usize,
    warmup: usize,
) -> Result<(String, Vec<Timing>), Error> {
    let be =
        trainer::backend::cpu::CpuBackend::<f32>::new().for_step(MatmulPrecision::Bf16, kernels);
    let timings = workloads
        .iter()
        .map(|w| time_steps(&be, &CpuProbe, w, steps, warmup))
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
    }

    pub fn run(
        kernels: Kernels,
        workloads: &[Workload],
        steps: usize,
        warmup: usize,
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
            .map(|w| time_steps(&be, &CudaProbe, w, steps, warmup))
            .collect::<Result<_, _>>()?;
        Ok((name, timings))
    }
}

#[cfg(not(feature = "cuda"))]
mod cuda {
    use super::*;

    pub fn run(
        _: Kernels,
        _: &[Workload],
        _: usize,
        _: usize,
    ) -> Result<(String, Vec<Timing>), Error> {
        Err(Error::NoCuda)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two timed steps of the tiny model train on the CPU and report a
    /// finite loss near ln 2 (two balanced classes, random weights).
    #[test]
    fn the_tiny_model_trains_on_the_cpu() {
        let w = Workload::named("tiny").unwrap();
        let (name, timings) = run(Device::Cpu, Kernels::Reference, &[w], 2, 1).unwrap();
        assert!(name.starts_with("cpu"));
        let t = &timings[0];
        assert!(t.seconds_per_step > 0.0);
        assert!((t.loss - 2f64.ln()).abs() < 0.2, "{}", t.loss);
        assert_eq!(t.peak_bytes, None);
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_is_a_clear_error() {
        let w = Workload::named("tiny").unwrap();
        let e = run(Device::Cuda, Kernels::Reference, &[w], 1, 0).unwrap_err();
        assert!(matches!(e, Error::NoCuda));
        assert!(e.to_string().contains("--features cuda"));
    }
}
