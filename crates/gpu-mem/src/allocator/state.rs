//! The allocator's bookkeeping and rules, run under the instance's lock.
//!
//! Free blocks are indexed per pool by `(stream, size, address)`, so a best
//! fit on the requesting stream is one ordered-map lookup. Everything that
//! can change a block's pool membership goes through `insert_free` and
//! `take_free`, which keep the inactive-split counters exact.

use super::blocks::{Block, BlockState, Blocks, NIL, Segment, Segments};
use super::free_index::FreeIndex;
use crate::backend::{Backend, BackendError, DevicePtr, StreamId};
use crate::config::{self, Config, LARGE_BUFFER, MIN_BLOCK_SIZE, PoolKind, SMALL_SIZE};
use crate::error::{AllocError, OomCause, OutOfMemory};
use crate::snapshot::{TraceAction, TraceEvent};
use crate::stats::{Fragmentation, MemoryStats};
use std::collections::{BTreeMap, VecDeque};

/// Free-index key `size << 64 | address`: within one stream's pool, best
/// fit is the first key at or after `size << 64`. One `u128` compares faster
/// than a tuple, which matters on the cached path.
#[inline]
pub(crate) fn free_key(size: usize, addr: DevicePtr) -> u128 {
    ((size as u128) << 64) | addr as u128
}

/// The free blocks of one stream, per pool (index by `PoolKind::index`).
pub(crate) struct StreamPools {
    pub stream: StreamId,
    pub free: [FreeIndex; 2],
}

/// Events recorded on one stream, each with the pending block waiting for
/// it, in recording order.
pub(crate) type EventQueue<E> = VecDeque<(E, u32)>;

/// Larger requests fail up front, as out of memory (256 TiB: no device
/// comes close, and every rounding below stays far from overflow).
pub(crate) const MAX_REQUEST: usize = 1 << 48;

/// The most address space one expandable segment reserves. A segment
/// reserves room for the whole device, but a simulated device may claim
/// more memory than a 64-bit address space holds; no real one has this much.
const MAX_SEGMENT_RANGE: usize = MAX_REQUEST;

/// Why growing failed, before it becomes an error.
enum GrowFailure {
    NoRoom(OomCause),
    Backend(BackendError),
}

pub(crate) struct State<B: Backend> {
    /// This allocator among the process's: an [`Allocation`] carries it, so
    /// one freed into another allocator is refused (simulated devices start
    /// at the same address, so addresses and block slots alone can match).
    ///
    /// [`Allocation`]: super::Allocation
    pub id: u32,
    pub config: Config,
    pub limit: Option<usize>,
    pub device_total: usize,
    pub blocks: Blocks,
    pub segments: Segments,
    /// Free blocks per stream (few streams: a linear search is fastest).
    pub streams: Vec<StreamPools>,
    /// The one expandable segment of each (stream, pool).
    pub expandable: BTreeMap<(StreamId, PoolKind), u32>,
    /// Events pending blocks wait for, per stream in recording order: a
    /// stream's events complete in that order, and one stream's unfinished
    /// work does not hold back another's. No queue is empty.
    pub pending: Vec<(StreamId, EventQueue<B::Event>)>,
    pub stats: MemoryStats,
    /// Garbage-collection clock: free-block lookups so far.
    pub gc_clock: u64,
    pub trace: Option<Vec<TraceEvent>>,
    pub trace_seq: u64,
}

impl<B: Backend> State<B> {
    pub fn new(config: Config, device_total: usize) -> Self {
        let limit = config.limit.map(|l| l.bytes(device_total));
        let trace = config.record_trace.then(Vec::new);
        static NEXT_ID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        State {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            config,
            limit,
            device_total,
            blocks: Blocks::default(),
            segments: Segments::default(),
            streams: Vec::new(),
            expandable: BTreeMap::new(),
            pending: Vec::new(),
            stats: MemoryStats::default(),
            gc_clock: 0,
            trace,
            trace_seq: 0,
        }
    }

