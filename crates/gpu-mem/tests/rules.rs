//! PyTorch's rules and this crate's guarantees, case by case on SimDevice.

use gpu_mem::snapshot::{BlockStateName, TraceAction};
use gpu_mem::trace::{self, bert::BertTraceSpec};
use gpu_mem::{
    AllocError, CachingAllocator, Config, MemoryLimit, OomCause, PoolKind, SimDevice, StreamId,
};
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

const MIB: usize = 1 << 20;
const S0: StreamId = StreamId(0);
const S1: StreamId = StreamId(1);

fn sim(capacity_mib: usize) -> SimDevice {
    SimDevice::new(capacity_mib * MIB, 2 * MIB)
}

fn check(a: &CachingAllocator<SimDevice>) {
    a.check_invariants(|p, n| a.backend().is_backed(p, n))
        .unwrap();
}

#[test]
fn pools_segment_sizes_and_reuse_follow_pytorch() {
    let a = CachingAllocator::new(sim(1024), Config::default()).unwrap();
    let small = a.allocate(1000, S0).unwrap();
    assert_eq!(small.block_size(), 1024);
    assert_eq!(a.pool_for(1000), PoolKind::Small);
    let st = a.stats();
    assert_eq!(st.reserved_bytes.small_pool.current, 2 * MIB as u64);
    let mid = a.allocate(3 * MIB, S0).unwrap();
    assert_eq!(a.stats().reserved_bytes.large_pool.current, 20 * MIB as u64);
    // Fits the 17 MiB left in the 20 MiB segment: best fit, no new segment.
    let fits = a.allocate(11 * MIB + 1, S0).unwrap();
    assert_eq!(fits.ptr(), mid.ptr() + 3 * MIB as u64);
    assert_eq!(a.stats().reserved_bytes.large_pool.current, 20 * MIB as u64);
    // Above 10 MiB and no room: a request-sized segment rounded to 2 MiB.
    let big = a.allocate(21 * MIB + 1, S0).unwrap();
    assert_eq!(
        a.stats().reserved_bytes.large_pool.current,
        (20 + 22) as u64 * MIB as u64
    );
    let (p_small, p_mid) = (small.ptr(), mid.ptr());
    a.free(small).unwrap();
    a.free(mid).unwrap();
    // Cached blocks come back without touching the device.
    let device_allocs = a.stats().num_device_alloc;
    let again = a.allocate(900, S0).unwrap();
    assert_eq!(again.ptr(), p_small);
    let again_mid = a.allocate(3 * MIB, S0).unwrap();
    assert_eq!(again_mid.ptr(), p_mid);
    assert_eq!(a.stats().num_device_alloc, device_allocs);
    // Another stream does not get this stream's cached blocks.
    let other = a.allocate(900, S1).unwrap();
    assert_ne!(other.ptr(), p_small);
    check(&a);
    for x in [again, again_mid, fits, big, other] {
        a.free(x).unwrap();
    }
    a.empty_cache().unwrap();
    assert_eq!(a.stats().reserved_bytes.all.current, 0);
    assert_eq!(a.backend().used(), 0);
}

#[test]
fn split_blocks_coalesce_when_freed() {
    let a = CachingAllocator::new(sim(1024), Config::default()).unwrap();
    let x = a.allocate(4 * MIB, S0).unwrap();
    let y = a.allocate(4 * MIB, S0).unwrap();
    assert_eq!(
        y.ptr(),
        x.ptr() + 4 * MIB as u64,
        "carved from the same 20 MiB segment"
    );
    assert_eq!(a.stats().inactive_split.all.current, 1);
    a.free(x).unwrap();
    assert_eq!(a.stats().inactive_split.all.current, 2);
    a.free(y).unwrap();
    let st = a.stats();
    assert_eq!(
        st.inactive_split.all.current, 0,
        "one whole free segment again"
    );
    assert_eq!(a.fragmentation().largest_free_block, 20 * MIB as u64);
    check(&a);
}

