//! Random-operation scenarios on a [`SimDevice`], checked after every step.
//!
//! The property tests and the fuzz target both drive the allocator through
//! [`run`]: after each operation every invariant is checked and the stats are
//! recounted from scratch; at the end everything is freed, the cache emptied,
//! and nothing may stay reserved on the allocator or the device.

use crate::allocator::{Allocation, CachingAllocator};
use crate::backend::StreamId;
use crate::config::{Config, MemoryLimit};
use crate::error::AllocError;
use crate::sim::SimDevice;

/// One step of a scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Allocate `size` bytes on stream `stream`.
    Alloc {
        /// Bytes asked for.
        size: usize,
        /// The stream id.
        stream: u8,
    },
    /// Free the live allocation at `pick % live`.
    Free {
        /// Picks the allocation.
        pick: usize,
    },
    /// Mark the live allocation at `pick % live` as used on `stream`.
    RecordStream {
        /// Picks the allocation.
        pick: usize,
        /// The other stream's id.
        stream: u8,
    },
    /// Give cached memory back to the device.
    EmptyCache,
    /// Set (`Some`) or clear the per-instance limit in bytes.
    SetLimit(Option<usize>),
    /// Let all queued stream work finish.
    CompleteWork,
    /// Make the next device `map` fail.
    FailNextMap,
    /// Make the next device `malloc` fail.
    FailNextMalloc,
}

impl Op {
    /// Decode one op from raw bytes (for the fuzz target); `None` when the
    /// input runs out.
    pub fn decode(bytes: &mut &[u8]) -> Option<Op> {
        let (&tag, rest) = bytes.split_first()?;
        *bytes = rest;
        let mut take = |n: usize| -> Option<u64> {
            if bytes.len() < n {
                return None;
            }
            let (head, tail) = bytes.split_at(n);
            *bytes = tail;
            Some(head.iter().fold(0u64, |acc, &b| (acc << 8) | b as u64))
        };
        Some(match tag % 16 {
            // Weighted towards allocation and free, both pools.
            0..=3 => Op::Alloc {
                size: (take(2)? as usize) * 64 + 1,
                stream: (take(1)? % 3) as u8,
            },
            4..=5 => Op::Alloc {
                size: (take(3)? as usize) * 8 + 1,
                stream: (take(1)? % 3) as u8,
            },
            6..=9 => Op::Free {
                pick: take(1)? as usize,
            },
            10 => Op::RecordStream {
                pick: take(1)? as usize,
                stream: (take(1)? % 3) as u8,
            },
            11 => Op::EmptyCache,
            12 => Op::SetLimit(match take(1)? {
                0..=127 => None,
                n => Some((n as usize) << 20),
            }),
            13 => Op::CompleteWork,
            14 => Op::FailNextMap,
            _ => Op::FailNextMalloc,
        })
    }
}

/// Totals of a finished scenario.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Allocations that succeeded.
    pub allocations: u64,
    /// Allocations that failed with out-of-memory (the allocator's count).
    pub ooms: u64,
}

/// A device of 256 MiB with 2 MiB pages: small enough that OOM happens.
pub fn test_device() -> SimDevice {
    SimDevice::new(256 << 20, 2 << 20)
}

/// Run `ops` on a fresh allocator over `device`, checking after each step.
pub fn run(config: Config, device: SimDevice, ops: &[Op]) -> Result<Outcome, String> {
    let alloc = CachingAllocator::new(device, config).map_err(|e| e.to_string())?;
    let mut live: Vec<Allocation> = Vec::new();
    let mut out = Outcome::default();
    let check = |alloc: &CachingAllocator<SimDevice>, step: usize, op: &Op| {
        alloc
            .check_invariants(|addr, len| alloc.backend().is_backed(addr, len))
            .map_err(|e| format!("after step {step} ({op:?}): {e}"))
    };
    for (step, op) in ops.iter().enumerate() {
        let reserved_before = alloc.stats().reserved_bytes.all.current;
        match op {
            Op::Alloc { size, stream } => match alloc.allocate(*size, StreamId(*stream as u64)) {
                Ok(a) => {
                    out.allocations += 1;
                    if a.block_size() < *size || a.ptr() % 512 != 0 {
                        return Err(format!("step {step}: bad block {a:?} for {size} bytes"));
                    }
                    live.push(a);
                }
                Err(AllocError::OutOfMemory(oom)) => {
                    out.ooms += 1;
                    if oom.to_string().is_empty() {
                        return Err("empty OOM message".into());
                    }
                }
                Err(e) => return Err(format!("step {step}: {e}")),
            },
            Op::Free { pick } => {
                if !live.is_empty() {
                    let a = live.swap_remove(pick % live.len());
                    alloc.free(a).map_err(|e| format!("step {step}: {e}"))?;
                }
            }
            Op::RecordStream { pick, stream } => {
                if !live.is_empty() {
                    let a = &live[pick % live.len()];
                    alloc
                        .record_stream(a, StreamId(*stream as u64))
                        .map_err(|e| format!("step {step}: {e}"))?;
                }
            }
            Op::EmptyCache => alloc
                .empty_cache()
                .map_err(|e| format!("step {step}: {e}"))?,
            Op::SetLimit(limit) => alloc
                .set_limit(limit.map(MemoryLimit::Bytes))
                .map_err(|e| format!("step {step}: {e}"))?,
            Op::CompleteWork => alloc.backend().complete_all_work(),
            Op::FailNextMap => alloc.backend().fail_nth_map(1),
            Op::FailNextMalloc => alloc.backend().fail_nth_malloc(1),
        }
        check(&alloc, step, op)?;
        // Growing never takes reserved memory past the limit.
        let reserved = alloc.stats().reserved_bytes.all.current;
        if let Some(limit) = alloc.limit_bytes()
            && reserved > reserved_before
            && reserved > limit as u64
        {
            return Err(format!(
                "step {step}: reserved {reserved} exceeds limit {limit}"
            ));
        }
    }
    let end = ops.len();
    for a in live.drain(..) {
        alloc.free(a).map_err(|e| format!("final free: {e}"))?;
    }
    alloc
        .empty_cache()
        .map_err(|e| format!("final empty_cache: {e}"))?;
    check(&alloc, end, &Op::EmptyCache)?;
    let stats = alloc.stats();
    if stats.reserved_bytes.all.current != 0 || stats.segment.all.current != 0 {
        return Err(format!(
            "after freeing everything and empty_cache, {} bytes in {} segments stay reserved",
            stats.reserved_bytes.all.current, stats.segment.all.current
        ));
    }
    let device = alloc.backend();
    if device.used() != 0 || device.reservation_count() != 0 {
        return Err(format!(
            "the device still has {} bytes in use and {} reservations",
            device.used(),
            device.reservation_count()
        ));
    }
    out.ooms = stats.num_ooms;
    Ok(out)
}