    #[inline]
    fn expandable_mode(&self) -> bool {
        self.config.expandable_segments && self.config.caching
    }

    #[inline]
    fn record(&mut self, action: TraceAction, address: DevicePtr, size: usize, stream: StreamId) {
        if let Some(trace) = self.trace.as_mut() {
            trace.push(TraceEvent {
                seq: self.trace_seq,
                action,
                address,
                size,
                stream,
            });
            self.trace_seq += 1;
        }
    }

    // ----- the free index -------------------------------------------------

    /// The pools of `stream`, created on first use.
    #[inline]
    fn stream_slot(&mut self, stream: StreamId) -> usize {
        match self.streams.iter().position(|p| p.stream == stream) {
            Some(i) => i,
            None => {
                self.streams.push(StreamPools {
                    stream,
                    free: [FreeIndex::default(), FreeIndex::default()],
                });
                self.streams.len() - 1
            }
        }
    }

    /// The free index of (stream, pool), if the stream has one.
    pub fn free_map(&self, stream: StreamId, pool: PoolKind) -> Option<&FreeIndex> {
        self.streams
            .iter()
            .find(|p| p.stream == stream)
            .map(|p| &p.free[pool.index()])
    }

    /// Every free-index map.
    pub fn free_maps(&self) -> impl Iterator<Item = &FreeIndex> {
        self.streams.iter().flat_map(|p| p.free.iter())
    }

    #[inline]
    fn insert_free(&mut self, idx: u32) {
        let clock = self.gc_clock;
        let b = self.blocks.get_mut(idx);
        b.state = BlockState::Free;
        b.requested = 0;
        b.free_since = clock;
        let (stream, key, pool, size, split) = (
            b.stream,
            free_key(b.size, b.addr),
            b.pool,
            b.size,
            b.is_split(),
        );
        let slot = self.stream_slot(stream);
        self.streams[slot].free[pool.index()].insert(key, idx);
        if split {
            self.stats.inactive_split.increase(pool, 1);
            self.stats.inactive_split_bytes.increase(pool, size as u64);
        }
    }

    /// Remove a free block from its pool's index.
    #[inline]
    fn take_free(&mut self, idx: u32) {
        let b = self.blocks.get(idx);
        debug_assert_eq!(b.state, BlockState::Free);
        let (slot, key, pool) = (b.stream_slot as usize, free_key(b.size, b.addr), b.pool);
        let removed = self.streams[slot].free[pool.index()].remove(key);
        debug_assert_eq!(removed, Some(idx));
        self.after_take(idx);
    }

    #[inline]
    fn after_take(&mut self, idx: u32) {
        let b = self.blocks.get(idx);
        if b.is_split() {
            self.stats.inactive_split.decrease(b.pool, 1);
            self.stats
                .inactive_split_bytes
                .decrease(b.pool, b.size as u64);
        }
    }

    /// PyTorch's `get_free_block`: best fit on the stream, honouring
    /// `max_split_size` in classic mode.
    #[inline]
    fn find_free(&mut self, pool: PoolKind, stream: StreamId, size: usize) -> Option<u32> {
        if self.config.garbage_collection_threshold > 0.0 {
            self.gc_clock += 1;
        }
        let oversize_rules = match self.config.max_split_size {
            Some(max) if !self.expandable_mode() => Some(max),
            _ => None,
        };
        let slot = self.streams.iter().position(|p| p.stream == stream)?;
        let map = &mut self.streams[slot].free[pool.index()];
        let (key, idx) = map.first_at_or_after(free_key(size, 0))?;
        if let Some(max) = oversize_rules {
            let found = (key >> 64) as usize;
            if size < max && found >= max {
                return None;
            }
            if size >= max && found >= size + LARGE_BUFFER {
                return None;
            }
        }
        map.remove(key);
        self.after_take(idx);
        Some(idx)
    }

