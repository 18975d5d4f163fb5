//! What the allocator looks like at one moment (segments and their blocks),
//! and the optional event trace; both serialise to JSON.

use crate::backend::StreamId;
use crate::config::PoolKind;
use crate::stats::{Fragmentation, MemoryStats};
use serde::Serialize;

/// A block's state, named as in PyTorch's `memory_snapshot()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockStateName {
    /// Handed out to a caller.
    ActiveAllocated,
    /// Freed by its caller, waiting for work queued on other streams.
    ActivePendingFree,
    /// Cached, free for reuse.
    Inactive,
}

/// One block of a segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockSnapshot {
    /// The block's device address.
    pub address: u64,
    /// Bytes in the block.
    pub size: usize,
    /// Bytes asked for (0 unless allocated).
    pub requested_size: usize,
    /// Allocated, waiting for other streams, or free.
    pub state: BlockStateName,
}

/// One segment (a classic allocation or an expandable segment) and its
/// blocks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SegmentSnapshot {
    /// The segment's first device address.
    pub address: u64,
    /// Bytes backed by physical memory (for an expandable segment: mapped).
    pub total_size: usize,
    /// The stream whose requests it serves.
    pub stream: StreamId,
    /// The pool it belongs to.
    pub segment_type: PoolKind,
    /// Whether it is an expandable segment.
    pub expandable: bool,
    /// Virtual address range reserved (expandable segments only, else 0).
    pub reserved_address_range: usize,
    /// Bytes in its allocated blocks.
    pub allocated_size: usize,
    /// Its blocks in address order.
    pub blocks: Vec<BlockSnapshot>,
}

/// Segments sorted by address, with the stats at the same moment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Snapshot {
    /// Every segment, by address.
    pub segments: Vec<SegmentSnapshot>,
    /// The counters at that moment.
    pub stats: MemoryStats,
    /// Fragmentation of the cached memory at that moment.
    pub fragmentation: Fragmentation,
    /// The allocator's memory limit in bytes, if any.
    pub limit: Option<usize>,
}

impl Snapshot {
    /// The snapshot as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a snapshot always serialises")
    }
}

/// What happened, for the optional trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceAction {
    /// A block was handed out.
    Alloc,
    /// A block went back to the cache (or, without caching, the device).
    Free,
    /// A block freed on one stream is waiting for events on others.
    FreeRequested,
    /// A classic segment was allocated from the device.
    SegmentAlloc,
    /// A classic segment was given back to the device.
    SegmentFree,
    /// Pages were mapped at the end of an expandable segment.
    SegmentMap,
    /// Pages were unmapped from the end of an expandable segment.
    SegmentUnmap,
    /// A request failed with out-of-memory (address 0; size after rounding).
    Oom,
}

/// One event of the optional trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TraceEvent {
    /// Position in the trace, from 0.
    pub seq: u64,
    /// What happened.
    pub action: TraceAction,
    /// The device address of the block or pages.
    pub address: u64,
    /// Bytes of the block or pages.
    pub size: usize,
    /// The stream of the block or segment.
    pub stream: StreamId,
}

/// A trace as JSON (an array of events).
pub fn trace_to_json(events: &[TraceEvent]) -> String {
    serde_json::to_string(events).expect("a trace always serialises")
}
