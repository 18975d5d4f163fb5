//! The invariant checker: walks every segment, recounts every statistic from
//! scratch and compares. Used by the property tests and the fuzz target.

use super::blocks::{BlockState, NIL};
use super::state::{State, free_key};
use crate::backend::{Backend, DevicePtr};
use crate::config::PoolKind;
use crate::stats::{MemoryStats, StatArray};

/// A broken invariant, described for a test failure message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allocator invariant violated: {0}")]
pub struct InvariantViolation(pub String);

fn fail<T>(msg: String) -> Result<T, InvariantViolation> {
    Err(InvariantViolation(msg))
}

#[derive(Default)]
struct Recount {
    stats: MemoryStats,
}

impl Recount {
    fn add(array: &mut StatArray, pool: PoolKind, amount: u64) {
        array.all.current += amount;
        match pool {
            PoolKind::Small => array.small_pool.current += amount,
            PoolKind::Large => array.large_pool.current += amount,
        }
    }
}

pub(crate) fn check<B: Backend>(
    st: &State<B>,
    is_backed: impl Fn(DevicePtr, usize) -> bool,
) -> Result<(), InvariantViolation> {
    let mut r = Recount::default();
    let mut seen_blocks = 0usize;
    let mut free_blocks = 0usize;
    let mut ranges: Vec<(DevicePtr, u64)> = Vec::new();

    for (seg_idx, seg) in st.segments.iter() {
        Recount::add(&mut r.stats.segment, seg.pool, 1);
        Recount::add(&mut r.stats.reserved_bytes, seg.pool, seg.size as u64);
        ranges.push((seg.base, seg.size as u64));
        if seg.expandable {
            if st.expandable.get(&(seg.stream, seg.pool)) != Some(&seg_idx) {
                return fail(format!("expandable segment {seg_idx} is not indexed"));
            }
            if seg.size > seg.va_size || seg.size % 512 != 0 {
                return fail(format!(
                    "segment {seg_idx} maps {} of {}",
                    seg.size, seg.va_size
                ));
            }
        } else if seg.head == NIL {
            return fail(format!("classic segment {seg_idx} has no blocks"));
        }
        // Blocks tile the backed bytes in order, with consistent links.
        let mut expected_addr = seg.base;
        let mut prev = NIL;
        let mut prev_free = false;
        let mut idx = seg.head;
        while idx != NIL {
            let b = st.blocks.get(idx);
            seen_blocks += 1;
            if !b.live || b.segment != seg_idx || b.prev != prev {
                return fail(format!(
                    "block {idx} has a broken link in segment {seg_idx}"
                ));
            }
            if b.addr != expected_addr || b.size == 0 || !b.size.is_multiple_of(512) {
                return fail(format!(
                    "block {idx} at {:#x}+{} does not continue segment {seg_idx} at {expected_addr:#x}",
                    b.addr, b.size
                ));
            }
            if b.stream != seg.stream || b.pool != seg.pool {
                return fail(format!("block {idx} stream/pool differs from its segment"));
            }
            let free = b.state == BlockState::Free;
            if free && prev_free {
                return fail(format!(
                    "free block {idx} was not merged with its free neighbour"
                ));
            }
            let (pool, size) = (b.pool, b.size as u64);
            match b.state {
                BlockState::Allocated => {
                    if !is_backed(b.addr, b.size) {
                        return fail(format!(
                            "allocated block {:#x}+{} is not backed by device memory",
                            b.addr, b.size
                        ));
                    }
                    if b.requested > b.size {
                        return fail(format!("block {idx} is smaller than its request"));
                    }
                    Recount::add(&mut r.stats.allocation, pool, 1);
                    Recount::add(&mut r.stats.allocated_bytes, pool, size);
                    Recount::add(&mut r.stats.requested_bytes, pool, b.requested as u64);
                    Recount::add(&mut r.stats.active, pool, 1);
                    Recount::add(&mut r.stats.active_bytes, pool, size);
                }
                BlockState::Pending => {
                    let waiting = st
                        .pending
                        .iter()
                        .flat_map(|(_, queue)| queue)
                        .filter(|(_, i)| *i == idx)
                        .count();
                    if waiting == 0 || waiting as u32 != b.pending_events {
                        return fail(format!("pending block {idx} waits for {waiting} events"));
                    }
                    Recount::add(&mut r.stats.active, pool, 1);
                    Recount::add(&mut r.stats.active_bytes, pool, size);
                }
                BlockState::Free => {
                    free_blocks += 1;
                    let key = free_key(b.size, b.addr);
                    if st.free_map(b.stream, pool).and_then(|m| m.get(key)) != Some(idx) {
                        return fail(format!("free block {idx} is missing from its pool index"));
                    }
                    if b.is_split() {
                        Recount::add(&mut r.stats.inactive_split, pool, 1);
                        Recount::add(&mut r.stats.inactive_split_bytes, pool, size);
                    }
                }
            }
            expected_addr = b.addr + size;
            prev_free = free;
            prev = idx;
            idx = b.next;
        }
        if expected_addr != seg.base + seg.size as u64 {
            return fail(format!(
                "segment {seg_idx} blocks end at {expected_addr:#x}, segment at {:#x}",
                seg.base + seg.size as u64
            ));
        }
    }

    if seen_blocks != st.blocks.live_count() {
        return fail(format!(
            "{} live blocks, {seen_blocks} reachable from segments",
            st.blocks.live_count()
        ));
    }
    let indexed: usize = st.free_maps().map(|m| m.len()).sum();
    if indexed != free_blocks {
        return fail(format!(
            "{indexed} indexed free blocks, {free_blocks} free blocks"
        ));
    }
    if let Some((stream, _)) = st.pending.iter().find(|(_, queue)| queue.is_empty()) {
        return fail(format!("stream {stream} has an empty pending queue"));
    }
    if st.expandable.len() != st.segments.iter().filter(|(_, s)| s.expandable).count() {
        return fail("expandable index out of step with segments".into());
    }

    // Segments (hence live blocks) never overlap.
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        if pair[0].0 + pair[0].1 > pair[1].0 {
            return fail(format!(
                "segments at {:#x} and {:#x} overlap",
                pair[0].0, pair[1].0
            ));
        }
    }

    compare(&st.stats, &r.stats)
}

