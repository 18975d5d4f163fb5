//! Fault injection for tests (feature `testing`): a backend wrapper that
//! refuses a chosen allocation and reports a chosen device failure, through
//! the same recorded-failure channel real failures take.
//!
//! [`FaultyBackend`] wraps a backend whose allocations a [`MemTracker`]
//! admits (the CPU, plan and simulated-device backends). At the chosen
//! allocation it squeezes the tracker's limit to the bytes then live, so the
//! wrapped backend refuses it exactly as it refuses a lease it cannot fit,
//! with the figures of that moment, then puts the limit back.

use std::sync::{Arc, Mutex, MutexGuard};

use super::cpu::CpuBackend;
use super::plan::PlanBackend;
use super::sim::SimBackend;
use super::{
    AdamWStep, AttentionInputs, AttentionShape, Backend, DeviceFailure, Dtype, Failure, Kernels,
    LossTargets, MatmulPrecision, MatmulShape, RelPosShape, RowSlots, SparseRows, Storage,
};
use crate::float::Float;
use crate::memory::{BufKind, MemTracker};
use crate::rng::RngKey;

/// A backend whose allocations go through a [`MemTracker`].
pub trait Tracked: Backend {
    /// The tracker that admits (or refuses) every allocation of the backend.
    fn tracker(&self) -> &Arc<MemTracker>;
}

impl<T: Float> Tracked for CpuBackend<T> {
    fn tracker(&self) -> &Arc<MemTracker> {
        CpuBackend::tracker(self)
    }
}

impl Tracked for PlanBackend {
    fn tracker(&self) -> &Arc<MemTracker> {
        PlanBackend::tracker(self)
    }
}

impl Tracked for SimBackend {
    fn tracker(&self) -> &Arc<MemTracker> {
        SimBackend::tracker(self)
    }
}

/// The faults of one run, armed on a [`FaultyBackend`] before it starts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    /// The n-th allocation of the run (1 = the first) is refused as out of
    /// memory, once.
    pub fail_nth_allocation: Option<u64>,
    /// The n-th check of the device (the training loop checks after the
    /// model is built, and after every step and evaluation) reports this
    /// failure.
    pub fail_nth_check: Option<(u64, DeviceFailure)>,
    /// The device loses its context once the observer has seen this epoch,
    /// as after a device-side assert: every later check reports
    /// [`FaultyBackend::CONTEXT_LOST`], sticky (the runs with faults of
    /// `crate::finetune` stage it).
    pub lose_context_after_epoch: Option<usize>,
}

impl Faults {
    /// Arms `be` with the allocation and check faults, counted from now;
    /// `lose_context_after_epoch` is the caller's to stage (it calls
    /// [`FaultyBackend::lose_context`] when the observer sees that epoch).
    pub fn arm<B: Tracked>(&self, be: &FaultyBackend<B>) {
        if let Some(n) = self.fail_nth_allocation {
            be.fail_nth_allocation(n);
        }
        if let Some((n, failure)) = &self.fail_nth_check {
            be.fail_nth_check(*n, failure.clone());
        }
    }
}

#[derive(Default)]
struct State {
    allocations: u64,
    /// The allocation (1-based, counted by this wrapper) to refuse.
    fail_allocation: Option<u64>,
    /// The tracker's own limit while it is squeezed.
    squeezed: Option<Option<usize>>,
    checks: u64,
    /// The call of `take_failure` (1-based) that reports this failure.
    fail_check: Option<(u64, DeviceFailure)>,
    /// A lost context: every check from now on reports it.
    lost: Option<DeviceFailure>,
}

/// Methods of [`Backend`] that [`FaultyBackend`] hands to its inner backend
/// unchanged: each signature once, as the trait declares it.
macro_rules! forward {
    ($(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) $(-> $ret:ty)?;)*) => {
        $(fn $name(&self $(, $arg: $ty)*) $(-> $ret)? {
            self.inner.$name($($arg),*)
        })*
    };
}

/// `B` with injected faults (see the module doc).
pub struct FaultyBackend<B> {
    inner: B,
    faults: Mutex<State>,
}

