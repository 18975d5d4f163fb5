//! A backend that computes nothing but takes every buffer from `gpu-mem`'s
//! caching allocator over a simulated device: the real training loop's
//! real allocation sequence through the real allocator (rounding, pools,
//! segments, the lease as a [`MemoryLimit`]), without a GPU.
//!
//! An allocator out-of-memory becomes the same [`OutOfMemory`] unwind as a
//! tracker limit (see [`crate::memory::oom`]), so [`crate::train::train`]
//! retries with smaller micro-batches exactly as it would on a device. The
//! tracker still counts requested bytes (the memory plan's figure) and
//! injects faults ([`MemTracker::fail_nth_allocation`]).

use std::sync::Arc;

use gpu_mem::{
    AllocError, CachingAllocator, Config, DeviceBuffer, MemoryLimit, SimDevice, StreamId,
};

use super::plan::compute_nothing;
use super::{AdamWStep, Backend, DeviceFailure, MatmulPrecision, MatmulShape, RelPosShape};
use crate::memory::{Allocation, BufKind, MemTracker, OutOfMemory, StepBackend};
use crate::rng::RngKey;

/// Page size of the simulated device (CUDA's usual granularity).
pub const SIM_GRANULARITY: usize = 2 << 20;

/// A buffer that is a block of simulated device memory and nothing else.
#[derive(Debug)]
pub struct SimBuf {
    len: usize,
    _block: DeviceBuffer<SimDevice>,
    _alloc: Allocation,
}

pub struct SimBackend {
    allocator: Arc<CachingAllocator<SimDevice>>,
    tracker: Arc<MemTracker>,
    float_bytes: usize,
    matmul_precision: MatmulPrecision,
    /// The buffers of the backend this one stands for, held while it lives.
    backend_buffers: Vec<SimBuf>,
    /// Calls of `take_failure` so far, and the injected failure with the
    /// call that reports it.
    failure: std::sync::Mutex<(u64, Option<(u64, DeviceFailure)>)>,
    /// A failure every check reports from now on (a lost context).
    sticky: std::sync::Mutex<Option<DeviceFailure>>,
}

impl SimBackend {
    /// A fresh simulated device of `capacity` bytes with an allocator
    /// configured by `config` (its `limit` is the lease) and buffers of
    /// `float_bytes` per element.
    pub fn new(capacity: usize, config: Config, float_bytes: usize) -> Result<Self, AllocError> {
        let device = SimDevice::new(capacity, SIM_GRANULARITY);
        let allocator = Arc::new(CachingAllocator::new(device, config)?);
        Ok(Self::with_allocator(allocator, float_bytes))
    }

    /// PyTorch's allocator defaults, expandable segments on or off, and
    /// `limit` bytes as the lease.
    pub fn with_limit(
        capacity: usize,
        limit: Option<usize>,
        expandable_segments: bool,
        float_bytes: usize,
    ) -> Result<Self, AllocError> {
        let config = Config {
            expandable_segments,
            limit: limit.map(MemoryLimit::Bytes),
            ..Config::default()
        };
        Self::new(capacity, config, float_bytes)
    }

    /// Buffers from an existing allocator (e.g. one shared by several
    /// simulated trials on one device).
    pub fn with_allocator(allocator: Arc<CachingAllocator<SimDevice>>, float_bytes: usize) -> Self {
        Self {
            allocator,
            tracker: MemTracker::new(false),
            float_bytes,
            matmul_precision: MatmulPrecision::Fp32,
            backend_buffers: Vec::new(),
            failure: std::sync::Mutex::new((0, None)),
            sticky: std::sync::Mutex::new(None),
        }
    }

    /// The simulated device standing for `backend` with matrix products at
    /// `precision`: `backend`'s own buffers (the CUDA backend's cuBLAS
    /// workspace and kernel scratch) are allocated now, as that backend
    /// allocates them when it starts, and held while this one lives. An
    /// error when the lease cannot hold them.
    pub fn standing_for(
        mut self,
        backend: StepBackend,
        precision: MatmulPrecision,
    ) -> Result<Self, OutOfMemory> {
        self.matmul_precision = precision;
        for b in backend.buffers() {
            let buf = crate::memory::catch_oom(|| {
                self.buffer(b.name, BufKind::Backend, b.bytes, b.bytes)
            })?;
            self.backend_buffers.push(buf);
        }
        Ok(self)
    }

    /// Makes the device lose its context, as a device-side assert or a
    /// trapped kernel does on a GPU: every check from now on reports
    /// `failure` (with `sticky` set), and nothing recovers in this
    /// process.
    pub fn lose_context(&self, failure: DeviceFailure) {
        *self.sticky.lock().unwrap_or_else(|p| p.into_inner()) = Some(DeviceFailure {
            sticky: true,
            ..failure
        });
    }

    /// Fault injection: the `n`-th call of `take_failure` from now (1 = the
    /// next) reports `failure`, as a device would after a failed launch.
    pub fn fail_nth_check(&self, n: u64, failure: DeviceFailure) {
        let mut f = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        let at = f.0 + n.max(1);
        f.1 = Some((at, failure));
    }

    pub fn allocator(&self) -> &Arc<CachingAllocator<SimDevice>> {
        &self.allocator
    }

    /// Counts requested bytes (no limit: the allocator enforces the lease)
    /// and holds the fault injection.
    pub fn tracker(&self) -> &Arc<MemTracker> {
        &self.tracker
    }

    fn buffer(&self, name: &str, kind: BufKind, len: usize, bytes: usize) -> SimBuf {
        let alloc = self.tracker.allocate(name, kind, bytes);
        let block = match self.allocator.allocate_buffer(bytes, StreamId(0)) {
            Ok(block) => block,
            Err(AllocError::OutOfMemory(oom)) => {
                OutOfMemory::from_allocator(name, bytes, &oom).raise()
            }
            // The simulated device fails only by running out of memory; any
            // other error is a bug in the allocator or in this backend.
            Err(e) => panic!("simulated device allocation of `{name}` failed: {e}"),
        };
        SimBuf {
            len,
            _block: block,
            _alloc: alloc,
        }
    }
}

impl Backend for SimBackend {
    type Buf = SimBuf;
    type Ids = SimBuf;

    fn float_bytes(&self) -> usize {
        self.float_bytes
    }
    fn holds_values(&self) -> bool {
        false
    }
    fn matmul_precision(&self) -> MatmulPrecision {
        self.matmul_precision
    }
    fn take_failure(&self) -> Result<(), DeviceFailure> {
        if let Some(lost) = &*self.sticky.lock().unwrap_or_else(|p| p.into_inner()) {
            return Err(lost.clone());
        }
        let mut f = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        f.0 += 1;
        match f.1.take() {
            Some((at, failure)) if at == f.0 => Err(failure),
            other => {
                f.1 = other;
                Ok(())
            }
        }
    }
    fn alloc(&self, name: &str, kind: BufKind, len: usize) -> SimBuf {
        self.buffer(name, kind, len, len * self.float_bytes)
    }
    fn alloc_ids(&self, name: &str, len: usize) -> SimBuf {
        self.buffer(name, BufKind::Input, len, len * 4)
    }
    fn len(&self, buf: &SimBuf) -> usize {
        buf.len
    }
    compute_nothing!(SimBuf);
}