    fn should_split(&self, pool: PoolKind, block_size: usize, size: usize) -> bool {
        let remaining = block_size - size;
        if pool == PoolKind::Small || self.expandable_mode() {
            remaining >= MIN_BLOCK_SIZE
        } else {
            self.config.max_split_size.is_none_or(|max| size < max) && remaining > SMALL_SIZE
        }
    }

    // ----- allocation -----------------------------------------------------

    /// Allocate a block; returns its index (the caller reads addr/generation).
    pub fn malloc(
        &mut self,
        be: &B,
        requested: usize,
        stream: StreamId,
    ) -> Result<u32, AllocError> {
        let size = config::round_size(requested, self.config.roundup_power2_divisions);
        if requested > MAX_REQUEST {
            // Larger than any device: out of memory, as PyTorch reports it,
            // without emptying the cache for a retry that cannot succeed.
            return Err(self.out_of_memory(be, OomCause::Device, requested, size, stream));
        }
        if !self.pending.is_empty() {
            self.process_events(be)?;
        }
        let pool = PoolKind::for_size(size);
        // Without caching every request takes fresh device memory: a block
        // whose segment could not be given back is not reused.
        let cached = if self.config.caching {
            self.find_free(pool, stream, size)
        } else {
            None
        };
        let idx = match cached {
            Some(idx) => idx,
            None => self.grow_or_retry(be, pool, stream, size, requested)?,
        };
        Ok(self.hand_out(idx, size, requested))
    }

    fn grow_or_retry(
        &mut self,
        be: &B,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
        requested: usize,
    ) -> Result<u32, AllocError> {
        // Only now, when no cached block fits: collecting before the lookup
        // would give back the block the request reuses (PyTorch's order).
        if self.config.garbage_collection_threshold > 0.0 && self.limit.is_some() {
            self.garbage_collect(be, pool, stream)?;
        }
        match self.grow(be, pool, stream, size) {
            Ok(idx) => return Ok(idx),
            Err(GrowFailure::Backend(e)) => return Err(e.into()),
            Err(GrowFailure::NoRoom(_)) => {}
        }
        // Free the whole cache (after waiting for pending frees) and retry.
        self.stats.num_alloc_retries += 1;
        self.release_cached(be)?;
        // Waiting for pending frees may have produced a fitting block.
        if let Some(idx) = self.find_free(pool, stream, size) {
            return Ok(idx);
        }
        match self.grow(be, pool, stream, size) {
            Ok(idx) => Ok(idx),
            Err(GrowFailure::Backend(e)) => Err(e.into()),
            Err(GrowFailure::NoRoom(cause)) => {
                Err(self.out_of_memory(be, cause, requested, size, stream))
            }
        }
    }

    /// Count and trace a failed request; its report as an error.
    fn out_of_memory(
        &mut self,
        be: &B,
        cause: OomCause,
        requested: usize,
        rounded: usize,
        stream: StreamId,
    ) -> AllocError {
        self.stats.num_ooms += 1;
        self.record(TraceAction::Oom, 0, rounded, stream);
        AllocError::OutOfMemory(Box::new(
            self.oom_report(be, cause, requested, rounded, stream),
        ))
    }

