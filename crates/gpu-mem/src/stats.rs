//! Counters with the names and meaning of PyTorch's `memory_stats()`.
//!
//! Each [`Stat`] has `current`, `peak`, `allocated` (sum of increases) and
//! `freed` (sum of decreases), kept for all pools and for the small and large
//! pool separately ([`StatArray`]).

use crate::config::PoolKind;
use serde::Serialize;
use std::collections::BTreeMap;

/// One counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stat {
    /// The value now.
    pub current: u64,
    /// The highest value since creation or the last peak reset.
    pub peak: u64,
    /// The sum of all increases.
    pub allocated: u64,
    /// The sum of all decreases.
    pub freed: u64,
}

impl Stat {
    #[inline(always)]
    fn increase(&mut self, amount: u64) {
        self.current += amount;
        self.allocated += amount;
        self.peak = self.peak.max(self.current);
    }

    #[inline(always)]
    fn decrease(&mut self, amount: u64) {
        debug_assert!(self.current >= amount, "stat underflow");
        self.current -= amount;
        self.freed += amount;
    }
}

/// A counter for all pools, the small pool and the large pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StatArray {
    /// Both pools together.
    pub all: Stat,
    /// The small pool only.
    pub small_pool: Stat,
    /// The large pool only.
    pub large_pool: Stat,
}

impl StatArray {
    #[inline(always)]
    pub(crate) fn increase(&mut self, pool: PoolKind, amount: u64) {
        self.all.increase(amount);
        self.pool_mut(pool).increase(amount);
    }

    #[inline(always)]
    pub(crate) fn decrease(&mut self, pool: PoolKind, amount: u64) {
        self.all.decrease(amount);
        self.pool_mut(pool).decrease(amount);
    }

    #[inline(always)]
    fn pool_mut(&mut self, pool: PoolKind) -> &mut Stat {
        match pool {
            PoolKind::Small => &mut self.small_pool,
            PoolKind::Large => &mut self.large_pool,
        }
    }

    /// The counter of one pool.
    pub fn pool(&self, pool: PoolKind) -> &Stat {
        match pool {
            PoolKind::Small => &self.small_pool,
            PoolKind::Large => &self.large_pool,
        }
    }

    fn reset_peak(&mut self) {
        for s in [&mut self.all, &mut self.small_pool, &mut self.large_pool] {
            s.peak = s.current;
        }
    }
}

/// Everything `torch.cuda.memory_stats()` reports that applies here.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemoryStats {
    /// Allocated blocks.
    pub allocation: StatArray,
    /// Segments (classic allocations, and expandable segments).
    pub segment: StatArray,
    /// Blocks allocated, or freed but waiting for other streams' work.
    pub active: StatArray,
    /// Free blocks that are part of a split segment.
    pub inactive_split: StatArray,
    /// Bytes in allocated blocks (requests rounded up).
    pub allocated_bytes: StatArray,
    /// Bytes taken from the device: classic segments and mapped pages.
    pub reserved_bytes: StatArray,
    /// Bytes in active blocks (allocated, or waiting for other streams).
    pub active_bytes: StatArray,
    /// Bytes in free blocks that are part of a split segment.
    pub inactive_split_bytes: StatArray,
    /// Bytes the callers asked for (before rounding) in allocated blocks.
    pub requested_bytes: StatArray,
    /// Allocations that had to free cached memory and try again.
    pub num_alloc_retries: u64,
    /// Allocations that failed with out-of-memory.
    pub num_ooms: u64,
    /// Device allocations (classic segments, expandable page maps).
    pub num_device_alloc: u64,
    /// Device frees (classic segments, expandable page unmaps).
    pub num_device_free: u64,
}

impl MemoryStats {
    /// Set every peak to its current value (`reset_peak_memory_stats`).
    pub fn reset_peak(&mut self) {
        for a in self.arrays_mut() {
            a.reset_peak();
        }
    }

    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    fn arrays(&self) -> [(&'static str, &StatArray); 9] {
        [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ]
    }

    /// The flat dictionary `torch.cuda.memory_stats()` returns, with the same
    /// keys (`"allocated_bytes.all.current"`, `"num_ooms"`, ...).
    pub fn to_map(&self) -> BTreeMap<String, u64> {
        let mut map = BTreeMap::new();
        for (name, array) in self.arrays() {
            for (pool, stat) in [
                ("all", &array.all),
                ("small_pool", &array.small_pool),
                ("large_pool", &array.large_pool),
            ] {
                for (field, value) in [
                    ("current", stat.current),
                    ("peak", stat.peak),
                    ("allocated", stat.allocated),
                    ("freed", stat.freed),
                ] {
                    map.insert(format!("{name}.{pool}.{field}"), value);
                }
            }
        }
        map.insert("num_alloc_retries".into(), self.num_alloc_retries);
        map.insert("num_ooms".into(), self.num_ooms);
        map.insert("num_device_alloc".into(), self.num_device_alloc);
        map.insert("num_device_free".into(), self.num_device_free);
        map
    }
}

/// Fragmentation of the cached (reserved but unallocated) memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Fragmentation {
    /// Reserved bytes not in allocated blocks.
    pub reserved_unallocated: u64,
    /// Total bytes of free cached blocks.
    pub total_free: u64,
    /// The largest free cached block.
    pub largest_free_block: u64,
    /// `1 - largest_free_block / total_free` (0 when nothing is free).
    pub ratio: f64,
}

impl Fragmentation {
    pub(crate) fn from_parts(reserved_unallocated: u64, total_free: u64, largest: u64) -> Self {
        let ratio = if total_free == 0 {
            0.0
        } else {
            1.0 - largest as f64 / total_free as f64
        };
        Fragmentation {
            reserved_unallocated,
            total_free,
            largest_free_block: largest,
            ratio,
        }
    }
}
