//! Errors: the typed out-of-memory report, and everything else.

use crate::backend::{BackendError, StreamId};
use serde::Serialize;
use std::fmt;

/// Why an allocation found no memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OomCause {
    /// This instance's memory limit would have been exceeded.
    Limit,
    /// The device itself had no room.
    Device,
}

/// An allocation that failed even after the cache was freed; the message
/// says what the memory is doing and what to change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OutOfMemory {
    /// Whether the limit or the device ran out.
    pub cause: OomCause,
    /// Bytes asked for.
    pub requested: usize,
    /// The request after rounding.
    pub rounded: usize,
    /// The stream the request was made on.
    pub stream: StreamId,
    /// The device's total memory in bytes.
    pub device_total: usize,
    /// The device's free memory in bytes when the request failed (0 if the
    /// device could not say).
    pub device_free: usize,
    /// This instance's limit in bytes, if any.
    pub limit: Option<usize>,
    /// Bytes in allocated blocks.
    pub allocated: u64,
    /// Bytes reserved by this allocator.
    pub reserved: u64,
    /// Reserved bytes not in allocated blocks.
    pub reserved_unallocated: u64,
    /// The largest free cached block.
    pub largest_free_block: u64,
    /// Whether expandable segments were on.
    pub expandable_segments: bool,
}

/// Bytes in a human unit (GiB/MiB/KiB), two decimals.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size {
            return format!("{:.2} {unit}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} bytes")
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = |b: u64| human_bytes(b);
        write!(
            f,
            "out of memory: tried to allocate {} ({} after rounding) on stream {}. \
             The device has a total capacity of {} of which {} is free. \
             Of this allocator's memory, {} is allocated and {} is reserved but unallocated \
             (largest free block {}).",
            h(self.requested as u64),
            h(self.rounded as u64),
            self.stream,
            h(self.device_total as u64),
            h(self.device_free as u64),
            h(self.allocated),
            h(self.reserved_unallocated),
            h(self.largest_free_block),
        )?;
        // A request the whole device cannot hold fails under any limit:
        // raising the limit would not help.
        match (self.cause, self.limit) {
            _ if self.rounded > self.device_total => write!(
                f,
                " The request is larger than the whole device: lower the batch size or \
                 sequence length."
            )?,
            (OomCause::Limit, Some(limit)) => write!(
                f,
                " The per-instance limit of {} would be exceeded ({} reserved): raise the \
                 limit (CachingAllocator::set_limit) or lower the batch size or sequence length.",
                h(limit as u64),
                h(self.reserved)
            )?,
            _ => write!(
                f,
                " The device is full: free memory held by other processes or allocators, or \
                 lower the batch size or sequence length."
            )?,
        }
        let fragmented = self.reserved_unallocated >= self.rounded as u64
            && self.largest_free_block < self.rounded as u64;
        if fragmented && !self.expandable_segments {
            write!(
                f,
                " Reserved-but-unallocated memory would cover the request but is fragmented: \
                 turn on expandable segments (Config::expandable_segments) or set \
                 Config::max_split_size."
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for OutOfMemory {}

/// Any failure of the allocator.
#[derive(Debug, thiserror::Error)]
pub enum AllocError {
    /// No memory for the request even after freeing the cache.
    #[error(transparent)]
    OutOfMemory(Box<OutOfMemory>),
    /// The device failed a call for a reason other than a lack of memory.
    #[error("device error: {0}")]
    Backend(#[from] BackendError),
    /// A bad argument: an invalid configuration, or an allocation that is
    /// not live in this allocator.
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl AllocError {
    /// The out-of-memory report, if that is what this is.
    pub fn as_oom(&self) -> Option<&OutOfMemory> {
        match self {
            AllocError::OutOfMemory(oom) => Some(oom),
            _ => None,
        }
    }
}