    /// Turn a free block (out of the index) into an allocation of `size`.
    #[inline]
    fn hand_out(&mut self, idx: u32, size: usize, requested: usize) -> u32 {
        let (block_size, pool) = {
            let b = self.blocks.get(idx);
            (b.size, b.pool)
        };
        if self.should_split(pool, block_size, size) {
            let (addr, stream, segment, next) = {
                let b = self.blocks.get(idx);
                (b.addr, (b.stream, b.stream_slot), b.segment, b.next)
            };
            let rest = self.blocks.insert(
                addr + size as u64,
                block_size - size,
                stream,
                pool,
                segment,
                idx,
                next,
                BlockState::Free,
            );
            if next != NIL {
                self.blocks.get_mut(next).prev = rest;
            }
            let b = self.blocks.get_mut(idx);
            b.next = rest;
            b.size = size;
            self.insert_free(rest);
        }
        let b = self.blocks.get_mut(idx);
        b.state = BlockState::Allocated;
        b.requested = requested;
        let (size, pool, addr, stream) = (b.size as u64, b.pool, b.addr, b.stream);
        let s = &mut self.stats;
        s.allocation.increase(pool, 1);
        s.allocated_bytes.increase(pool, size);
        s.requested_bytes.increase(pool, requested as u64);
        s.active.increase(pool, 1);
        s.active_bytes.increase(pool, size);
        self.record(TraceAction::Alloc, addr, size as usize, stream);
        idx
    }

    fn limit_allows(&self, extra: usize) -> bool {
        self.limit.is_none_or(|limit| {
            self.stats.reserved_bytes.all.current + extra as u64 <= limit as u64
        })
    }

    fn grow(
        &mut self,
        be: &B,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
    ) -> Result<u32, GrowFailure> {
        if self.expandable_mode() {
            self.grow_expandable(be, pool, stream, size)
        } else {
            self.new_classic_segment(be, pool, stream, size)
        }
    }

    fn new_classic_segment(
        &mut self,
        be: &B,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
    ) -> Result<u32, GrowFailure> {
        let seg_size = if self.config.caching {
            config::segment_size(size)
        } else {
            size
        };
        if !self.limit_allows(seg_size) {
            return Err(GrowFailure::NoRoom(OomCause::Limit));
        }
        let base = match be.malloc(seg_size) {
            Ok(base) => base,
            Err(BackendError::OutOfMemory { .. }) => {
                return Err(GrowFailure::NoRoom(OomCause::Device));
            }
            Err(e) => return Err(GrowFailure::Backend(e)),
        };
        let seg = self.segments.insert(Segment {
            base,
            size: seg_size,
            va_size: 0,
            stream,
            pool,
            expandable: false,
            head: NIL,
        });
        let slot = self.stream_slot(stream) as u32;
        let idx = self.blocks.insert(
            base,
            seg_size,
            (stream, slot),
            pool,
            seg,
            NIL,
            NIL,
            BlockState::Free,
        );
        self.segments.get_mut(seg).head = idx;
        self.stats.segment.increase(pool, 1);
        self.stats.reserved_bytes.increase(pool, seg_size as u64);
        self.stats.num_device_alloc += 1;
        self.record(TraceAction::SegmentAlloc, base, seg_size, stream);
        Ok(idx)
    }

    /// The last block of a segment (NIL when nothing is mapped).
    fn tail_of(&self, seg: u32) -> u32 {
        let mut idx = self.segments.get(seg).head;
        if idx == NIL {
            return NIL;
        }
        while self.blocks.get(idx).next != NIL {
            idx = self.blocks.get(idx).next;
        }
        idx
    }

