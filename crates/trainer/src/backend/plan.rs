//! A backend that allocates and computes nothing else: running the model's
//! real training step on it yields the memory plan (every buffer, its size
//! and lifetime, the peak) from the very code path the real backends run.

use std::sync::Arc;

use super::{
    AdamWStep, AttentionShape, Backend, Dtype, Failure, Kernels, MatmulPrecision, MatmulShape,
    RelPosShape, Storage,
};
use crate::memory::oom::RecordedOom;
use crate::memory::{Allocation, BufKind, MemTracker};
use crate::rng::RngKey;

/// The operations of a backend that computes nothing (every one a no-op;
/// `download` returns zeros, the loss is 0), over buffer type `$buf` with
/// `len` and `dtype` fields. Shared by [`PlanBackend`] and
/// [`super::sim::SimBackend`], which differ only in where their buffers'
/// memory comes from.
macro_rules! compute_nothing {
    ($buf:ty) => {
        fn len(&self, buf: &$buf) -> usize {
            buf.len
        }
        fn dtype(&self, buf: &$buf) -> Dtype {
            buf.dtype
        }
        fn cast(&self, _: &$buf, _: &mut $buf) {}
        fn upload(&self, _: &mut $buf, _: &[f64]) {}
        fn upload_f32(&self, _: &mut $buf, _: &[f32]) {}
        fn upload_ids(&self, _: &mut $buf, _: &[u32]) {}
        fn download(&self, src: &$buf) -> Vec<f64> {
            vec![0.0; src.len]
        }
        fn fill(&self, _: &mut $buf, _: f64) {}
        fn add(&self, _: &$buf, _: &$buf, _: &mut $buf) {}
        fn add_assign(&self, _: &mut $buf, _: &$buf) {}
        fn scale(&self, _: &mut $buf, _: f64) {}
        fn sum_squares(&self, _: &$buf) -> f64 {
            0.0
        }
        fn matmul(&self, _: &MatmulShape, _: f64, _: &$buf, _: &$buf, _: f64, _: &mut $buf) {}
        fn bias_add(&self, _: &mut $buf, _: &$buf, _: usize) {}
        fn bias_backward(&self, _: &$buf, _: &mut $buf, _: usize) {}
        fn layernorm_forward(
            &self,
            _: &$buf,
            _: &$buf,
            _: &$buf,
            _: usize,
            _: f64,
            _: &mut $buf,
            _: &mut $buf,
            _: &mut $buf,
        ) {
        }
        fn layernorm_backward(
            &self,
            _: &$buf,
            _: &$buf,
            _: &$buf,
            _: &$buf,
            _: &$buf,
            _: usize,
            _: &mut $buf,
            _: &mut $buf,
            _: &mut $buf,
        ) {
        }
        fn permute_heads(&self, _: &$buf, _: &mut $buf, _: usize, _: usize, _: usize) {}
        fn unpermute_heads(&self, _: &$buf, _: &mut $buf, _: usize, _: usize, _: usize) {}
        fn softmax_forward(
            &self,
            _: &$buf,
            _: &$buf,
            _: usize,
            _: usize,
            _: usize,
            _: f64,
            _: &mut $buf,
        ) {
        }
        fn softmax_backward(&self, _: &$buf, _: &$buf, _: usize, _: f64, _: &mut $buf) {}
        fn gelu_forward(&self, _: &$buf, _: &mut $buf) {}
        fn gelu_backward(&self, _: &$buf, _: &$buf, _: &mut $buf) {}
        fn gelu_backward_in_place(&self, _: &$buf, _: &mut $buf) {}
        fn tanh_forward(&self, _: &$buf, _: &mut $buf) {}
        fn tanh_backward(&self, _: &$buf, _: &$buf, _: &mut $buf) {}
        fn relu_forward(&self, _: &$buf, _: &mut $buf) {}
        fn relu_backward(&self, _: &$buf, _: &$buf, _: &mut $buf) {}
        fn dropout_forward(&self, _: &$buf, _: &mut $buf, _: f64, _: RngKey) {}
        fn dropout_backward(&self, _: &$buf, _: &mut $buf, _: f64, _: RngKey) {}
        fn embedding_forward(&self, _: &$buf, _: &$buf, _: usize, _: &mut $buf, _: bool) {}
        fn embedding_backward(
            &self,
            _: &$buf,
            _: &$buf,
            _: usize,
            _: &mut $buf,
            _: Option<&mut $crate::backend::RowSlots>,
        ) {
        }
        fn cls_forward(&self, _: &$buf, _: &mut $buf, _: usize, _: usize) {}
        fn cls_backward(&self, _: &$buf, _: &mut $buf, _: usize, _: usize) {}
        fn mean_pool(&self, _: &$buf, _: &$buf, _: usize, _: usize, _: &mut $buf) {}
        fn rel_pos_gather(&self, _: &RelPosShape, _: f64, _: &$buf, _: &$buf, _: &mut $buf) {}
        fn rel_pos_scatter(&self, _: &RelPosShape, _: f64, _: &$buf, _: &$buf, _: &mut $buf) {}
        fn mask_rows(&self, _: &mut $buf, _: &$buf, _: usize) {}
        fn cross_entropy_forward(
            &self,
            _: &$buf,
            _: &$crate::backend::LossTargets<'_, $buf, $buf>,
        ) -> f64 {
            0.0
        }
        fn cross_entropy_backward(
            &self,
            _: &$buf,
            _: &$crate::backend::LossTargets<'_, $buf, $buf>,
            _: f64,
            _: &mut $buf,
        ) {
        }
        fn adamw(&self, _: &mut $buf, _: &$buf, _: &mut $buf, _: &mut $buf, _: &AdamWStep) {}
        fn sgd(&self, _: &mut $buf, _: &$buf, _: f64) {}
        fn attention_forward(
            &self,
            _: &AttentionShape,
            _: &$crate::backend::AttentionInputs<'_, $buf, $buf>,
            _: &mut $buf,
            _: &mut $buf,
        ) {
        }
        fn attention_backward(
            &self,
            _: &AttentionShape,
            _: &$crate::backend::AttentionInputs<'_, $buf, $buf>,
            _: &$buf,
            _: &$buf,
            _: &$buf,
            _: &mut $buf,
            _: &mut $buf,
            _: &mut $buf,
            _: &mut $buf,
        ) {
        }
        fn bias_gelu_forward(&self, _: &mut $buf, _: &$buf, _: &mut $buf) {}
        fn residual_layernorm_forward(
            &self,
            _: &mut $buf,
            _: &$buf,
            _: &$buf,
            _: f64,
            _: Option<RngKey>,
            _: &$buf,
            _: &$buf,
            _: f64,
            _: &mut $buf,
            _: &mut $buf,
            _: &mut $buf,
        ) {
        }
        fn residual_layernorm_backward(
            &self,
            _: &$buf,
            _: &$buf,
            _: &$buf,
            _: &$buf,
            _: &$buf,
            _: f64,
            _: Option<RngKey>,
            _: &mut $buf,
            _: Option<&mut $buf>,
            _: &mut $buf,
            _: &mut $buf,
        ) {
        }
        fn adamw_all(
            &self,
            _: &mut [$buf],
            _: &[$buf],
            _: &mut [$buf],
            _: &mut [$buf],
            _: &[bool],
            _: &AdamWStep,
            _: f64,
            _: Option<f64>,
            _: Option<$crate::backend::SparseRows<'_, $buf>>,
        ) {
        }
    };
}
pub(crate) use compute_nothing;

