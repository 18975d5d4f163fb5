//! A caching CUDA memory allocator with expandable segments, exact
//! statistics, fragmentation metrics and per-instance memory limits.
//!
//! Long studies die of fragmentation and of one trial taking the memory
//! another needed. This allocator caches device memory the way PyTorch's does,
//! can grow segments in place on CUDA's virtual-memory API so that freed
//! memory is not stranded between live blocks, and reports every byte.
//!
//! It deliberately does not know about models, trials or storage; it is
//! usable by any cudarc program, and every rule is testable without a GPU on a
//! simulated device.
//!
//! # Example
//!
//! One allocator per device, a lease for one trial, buffers that return to
//! the cache on drop, and an out-of-memory report that says why. On a GPU,
//! `gpu_mem::cuda::CudaDevice::new(0)?` (feature `cuda`) takes the place of
//! the simulated device, and [`DevicePtr`] is the `CUdeviceptr` to hand to
//! a kernel launch.
//!
//! ```
//! use gpu_mem::{CachingAllocator, Config, MemoryLimit, SimDevice, StreamId};
//! use std::sync::Arc;
//!
//! # fn main() -> Result<(), gpu_mem::AllocError> {
//! const MIB: usize = 1 << 20;
//! // A 1 GiB device with 2 MiB pages; expandable segments grow in place.
//! let device = SimDevice::new(1 << 30, 2 * MIB);
//! let alloc = Arc::new(CachingAllocator::new(device, Config::expandable())?);
//! alloc.set_limit(Some(MemoryLimit::Bytes(256 * MIB)))?; // this trial's lease
//!
//! let stream = StreamId(0);
//! let weights = alloc.allocate_buffer(100 * MIB, stream)?;
//! {
//!     let activations = alloc.allocate_buffer(120 * MIB, stream)?;
//!     assert_ne!(activations.ptr(), weights.ptr());
//! } // back in the cache, not to the device
//! let stats = alloc.stats();
//! assert_eq!(stats.allocated_bytes.all.current, 100 * MIB as u64);
//! assert_eq!(stats.allocated_bytes.all.peak, 220 * MIB as u64);
//!
//! // Past the lease: a typed report instead of a dead process.
//! let err = alloc.allocate_buffer(200 * MIB, stream).err().expect("over the lease");
//! let oom = err.as_oom().expect("an out-of-memory report");
//! assert_eq!(oom.limit, Some(256 * MIB));
//! println!("{oom}"); // what is allocated, cached and fragmented, and what to change
//! # Ok(())
//! # }
//! ```
//!
//! # The seams
//!
//! - [`Backend`] is the physical-memory seam: classic allocations, reserved
//!   address ranges with pages mapped at the device granularity, streams and
//!   events. [`SimDevice`] is a deterministic host-side model with injectable
//!   failures; `CudaDevice` (feature `cuda`) is the real driver API through
//!   cudarc's `sys` bindings, loaded at run time.
//! - [`CachingAllocator`] is generic over the backend, `Send + Sync`, one
//!   instance per device. Its rules are PyTorch's (see [`config`]): 512-byte
//!   rounding, small pool (<= 1 MiB, 2 MiB segments), large pool (20 MiB or
//!   request-sized segments), best fit by (stream, size), split and merge,
//!   `max_split_size`, power-of-two rounding divisions, a garbage-collection
//!   threshold, cross-stream reuse through `record_stream` and events, and
//!   expandable segments (one segment per (stream, pool) growing in place).
//! - [`MemoryLimit`] caps what one instance reserves: the lease a trial gets.
//!   Hitting it, or the device's end, after freeing the cache gives a typed
//!   [`OutOfMemory`] whose message says what the memory is doing and what to
//!   change.
//! - [`MemoryStats`] has the counters of PyTorch's `memory_stats()`;
//!   [`Fragmentation`], [`Snapshot`] and the optional [`TraceEvent`] trace
//!   export to JSON.
//! - [`trace`] replays JSON-lines allocation traces through any
//!   configuration.
//! - The `testing` feature adds test and research tools: a generator of a
//!   multi-trial BERT fine-tuning trace (`trace::bert`) and random-operation
//!   scenarios checked after every step (`scenario`, for the property tests
//!   and the fuzz target).
//!
//! # What it does not do
//!
//! It does not pick batch sizes, predict peaks or schedule trials (the
//! trainer and the study runner do, using these numbers). It does not share
//! memory between processes (no IPC handles), does not unmap free pages in
//! the middle of an expandable segment (only its free tail), and does not
//! implement PyTorch's private memory pools for CUDA graphs. It prints
//! nothing: expandable segments refused by the device are a `tracing`
//! warning and [`CachingAllocator::expandable_fallback`].

#![warn(missing_docs)]

pub mod allocator;
pub mod backend;
pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod error;
pub mod libs;
#[cfg(feature = "testing")]
pub mod scenario;
pub mod sim;
pub mod snapshot;
pub mod stats;
pub mod trace;

pub use allocator::{Allocation, CachingAllocator, DeviceBuffer, InvariantViolation};
pub use backend::{Backend, BackendError, DevicePtr, MemInfo, StreamId};
pub use config::{Config, MemoryLimit, PoolKind};
pub use error::{AllocError, OomCause, OutOfMemory, human_bytes};
pub use sim::SimDevice;
pub use snapshot::{Snapshot, TraceEvent};
pub use stats::{Fragmentation, MemoryStats, Stat, StatArray};