#[test]
fn max_split_size_keeps_big_blocks_whole() {
    let config = Config {
        max_split_size: Some(24 * MIB),
        ..Config::default()
    };
    let a = CachingAllocator::new(sim(1024), config).unwrap();
    let big = a.allocate(40 * MIB, S0).unwrap();
    let p = big.ptr();
    a.free(big).unwrap();
    // A small-ish large request must not carve up the oversize block.
    let x = a.allocate(2 * MIB, S0).unwrap();
    assert_ne!(x.ptr(), p);
    // A request within 20 MiB of it that nothing smaller fits reuses it
    // whole (the rest of x's 20 MiB segment is 18 MiB).
    let y = a.allocate(25 * MIB, S0).unwrap();
    assert_eq!(y.ptr(), p);
    assert_eq!(y.block_size(), 40 * MIB);
    check(&a);
}

#[test]
fn configurations_pytorch_refuses_are_refused_naming_the_field() {
    let refused = [
        (
            "max_split_size",
            Config {
                max_split_size: Some(20 * MIB),
                ..Config::default()
            },
        ),
        (
            "max_split_size",
            Config {
                max_split_size: Some(0),
                ..Config::default()
            },
        ),
        (
            "roundup_power2_divisions",
            Config {
                roundup_power2_divisions: 3,
                ..Config::default()
            },
        ),
        (
            "garbage_collection_threshold",
            Config {
                garbage_collection_threshold: 1.0,
                ..Config::default()
            },
        ),
        (
            "garbage_collection_threshold",
            Config {
                garbage_collection_threshold: -0.5,
                ..Config::default()
            },
        ),
        (
            "garbage_collection_threshold",
            Config {
                garbage_collection_threshold: f64::NAN,
                ..Config::default()
            },
        ),
        (
            "memory limit fraction",
            Config {
                limit: Some(MemoryLimit::Fraction(f64::NAN)),
                ..Config::default()
            },
        ),
    ];
    for (field, config) in refused {
        let err = CachingAllocator::new(sim(64), config.clone())
            .err()
            .unwrap_or_else(|| panic!("{config:?} was accepted"));
        assert!(matches!(err, AllocError::Invalid(_)), "{err}");
        assert!(
            err.to_string().contains(field),
            "{err} does not name {field}"
        );
    }
    let accepted = Config {
        max_split_size: Some(20 * MIB + 1),
        roundup_power2_divisions: 1,
        garbage_collection_threshold: 0.999,
        ..Config::default()
    };
    CachingAllocator::new(sim(64), accepted).unwrap();
}

/// Divisions are only bounded by being a power of two, as in PyTorch; so
/// many that no size is above 512 * divisions round as if there were none.
#[test]
fn more_rounding_divisions_than_sizes_round_to_512_bytes() {
    let config = Config {
        roundup_power2_divisions: 1 << 60,
        ..Config::default()
    };
    let a = CachingAllocator::new(sim(64), config).unwrap();
    let x = a.allocate(3 * MIB + 1, S0).unwrap();
    assert_eq!(x.block_size(), 3 * MIB + 512);
    assert_eq!(a.pool_for(usize::MAX), PoolKind::Large);
    a.free(x).unwrap();
    check(&a);
}

#[test]
fn record_stream_delays_reuse_until_the_other_stream_is_done() {
    let a = CachingAllocator::new(sim(1024), Config::default()).unwrap();
    let x = a.allocate(1000, S0).unwrap();
    let p = x.ptr();
    a.record_stream(&x, S1).unwrap();
    a.free(x).unwrap();
    assert_eq!(
        a.snapshot().segments[0].blocks[0].state,
        BlockStateName::ActivePendingFree
    );
    let y = a.allocate(1000, S0).unwrap();
    assert_ne!(y.ptr(), p, "still in use on stream 1");
    a.backend().complete_all_work();
    let z = a.allocate(1000, S0).unwrap();
    assert_eq!(z.ptr(), p, "reused once stream 1's work finished");
    check(&a);
}