impl<B: Tracked> FaultyBackend<B> {
    /// `inner` wrapped, with no fault armed.
    pub fn new(inner: B) -> Self {
        Self {
            inner,
            faults: Mutex::default(),
        }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn faults(&self) -> MutexGuard<'_, State> {
        self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Refuses the `n`-th allocation from now (1 = the next), once, as out
    /// of memory (or the first one after it that takes bytes).
    pub fn fail_nth_allocation(&self, n: u64) {
        let mut f = self.faults();
        f.fail_allocation = Some(f.allocations + n.max(1));
    }

    /// The `n`-th call of `take_failure` from now (1 = the next) reports
    /// `failure`, as a device does after a failed launch.
    pub fn fail_nth_check(&self, n: u64, failure: DeviceFailure) {
        let mut f = self.faults();
        f.fail_check = Some((f.checks + n.max(1), failure));
    }

    /// What a lost context reports: the sticky failure a device-side
    /// assert leaves.
    pub const CONTEXT_LOST: &'static str =
        "CUDA_ERROR_ASSERT: device-side assert triggered (injected); the context is lost";

    /// The device loses its context now: every check from now on reports
    /// [`Self::CONTEXT_LOST`] as a sticky failure, and nothing recovers in
    /// this process.
    pub fn lose_context(&self) {
        self.faults().lost = Some(DeviceFailure {
            message: Self::CONTEXT_LOST.into(),
            sticky: true,
        });
    }

    /// Allocation requests through this wrapper so far.
    pub fn allocation_requests(&self) -> u64 {
        self.faults().allocations
    }

    /// Allocates through the wrapped backend, squeezing its tracker's limit
    /// from the chosen allocation until one is refused.
    fn allocating<R>(&self, alloc: impl FnOnce(&B) -> R) -> R {
        let tracker = self.inner.tracker();
        {
            let mut f = self.faults();
            f.allocations += 1;
            if f.fail_allocation == Some(f.allocations) {
                f.fail_allocation = None;
                f.squeezed = Some(tracker.limit());
                tracker.set_limit(Some(tracker.live_bytes()));
            }
        }
        let buf = alloc(&self.inner);
        let mut f = self.faults();
        if self.inner.failed()
            && let Some(limit) = f.squeezed.take()
        {
            tracker.set_limit(limit);
        }
        buf
    }
}

impl<B: Tracked> Backend for FaultyBackend<B> {
    type Buf = B::Buf;
    type Ids = B::Ids;

