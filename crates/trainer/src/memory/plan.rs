//! The memory plan: every buffer a training step allocates, with size and
//! lifetime, and the peak, obtained by running the real training step
//! ([`crate::train::train_step`]) on [`PlanBackend`], which allocates
//! through the same calls as the real backends but computes nothing.
//!
//! Because the model, optimiser and step code are shared, a backend that
//! allocates exactly what it is asked for (the CPU backend does; a CUDA
//! backend allocating from `gpu-mem` in this order does up to the
//! allocator's rounding) reaches exactly this peak.

use std::collections::BTreeMap;

use super::backend_buffers::StepBackend;
use super::tracker::{Allocation, BufKind, TrackedBuffer};
use crate::backend::plan::PlanBackend;
use crate::backend::{Backend, Dtype, Kernels, MatmulPrecision, Storage};
use crate::batch::Batch;
use crate::model::{BatchError, BuildError, Classifier, HeadConfig, ModelConfig};
use crate::train::{OptimizerConfig, StepContext, train_step};

/// The master precision of a planned step: what weights, gradients,
/// optimiser state, inputs and statistics are stored as (activations too,
/// unless the fused kernels store them in 16 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// 32-bit floats, as real training runs.
    F32,
    /// 64-bit floats, as the CPU backend runs for gradient checks.
    F64,
}

impl Precision {
    /// Bytes of one stored float: 4 or 8.
    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F64 => 8,
        }
    }

    /// The storage type of this master precision.
    pub fn dtype(self) -> Dtype {
        match self {
            Precision::F32 => Dtype::F32,
            Precision::F64 => Dtype::F64,
        }
    }
}

/// The optimiser of a planned step, which decides the optimiser state it
/// holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerKind {
    /// AdamW: two moments per parameter, each the parameter's size.
    AdamW,
    /// Plain SGD: no optimiser state.
    Sgd,
}

impl OptimizerKind {
    /// The optimiser's configuration: AdamW with its default
    /// hyperparameters, or SGD (the values do not change the memory).
    pub fn config(self) -> OptimizerConfig {
        match self {
            OptimizerKind::AdamW => OptimizerConfig::default(),
            OptimizerKind::Sgd => OptimizerConfig::Sgd,
        }
    }
}

/// What a training step looks like.
#[derive(Clone, Debug, PartialEq)]
pub struct PlanRequest {
    /// The architecture (any `model_type` a run can train).
    pub config: ModelConfig,
    /// The classifier head on top of the encoder.
    pub head: HeadConfig,
    /// Rows of the step's one micro-batch. With the fused kernels and
    /// AdamW the word-embedding gradient holds a row per token of the
    /// optimiser step, so a step accumulating `k` micro-batches holds
    /// `k` times those rows (the study runner prices a trial by replaying
    /// its steps, accumulation included).
    pub micro_batch: usize,
    /// Tokens in each row, all real (no padding); 1 to the model's
    /// positions.
    pub seq_len: usize,
    /// The master precision (see [`Precision`]).
    pub precision: Precision,
    /// Activation recomputation: forward keeps only each encoder layer's
    /// input, and backward recomputes the rest.
    pub recompute: bool,
    /// The optimiser, whose state is part of the plan.
    pub optimizer: OptimizerKind,
    /// Whether the loss is class-weighted, which holds a buffer of one
    /// weight per class.
    pub class_weights: bool,
    /// Dropout on (training); off makes dropout buffers disappear.
    pub dropout: bool,
    /// The backend that runs the step: the buffers it holds for itself
    /// (the CUDA backend's cuBLAS workspace and kernel scratch) are
    /// allocated before the model and live through the step.
    pub backend: StepBackend,
    /// The operand format of the step's matrix products, reported to the
    /// model code by the plan's backend as the real backend reports it;
    /// with [`Kernels::Fused`], 16 bits stores the activations in 16 bits.
    pub matmul_precision: MatmulPrecision,
    /// Which implementation of the step runs (see [`Kernels`]).
    pub kernels: Kernels,
}