fn compare(kept: &MemoryStats, recount: &MemoryStats) -> Result<(), InvariantViolation> {
    let pairs = [
        ("allocation", &kept.allocation, &recount.allocation),
        ("segment", &kept.segment, &recount.segment),
        ("active", &kept.active, &recount.active),
        (
            "inactive_split",
            &kept.inactive_split,
            &recount.inactive_split,
        ),
        (
            "allocated_bytes",
            &kept.allocated_bytes,
            &recount.allocated_bytes,
        ),
        (
            "reserved_bytes",
            &kept.reserved_bytes,
            &recount.reserved_bytes,
        ),
        ("active_bytes", &kept.active_bytes, &recount.active_bytes),
        (
            "inactive_split_bytes",
            &kept.inactive_split_bytes,
            &recount.inactive_split_bytes,
        ),
        (
            "requested_bytes",
            &kept.requested_bytes,
            &recount.requested_bytes,
        ),
    ];
    for (name, k, r) in pairs {
        for (pool, ks, rs) in [
            ("all", &k.all, &r.all),
            ("small_pool", &k.small_pool, &r.small_pool),
            ("large_pool", &k.large_pool, &r.large_pool),
        ] {
            if ks.current != rs.current {
                return fail(format!(
                    "{name}.{pool}.current is {} but a recount gives {}",
                    ks.current, rs.current
                ));
            }
            if ks.peak < ks.current || ks.allocated - ks.freed != ks.current {
                return fail(format!("{name}.{pool} is inconsistent: {ks:?}"));
            }
        }
        if k.all.current != k.small_pool.current + k.large_pool.current {
            return fail(format!("{name}: all != small + large"));
        }
    }
    Ok(())
}