    /// Map pages at the end of the (stream, pool) segment until its free
    /// tail holds `size` bytes; returns that tail block, out of the index.
    fn grow_expandable(
        &mut self,
        be: &B,
        pool: PoolKind,
        stream: StreamId,
        size: usize,
    ) -> Result<u32, GrowFailure> {
        let gran = be.granularity();
        let seg = match self.expandable.get(&(stream, pool)) {
            Some(&seg) => seg,
            None => {
                let va_size = self
                    .device_total
                    .min(MAX_SEGMENT_RANGE)
                    .div_ceil(gran)
                    .max(1)
                    .checked_mul(gran)
                    .ok_or(GrowFailure::NoRoom(OomCause::Device))?;
                let base = be.reserve(va_size).map_err(|e| match e {
                    BackendError::OutOfMemory { .. } => GrowFailure::NoRoom(OomCause::Device),
                    e => GrowFailure::Backend(e),
                })?;
                let seg = self.segments.insert(Segment {
                    base,
                    size: 0,
                    va_size,
                    stream,
                    pool,
                    expandable: true,
                    head: NIL,
                });
                self.expandable.insert((stream, pool), seg);
                self.stats.segment.increase(pool, 1);
                seg
            }
        };
        let tail = self.tail_of(seg);
        let tail_free = tail != NIL && self.blocks.get(tail).state == BlockState::Free;
        let have = if tail_free {
            self.blocks.get(tail).size
        } else {
            0
        };
        debug_assert!(have < size, "a fitting free tail is found before growing");
        let (base, mapped, va_size) = {
            let s = self.segments.get(seg);
            (s.base, s.size, s.va_size)
        };
        // Pages that would not fit the reserved range (or the arithmetic).
        let map_bytes = (size - have)
            .checked_next_multiple_of(gran)
            .filter(|&bytes| mapped.checked_add(bytes).is_some_and(|end| end <= va_size))
            .ok_or(GrowFailure::NoRoom(OomCause::Device))?;
        if !self.limit_allows(map_bytes) {
            return Err(GrowFailure::NoRoom(OomCause::Limit));
        }
        let at = base + mapped as u64;
        match be.map(at, map_bytes) {
            Ok(()) => {}
            Err(BackendError::OutOfMemory { .. }) => {
                return Err(GrowFailure::NoRoom(OomCause::Device));
            }
            Err(e) => return Err(GrowFailure::Backend(e)),
        }
        self.segments.get_mut(seg).size += map_bytes;
        self.stats.reserved_bytes.increase(pool, map_bytes as u64);
        self.stats.num_device_alloc += 1;
        self.record(TraceAction::SegmentMap, at, map_bytes, stream);
        if tail_free {
            self.take_free(tail);
            self.blocks.get_mut(tail).size += map_bytes;
            Ok(tail)
        } else {
            let slot = self.stream_slot(stream) as u32;
            let idx = self.blocks.insert(
                at,
                map_bytes,
                (stream, slot),
                pool,
                seg,
                tail,
                NIL,
                BlockState::Free,
            );
            if tail == NIL {
                self.segments.get_mut(seg).head = idx;
            } else {
                self.blocks.get_mut(tail).next = idx;
            }
            Ok(idx)
        }
    }

    // ----- freeing --------------------------------------------------------

    /// The caller frees an allocation (already validated).
    pub fn free(&mut self, be: &B, idx: u32) -> Result<(), AllocError> {
        // Record the cross-stream events first: if that fails, nothing has
        // changed and the allocation is still live.
        let mut events = Vec::new();
        for &use_stream in &self.blocks.get(idx).stream_uses {
            events.push((use_stream, be.record_event(use_stream)?));
        }
        let b = self.blocks.get_mut(idx);
        b.generation = b.generation.wrapping_add(1);
        b.stream_uses.clear();
        let (size, requested, pool, addr, stream) =
            (b.size as u64, b.requested as u64, b.pool, b.addr, b.stream);
        let s = &mut self.stats;
        s.allocation.decrease(pool, 1);
        s.allocated_bytes.decrease(pool, size);
        s.requested_bytes.decrease(pool, requested);
        if events.is_empty() {
            self.record(TraceAction::Free, addr, size as usize, stream);
            return Ok(self.free_block(be, idx)?);
        }
        // Used on other streams: reusable once their queued work is done.
        self.record(TraceAction::FreeRequested, addr, size as usize, stream);
        let b = self.blocks.get_mut(idx);
        b.state = BlockState::Pending;
        b.requested = 0;
        b.pending_events = events.len() as u32;
        for (use_stream, event) in events {
            match self.pending.iter_mut().find(|(s, _)| *s == use_stream) {
                Some((_, queue)) => queue.push_back((event, idx)),
                None => self
                    .pending
                    .push((use_stream, VecDeque::from([(event, idx)]))),
            }
        }
        Ok(())
    }

