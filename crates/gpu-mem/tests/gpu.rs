//! CUDA backend tests. They need feature `cuda` and a GPU: they are
//! `#[ignore]`d, so `cargo test` lists them as ignored, and `cargo xtask
//! gpu-test` runs them with `--include-ignored`. The missing-driver test
//! runs wherever libcuda is absent.

#![cfg(feature = "cuda")]

use gpu_mem::cuda::cudarc::driver::{CudaContext, sys};
use gpu_mem::cuda::{CudaDevice, driver, stream_id};
use gpu_mem::{Backend, BackendError, CachingAllocator, Config, StreamId};
use std::sync::Arc;

const MIB: usize = 1 << 20;

fn allocator(config: Config) -> Arc<CachingAllocator<CudaDevice>> {
    let device = CudaDevice::new(0).expect("CUDA device 0");
    Arc::new(CachingAllocator::new(device, config).expect("allocator"))
}

#[test]
fn missing_driver_is_a_clean_error() {
    // SAFETY: only tries to load the library.
    if unsafe { sys::is_culib_present() } {
        eprintln!("skipping missing_driver_is_a_clean_error: libcuda is present");
        return;
    }
    match CudaDevice::new(0) {
        Err(BackendError::NoDriver(msg)) => assert!(msg.contains("libcuda")),
        other => panic!("expected NoDriver, got {other:?}"),
    }
}

