//! Allocator configuration and PyTorch's size rules.
//!
//! The constants and rounding are those of PyTorch's CUDACachingAllocator:
//! requests round up to 512 bytes; requests up to 1 MiB use the small pool,
//! carved from 2 MiB segments; larger ones use the large pool, carved from
//! 20 MiB segments below 10 MiB and from request-sized segments (rounded to
//! 2 MiB) above.

use serde::Serialize;

/// Every block size is a multiple of this.
pub const MIN_BLOCK_SIZE: usize = 512;
/// Largest request served by the small pool.
pub const SMALL_SIZE: usize = 1 << 20;
/// Segment size of the small pool.
pub const SMALL_BUFFER: usize = 2 << 20;
/// Segment size of the large pool for requests below [`MIN_LARGE_ALLOC`].
pub const LARGE_BUFFER: usize = 20 << 20;
/// Requests at least this big get their own (rounded) segment.
pub const MIN_LARGE_ALLOC: usize = 10 << 20;
/// Large segments are rounded up to a multiple of this.
pub const ROUND_LARGE: usize = 2 << 20;

/// A per-instance cap on reserved memory: the lease a trial gets.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum MemoryLimit {
    /// At most this many bytes reserved.
    Bytes(usize),
    /// At most this fraction (0..=1) of the device's total memory.
    Fraction(f64),
}

impl MemoryLimit {
    /// The limit in bytes on a device of `total` bytes.
    pub fn bytes(self, total: usize) -> usize {
        match self {
            MemoryLimit::Bytes(b) => b,
            MemoryLimit::Fraction(f) => (f.clamp(0.0, 1.0) * total as f64) as usize,
        }
    }
}

/// How the allocator behaves; `Config::default()` is PyTorch's default.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Config {
    /// Keep freed blocks for reuse. `false` models
    /// `PYTORCH_NO_CUDA_MEMORY_CACHING=1`: each block is its own segment and
    /// goes back to the device when freed. Implies classic segments
    /// (`expandable_segments` is ignored).
    pub caching: bool,
    /// Grow one segment per (stream, pool) in place on the virtual-memory API
    /// instead of allocating separate segments.
    pub expandable_segments: bool,
    /// Blocks at least this big are never split, and are only reused for
    /// requests at least this big (and at most 20 MiB smaller). Classic mode.
    pub max_split_size: Option<usize>,
    /// Round requests above 512 * divisions up to one of `divisions` steps
    /// between powers of two (`roundup_power2_divisions`); 0 or 1 disables.
    pub roundup_power2_divisions: usize,
    /// With a limit set: when reserved memory exceeds this fraction of the
    /// limit, free the oldest cached segments before allocating (0 disables).
    pub garbage_collection_threshold: f64,
    /// Per-instance cap on reserved memory.
    pub limit: Option<MemoryLimit>,
    /// Keep an event trace (alloc, free, map, unmap, oom) for export. It
    /// grows until `CachingAllocator::take_trace` drains it.
    pub record_trace: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            caching: true,
            expandable_segments: false,
            max_split_size: None,
            roundup_power2_divisions: 0,
            garbage_collection_threshold: 0.0,
            limit: None,
            record_trace: false,
        }
    }
}

impl Config {
    /// PyTorch's defaults with expandable segments on.
    pub fn expandable() -> Self {
        Config {
            expandable_segments: true,
            ..Config::default()
        }
    }

    /// No caching: every free goes straight back to the device.
    pub fn no_caching() -> Self {
        Config {
            caching: false,
            ..Config::default()
        }
    }
}

/// Which pool a request is served from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    Small,
    Large,
}

impl PoolKind {
    pub fn for_size(rounded: usize) -> PoolKind {
        if rounded <= SMALL_SIZE {
            PoolKind::Small
        } else {
            PoolKind::Large
        }
    }

    pub fn index(self) -> usize {
        match self {
            PoolKind::Small => 0,
            PoolKind::Large => 1,
        }
    }
}

/// PyTorch's `round_size`: 512-byte multiples, or power-of-two divisions.
pub fn round_size(size: usize, divisions: usize) -> usize {
    if size < MIN_BLOCK_SIZE {
        return MIN_BLOCK_SIZE;
    }
    if divisions > 1 && size > MIN_BLOCK_SIZE * divisions {
        return roundup_power2_next_division(size, divisions);
    }
    // Saturating: no request near usize::MAX is ever served, but asking
    // which pool it would take must not overflow.
    size.div_ceil(MIN_BLOCK_SIZE).saturating_mul(MIN_BLOCK_SIZE)
}

/// Round up to the next of `divisions` equal steps between two powers of two.
fn roundup_power2_next_division(size: usize, divisions: usize) -> usize {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1usize << (usize::BITS - 1 - size.leading_zeros());
    // Divisions are rounded down to a power of two, as PyTorch does.
    let divisions = 1usize << (usize::BITS - 1 - divisions.leading_zeros());
    let step = floor / divisions;
    if step == 0 {
        return size.next_power_of_two();
    }
    let rounded_floor = size & !(step - 1);
    if rounded_floor == size {
        size
    } else {
        rounded_floor.saturating_add(step)
    }
}

/// PyTorch's `get_allocation_size`: the classic segment for a rounded request.
pub fn segment_size(rounded: usize) -> usize {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        rounded.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_matches_pytorch() {
        assert_eq!(round_size(1, 0), 512);
        assert_eq!(round_size(512, 0), 512);
        assert_eq!(round_size(513, 0), 1024);
        assert_eq!(round_size(1_000_000, 0), 1_000_448);
        // 4 divisions between 1 MiB and 2 MiB: steps of 256 KiB.
        assert_eq!(round_size((1 << 20) + 1, 4), (1 << 20) + (256 << 10));
        assert_eq!(round_size(1 << 20, 4), 1 << 20);
        assert_eq!(round_size(1200, 4), 1536);
    }

    #[test]
    fn segment_sizes_match_pytorch() {
        assert_eq!(segment_size(512), SMALL_BUFFER);
        assert_eq!(segment_size(SMALL_SIZE), SMALL_BUFFER);
        assert_eq!(segment_size(SMALL_SIZE + 512), LARGE_BUFFER);
        assert_eq!(segment_size(MIN_LARGE_ALLOC), MIN_LARGE_ALLOC);
        assert_eq!(
            segment_size(MIN_LARGE_ALLOC + 1),
            MIN_LARGE_ALLOC + ROUND_LARGE
        );
    }

    #[test]
    fn fraction_limit_is_a_share_of_total() {
        assert_eq!(MemoryLimit::Fraction(0.5).bytes(1000), 500);
        assert_eq!(MemoryLimit::Fraction(2.0).bytes(1000), 1000);
        assert_eq!(MemoryLimit::Bytes(7).bytes(1000), 7);
    }
}