/// Without caching, a block used on another stream goes back to the device
/// once that stream's work is done; it is never reused as a cache.
#[test]
fn no_caching_gives_a_cross_stream_free_back_once_the_stream_is_done() {
    let a = CachingAllocator::new(sim(1024), Config::no_caching()).unwrap();
    let x = a.allocate(8 * MIB, S0).unwrap();
    a.record_stream(&x, S1).unwrap();
    a.free(x).unwrap();
    a.backend().complete_all_work();
    let allocs = a.stats().num_device_alloc;
    let y = a.allocate(8 * MIB, S0).unwrap();
    let st = a.stats();
    assert_eq!(
        st.num_device_alloc,
        allocs + 1,
        "served from a cached block"
    );
    assert_eq!(st.reserved_bytes.all.current, 8 * MIB as u64);
    assert_eq!(a.backend().used(), 8 * MIB);
    check(&a);
    a.free(y).unwrap();
    assert_eq!(a.backend().used(), 0);
}

#[test]
fn expandable_segments_grow_in_place_and_unmap_free_tails() {
    let config = Config {
        record_trace: true,
        ..Config::expandable()
    };
    let a = CachingAllocator::new(sim(1024), config).unwrap();
    let x = a.allocate(3 * MIB, S0).unwrap();
    let y = a.allocate(5 * MIB, S0).unwrap();
    assert_eq!(
        y.ptr(),
        x.ptr() + 3 * MIB as u64,
        "the segment grew in place"
    );
    assert_eq!(a.stats().reserved_bytes.all.current, 8 * MIB as u64);
    assert_eq!(a.stats().segment.all.current, 1);
    let syncs = a.backend().sync_count();
    a.free(y).unwrap();
    a.empty_cache().unwrap();
    assert!(
        a.backend().sync_count() > syncs,
        "synchronised before unmapping"
    );
    assert_eq!(a.stats().reserved_bytes.all.current, 4 * MIB as u64);
    check(&a);
    a.free(x).unwrap();
    a.empty_cache().unwrap();
    assert_eq!(a.backend().used(), 0);
    assert_eq!(a.backend().reservation_count(), 0);
    let actions: Vec<TraceAction> = a.take_trace().iter().map(|e| e.action).collect();
    assert!(actions.contains(&TraceAction::SegmentMap));
    assert!(actions.contains(&TraceAction::SegmentUnmap));
}

#[test]
fn limit_gives_a_typed_actionable_oom_even_with_device_room() {
    let config = Config {
        limit: Some(MemoryLimit::Bytes(64 * MIB)),
        ..Config::default()
    };
    let a = CachingAllocator::new(sim(1024), config).unwrap();
    let x = a.allocate(40 * MIB, S0).unwrap();
    let err = a.allocate(40 * MIB, S0).unwrap_err();
    let oom = err.as_oom().expect("an OutOfMemory");
    assert_eq!(oom.cause, OomCause::Limit);
    assert_eq!(oom.limit, Some(64 * MIB));
    assert_eq!(oom.allocated, 40 * MIB as u64);
    let msg = err.to_string();
    for needle in [
        "tried to allocate 40.00 MiB",
        "total capacity of 1.00 GiB",
        "40.00 MiB is allocated",
        "limit of 64.00 MiB",
        "set_limit",
    ] {
        assert!(msg.contains(needle), "{needle:?} missing from: {msg}");
    }
    let st = a.stats();
    assert_eq!((st.num_ooms, st.num_alloc_retries), (1, 1));
    a.set_limit(Some(MemoryLimit::Fraction(0.5))).unwrap();
    let y = a.allocate(40 * MIB, S0).unwrap();
    assert!(a.set_limit(Some(MemoryLimit::Fraction(1.5))).is_err());
    a.free(x).unwrap();
    a.free(y).unwrap();
}