/// A buffer that exists only as a size.
#[derive(Debug)]
pub struct PlanBuf {
    len: usize,
    dtype: Dtype,
    /// `None` when the tracker's limit refused it.
    _alloc: Option<Allocation>,
}

/// The memory plan's backend (see the module doc): every buffer is a size
/// registered with its tracker, every operation a no-op.
pub struct PlanBackend {
    tracker: Arc<MemTracker>,
    storage: Storage,
    kernels: Kernels,
    matmul_precision: MatmulPrecision,
    /// A refusal of the tracker's limit, when one is set.
    failure: RecordedOom,
}

/// The master type of `float_bytes` bytes: 8 is f64, anything else f32.
fn master(float_bytes: usize) -> Dtype {
    if float_bytes == 8 {
        Dtype::F64
    } else {
        Dtype::F32
    }
}

impl PlanBackend {
    /// The reference step with every buffer `float_bytes` wide (4 for f32,
    /// 8 for f64).
    pub fn new(float_bytes: usize) -> Self {
        Self::for_step(
            Storage::uniform(master(float_bytes)),
            Kernels::Reference,
            true,
        )
    }

    /// Like [`Self::new`] but only counting live and peak bytes, without a
    /// record of every buffer (for many steps in a row).
    pub fn counting(float_bytes: usize) -> Self {
        Self::for_step(
            Storage::uniform(master(float_bytes)),
            Kernels::Reference,
            false,
        )
    }

    /// The step `kernels` runs with buffers stored as `storage`; `record`
    /// keeps every buffer's life (else only live and peak bytes).
    pub fn for_step(storage: Storage, kernels: Kernels, record: bool) -> Self {
        Self {
            tracker: MemTracker::new(record),
            storage,
            kernels,
            matmul_precision: MatmulPrecision::Fp32,
            failure: RecordedOom::default(),
        }
    }

    /// The backend reporting `precision` as its matrix products' operand
    /// format, as the backend it plans for does.
    pub fn with_matmul_precision(self, precision: MatmulPrecision) -> Self {
        Self {
            matmul_precision: precision,
            ..self
        }
    }

    /// The tracker the plan is read from: every buffer's bytes, and its
    /// lifetime when recording.
    pub fn tracker(&self) -> &Arc<MemTracker> {
        &self.tracker
    }

    fn buffer(&self, name: &str, kind: BufKind, len: usize, dtype: Dtype) -> PlanBuf {
        let alloc = if self.failure.is_pending() {
            None
        } else {
            self.tracker
                .allocate(name, kind, len * dtype.bytes())
                .map_err(|oom| self.failure.record(oom))
                .ok()
        };
        PlanBuf {
            len,
            dtype,
            _alloc: alloc,
        }
    }
}

impl Backend for PlanBackend {
    type Buf = PlanBuf;
    type Ids = PlanBuf;

    fn storage(&self) -> Storage {
        self.storage
    }
    fn kernels(&self) -> Kernels {
        self.kernels
    }
    fn holds_values(&self) -> bool {
        false
    }
    fn matmul_precision(&self) -> MatmulPrecision {
        self.matmul_precision
    }
    fn take_failure(&self) -> Result<(), Failure> {
        self.failure.take()
    }
    fn failed(&self) -> bool {
        self.failure.is_pending()
    }
    fn alloc(&self, name: &str, kind: BufKind, len: usize) -> PlanBuf {
        self.buffer(name, kind, len, self.storage.of(kind))
    }
    /// Ids are 4 bytes, as an f32.
    fn alloc_ids(&self, name: &str, len: usize) -> PlanBuf {
        self.buffer(name, BufKind::Input, len, Dtype::F32)
    }
    compute_nothing!(PlanBuf);
}