impl PlanRequest {
    /// The usual fine-tuning step: fp32 weights and activations, AdamW,
    /// dropout on, no recomputation, no class weights, on the host (no
    /// backend buffers) with fp32 matrix products, the reference kernels.
    pub fn fp32_adamw(
        config: impl Into<ModelConfig>,
        head: &HeadConfig,
        micro_batch: usize,
        seq_len: usize,
    ) -> Self {
        Self {
            config: config.into(),
            head: head.clone(),
            micro_batch,
            seq_len,
            precision: Precision::F32,
            recompute: false,
            optimizer: OptimizerKind::AdamW,
            class_weights: false,
            dropout: true,
            backend: StepBackend::Host,
            matmul_precision: MatmulPrecision::Fp32,
            kernels: Kernels::Reference,
        }
    }

    /// This request's step on `backend` with matrix products at
    /// `matmul_precision`.
    pub fn on(self, backend: StepBackend, matmul_precision: MatmulPrecision) -> Self {
        Self {
            backend,
            matmul_precision,
            ..self
        }
    }

    /// This step with products at `precision`, run by `kernels`.
    pub fn with_step(self, precision: MatmulPrecision, kernels: Kernels) -> Self {
        Self {
            matmul_precision: precision,
            kernels,
            ..self
        }
    }

    /// What the step stores each kind of buffer as.
    pub fn storage(&self) -> Storage {
        Storage::for_step(self.precision.dtype(), self.matmul_precision, self.kernels)
    }
}

impl PlanRequest {
    /// Checks that the step can run: at least one example of at least one
    /// token, no longer than the model's positions, a vocabulary, and a
    /// head the architecture can carry. The step checks everything else
    /// (ids, labels) itself.
    pub fn check(&self) -> Result<(), PlanError> {
        let bad = |field: &'static str, problem: String| Err(PlanError::Request { field, problem });
        let max_seq = self.config.max_sequence();
        if self.micro_batch == 0 {
            return bad("micro_batch", "must be at least 1".into());
        }
        if self.seq_len == 0 || self.seq_len > max_seq {
            return bad(
                "seq_len",
                format!(
                    "{} is not in 1..={max_seq} (the longest sequence `{}` takes)",
                    self.seq_len,
                    self.config.model_type()
                ),
            );
        }
        if self.micro_batch.checked_mul(self.seq_len).is_none() {
            return bad(
                "micro_batch",
                format!(
                    "{} rows of {} tokens overflow a count of tokens",
                    self.micro_batch, self.seq_len
                ),
            );
        }
        if self.config.vocab_size() == 0 {
            return bad("config.vocab_size", "must be at least 1".into());
        }
        if let Some((field, problem)) = self.config.shape_problem() {
            return bad(field, problem);
        }
        if self.head.num_labels < 2 {
            return bad(
                "head.num_labels",
                format!("{} must be at least 2", self.head.num_labels),
            );
        }
        self.config.check_head(&self.head)?;
        Ok(())
    }
}

/// Why a step could not be planned: the request, named by field.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A field of the request is out of range ([`PlanRequest::check`]).
    #[error("memory plan request: `{field}` {problem}")]
    Request {
        /// The field at fault (`micro_batch`, `seq_len`,
        /// `config.vocab_size`, `head.num_labels`, or a size of the config).
        field: &'static str,
        /// What is wrong with its value.
        problem: String,
    },
    /// The model cannot be built from the request's config and head (a
    /// head the architecture cannot carry).
    #[error("memory plan request: {0}")]
    Build(#[from] BuildError),
    /// The step refused the request's synthetic batch.
    #[error("memory plan request: {0}")]
    Batch(#[from] BatchError),
}

/// One buffer of a [`MemoryPlan`]: name, kind, bytes and the events of its
/// allocation and free.
pub type PlannedBuffer = TrackedBuffer;

/// A planned model with its gradients and optimiser state, held by the
/// caller until it chooses to free them.
pub type PlannedStep<'m, B> = (Box<dyn Classifier<B> + 'm>, StepContext<B>);