#[test]
fn device_oom_frees_the_cache_and_retries_then_reports_fragmentation() {
    let a = CachingAllocator::new(sim(100), Config::default()).unwrap();
    // Fill the device with 20 MiB segments holding small live blocks.
    let mut keep = Vec::new();
    let mut drop_later = Vec::new();
    for _ in 0..5 {
        keep.push(a.allocate(2 * MIB, S0).unwrap());
        drop_later.push(a.allocate(17 * MIB, S0).unwrap());
    }
    for x in drop_later {
        a.free(x).unwrap();
    }
    let err = a.allocate(30 * MIB, S0).unwrap_err();
    let oom = err.as_oom().expect("an OutOfMemory");
    assert_eq!(oom.cause, OomCause::Device);
    assert!(oom.reserved_unallocated >= 30 * MIB as u64);
    assert!(err.to_string().contains("expandable segments"), "{err}");
    // Freed cached segments are retried: one whole free segment is enough.
    for x in keep.drain(..) {
        a.free(x).unwrap();
    }
    let y = a.allocate(60 * MIB, S0).unwrap();
    assert_eq!(a.stats().num_alloc_retries, 2);
    a.free(y).unwrap();
    check(&a);
}

#[test]
fn injected_map_failure_is_an_oom_not_corruption() {
    let a = CachingAllocator::new(sim(1024), Config::expandable()).unwrap();
    a.backend().fail_nth_map(1);
    a.backend().fail_nth_map(1);
    let err = a.allocate(MIB * 3, S0);
    assert!(matches!(err, Err(AllocError::OutOfMemory(_))) || err.is_ok());
    check(&a);
}

#[test]
fn stats_use_pytorch_keys_and_reset_peak() {
    let a = CachingAllocator::new(sim(1024), Config::default()).unwrap();
    let x = a.allocate(5000, S0).unwrap();
    a.free(x).unwrap();
    let map = a.stats().to_map();
    assert_eq!(map["allocated_bytes.all.peak"], 5120);
    assert_eq!(map["requested_bytes.small_pool.allocated"], 5000);
    assert_eq!(map["allocation.all.freed"], 1);
    assert_eq!(map["num_device_alloc"], 1);
    assert!(map.contains_key("inactive_split_bytes.large_pool.current"));
    assert_eq!(map.len(), 9 * 3 * 4 + 4);
    a.reset_peak();
    assert_eq!(a.stats().allocated_bytes.all.peak, 0);
    let json = a.snapshot().to_json();
    assert!(json.contains("\"segment_type\": \"small\""), "{json}");
}

#[test]
fn buffers_free_on_drop_from_many_threads() {
    let a = Arc::new(CachingAllocator::new(sim(1024), Config::default()).unwrap());
    std::thread::scope(|s| {
        for t in 0..4 {
            let a = Arc::clone(&a);
            s.spawn(move || {
                for i in 0..500 {
                    let b = a
                        .allocate_buffer(512 * (i % 7 + 1) + t, StreamId(t as u64 % 2))
                        .unwrap();
                    assert!(!b.is_empty());
                }
            });
        }
    });
    assert_eq!(a.stats().allocation.all.current, 0);
    check(&a);
}

#[test]
fn multi_trial_bert_trace_expandable_within_five_percent_of_requested() {
    let spec = BertTraceSpec {
        trials: vec![(16, 128), (8, 256), (32, 64), (4, 512)],
        steps_per_trial: 2,
        ..BertTraceSpec::default()
    };
    let records = spec.generate();
    let expandable = trace::replay(&records, Config::expandable(), SimDevice::h100()).unwrap();
    let classic = trace::replay(&records, Config::default(), SimDevice::h100()).unwrap();
    assert_eq!(expandable.num_ooms + classic.num_ooms, 0);
    assert_eq!(expandable.peak_requested, classic.peak_requested);
    assert!(expandable.reserved_over_requested <= 1.05, "{expandable:?}");
    assert!(
        classic.reserved_over_requested > expandable.reserved_over_requested,
        "{classic:?}"
    );
}

