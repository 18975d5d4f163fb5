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

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockSnapshot {
    pub address: u64,
    pub size: usize,
    /// Bytes asked for (0 unless allocated).
    pub requested_size: usize,
    pub state: BlockStateName,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SegmentSnapshot {
    pub address: u64,
    /// Bytes backed by physical memory (for an expandable segment: mapped).
    pub total_size: usize,
    pub stream: StreamId,
    pub segment_type: PoolKind,
    pub expandable: bool,
    /// Virtual address range reserved (expandable segments only, else 0).
    pub reserved_address_range: usize,
    pub allocated_size: usize,
    pub blocks: Vec<BlockSnapshot>,
}

/// Segments sorted by address, with the stats at the same moment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Snapshot {
    pub segments: Vec<SegmentSnapshot>,
    pub stats: MemoryStats,
    pub fragmentation: Fragmentation,
    pub limit: Option<usize>,
}

impl Snapshot {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a snapshot always serialises")
    }
}

/// What happened, for the optional trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceAction {
    Alloc,
    Free,
    /// A block freed on one stream is waiting for events on others.
    FreeRequested,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Oom,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TraceEvent {
    /// Position in the trace, from 0.
    pub seq: u64,
    pub action: TraceAction,
    pub address: u64,
    pub size: usize,
    pub stream: StreamId,
}

/// A trace as JSON (an array of events).
pub fn trace_to_json(events: &[TraceEvent]) -> String {
    serde_json::to_string(events).expect("a trace always serialises")
}
