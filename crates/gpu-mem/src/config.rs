//! Allocator configuration and PyTorch's size rules.
//!
//! The constants and rounding are those of PyTorch's CUDACachingAllocator:
//! requests round up to 512 bytes; requests up to 1 MiB use the small pool,
//! carved from 2 MiB segments; larger ones use the large pool, carved from
//! 20 MiB segments below 10 MiB and from request-sized segments (rounded to
//! 2 MiB) above.

use crate::error::{AllocError, human_bytes};
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

    /// Refuse a fraction outside 0..=1 (NaN included).
    pub(crate) fn validate(self) -> Result<(), AllocError> {
        match self {
            MemoryLimit::Fraction(f) if !(0.0..=1.0).contains(&f) => Err(AllocError::Invalid(
                format!("memory limit fraction {f} is outside 0..=1"),
            )),
            _ => Ok(()),
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
    /// Blocks of at least this many bytes are never split, and are only
    /// reused for requests at least this big (and at most 20 MiB smaller).
    /// Classic mode. More than 20 MiB, as PyTorch requires of
    /// `max_split_size_mb`.
    pub max_split_size: Option<usize>,
    /// Round requests above 512 * divisions up to one of `divisions` steps
    /// between powers of two (`roundup_power2_divisions`): 0 or a power of
    /// two, as in PyTorch; 0 or 1 disables.
    pub roundup_power2_divisions: usize,
    /// With a limit set: when no cached block fits a request and reserved
    /// memory exceeds this fraction of the limit, give back the cached
    /// memory free longest (whole classic segments, expandable segments'
    /// free tail pages) until reserved memory is back at the fraction,
    /// before asking the device for more. 0 disables; otherwise strictly
    /// between 0 and 1, as in PyTorch.
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

    /// Check the settings PyTorch's allocator checks (and the limit
    /// fraction); the error names the field. [`CachingAllocator::new`]
    /// refuses a configuration that fails this.
    ///
    /// [`CachingAllocator::new`]: crate::CachingAllocator::new
    pub fn validate(&self) -> Result<(), AllocError> {
        if let Some(limit) = self.limit {
            limit.validate()?;
        }
        if let Some(max) = self.max_split_size
            && max <= LARGE_BUFFER
        {
            // Smaller blocks are carved from 20 MiB segments anyway, and the
            // reuse rule allows blocks up to 20 MiB larger than the request.
            return Err(AllocError::Invalid(format!(
                "max_split_size of {max} bytes is too small: it must be more than {}",
                human_bytes(LARGE_BUFFER as u64)
            )));
        }
        let divisions = self.roundup_power2_divisions;
        if divisions != 0 && !divisions.is_power_of_two() {
            return Err(AllocError::Invalid(format!(
                "roundup_power2_divisions of {divisions} is neither 0 nor a power of two"
            )));
        }
        let threshold = self.garbage_collection_threshold;
        if threshold != 0.0 && !(threshold > 0.0 && threshold < 1.0) {
            return Err(AllocError::Invalid(format!(
                "garbage_collection_threshold of {threshold} is outside (0, 1) (0 disables it)"
            )));
        }
        Ok(())
    }
}

/// Which pool a request is served from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    /// Requests of at most 1 MiB after rounding, carved from 2 MiB segments.
    Small,
    /// Larger requests, from 20 MiB or request-sized segments.
    Large,
}

impl PoolKind {
    /// The pool of a request of `rounded` bytes (already rounded by
    /// [`round_size`]).
    pub fn for_size(rounded: usize) -> PoolKind {
        if rounded <= SMALL_SIZE {
            PoolKind::Small
        } else {
            PoolKind::Large
        }
    }

    /// 0 for the small pool, 1 for the large one (for per-pool arrays).
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
    // With more divisions than usize::MAX / 512, no size is above the bound.
    if divisions > 1
        && MIN_BLOCK_SIZE
            .checked_mul(divisions)
            .is_some_and(|bound| size > bound)
    {
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
    fn rounding_with_more_divisions_than_sizes_does_not_overflow() {
        for divisions in [usize::MAX / 512 + 1, 1 << 60, usize::MAX] {
            assert_eq!(round_size(1000, divisions), 1024);
            assert_eq!(round_size(usize::MAX / 2, divisions), usize::MAX / 2 + 1);
        }
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