/// A replay reports the fragmentation of the last time reserved memory
/// reached its peak, not the first.
#[test]
fn replay_fragmentation_at_peak_is_from_the_last_time_the_peak_is_reached() {
    use gpu_mem::trace::TraceRecord::{self, EmptyCache, Free};
    let alloc = |id, mib| TraceRecord::Alloc {
        id,
        size: mib * MIB,
        stream: 0,
    };
    let records = [
        // 38 MiB, the peak: a 20 MiB segment and an 18 MiB one.
        alloc(1, 4),
        alloc(2, 18),
        Free { id: 2 },
        EmptyCache,
        // 38 MiB again, with a free 4 MiB hole before a free 12 MiB tail.
        alloc(3, 4),
        Free { id: 1 },
        alloc(4, 18),
    ];
    let r = trace::replay(&records, Config::default(), sim(1024)).unwrap();
    assert_eq!(r.peak_reserved, 38 * MIB as u64);
    assert!((r.fragmentation_at_peak - 0.25).abs() < 1e-9, "{r:?}");
}

#[test]
fn absurd_requests_are_typed_errors_not_panics() {
    let a = CachingAllocator::new(sim(64), Config::default()).unwrap();
    for requested in [usize::MAX, usize::MAX - 511, (1 << 48) + 1] {
        let err = a.allocate(requested, S0).unwrap_err();
        let oom = err.as_oom().expect("an out-of-memory report");
        assert_eq!(oom.cause, OomCause::Device);
        assert_eq!(oom.requested, requested);
        assert!(
            err.to_string().contains("larger than the whole device"),
            "{err}"
        );
    }
    let err = a.allocate(1 << 40, S0).unwrap_err();
    assert!(err.as_oom().is_some(), "{err}");
    assert_eq!(a.stats().num_ooms, 4);
    // Where a request would go, at any size.
    assert_eq!(a.pool_for(usize::MAX), PoolKind::Large);
    for divisions in [0, 1, 4, 8] {
        assert_eq!(
            gpu_mem::config::round_size(usize::MAX, divisions),
            usize::MAX
        );
    }
    check(&a);
}

/// Under a limit, a request larger than the whole device is reported as
/// such: raising the limit cannot help.
#[test]
fn a_request_larger_than_the_device_says_so_under_a_limit() {
    let config = Config {
        limit: Some(MemoryLimit::Bytes(256 * MIB)),
        ..Config::default()
    };
    let a = CachingAllocator::new(sim(1024), config).unwrap();
    let err = a.allocate(2048 * MIB, S0).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("larger than the whole device"), "{msg}");
    assert!(!msg.contains("set_limit"), "{msg}");
}

/// A simulated device may claim more memory than the address space holds:
/// an expandable segment reserves what fits, and huge requests on it are
/// out of memory.
#[test]
fn expandable_segments_on_a_device_of_usize_max_bytes() {
    let device = SimDevice::new(usize::MAX, 2 * MIB);
    let a = CachingAllocator::new(device, Config::expandable()).unwrap();
    let x = a.allocate(1, S0).unwrap();
    assert_eq!(a.stats().reserved_bytes.all.current, 2 * MIB as u64);
    for requested in [usize::MAX, usize::MAX - 4095] {
        let err = a.allocate(requested, S0).unwrap_err();
        assert!(err.as_oom().is_some(), "{err}");
    }
    a.free(x).unwrap();
    check(&a);
}

/// An allocation freed into an allocator that did not make it is refused
/// and frees nothing there, though two simulated devices hand out the same
/// first addresses.
#[test]
fn an_allocation_from_another_allocator_is_refused() {
    let a = CachingAllocator::new(sim(64), Config::default()).unwrap();
    let b = CachingAllocator::new(sim(64), Config::default()).unwrap();
    let from_a = a.allocate(1000, S0).unwrap();
    let from_b = b.allocate(1000, S0).unwrap();
    assert_eq!(from_a.ptr(), from_b.ptr());
    let err = b.free(from_a).unwrap_err();
    assert!(matches!(err, AllocError::Invalid(_)), "{err}");
    assert_eq!(b.stats().allocated_bytes.all.current, 1024);
    b.free(from_b).unwrap();
    check(&a);
    check(&b);
}

