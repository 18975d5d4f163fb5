//! A backend that computes nothing but takes every buffer from `gpu-mem`'s
//! caching allocator over a simulated device: the real training loop's
//! real allocation sequence through the real allocator (rounding, pools,
//! segments, the lease as a [`MemoryLimit`]), without a GPU.
//!
//! An allocator out-of-memory is recorded as the backend's failure with
//! gpu-mem's typed report (see [`crate::memory::oom`]), so
//! [`crate::train::train`] retries with smaller micro-batches exactly as it
//! would on a device. The tracker counts requested bytes (the memory plan's
//! figure).

use std::sync::Arc;

use gpu_mem::{
    AllocError, CachingAllocator, Config, DeviceBuffer, MemoryLimit, SimDevice, StreamId,
};

use super::plan::compute_nothing;
use super::{
    AdamWStep, AttentionShape, Backend, Dtype, Failure, Kernels, MatmulPrecision, MatmulShape,
    RelPosShape, Storage,
};
use crate::memory::oom::RecordedOom;
use crate::memory::{Allocation, BufKind, MemTracker, OutOfMemory, StepBackend};
use crate::rng::RngKey;

/// Page size of the simulated device (CUDA's usual granularity).
pub const SIM_GRANULARITY: usize = 2 << 20;

/// A buffer that is a block of simulated device memory and nothing else
/// (no block when the allocation was refused).
#[derive(Debug)]
pub struct SimBuf {
    len: usize,
    dtype: Dtype,
    _memory: Option<(DeviceBuffer<SimDevice>, Allocation)>,
}

/// The simulated-device backend (see the module doc): buffers from a
/// caching allocator over a [`SimDevice`], operations that compute nothing.
pub struct SimBackend {
    allocator: Arc<CachingAllocator<SimDevice>>,
    tracker: Arc<MemTracker>,
    storage: Storage,
    kernels: Kernels,
    matmul_precision: MatmulPrecision,
    /// The buffers of the backend this one stands for, held while it lives.
    backend_buffers: Vec<SimBuf>,
    failure: RecordedOom,
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
        let master = if float_bytes == 8 {
            Dtype::F64
        } else {
            Dtype::F32
        };
        Self {
            allocator,
            tracker: MemTracker::new(false),
            storage: Storage::uniform(master),
            kernels: Kernels::Reference,
            matmul_precision: MatmulPrecision::Fp32,
            backend_buffers: Vec::new(),
            failure: RecordedOom::default(),
        }
    }

    /// The step `kernels` runs with buffers stored as `storage`.
    pub fn for_step(self, storage: Storage, kernels: Kernels) -> Self {
        Self {
            storage,
            kernels,
            ..self
        }
    }

    /// The simulated device standing for `backend` running `kernels` with
    /// matrix products at `precision` (and the stored types those imply,
    /// [`Storage::for_step`]): `backend`'s own buffers (the CUDA backend's cuBLAS
    /// workspace and kernel scratch) are allocated now, as that backend
    /// allocates them when it starts, and held while this one lives. A
    /// lease that cannot hold them is the backend's recorded
    /// out-of-memory, as for any buffer.
    pub fn standing_for(
        mut self,
        backend: StepBackend,
        precision: MatmulPrecision,
        kernels: Kernels,
    ) -> Self {
        self.matmul_precision = precision;
        self.kernels = kernels;
        self.storage = Storage::for_step(self.storage.master, precision, kernels);
        for b in backend.buffers() {
            // Raw bytes: the element type is nominal.
            let buf = self.buffer(b.name, BufKind::Backend, b.bytes, Dtype::F32, b.bytes);
            self.backend_buffers.push(buf);
        }
        self
    }

    /// The caching allocator every buffer comes from, with its statistics
    /// of reserved and allocated device bytes.
    pub fn allocator(&self) -> &Arc<CachingAllocator<SimDevice>> {
        &self.allocator
    }

    /// Counts requested bytes (no limit: the allocator enforces the lease).
    pub fn tracker(&self) -> &Arc<MemTracker> {
        &self.tracker
    }

    fn buffer(&self, name: &str, kind: BufKind, len: usize, dtype: Dtype, bytes: usize) -> SimBuf {
        // Nothing, as the CUDA backend allocates nothing for an empty
        // buffer (the allocator would round it up to a block).
        if self.failure.is_pending() || bytes == 0 {
            return SimBuf {
                len,
                dtype,
                _memory: None,
            };
        }
        let memory = self.tracker.allocate(name, kind, bytes).and_then(|alloc| {
            match self.allocator.allocate_buffer(bytes, StreamId(0)) {
                Ok(block) => Ok((block, alloc)),
                Err(AllocError::OutOfMemory(oom)) => {
                    Err(OutOfMemory::from_allocator(name, bytes, &oom))
                }
                // The simulated device fails only by running out of memory;
                // any other error is a bug in the allocator or in this backend.
                Err(e) => panic!("simulated device allocation of `{name}` failed: {e}"),
            }
        });
        SimBuf {
            len,
            dtype,
            _memory: memory.map_err(|oom| self.failure.record(oom)).ok(),
        }
    }
}

impl Backend for SimBackend {
    type Buf = SimBuf;
    type Ids = SimBuf;

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
    fn alloc(&self, name: &str, kind: BufKind, len: usize) -> SimBuf {
        let dtype = self.storage.of(kind);
        self.buffer(name, kind, len, dtype, len * dtype.bytes())
    }
    /// Ids are 4 bytes, as an f32.
    fn alloc_ids(&self, name: &str, len: usize) -> SimBuf {
        self.buffer(name, BufKind::Input, len, Dtype::F32, len * 4)
    }
    compute_nothing!(SimBuf);
}