    /// Return an allocated or pending block to its pool, merging
    /// neighbours; without caching, its segment goes back to the device.
    fn free_block(&mut self, be: &B, mut idx: u32) -> Result<(), BackendError> {
        let (size, pool, segment) = {
            let b = self.blocks.get(idx);
            (b.size as u64, b.pool, b.segment)
        };
        self.stats.active.decrease(pool, 1);
        self.stats.active_bytes.decrease(pool, size);
        let prev = self.blocks.get(idx).prev;
        if prev != NIL && self.blocks.get(prev).state == BlockState::Free {
            self.take_free(prev);
            self.absorb_next(prev);
            idx = prev;
        }
        let next = self.blocks.get(idx).next;
        if next != NIL && self.blocks.get(next).state == BlockState::Free {
            self.take_free(next);
            self.absorb_next(idx);
        }
        self.insert_free(idx);
        if !self.config.caching {
            self.release_if_whole(be, segment)?;
        }
        Ok(())
    }

    /// Merge `idx`'s next block into it and drop the next block's slot.
    fn absorb_next(&mut self, idx: u32) {
        let next = self.blocks.get(idx).next;
        let (next_size, next_next) = {
            let n = self.blocks.get(next);
            (n.size, n.next)
        };
        let b = self.blocks.get_mut(idx);
        b.size += next_size;
        b.next = next_next;
        if next_next != NIL {
            self.blocks.get_mut(next_next).prev = idx;
        }
        self.blocks.remove(next);
    }

    /// Complete pending frees whose events are done: each stream's in
    /// order, up to its first unfinished event.
    pub fn process_events(&mut self, be: &B) -> Result<(), BackendError> {
        let mut i = 0;
        while i < self.pending.len() {
            let queue = &mut self.pending[i].1;
            let (event, _) = queue.front().expect("pending queues are never empty");
            if !be.event_done(event)? {
                i += 1;
                continue;
            }
            let (_, idx) = queue.pop_front().expect("front exists");
            if queue.is_empty() {
                self.pending.swap_remove(i);
            }
            self.event_completed(be, idx)?;
        }
        Ok(())
    }

    fn event_completed(&mut self, be: &B, idx: u32) -> Result<(), BackendError> {
        let b = self.blocks.get_mut(idx);
        b.pending_events -= 1;
        if b.pending_events == 0 {
            let (addr, size, stream) = (b.addr, b.size, b.stream);
            self.record(TraceAction::Free, addr, size, stream);
            self.free_block(be, idx)?;
        }
        Ok(())
    }

    /// Wait for every pending free, then complete it. An event is dropped
    /// only once waited for: after a failed wait its block stays pending,
    /// and the next call waits again.
    fn wait_all_events(&mut self, be: &B) -> Result<(), BackendError> {
        while let Some((_, queue)) = self.pending.last_mut() {
            let (event, _) = queue.front().expect("pending queues are never empty");
            be.event_wait(event)?;
            let (_, idx) = queue.pop_front().expect("front exists");
            if queue.is_empty() {
                self.pending.pop();
            }
            self.event_completed(be, idx)?;
        }
        Ok(())
    }

    pub fn record_stream(&mut self, idx: u32, stream: StreamId) {
        let b = self.blocks.get_mut(idx);
        if stream != b.stream && !b.stream_uses.contains(&stream) {
            b.stream_uses.push(stream);
        }
    }

    // ----- giving memory back ---------------------------------------------

    /// `empty_cache`: wait for pending frees, give every free classic segment
    /// back, unmap the free tail pages of expandable segments.
    pub fn release_cached(&mut self, be: &B) -> Result<(), BackendError> {
        self.wait_all_events(be)?;
        for seg in self.segments.indices() {
            if self.segments.get(seg).expandable {
                self.unmap_free_tail(be, seg)?;
            } else {
                self.release_if_whole(be, seg)?;
            }
        }
        Ok(())
    }