#[test]
fn garbage_collection_frees_cached_segments_above_the_threshold() {
    let config = Config {
        limit: Some(MemoryLimit::Bytes(100 * MIB)),
        garbage_collection_threshold: 0.5,
        ..Config::default()
    };
    let a = CachingAllocator::new(sim(1024), config).unwrap();
    let blocks: Vec<_> = (0..5).map(|_| a.allocate(12 * MIB, S0).unwrap()).collect();
    for b in blocks {
        a.free(b).unwrap();
    }
    assert_eq!(a.stats().reserved_bytes.all.current, 60 * MIB as u64);
    // 60 MiB cached > 50% of the limit: the oldest segments go first.
    let x = a.allocate(14 * MIB, S0).unwrap();
    let st = a.stats();
    assert!(st.num_device_free >= 1, "{st:?}");
    assert!(st.reserved_bytes.all.current <= 62 * MIB as u64);
    a.free(x).unwrap();
    check(&a);
}

/// Garbage collection runs only when no cached block fits: a request that
/// one serves goes to neither the device nor the collector.
#[test]
fn garbage_collection_keeps_the_cached_block_a_request_reuses() {
    for mode in [Config::default(), Config::expandable()] {
        let config = Config {
            limit: Some(MemoryLimit::Bytes(100 * MIB)),
            garbage_collection_threshold: 0.5,
            ..mode
        };
        let a = CachingAllocator::new(sim(1024), config).unwrap();
        let big = a.allocate(40 * MIB, S0).unwrap();
        let other = a.allocate(12 * MIB, S0).unwrap();
        let p = big.ptr();
        a.free(big).unwrap();
        a.free(other).unwrap();
        // 52 MiB cached is above the threshold.
        let before = a.stats();
        let again = a.allocate(40 * MIB, S0).unwrap();
        let after = a.stats();
        assert_eq!(again.ptr(), p);
        assert_eq!(
            (after.num_device_alloc, after.num_device_free),
            (before.num_device_alloc, before.num_device_free),
            "{:?}",
            a.config()
        );
        a.free(again).unwrap();
        check(&a);
    }
}

/// In expandable mode the collector unmaps the free tails that have been
/// free longest, only down to the threshold, not every cached page.
#[test]
fn expandable_garbage_collection_unmaps_the_oldest_free_tails_down_to_the_threshold() {
    const S2: StreamId = StreamId(2);
    let config = Config {
        limit: Some(MemoryLimit::Bytes(80 * MIB)),
        garbage_collection_threshold: 0.5,
        ..Config::expandable()
    };
    let a = CachingAllocator::new(sim(1024), config).unwrap();
    let x0 = a.allocate(20 * MIB, S0).unwrap();
    let tail = a.allocate(4 * MIB, S0).unwrap();
    let x1 = a.allocate(20 * MIB, S1).unwrap();
    a.free(x1).unwrap();
    a.free(tail).unwrap();
    // S0's cached memory is reused (younger); S1's stays free (older).
    for _ in 0..3 {
        a.free(a.allocate(4 * MIB, S0).unwrap()).unwrap();
    }
    a.free(x0).unwrap();
    assert_eq!(a.stats().reserved_bytes.all.current, 44 * MIB as u64);
    // 44 MiB is 4 MiB above the threshold: S1's older 20 MiB tail goes.
    let y = a.allocate(20 * MIB, S2).unwrap();
    assert_eq!(a.stats().reserved_bytes.all.current, 44 * MIB as u64);
    let device_allocs = a.stats().num_device_alloc;
    let z = a.allocate(24 * MIB, S0).unwrap();
    assert_eq!(
        a.stats().num_device_alloc,
        device_allocs,
        "S0's tail was unmapped"
    );
    // The free tail of the segment a request grows is part of the request.
    a.free(y).unwrap();
    let frees = a.stats().num_device_free;
    let y = a.allocate(22 * MIB, S2).unwrap();
    assert_eq!(a.stats().num_device_free, frees, "S2's tail was unmapped");
    assert_eq!(a.stats().reserved_bytes.all.current, 46 * MIB as u64);
    check(&a);
    a.free(y).unwrap();
    a.free(z).unwrap();
}