/// Write a pattern over every backed byte of every segment (allocated and
/// cached blocks alike), read it back, compare.
fn write_and_read_every_mapped_byte(a: &CachingAllocator<CudaDevice>) {
    for seg in a.snapshot().segments {
        let pattern: Vec<u8> = (0..seg.total_size)
            .map(|i| ((i as u64).wrapping_mul(2654435761) >> 7) as u8 ^ (seg.address as u8))
            .collect();
        driver::copy_to_device(seg.address, &pattern).expect("write");
        let mut back = vec![0u8; seg.total_size];
        driver::copy_from_device(&mut back, seg.address).expect("read");
        assert!(
            back == pattern,
            "segment at {:#x} did not read back",
            seg.address
        );
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn classic_and_expandable_memory_is_really_usable() {
    for config in [Config::default(), Config::expandable()] {
        let a = allocator(config.clone());
        let stream = a.backend().context().default_stream();
        let sizes = [1000, 100_000, MIB, 3 * MIB + 5, 25 * MIB, 100 * MIB];
        let mut bufs = Vec::new();
        for &n in &sizes {
            let mut b = a.alloc_slice::<u32>(n / 4, &stream).expect("alloc");
            let host: Vec<u32> = (0..n as u32 / 4).map(|i| i ^ 0x5a5a_5a5a).collect();
            stream.memcpy_htod(&host, &mut b).expect("htod");
            let mut back = vec![0u32; host.len()];
            stream.memcpy_dtoh(&b, &mut back).expect("dtoh");
            stream.synchronize().expect("sync");
            assert_eq!(back, host, "{config:?} size {n}");
            bufs.push(b);
        }
        write_and_read_every_mapped_byte(&a);
        a.check_invariants(|_, _| true).expect("invariants");
        drop(bufs);
        a.empty_cache().expect("empty_cache");
        assert_eq!(a.stats().reserved_bytes.all.current, 0);
    }
}

/// The device's free bytes, read when no other process is allocating or
/// freeing: two readings 20 ms apart within 2 MiB of each other. `None`
/// when the device's free memory keeps moving for a second.
fn quiet_free(a: &CachingAllocator<CudaDevice>) -> Option<usize> {
    let mut previous = a.backend().mem_info().unwrap().free;
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = a.backend().mem_info().unwrap().free;
        if now.abs_diff(previous) <= 2 * MIB {
            return Some(now);
        }
        previous = now;
    }
    None
}

/// One grow / unmap cycle, checked against the device's free memory.
fn grow_and_unmap(a: &CachingAllocator<CudaDevice>) -> Result<(), String> {
    let quiet = || quiet_free(a).ok_or("the device's free memory kept moving".to_string());
    let free0 = quiet()?;
    let x = a.allocate(512 * MIB, StreamId(0)).unwrap();
    let free1 = quiet()?;
    if free0.saturating_sub(free1) < 512 * MIB {
        return Err(format!("growth by 512 MiB: free {free0} -> {free1}"));
    }
    let y = a.allocate(256 * MIB, StreamId(0)).unwrap();
    assert_eq!(y.ptr(), x.ptr() + 512 * MIB as u64, "grew in place");
    write_and_read_every_mapped_byte(a);
    a.free(y).unwrap();
    a.empty_cache().unwrap();
    let free2 = quiet()?;
    a.free(x).unwrap();
    a.empty_cache().unwrap();
    if free2 + 2 * MIB < free1 {
        return Err(format!(
            "unmapping the 256 MiB tail: free {free1} -> {free2}"
        ));
    }
    let free3 = quiet()?;
    if free3 + 4 * MIB < free0 {
        return Err(format!("everything back: free {free0} -> {free3}"));
    }
    Ok(())
}

/// Growth maps device memory and unmapping returns it, as the driver's
/// device-wide free memory shows. Other processes on the GPU move that
/// figure too: readings are taken only while it is still, and a cycle an
/// other process disturbed is run again (five tries); a failure lists what
/// every try saw.
#[test]
#[ignore = "needs a CUDA device"]
fn expandable_growth_and_unmap_show_in_mem_get_info() {
    let a = allocator(Config::expandable());
    let mut tries = Vec::new();
    for _ in 0..5 {
        match grow_and_unmap(&a) {
            Ok(()) => return,
            Err(why) => tries.push(why),
        }
    }
    panic!("no grow/unmap cycle showed in cuMemGetInfo: {tries:#?}");
}

/// Set by the test thread to let [`block_until_released`] return.
static RELEASE_S2: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A host function that holds its stream until `RELEASE_S2` is set, so the
/// stream's later work is pending for as long as the test wants.
unsafe extern "C" fn block_until_released(_: *mut std::ffi::c_void) {
    while !RELEASE_S2.load(std::sync::atomic::Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn record_stream_waits_for_the_other_stream() {
    let ctx = CudaContext::new(0).unwrap();
    let a = Arc::new(
        CachingAllocator::new(
            CudaDevice::with_context(ctx.clone()).unwrap(),
            Config::default(),
        )
        .unwrap(),
    );
    let s1 = ctx.new_stream().unwrap();
    let s2 = ctx.new_stream().unwrap();
    let mut b = a.alloc_slice::<u8>(MIB, &s1).unwrap();
    // s2 is held by the host function, so the memset queued after it is
    // still pending when the buffer is freed.
    RELEASE_S2.store(false, std::sync::atomic::Ordering::Release);
    ctx.bind_to_thread().unwrap();
    // SAFETY: a live stream of the bound context; the function takes no data.
    let r = unsafe {
        sys::cuLaunchHostFunc(
            s2.cu_stream(),
            Some(block_until_released),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    // Using it on s2 records s2, as PyTorch's record_stream does.
    s2.memset_zeros(&mut b).unwrap();
    let ptr = b.ptr();
    drop(b);
    // s2's use is pending: the block must not go to s1 yet. Without the
    // record this returns the same block and s1 would race s2's memset.
    let meanwhile = a.allocate(MIB, stream_id(&s1)).unwrap();
    assert_ne!(meanwhile.ptr(), ptr, "reused while s2 still uses it");
    RELEASE_S2.store(true, std::sync::atomic::Ordering::Release);
    s2.synchronize().unwrap();
    let again = a.allocate(MIB, stream_id(&s1)).unwrap();
    assert_eq!(again.ptr(), ptr, "reused once s2's work was done");
    a.free(again).unwrap();
    a.free(meanwhile).unwrap();
}