    /// Free a classic segment whose only block is free.
    fn release_if_whole(&mut self, be: &B, seg: u32) -> Result<(), BackendError> {
        let head = self.segments.get(seg).head;
        let b = self.blocks.get(head);
        if b.state != BlockState::Free || b.next != NIL {
            return Ok(());
        }
        let (base, size, pool, stream) = {
            let s = self.segments.get(seg);
            (s.base, s.size, s.pool, s.stream)
        };
        be.free(base, size)?;
        self.take_free(head);
        self.blocks.remove(head);
        self.segments.remove(seg);
        self.stats.segment.decrease(pool, 1);
        self.stats.reserved_bytes.decrease(pool, size as u64);
        self.stats.num_device_free += 1;
        self.record(TraceAction::SegmentFree, base, size, stream);
        Ok(())
    }

    /// Unmap the whole pages of an expandable segment's free tail; release
    /// the segment's address range once nothing is mapped.
    fn unmap_free_tail(&mut self, be: &B, seg: u32) -> Result<(), BackendError> {
        let gran = be.granularity() as u64;
        let tail = self.tail_of(seg);
        let (base, mapped, pool, stream, va_size) = {
            let s = self.segments.get(seg);
            (s.base, s.size as u64, s.pool, s.stream, s.va_size)
        };
        if tail != NIL && self.blocks.get(tail).state == BlockState::Free {
            let tail_addr = self.blocks.get(tail).addr;
            let cut = base + (tail_addr - base).div_ceil(gran) * gran;
            let end = base + mapped;
            if cut < end {
                let bytes = (end - cut) as usize;
                // Kernels queued on the stream may still touch these pages.
                be.synchronize(stream)?;
                be.unmap(cut, bytes)?;
                self.take_free(tail);
                self.segments.get_mut(seg).size -= bytes;
                self.stats.reserved_bytes.decrease(pool, bytes as u64);
                self.stats.num_device_free += 1;
                self.record(TraceAction::SegmentUnmap, cut, bytes, stream);
                if cut == tail_addr {
                    let prev = self.blocks.get(tail).prev;
                    self.blocks.remove(tail);
                    if prev == NIL {
                        self.segments.get_mut(seg).head = NIL;
                    } else {
                        // `prev` is not free (free neighbours are merged), so
                        // its changed split status is not counted anywhere.
                        self.blocks.get_mut(prev).next = NIL;
                    }
                } else {
                    self.blocks.get_mut(tail).size -= bytes;
                    self.insert_free(tail);
                }
            }
        }
        if self.segments.get(seg).head == NIL {
            be.release_reservation(base, va_size)?;
            self.segments.remove(seg);
            self.expandable.remove(&(stream, pool));
            self.stats.segment.decrease(pool, 1);
        }
        Ok(())
    }