#[test]
fn the_allocator_and_its_buffers_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<CachingAllocator<SimDevice>>();
    send_sync::<gpu_mem::DeviceBuffer<SimDevice>>();
    #[cfg(feature = "cuda")]
    send_sync::<CachingAllocator<gpu_mem::cuda::CudaDevice>>();
}

#[test]
fn expandable_segments_fall_back_to_classic_without_virtual_memory() {
    let dev = sim(64).without_virtual_memory("the device reports no virtual memory management");
    let a = CachingAllocator::new(dev, Config::expandable()).unwrap();
    assert_eq!(
        a.expandable_fallback(),
        Some("the device reports no virtual memory management")
    );
    assert!(!a.config().expandable_segments);
    // Classic segments: the allocation works and reserves no address range.
    let x = a.allocate(3 * MIB, S0).unwrap();
    assert_eq!(a.backend().reservation_count(), 0);
    check(&a);
    a.free(x).unwrap();
    // A device with virtual memory keeps expandable segments.
    let b = CachingAllocator::new(sim(64), Config::expandable()).unwrap();
    assert_eq!(b.expandable_fallback(), None);
    let y = b.allocate(3 * MIB, S0).unwrap();
    assert_eq!(b.backend().reservation_count(), 1);
    b.free(y).unwrap();
}

/// A simulated device changed where a test needs it: pages of
/// `granularity` bytes; streams in `busy` whose queued work does not finish
/// until they are synchronised (the simulated device's streams all finish
/// together); and `failing_waits` event waits that fail.
struct Custom {
    device: SimDevice,
    granularity: usize,
    busy: Mutex<Vec<StreamId>>,
    failing_waits: AtomicU32,
}

impl Custom {
    fn new(device: SimDevice) -> Self {
        Custom {
            granularity: gpu_mem::Backend::granularity(&device),
            device,
            busy: Mutex::default(),
            failing_waits: AtomicU32::default(),
        }
    }

    fn finish(&self, stream: StreamId) {
        self.busy.lock().unwrap().retain(|s| *s != stream);
    }
}

impl gpu_mem::Backend for Custom {
    type Event = (StreamId, <SimDevice as gpu_mem::Backend>::Event);
    fn mem_info(&self) -> Result<gpu_mem::MemInfo, gpu_mem::BackendError> {
        self.device.mem_info()
    }
    fn granularity(&self) -> usize {
        self.granularity
    }
    fn malloc(&self, size: usize) -> Result<gpu_mem::DevicePtr, gpu_mem::BackendError> {
        self.device.malloc(size)
    }
    fn free(&self, ptr: gpu_mem::DevicePtr, size: usize) -> Result<(), gpu_mem::BackendError> {
        self.device.free(ptr, size)
    }
    fn reserve(&self, size: usize) -> Result<gpu_mem::DevicePtr, gpu_mem::BackendError> {
        self.device.reserve(size)
    }
    fn release_reservation(
        &self,
        base: gpu_mem::DevicePtr,
        size: usize,
    ) -> Result<(), gpu_mem::BackendError> {
        self.device.release_reservation(base, size)
    }
    fn map(&self, addr: gpu_mem::DevicePtr, size: usize) -> Result<(), gpu_mem::BackendError> {
        self.device.map(addr, size)
    }
    fn unmap(&self, addr: gpu_mem::DevicePtr, size: usize) -> Result<(), gpu_mem::BackendError> {
        self.device.unmap(addr, size)
    }
    fn synchronize(&self, stream: StreamId) -> Result<(), gpu_mem::BackendError> {
        self.finish(stream);
        self.device.synchronize(stream)
    }
    fn synchronize_device(&self) -> Result<(), gpu_mem::BackendError> {
        self.busy.lock().unwrap().clear();
        self.device.synchronize_device()
    }
    fn record_event(&self, stream: StreamId) -> Result<Self::Event, gpu_mem::BackendError> {
        Ok((stream, self.device.record_event(stream)?))
    }
    fn event_done(&self, (stream, event): &Self::Event) -> Result<bool, gpu_mem::BackendError> {
        Ok(!self.busy.lock().unwrap().contains(stream) && self.device.event_done(event)?)
    }
    fn event_wait(&self, (stream, event): &Self::Event) -> Result<(), gpu_mem::BackendError> {
        let fail = self
            .failing_waits
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if fail {
            return Err(gpu_mem::BackendError::Driver {
                call: "cuEventSynchronize",
                message: "CUDA_ERROR_LAUNCH_TIMEOUT".into(),
            });
        }
        self.finish(*stream);
        self.device.event_wait(event)
    }
}

