//! Replaying a trace through one allocator configuration.

use super::TraceRecord;
use crate::allocator::{Allocation, CachingAllocator};
use crate::backend::StreamId;
use crate::config::Config;
use crate::error::AllocError;
use crate::sim::SimDevice;
use serde::Serialize;
use std::collections::HashMap;

/// What a replay measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplayReport {
    /// Records replayed.
    pub records: usize,
    /// Peak of bytes requested by live allocations.
    pub peak_requested: u64,
    /// Peak of bytes in allocated (rounded) blocks.
    pub peak_allocated: u64,
    /// Peak of bytes reserved from the device.
    pub peak_reserved: u64,
    /// `peak_reserved / peak_requested`.
    pub reserved_over_requested: f64,
    /// Largest reserved-but-unallocated amount seen after any record.
    pub max_reserved_unallocated: u64,
    /// Fragmentation ratio (`1 - largest_free/total_free`) when reserved
    /// memory last reached its peak.
    pub fragmentation_at_peak: f64,
    /// Allocations that failed with out-of-memory (and were skipped).
    pub num_ooms: u64,
    /// Allocations that freed the cache and tried again.
    pub num_alloc_retries: u64,
    /// Device allocations (classic segments, expandable page maps).
    pub num_device_alloc: u64,
    /// Device frees (classic segments, expandable page unmaps).
    pub num_device_free: u64,
}

/// Replay `records` through a fresh allocator with `config` on `device`.
/// Allocations that run out of memory are counted and skipped (their
/// frees too); any other failure is returned.
pub fn replay(
    records: &[TraceRecord],
    config: Config,
    device: SimDevice,
) -> Result<ReplayReport, AllocError> {
    let alloc = CachingAllocator::new(device, config)?;
    let mut live: HashMap<u64, Allocation> = HashMap::new();
    let mut max_unallocated = 0u64;
    let mut peak_reserved = 0u64;
    let mut last_reserved = 0u64;
    let mut frag_at_peak = 0.0;
    for record in records {
        match *record {
            TraceRecord::Alloc { id, size, stream } => match alloc.allocate(size, StreamId(stream))
            {
                Ok(a) => {
                    if let Some(old) = live.insert(id, a) {
                        return Err(AllocError::Invalid(format!(
                            "trace allocates id {id} twice (at {:#x})",
                            old.ptr()
                        )));
                    }
                }
                Err(AllocError::OutOfMemory(_)) => {}
                Err(e) => return Err(e),
            },
            TraceRecord::Free { id } => {
                if let Some(a) = live.remove(&id) {
                    alloc.free(a)?;
                }
            }
            TraceRecord::EmptyCache => alloc.empty_cache()?,
        }
        let (reserved, allocated) = alloc.reserved_and_allocated();
        max_unallocated = max_unallocated.max(reserved - allocated);
        // Each time reserved memory reaches the peak, not at every record
        // that stays there: the ratio walks every free block.
        let reaches =
            reserved > peak_reserved || (reserved == peak_reserved && reserved != last_reserved);
        if reaches {
            peak_reserved = reserved;
            frag_at_peak = alloc.fragmentation().ratio;
        }
        last_reserved = reserved;
    }
    for (_, a) in live.drain() {
        alloc.free(a)?;
    }
    let s = alloc.stats();
    let peak_requested = s.requested_bytes.all.peak;
    Ok(ReplayReport {
        records: records.len(),
        peak_requested,
        peak_allocated: s.allocated_bytes.all.peak,
        peak_reserved: s.reserved_bytes.all.peak,
        reserved_over_requested: s.reserved_bytes.all.peak as f64 / peak_requested.max(1) as f64,
        max_reserved_unallocated: max_unallocated,
        fragmentation_at_peak: frag_at_peak,
        num_ooms: s.num_ooms,
        num_alloc_retries: s.num_alloc_retries,
        num_device_alloc: s.num_device_alloc,
        num_device_free: s.num_device_free,
    })
}
