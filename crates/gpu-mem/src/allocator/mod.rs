//! The caching allocator: one instance per device, generic over the backend.

mod blocks;
mod check;
mod free_index;
mod state;

use crate::backend::{Backend, DevicePtr, StreamId};
use crate::config::{Config, MemoryLimit, PoolKind};
use crate::error::AllocError;
use crate::snapshot::{BlockSnapshot, BlockStateName, SegmentSnapshot, Snapshot, TraceEvent};
use crate::stats::{Fragmentation, MemoryStats};
use blocks::BlockState;
use state::State;
use std::sync::{Arc, Mutex, MutexGuard};

pub use check::InvariantViolation;

/// A block handed out by [`CachingAllocator::allocate`]. Give it back with
/// [`CachingAllocator::free`]; it is not `Clone`, so it is freed once. For a
/// block freed on drop, use [`CachingAllocator::allocate_buffer`].
#[derive(Debug, PartialEq, Eq)]
#[must_use = "an allocation that is never freed stays allocated"]
pub struct Allocation {
    ptr: DevicePtr,
    size: usize,
    requested: usize,
    stream: StreamId,
    index: u32,
    generation: u32,
    /// The id of the allocator that made it.
    allocator: u32,
}

impl Allocation {
    /// The device address.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }
    /// Bytes asked for.
    pub fn len(&self) -> usize {
        self.requested
    }
    /// Whether zero bytes were asked for (the block is still 512 bytes).
    pub fn is_empty(&self) -> bool {
        self.requested == 0
    }
    /// Bytes of the block (the request rounded up).
    pub fn block_size(&self) -> usize {
        self.size
    }
    /// The stream it was allocated on.
    pub fn stream(&self) -> StreamId {
        self.stream
    }
}

/// A caching device-memory allocator with PyTorch's rules; see the crate doc.
pub struct CachingAllocator<B: Backend> {
    backend: B,
    state: Mutex<State<B>>,
    expandable_fallback: Option<String>,
}

impl<B: Backend> CachingAllocator<B> {
    /// An allocator taking memory from `backend`. A configuration that
    /// [`Config::validate`] refuses is [`AllocError::Invalid`].
    pub fn new(backend: B, config: Config) -> Result<Self, AllocError> {
        config.validate()?;
        // Segments are cut and mapped in whole pages of this size.
        let granularity = backend.granularity();
        if !granularity.is_power_of_two() {
            return Err(AllocError::Invalid(format!(
                "the backend's granularity is {granularity} bytes: it must be a power of two"
            )));
        }
        let total = backend.mem_info()?.total;
        let mut config = config;
        let mut expandable_fallback = None;
        if config.expandable_segments
            && let Some(reason) = backend.virtual_memory_unsupported()
        {
            // The user asked for expandable segments and gets classic ones:
            // a warning for their log, and `expandable_fallback` for code.
            tracing::warn!(
                "gpu-mem: expandable segments are unavailable ({reason}); using classic segments"
            );
            config.expandable_segments = false;
            expandable_fallback = Some(reason);
        }
        Ok(CachingAllocator {
            state: Mutex::new(State::new(config, total)),
            backend,
            expandable_fallback,
        })
    }

    /// Why expandable segments were asked for but classic segments are used
    /// (the device has no virtual memory management), if so.
    pub fn expandable_fallback(&self) -> Option<&str> {
        self.expandable_fallback.as_deref()
    }

    #[inline]
    fn lock(&self) -> MutexGuard<'_, State<B>> {
        // Every mutation keeps the state consistent before anything that can
        // panic, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The device this allocator takes memory from.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The configuration in use: the one given, with `expandable_segments`
    /// off if the device fell back to classic segments, and the limit last
    /// set by [`Self::set_limit`].
    pub fn config(&self) -> Config {
        self.lock().config.clone()
    }