    /// Above `garbage_collection_threshold` of the limit, give back the
    /// cached memory that has been free longest (PyTorch's age rule) until
    /// reserved memory is back at the threshold: whole free classic
    /// segments, and the free tail pages of expandable segments. The tail of
    /// the segment about to grow for (`stream`, `pool`) stays: the request
    /// takes it.
    fn garbage_collect(
        &mut self,
        be: &B,
        pool: PoolKind,
        stream: StreamId,
    ) -> Result<(), BackendError> {
        let Some(limit) = self.limit else {
            return Ok(());
        };
        let threshold = (self.config.garbage_collection_threshold * limit as f64) as u64;
        let reserved = self.stats.reserved_bytes.all.current;
        if reserved <= threshold {
            return Ok(());
        }
        let growing = self.expandable.get(&(stream, pool)).copied();
        let gran = be.granularity() as u64;
        let target = reserved - threshold;
        let mut reclaimed = 0u64;
        while reclaimed < target {
            // Segments with memory to give back, and how long it has been free.
            let freeable: Vec<(u32, u64)> = self
                .segments
                .iter()
                .filter_map(|(i, s)| {
                    let free = if s.expandable {
                        self.unmappable_tail(i, gran).filter(|_| growing != Some(i))
                    } else {
                        let b = self.blocks.get(s.head);
                        (b.state == BlockState::Free && b.next == NIL).then_some(s.head)
                    };
                    free.map(|b| (i, self.gc_clock - self.blocks.get(b).free_since))
                })
                .collect();
            if freeable.is_empty() {
                break;
            }
            let mean = freeable.iter().map(|(_, age)| age).sum::<u64>() / freeable.len() as u64;
            for (seg, age) in freeable {
                if age >= mean && reclaimed < target {
                    let before = self.stats.reserved_bytes.all.current;
                    if self.segments.get(seg).expandable {
                        self.unmap_free_tail(be, seg)?;
                    } else {
                        self.release_if_whole(be, seg)?;
                    }
                    reclaimed += before - self.stats.reserved_bytes.all.current;
                }
            }
        }
        Ok(())
    }

    /// The free tail block of an expandable segment, if it spans whole
    /// pages that can be unmapped.
    fn unmappable_tail(&self, seg: u32, gran: u64) -> Option<u32> {
        let tail = self.tail_of(seg);
        if tail == NIL || self.blocks.get(tail).state != BlockState::Free {
            return None;
        }
        let s = self.segments.get(seg);
        let cut = s.base + (self.blocks.get(tail).addr - s.base).div_ceil(gran) * gran;
        (cut < s.base + s.size as u64).then_some(tail)
    }

    /// Give back everything (the allocator is being dropped).
    pub fn release_all(&mut self, be: &B) {
        let _ = self.wait_all_events(be);
        // The streams may be gone by now: wait for the whole device.
        let _ = be.synchronize_device();
        for seg in self.segments.indices() {
            let s = self.segments.remove(seg);
            if s.expandable {
                if s.size > 0 {
                    let _ = be.unmap(s.base, s.size);
                }
                let _ = be.release_reservation(s.base, s.va_size);
            } else {
                let _ = be.free(s.base, s.size);
            }
        }
    }

    // ----- reporting ------------------------------------------------------

    pub fn fragmentation(&self) -> Fragmentation {
        let mut total = 0u64;
        let mut largest = 0u64;
        for map in self.free_maps() {
            for key in map.keys() {
                let size = (key >> 64) as u64;
                total += size;
                largest = largest.max(size);
            }
        }
        let reserved = self.stats.reserved_bytes.all.current;
        let allocated = self.stats.allocated_bytes.all.current;
        Fragmentation::from_parts(reserved - allocated, total, largest)
    }

    fn oom_report(
        &self,
        be: &B,
        cause: OomCause,
        requested: usize,
        rounded: usize,
        stream: StreamId,
    ) -> OutOfMemory {
        let info = be.mem_info().ok();
        let frag = self.fragmentation();
        OutOfMemory {
            cause,
            requested,
            rounded,
            stream,
            device_total: info.map_or(self.device_total, |i| i.total),
            device_free: info.map_or(0, |i| i.free),
            limit: self.limit,
            allocated: self.stats.allocated_bytes.all.current,
            reserved: self.stats.reserved_bytes.all.current,
            reserved_unallocated: frag.reserved_unallocated,
            largest_free_block: frag.largest_free_block,
            expandable_segments: self.expandable_mode(),
        }
    }

    /// Blocks of a segment in address order.
    pub fn segment_blocks(&self, seg: u32) -> Vec<(u32, &Block)> {
        let mut out = Vec::new();
        let mut idx = self.segments.get(seg).head;
        while idx != NIL {
            let b = self.blocks.get(idx);
            out.push((idx, b));
            idx = b.next;
        }
        out
    }
}