/// Every buffer one training step allocates, in order and with its life,
/// and the peak of live bytes; built by [`MemoryPlan::new`].
#[derive(Clone, Debug)]
pub struct MemoryPlan {
    /// The step planned.
    pub request: PlanRequest,
    /// Every buffer in allocation order: model construction (weights), then
    /// gradients and optimiser state, then one training step.
    pub buffers: Vec<PlannedBuffer>,
    /// The most bytes live at once, the backend's own buffers included.
    pub peak_bytes: usize,
    /// Bytes by kind among the buffers live at the (first) peak.
    pub at_peak: BTreeMap<BufKind, usize>,
}

/// A batch of the requested shape (every token real, labels cycling), used
/// to run the step for planning and for measuring.
pub fn synthetic_batch(req: &PlanRequest) -> Batch {
    let (b, s) = (req.micro_batch, req.seq_len);
    Batch {
        batch: b,
        seq: s,
        input_ids: (0..b * s)
            .map(|i| (i % req.config.vocab_size()) as u32)
            .collect(),
        token_type_ids: vec![0; b * s],
        attention_mask: vec![1; b * s],
        labels: (0..b).map(|i| i % req.head.num_labels).collect(),
    }
}

/// Builds the model, optimiser state and runs one training step on `be`;
/// returns the model and step context so the caller controls when they are
/// freed. The memory plan and the measurement tests both call this.
///
/// A request that cannot run ([`PlanRequest::check`], or a head the model
/// refuses) is an error, before anything is allocated on `be`.
pub fn run_planned_step<'m, B: Backend + 'm>(
    be: &B,
    req: &PlanRequest,
) -> Result<PlannedStep<'m, B>, PlanError> {
    let (mut model, mut ctx) = build_planned_model(be, req)?;
    let batch = synthetic_batch(req);
    train_step(be, &mut *model, &mut ctx, &[&batch], 1e-5)?;
    Ok((model, ctx))
}

/// The model, gradients and optimiser state of `req`, before any step: what
/// [`run_planned_step`] steps, for callers that time or count steps of
/// their own.
pub fn build_planned_model<'m, B: Backend + 'm>(
    be: &B,
    req: &PlanRequest,
) -> Result<PlannedStep<'m, B>, PlanError> {
    req.check()?;
    let config = if req.dropout {
        req.config.clone()
    } else {
        req.config.with_dropout(0.0)
    };
    let mut model = config.build_random(be, &req.head, 0)?;
    let weights: Option<Vec<f64>> = req.class_weights.then(|| vec![1.0; req.head.num_labels]);
    let ctx = StepContext::new(
        be,
        &mut *model,
        req.optimizer.config(),
        weights.as_deref(),
        Some(1.0),
        req.recompute,
        0,
    );
    Ok((model, ctx))
}

/// The peak bytes of a training step at each of `micro_batches` (the rest
/// of `req` fixed), building the model and optimiser state once. Each
/// equals `MemoryPlan::new` of that micro-batch's request's `peak_bytes`,
/// but building a large model's parameters dominates a plan's cost, so
/// this is the cheap way to try many micro-batch sizes.
pub fn step_peaks(req: &PlanRequest, micro_batches: &[usize]) -> Result<Vec<usize>, PlanError> {
    let requests: Vec<PlanRequest> = micro_batches
        .iter()
        .map(|&micro_batch| PlanRequest {
            micro_batch,
            ..req.clone()
        })
        .collect();
    for r in &requests {
        r.check()?;
    }
    let be = planning_backend(req, false);
    let _backend = hold_backend_buffers(&be, req.backend);
    let (mut model, mut ctx) = build_planned_model(&be, req)?;
    requests
        .iter()
        .map(|r| {
            let batch = synthetic_batch(r);
            // As a new plan's: a row-sparse gradient grows to the largest
            // step it has seen.
            model.params_mut().release_rows(&be);
            be.tracker().reset_peak();
            train_step(&be, &mut *model, &mut ctx, &[&batch], 1e-5)?;
            Ok(be.tracker().peak_bytes())
        })
        .collect()
}