    fn storage(&self) -> Storage {
        self.inner.storage()
    }
    fn kernels(&self) -> Kernels {
        self.inner.kernels()
    }
    fn holds_values(&self) -> bool {
        self.inner.holds_values()
    }
    fn matmul_precision(&self) -> MatmulPrecision {
        self.inner.matmul_precision()
    }
    fn take_failure(&self) -> Result<(), Failure> {
        let injected = {
            let mut f = self.faults();
            f.checks += 1;
            if let Some(lost) = &f.lost {
                return Err(Failure::Device(lost.clone()));
            }
            match f.fail_check.take() {
                Some((at, failure)) if at == f.checks => Some(failure),
                other => {
                    f.fail_check = other;
                    None
                }
            }
        };
        let recorded = self.inner.take_failure();
        match injected {
            Some(failure) => Err(Failure::Device(failure)),
            None => recorded,
        }
    }
    fn failed(&self) -> bool {
        self.faults().lost.is_some() || self.inner.failed()
    }
    fn alloc(&self, name: &str, kind: BufKind, len: usize) -> Self::Buf {
        self.allocating(|b| b.alloc(name, kind, len))
    }
    fn alloc_overwritten(&self, name: &str, kind: BufKind, len: usize) -> Self::Buf {
        self.allocating(|b| b.alloc_overwritten(name, kind, len))
    }
    fn alloc_ids(&self, name: &str, len: usize) -> Self::Ids {
        self.allocating(|b| b.alloc_ids(name, len))
    }
    forward! {
        fn len(&self, buf: &Self::Buf) -> usize;
        fn dtype(&self, buf: &Self::Buf) -> Dtype;
        fn cast(&self, src: &Self::Buf, dst: &mut Self::Buf);
        fn cast_all(&self, src: &[&Self::Buf], dst: &mut [Self::Buf]);
        fn upload(&self, dst: &mut Self::Buf, src: &[f64]);
        fn upload_f32(&self, dst: &mut Self::Buf, src: &[f32]);
        fn upload_ids(&self, dst: &mut Self::Ids, src: &[u32]);
        fn download(&self, src: &Self::Buf) -> Vec<f64>;
        fn fill(&self, dst: &mut Self::Buf, value: f64);
        fn fill_normal(&self, dst: &mut Self::Buf, key: &RngKey, scale: f64, zeroed: std::ops::Range<usize>);
        fn add(&self, a: &Self::Buf, b: &Self::Buf, out: &mut Self::Buf);
        fn add_assign(&self, acc: &mut Self::Buf, x: &Self::Buf);
        fn scale(&self, buf: &mut Self::Buf, factor: f64);
        fn sum_squares(&self, buf: &Self::Buf) -> f64;
        fn matmul(&self, shape: &MatmulShape, alpha: f64, a: &Self::Buf, b: &Self::Buf, beta: f64, c: &mut Self::Buf);
        fn bias_add(&self, out: &mut Self::Buf, bias: &Self::Buf, n: usize);
        fn bias_backward(&self, dout: &Self::Buf, dbias: &mut Self::Buf, n: usize);
        fn layernorm_forward(&self, x: &Self::Buf, gamma: &Self::Buf, beta: &Self::Buf, n: usize, eps: f64, out: &mut Self::Buf, mean: &mut Self::Buf, rstd: &mut Self::Buf);
        fn layernorm_backward(&self, dout: &Self::Buf, x: &Self::Buf, gamma: &Self::Buf, mean: &Self::Buf, rstd: &Self::Buf, n: usize, dx: &mut Self::Buf, dgamma: &mut Self::Buf, dbeta: &mut Self::Buf);
        fn permute_heads(&self, x: &Self::Buf, out: &mut Self::Buf, b: usize, s: usize, heads: usize);
        fn unpermute_heads(&self, x: &Self::Buf, out: &mut Self::Buf, b: usize, s: usize, heads: usize);
        fn softmax_forward(&self, scores: &Self::Buf, mask: &Self::Ids, b: usize, heads: usize, s: usize, scale: f64, probs: &mut Self::Buf);
        fn softmax_backward(&self, dprobs: &Self::Buf, probs: &Self::Buf, s: usize, scale: f64, dscores: &mut Self::Buf);
        fn gelu_forward(&self, x: &Self::Buf, out: &mut Self::Buf);
        fn gelu_backward(&self, x: &Self::Buf, dout: &Self::Buf, dx: &mut Self::Buf);
        fn gelu_backward_in_place(&self, x: &Self::Buf, d: &mut Self::Buf);
        fn tanh_forward(&self, x: &Self::Buf, out: &mut Self::Buf);
        fn tanh_backward(&self, out: &Self::Buf, dout: &Self::Buf, dx: &mut Self::Buf);
        fn relu_forward(&self, x: &Self::Buf, out: &mut Self::Buf);
        fn relu_backward(&self, out: &Self::Buf, dout: &Self::Buf, dx: &mut Self::Buf);
        fn dropout_forward(&self, x: &Self::Buf, out: &mut Self::Buf, p: f64, key: RngKey);
        fn dropout_backward(&self, dout: &Self::Buf, dx: &mut Self::Buf, p: f64, key: RngKey);
        fn embedding_forward(&self, ids: &Self::Ids, table: &Self::Buf, dim: usize, out: &mut Self::Buf, accumulate: bool);
        fn embedding_backward(&self, ids: &Self::Ids, dout: &Self::Buf, dim: usize, dtable: &mut Self::Buf, rows: Option<&mut RowSlots>);
        fn cls_forward(&self, x: &Self::Buf, out: &mut Self::Buf, b: usize, s: usize);
        fn cls_backward(&self, dout: &Self::Buf, dx: &mut Self::Buf, b: usize, s: usize);
        fn mean_pool(&self, x: &Self::Buf, mask: &Self::Ids, b: usize, s: usize, out: &mut Self::Buf);
        fn rel_pos_gather(&self, shape: &RelPosShape, alpha: f64, rel: &Self::Buf, idx: &Self::Ids, scores: &mut Self::Buf);
        fn rel_pos_scatter(&self, shape: &RelPosShape, alpha: f64, dscores: &Self::Buf, idx: &Self::Ids, drel: &mut Self::Buf);
        fn mask_rows(&self, x: &mut Self::Buf, mask: &Self::Ids, n: usize);
        fn cross_entropy_forward(&self, logits: &Self::Buf, targets: &LossTargets<'_, Self::Buf, Self::Ids>) -> f64;
        fn cross_entropy_backward(&self, logits: &Self::Buf, targets: &LossTargets<'_, Self::Buf, Self::Ids>, dloss: f64, dlogits: &mut Self::Buf);
        fn adamw(&self, param: &mut Self::Buf, grad: &Self::Buf, m: &mut Self::Buf, v: &mut Self::Buf, step: &AdamWStep);
        fn sgd(&self, param: &mut Self::Buf, grad: &Self::Buf, lr: f64);
        fn attention_forward(&self, shape: &AttentionShape, x: &AttentionInputs<'_, Self::Buf, Self::Ids>, out: &mut Self::Buf, lse: &mut Self::Buf);
        fn attention_backward(&self, shape: &AttentionShape, x: &AttentionInputs<'_, Self::Buf, Self::Ids>, out: &Self::Buf, dout: &Self::Buf, lse: &Self::Buf, delta: &mut Self::Buf, dq: &mut Self::Buf, dk: &mut Self::Buf, dv: &mut Self::Buf);
        fn bias_gelu_forward(&self, pre: &mut Self::Buf, bias: &Self::Buf, out: &mut Self::Buf);
        fn residual_layernorm_forward(&self, sum: &mut Self::Buf, bias: &Self::Buf, residual: &Self::Buf, dropout: f64, key: Option<RngKey>, gamma: &Self::Buf, beta: &Self::Buf, eps: f64, out: &mut Self::Buf, mean: &mut Self::Buf, rstd: &mut Self::Buf);
        fn residual_layernorm_backward(&self, dout: &Self::Buf, sum: &Self::Buf, gamma: &Self::Buf, mean: &Self::Buf, rstd: &Self::Buf, dropout: f64, key: Option<RngKey>, d_sum: &mut Self::Buf, d_branch: Option<&mut Self::Buf>, dgamma: &mut Self::Buf, dbeta: &mut Self::Buf);
        fn adamw_all(&self, params: &mut [Self::Buf], grads: &[Self::Buf], m: &mut [Self::Buf], v: &mut [Self::Buf], decay: &[bool], step: &AdamWStep, grad_scale: f64, clip: Option<f64>, sparse: Option<SparseRows<'_, Self::Ids>>);
    }
}
