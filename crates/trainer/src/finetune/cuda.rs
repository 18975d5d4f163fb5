//! One fine-tuning run on a CUDA device: the CPU run's data, model and
//! training loop over [`CudaBackend`], allocating through `gpu-mem`'s
//! caching allocator, whose limit is the trial's lease.

use std::time::Instant;

use super::{FinetuneError, FinetuneOutcome, FinetuneSpec, build_and_train, prepare};
use crate::backend::cuda::CudaBackend;
use crate::model::deberta::DebertaClassifier;
use crate::model::{BertClassifier, ModelConfig};
use crate::train::{Control, EpochMetrics};

/// What a CUDA run produced, with the allocator's view of its memory.
#[derive(Clone, Debug)]
pub struct CudaOutcome {
    /// `peak_bytes` is the allocator's peak of allocated bytes.
    pub outcome: FinetuneOutcome,
    /// Peak bytes the allocator reserved from the device.
    pub peak_reserved: u64,
    /// Peak bytes the model asked for (before the allocator's rounding).
    pub peak_requested: u64,
    /// Bytes the backend reserved for itself before the model existed
    /// (its own buffers, [`crate::memory::StepBackend::Cuda`]: cuBLAS
    /// workspace, norm partials), inside the lease.
    pub backend_reserved: u64,
    /// The allocator's counters at the end (before teardown).
    pub stats: gpu_mem::MemoryStats,
}

/// Fine-tunes on CUDA device `ordinal` (fp32 buffers, matrix products at
/// `spec.matmul_precision`), the model chosen by
/// `config.json`'s `model_type`. `allocator` configures the caching
/// allocator; [`FinetuneSpec::memory_limit`], when set, becomes its
/// reserved-bytes limit, the backend's own buffers included (a study runner
/// prices them with the run: [`super::replay_run`]), so a step that would
/// pass the lease is retried with half the micro-batch exactly as on the
/// CPU.
pub fn finetune_cuda(
    spec: &FinetuneSpec,
    ordinal: usize,
    allocator: gpu_mem::Config,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<CudaOutcome, FinetuneError> {
    let prepared = prepare(spec)?;
    let started = Instant::now();
    let be = CudaBackend::new(ordinal, allocator)?
        .with_matmul_precision(spec.matmul_precision)?
        .with_kernels(spec.kernels);
    // The lease covers everything this allocator reserves, the backend's
    // own buffers (already allocated) included.
    let backend_reserved = be.allocator().stats().reserved_bytes.all.current;
    if let Some(limit) = spec.memory_limit {
        be.allocator()
            .set_limit(Some(gpu_mem::MemoryLimit::Bytes(limit)))
            .map_err(|source| crate::backend::cuda::CudaError::Alloc {
                name: "allocator limit".into(),
                bytes: limit,
                source,
            })?;
    }
    let device = started.elapsed().as_secs_f64();
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
    let stats = be.allocator().stats();
    let startup = prepared.startup(device, built);
    let outcome = FinetuneOutcome {
        report,
        train_examples: prepared.train_examples,
        validation_examples: prepared.validation_examples,
        skipped_records: prepared.dataset_report,
        peak_bytes: stats.allocated_bytes.all.peak as usize,
        allocation_requests: stats.allocation.all.allocated,
        startup,
    };
    Ok(CudaOutcome {
        backend_reserved,
        peak_reserved: stats.reserved_bytes.all.peak,
        peak_requested: stats.requested_bytes.all.peak,
        outcome,
        stats,
    })
}