/// The allocation-only backend of `req`'s step: its storage, kernels and
/// products' format; `record` keeps every buffer's life.
fn planning_backend(req: &PlanRequest, record: bool) -> PlanBackend {
    PlanBackend::for_step(req.storage(), req.kernels, record)
        .with_matmul_precision(req.matmul_precision)
}

/// Allocates `backend`'s own buffers on the plan's backend, as the real
/// backend does before the model exists; they are freed when dropped.
fn hold_backend_buffers(be: &PlanBackend, backend: StepBackend) -> Vec<Allocation> {
    backend
        .buffers()
        .iter()
        // A plan's tracker has no limit: nothing is refused.
        .filter_map(|b| {
            be.tracker()
                .allocate(b.name, BufKind::Backend, b.bytes)
                .ok()
        })
        .collect()
}

impl MemoryPlan {
    /// The plan of `req`'s step; an error for a request that cannot run
    /// (see [`run_planned_step`]).
    pub fn new(req: &PlanRequest) -> Result<Self, PlanError> {
        req.check()?;
        let be = planning_backend(req, true);
        let backend = hold_backend_buffers(&be, req.backend);
        let (model, ctx) = run_planned_step(&be, req)?;
        // Tear down too, so persistent buffers get a free event (the end of
        // the trial) like everything else; the backend's own go last, as
        // the backend outlives its model.
        drop((model, ctx));
        drop(backend);
        let mut plan = Self {
            request: req.clone(),
            buffers: be.tracker().buffers(),
            peak_bytes: be.tracker().peak_bytes(),
            at_peak: BTreeMap::new(),
        };
        let mut at_peak = BTreeMap::new();
        for b in plan.live_at_peak() {
            *at_peak.entry(b.kind).or_insert(0) += b.bytes;
        }
        plan.at_peak = at_peak;
        Ok(plan)
    }

    /// The allocation that reached the (first) peak; `None` for a step
    /// that allocates nothing.
    pub fn peak_buffer(&self) -> Option<&PlannedBuffer> {
        self.buffers
            .iter()
            .find(|b| b.live_after_alloc == self.peak_bytes)
    }

    /// The buffers live right after [`MemoryPlan::peak_buffer`]'s
    /// allocation, in allocation order (it among them).
    pub fn live_at_peak(&self) -> impl Iterator<Item = &PlannedBuffer> {
        let event = self.peak_buffer().map(|b| b.alloc_event);
        self.buffers.iter().filter(move |b| {
            event.is_some_and(|e| b.alloc_event <= e && b.free_event.is_none_or(|f| f > e))
        })
    }

    /// Total bytes of buffers of `kind` (over the whole step, not at peak).
    pub fn total_of(&self, kind: BufKind) -> usize {
        self.buffers
            .iter()
            .filter(|b| b.kind == kind)
            .map(|b| b.bytes)
            .sum()
    }

    /// A human-readable table: per kind at the peak, then the largest buffers.
    pub fn summary(&self) -> String {
        use std::fmt::Write;
        let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "predicted peak: {} bytes ({:.1} MiB)",
            self.peak_bytes,
            mib(self.peak_bytes)
        );
        let _ = writeln!(s, "live at peak by kind:");
        for (k, b) in &self.at_peak {
            let _ = writeln!(
                s,
                "  {:<16} {:>14} bytes {:>10.1} MiB",
                format!("{k:?}"),
                b,
                mib(*b)
            );
        }
        let _ = writeln!(s, "buffers: {}", self.buffers.len());
        s
    }
}