    /// Allocate `size` bytes for use on `stream`: from the cache when a
    /// block fits, else from new device memory; on out-of-memory the cache
    /// is freed and the request retried once before failing.
    #[inline]
    pub fn allocate(&self, size: usize, stream: StreamId) -> Result<Allocation, AllocError> {
        let mut st = self.lock();
        let index = st.malloc(&self.backend, size, stream)?;
        let b = st.blocks_get(index);
        Ok(Allocation {
            ptr: b.addr,
            size: b.size,
            requested: size,
            stream,
            index,
            generation: b.generation,
            allocator: st.id,
        })
    }

    /// Return an allocation to the cache (never to the device, unless
    /// caching is off). If other streams used it (`record_stream`), it is
    /// reused only after their work queued so far has finished.
    #[inline]
    pub fn free(&self, allocation: Allocation) -> Result<(), AllocError> {
        let mut st = self.lock();
        st.validate(&allocation)?;
        st.free(&self.backend, allocation.index)
    }

    /// Mark an allocation as used on `stream` too (PyTorch's
    /// `record_stream`): its memory is not reused until the work queued on
    /// `stream` at the time of the free has finished.
    pub fn record_stream(
        &self,
        allocation: &Allocation,
        stream: StreamId,
    ) -> Result<(), AllocError> {
        let mut st = self.lock();
        st.validate(allocation)?;
        st.record_stream(allocation.index, stream);
        Ok(())
    }

    /// Give cached memory back to the device (after waiting for pending
    /// cross-stream frees and, for expandable segments, their streams).
    pub fn empty_cache(&self) -> Result<(), AllocError> {
        let mut st = self.lock();
        st.release_cached(&self.backend)?;
        Ok(())
    }

    /// Set or clear this instance's memory limit. Memory already reserved
    /// beyond a lowered limit stays until freed and `empty_cache`d.
    pub fn set_limit(&self, limit: Option<MemoryLimit>) -> Result<(), AllocError> {
        if let Some(limit) = limit {
            limit.validate()?;
        }
        let total = self.backend.mem_info()?.total;
        let mut st = self.lock();
        st.config.limit = limit;
        st.limit = limit.map(|l| l.bytes(total));
        Ok(())
    }

    /// The current limit in bytes.
    pub fn limit_bytes(&self) -> Option<usize> {
        self.lock().limit
    }

    /// The counters of PyTorch's `memory_stats()`.
    pub fn stats(&self) -> MemoryStats {
        self.lock().stats.clone()
    }

    /// Reserved and allocated bytes now (cheaper than [`Self::stats`]).
    pub fn reserved_and_allocated(&self) -> (u64, u64) {
        let st = self.lock();
        (
            st.stats.reserved_bytes.all.current,
            st.stats.allocated_bytes.all.current,
        )
    }

    /// Set every peak to the current value.
    pub fn reset_peak(&self) {
        self.lock().stats.reset_peak();
    }

    /// Fragmentation of the cached memory.
    pub fn fragmentation(&self) -> Fragmentation {
        self.lock().fragmentation()
    }

    /// Every segment with its blocks, plus stats (serialisable to JSON).
    pub fn snapshot(&self) -> Snapshot {
        let st = self.lock();
        let mut segments: Vec<SegmentSnapshot> = st
            .segments
            .iter()
            .map(|(i, s)| {
                let blocks: Vec<BlockSnapshot> = st
                    .segment_blocks(i)
                    .into_iter()
                    .map(|(_, b)| BlockSnapshot {
                        address: b.addr,
                        size: b.size,
                        requested_size: b.requested,
                        state: match b.state {
                            BlockState::Allocated => BlockStateName::ActiveAllocated,
                            BlockState::Pending => BlockStateName::ActivePendingFree,
                            BlockState::Free => BlockStateName::Inactive,
                        },
                    })
                    .collect();
                SegmentSnapshot {
                    address: s.base,
                    total_size: s.size,
                    stream: s.stream,
                    segment_type: s.pool,
                    expandable: s.expandable,
                    reserved_address_range: s.va_size,
                    allocated_size: blocks
                        .iter()
                        .filter(|b| b.state == BlockStateName::ActiveAllocated)
                        .map(|b| b.size)
                        .sum(),
                    blocks,
                }
            })
            .collect();
        segments.sort_by_key(|s| s.address);
        Snapshot {
            segments,
            stats: st.stats.clone(),
            fragmentation: st.fragmentation(),
            limit: st.limit,
        }
    }