/// Segments are cut and mapped in whole pages: a backend whose page size
/// is 0 (a division by zero inside the allocator's lock) or not a power of
/// two is refused when the allocator is made.
#[test]
fn a_backend_page_size_that_is_not_a_power_of_two_is_refused() {
    for granularity in [0, 3 << 20] {
        let backend = Custom {
            granularity,
            ..Custom::new(sim(64))
        };
        let err = CachingAllocator::new(backend, Config::expandable())
            .err()
            .expect("refused");
        assert!(
            matches!(&err, AllocError::Invalid(m) if m.contains("power of two")),
            "{err}"
        );
    }
    let backend = Custom::new(sim(64));
    let a = CachingAllocator::new(backend, Config::expandable()).unwrap();
    a.free(a.allocate(1 << 20, StreamId(0)).unwrap()).unwrap();
}

/// Streams finish independently: a block whose other stream is done is
/// reused while another block still waits for a busy stream.
#[test]
fn a_busy_stream_does_not_hold_back_frees_whose_streams_are_done() {
    const S2: StreamId = StreamId(2);
    let a = CachingAllocator::new(Custom::new(sim(1024)), Config::default()).unwrap();
    a.backend().busy.lock().unwrap().push(S1);
    let x = a.allocate(4 * MIB, S0).unwrap();
    let y = a.allocate(4 * MIB, S0).unwrap();
    let keep = a.allocate(4 * MIB, S0).unwrap(); // y does not merge with the free rest
    let (px, py) = (x.ptr(), y.ptr());
    a.record_stream(&x, S1).unwrap();
    a.record_stream(&y, S2).unwrap();
    a.free(x).unwrap();
    a.free(y).unwrap();
    a.backend().device.complete_all_work(); // all but S1's
    let z = a.allocate(4 * MIB, S0).unwrap();
    assert_eq!(z.ptr(), py, "y's block waits behind x's busy stream");
    let w = a.allocate(4 * MIB, S0).unwrap();
    assert_ne!(w.ptr(), px, "x's block is reused while S1 is busy");
    a.backend().finish(S1);
    let v = a.allocate(4 * MIB, S0).unwrap();
    assert_eq!(v.ptr(), px);
    for b in [z, w, v, keep] {
        a.free(b).unwrap();
    }
    a.check_invariants(|p, n| a.backend().device.is_backed(p, n))
        .unwrap();
}

/// A failed event wait in `empty_cache` is an error that a retry gets past:
/// the block waiting for the event is neither lost nor freed early.
#[test]
fn a_failed_event_wait_keeps_the_block_pending_for_a_retry() {
    let a = CachingAllocator::new(Custom::new(sim(1024)), Config::default()).unwrap();
    a.backend().busy.lock().unwrap().push(S1);
    let x = a.allocate(4 * MIB, S0).unwrap();
    a.record_stream(&x, S1).unwrap();
    a.free(x).unwrap();
    a.backend().failing_waits.store(1, SeqCst);
    assert!(matches!(a.empty_cache(), Err(AllocError::Backend(_))));
    assert_eq!(a.stats().active_bytes.all.current, 4 * MIB as u64);
    a.check_invariants(|p, n| a.backend().device.is_backed(p, n))
        .unwrap();
    a.empty_cache().unwrap();
    let st = a.stats();
    assert_eq!(st.active_bytes.all.current, 0);
    assert_eq!(st.reserved_bytes.all.current, 0);
    assert_eq!(a.backend().device.used(), 0);
    a.check_invariants(|p, n| a.backend().device.is_backed(p, n))
        .unwrap();
}
