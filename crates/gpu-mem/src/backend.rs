//! The physical-memory seam: what the caching allocator needs from a device.
//!
//! Two kinds of memory are asked for. Classic segments are whole allocations
//! (`cuMemAlloc`/`cuMemFree`). Expandable segments are a reserved virtual
//! address range whose pages are mapped and unmapped at the device's
//! granularity (`cuMemAddressReserve`, `cuMemCreate` + `cuMemMap` +
//! `cuMemSetAccess`, `cuMemUnmap` + `cuMemRelease`). Streams are opaque ids;
//! events let a block freed on one stream wait for work queued on another.
//!
//! The allocator calls every method with its own lock held, so a backend only
//! needs to be internally consistent, not fast.

use serde::Serialize;
use std::fmt;

/// A device address (a `CUdeviceptr` on CUDA).
pub type DevicePtr = u64;

/// An opaque stream id. On CUDA it is the `CUstream` handle's value; `0` is
/// the legacy default stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct StreamId(pub u64);

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Free and total device memory as the driver reports them (`cuMemGetInfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MemInfo {
    /// Bytes free on the device (for every process).
    pub free: usize,
    /// The device's total memory in bytes.
    pub total: usize,
}

/// A failed backend call. `OutOfMemory` is the only kind the allocator
/// recovers from (by freeing its cache and retrying).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The device has no room (or no address space) for the request.
    #[error("the device has no room for {requested} bytes")]
    OutOfMemory {
        /// Bytes asked for.
        requested: usize,
    },
    /// A driver call failed.
    #[error("{call} failed: {message}")]
    Driver {
        /// The driver function (`cuMemMap`).
        call: &'static str,
        /// The driver's error code (`CUDA_ERROR_...`), or what was wrong with its answer.
        message: String,
    },
    /// The CUDA driver library could not be loaded; the reason.
    #[error("the CUDA driver library (libcuda) could not be loaded: {0}")]
    NoDriver(String),
    /// A bad argument: a range that is not whole pages, outside every
    /// reservation, or not allocated.
    #[error("invalid backend request: {0}")]
    Invalid(String),
}

/// A device the caching allocator can take physical memory from.
///
/// Addresses handed out must never overlap while live. `map`/`unmap` work on
/// whole granularity pages inside a range returned by `reserve`.
pub trait Backend: Send + Sync + 'static {
    /// A recorded point in a stream's work queue.
    type Event: Send + 'static;

    /// Device total and free memory.
    fn mem_info(&self) -> Result<MemInfo, BackendError>;
    /// The page size of `map`/`unmap` (`cuMemGetAllocationGranularity`): a
    /// power of two ([`crate::CachingAllocator::new`] refuses another).
    fn granularity(&self) -> usize;

    /// Allocate a classic segment of exactly `size` bytes.
    fn malloc(&self, size: usize) -> Result<DevicePtr, BackendError>;
    /// Free a classic segment returned by `malloc`.
    fn free(&self, ptr: DevicePtr, size: usize) -> Result<(), BackendError>;

    /// Reserve a virtual address range of `size` bytes (a multiple of the
    /// granularity) with no physical memory behind it.
    fn reserve(&self, size: usize) -> Result<DevicePtr, BackendError>;
    /// Give back a reservation; every page in it must be unmapped.
    fn release_reservation(&self, base: DevicePtr, size: usize) -> Result<(), BackendError>;
    /// Back `[addr, addr + size)` with physical pages, readable and writable.
    fn map(&self, addr: DevicePtr, size: usize) -> Result<(), BackendError>;
    /// Unmap and release the pages of `[addr, addr + size)`.
    fn unmap(&self, addr: DevicePtr, size: usize) -> Result<(), BackendError>;

    /// Wait until all work queued on `stream` has finished.
    fn synchronize(&self, stream: StreamId) -> Result<(), BackendError>;
    /// Wait until all work on the device has finished (used when the
    /// allocator is dropped, when its streams may already be gone).
    fn synchronize_device(&self) -> Result<(), BackendError>;
    /// Record an event at the current end of `stream`'s queue.
    fn record_event(&self, stream: StreamId) -> Result<Self::Event, BackendError>;
    /// Whether the work before `event` has finished (does not block).
    fn event_done(&self, event: &Self::Event) -> Result<bool, BackendError>;
    /// Block until the work before `event` has finished.
    fn event_wait(&self, event: &Self::Event) -> Result<(), BackendError>;

    /// Why `reserve`/`map` cannot be used on this device, if they cannot
    /// (no virtual memory management, as under some sandboxes). The
    /// allocator then uses classic segments instead of expandable ones.
    fn virtual_memory_unsupported(&self) -> Option<String> {
        None
    }
}