    /// Take the events recorded so far (empty unless `Config::record_trace`).
    pub fn take_trace(&self) -> Vec<TraceEvent> {
        self.lock()
            .trace
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Check every internal invariant and recount the stats from scratch;
    /// `is_backed(addr, len)` says whether the backend has memory there.
    pub fn check_invariants(
        &self,
        is_backed: impl Fn(DevicePtr, usize) -> bool,
    ) -> Result<(), InvariantViolation> {
        check::check(&self.lock(), is_backed)
    }

    /// Allocate a buffer that frees itself on drop.
    pub fn allocate_buffer(
        self: &Arc<Self>,
        size: usize,
        stream: StreamId,
    ) -> Result<DeviceBuffer<B>, AllocError> {
        let allocation = self.allocate(size, stream)?;
        Ok(DeviceBuffer {
            allocator: Arc::clone(self),
            allocation: Some(allocation),
        })
    }

    /// The pool a request of `size` bytes is served from.
    pub fn pool_for(&self, size: usize) -> PoolKind {
        let divisions = self.lock().config.roundup_power2_divisions;
        PoolKind::for_size(crate::config::round_size(size, divisions))
    }
}

impl<B: Backend> Drop for CachingAllocator<B> {
    /// Everything goes back to the device; handles still held are dangling.
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        st.release_all(&self.backend);
    }
}

impl<B: Backend> State<B> {
    #[inline]
    fn blocks_get(&self, index: u32) -> &blocks::Block {
        self.blocks.get(index)
    }

    #[inline]
    fn validate(&self, a: &Allocation) -> Result<(), AllocError> {
        match self.blocks.lookup(a.index, a.generation) {
            Some(b)
                if b.state == BlockState::Allocated
                    && b.addr == a.ptr
                    && a.allocator == self.id =>
            {
                Ok(())
            }
            _ => Err(AllocError::Invalid(format!(
                "allocation at {:#x} is not live in this allocator (freed twice, or from another instance)",
                a.ptr
            ))),
        }
    }
}

/// An allocation that returns to its allocator's cache when dropped.
pub struct DeviceBuffer<B: Backend> {
    allocator: Arc<CachingAllocator<B>>,
    allocation: Option<Allocation>,
}

impl<B: Backend> DeviceBuffer<B> {
    fn inner(&self) -> &Allocation {
        self.allocation.as_ref().expect("present until drop")
    }
    /// The device address.
    pub fn ptr(&self) -> DevicePtr {
        self.inner().ptr()
    }
    /// Bytes asked for.
    pub fn len(&self) -> usize {
        self.inner().len()
    }
    /// Whether zero bytes were asked for.
    pub fn is_empty(&self) -> bool {
        self.inner().is_empty()
    }
    /// The stream it was allocated on.
    pub fn stream(&self) -> StreamId {
        self.inner().stream()
    }
    /// The allocation it owns (its block size, stream and address).
    pub fn allocation(&self) -> &Allocation {
        self.inner()
    }
    /// The allocator it returns to when dropped.
    pub fn allocator(&self) -> &Arc<CachingAllocator<B>> {
        &self.allocator
    }
    /// See [`CachingAllocator::record_stream`].
    pub fn record_stream(&self, stream: StreamId) -> Result<(), AllocError> {
        self.allocator.record_stream(self.inner(), stream)
    }
}

impl<B: Backend> Drop for DeviceBuffer<B> {
    fn drop(&mut self) {
        if let Some(a) = self.allocation.take() {
            // A live buffer's handle is always valid, so only a device error
            // can fail here (recording a cross-stream event, or freeing in
            // no-caching mode), and a destructor cannot report it.
            let _ = self.allocator.free(a);
        }
    }
}

impl<B: Backend> std::fmt::Debug for DeviceBuffer<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("allocation", &self.allocation)
            .finish()
    }
}
