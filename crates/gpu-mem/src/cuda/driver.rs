//! A small safe layer over the driver calls cudarc has no safe wrapper for
//! (the virtual-memory API, classic alloc/free, memory info, events).
//!
//! Every function checks its `CUresult`. Callers must have made the right
//! context current (`CudaContext::bind_to_thread`) and must have checked
//! `sys::is_culib_present()` once (cudarc panics on the first call
//! otherwise; `CudaDevice::new` does both).

use crate::backend::BackendError;
use cudarc::driver::sys;

/// Turn a `CUresult` into our error; `requested` feeds the OOM variant.
pub fn check(
    call: &'static str,
    result: sys::CUresult,
    requested: usize,
) -> Result<(), BackendError> {
    match result {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(BackendError::OutOfMemory { requested }),
        other => Err(BackendError::Driver {
            call,
            message: format!("{other:?}"),
        }),
    }
}

/// The allocation properties of pinned device memory on `device`.
pub fn device_prop(device: sys::CUdevice) -> sys::CUmemAllocationProp {
    // SAFETY: a plain C struct for which all-zero is a valid value.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop
}

/// The minimum page size of physical allocations with `prop`
/// (`cuMemGetAllocationGranularity`), checked to be a power of two.
pub fn granularity(prop: &sys::CUmemAllocationProp) -> Result<usize, BackendError> {
    let mut g = 0usize;
    // SAFETY: valid out-pointer and property struct.
    let r = unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut g,
            prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    };
    check("cuMemGetAllocationGranularity", r, 0)?;
    if g == 0 || !g.is_power_of_two() {
        return Err(BackendError::Driver {
            call: "cuMemGetAllocationGranularity",
            message: format!("unexpected granularity {g}"),
        });
    }
    Ok(g)
}

/// One attribute of `device`.
pub fn device_attribute(
    device: sys::CUdevice,
    attribute: sys::CUdevice_attribute,
) -> Result<i32, BackendError> {
    let mut value = 0i32;
    // SAFETY: a valid out-pointer.
    check(
        "cuDeviceGetAttribute",
        unsafe { sys::cuDeviceGetAttribute(&mut value, attribute, device) },
        0,
    )?;
    Ok(value)
}

/// Free and total bytes of the current context's device (`cuMemGetInfo`).
pub fn mem_get_info() -> Result<(usize, usize), BackendError> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers.
    check(
        "cuMemGetInfo",
        unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) },
        0,
    )?;
    Ok((free, total))
}

/// Allocate `size` bytes of device memory (`cuMemAlloc`).
pub fn mem_alloc(size: usize) -> Result<u64, BackendError> {
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: valid out-pointer.
    check(
        "cuMemAlloc",
        unsafe { sys::cuMemAlloc_v2(&mut ptr, size) },
        size,
    )?;
    Ok(ptr)
}

/// Free memory from [`mem_alloc`] (`cuMemFree`).
pub fn mem_free(ptr: u64) -> Result<(), BackendError> {
    // SAFETY: the caller passes a pointer from `mem_alloc`, freed once.
    check("cuMemFree", unsafe { sys::cuMemFree_v2(ptr) }, 0)
}

/// Reserve `size` bytes of virtual address space aligned to `alignment`
/// (`cuMemAddressReserve`).
pub fn address_reserve(size: usize, alignment: usize) -> Result<u64, BackendError> {
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: valid out-pointer; no fixed address requested.
    let r = unsafe { sys::cuMemAddressReserve(&mut ptr, size, alignment, 0, 0) };
    check("cuMemAddressReserve", r, size)?;
    Ok(ptr)
}

/// Give back a reservation from [`address_reserve`] (`cuMemAddressFree`).
pub fn address_free(ptr: u64, size: usize) -> Result<(), BackendError> {
    // SAFETY: a range from `address_reserve` with nothing mapped.
    check(
        "cuMemAddressFree",
        unsafe { sys::cuMemAddressFree(ptr, size) },
        0,
    )
}

/// Create one physical allocation of `size` bytes.
pub fn mem_create(
    prop: &sys::CUmemAllocationProp,
    size: usize,
) -> Result<sys::CUmemGenericAllocationHandle, BackendError> {
    let mut handle: sys::CUmemGenericAllocationHandle = 0;
    // SAFETY: valid out-pointer and property struct.
    let r = unsafe { sys::cuMemCreate(&mut handle, size, prop, 0) };
    check("cuMemCreate", r, size)?;
    Ok(handle)
}

/// Release a physical allocation from [`mem_create`] (`cuMemRelease`).
pub fn mem_release(handle: sys::CUmemGenericAllocationHandle) -> Result<(), BackendError> {
    // SAFETY: a handle from `mem_create`, released once.
    check("cuMemRelease", unsafe { sys::cuMemRelease(handle) }, 0)
}

/// Map the physical allocation `handle` at `ptr` (`cuMemMap`).
pub fn mem_map(
    ptr: u64,
    size: usize,
    handle: sys::CUmemGenericAllocationHandle,
) -> Result<(), BackendError> {
    // SAFETY: `ptr..ptr+size` lies in a reservation and is unmapped.
    check(
        "cuMemMap",
        unsafe { sys::cuMemMap(ptr, size, 0, handle, 0) },
        size,
    )
}

/// Unmap `size` bytes at `ptr` (`cuMemUnmap`).
pub fn mem_unmap(ptr: u64, size: usize) -> Result<(), BackendError> {
    // SAFETY: `ptr..ptr+size` is exactly one mapping made by `mem_map`.
    check("cuMemUnmap", unsafe { sys::cuMemUnmap(ptr, size) }, 0)
}

/// Make `ptr..ptr+size` readable and writable from `device`.
pub fn set_access(ptr: u64, size: usize, device: sys::CUdevice) -> Result<(), BackendError> {
    // SAFETY: all-zero is valid for this C struct; fields set below.
    let mut desc: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
    desc.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    desc.location.id = device;
    desc.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    // SAFETY: one valid descriptor for a mapped range.
    check(
        "cuMemSetAccess",
        unsafe { sys::cuMemSetAccess(ptr, size, &desc, 1) },
        size,
    )
}

/// # Safety
/// `stream` is null (the legacy stream) or a live stream of the current context.
pub unsafe fn stream_synchronize(stream: sys::CUstream) -> Result<(), BackendError> {
    // SAFETY: guaranteed by the caller.
    check(
        "cuStreamSynchronize",
        unsafe { sys::cuStreamSynchronize(stream) },
        0,
    )
}

/// An owned CUDA event, destroyed on drop.
#[derive(Debug)]
pub struct Event(sys::CUevent);

// SAFETY: CUDA events may be used and destroyed from any thread.
unsafe impl Send for Event {}

impl Event {
    /// Create an event (timing disabled) and record it on `stream`.
    ///
    /// # Safety
    /// `stream` is null (the legacy stream) or a live stream of the current context.
    pub unsafe fn record(stream: sys::CUstream) -> Result<Event, BackendError> {
        let mut ev: sys::CUevent = std::ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        // SAFETY: valid out-pointer.
        check(
            "cuEventCreate",
            unsafe { sys::cuEventCreate(&mut ev, flags) },
            0,
        )?;
        let event = Event(ev);
        // SAFETY: a live event; the stream is guaranteed by the caller.
        check(
            "cuEventRecord",
            unsafe { sys::cuEventRecord(event.0, stream) },
            0,
        )?;
        Ok(event)
    }

    /// Whether the work before the event has finished (`cuEventQuery`).
    pub fn is_done(&self) -> Result<bool, BackendError> {
        // SAFETY: a live event.
        match unsafe { sys::cuEventQuery(self.0) } {
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check("cuEventQuery", r, 0).map(|()| true),
        }
    }

    /// Block until the work before the event has finished
    /// (`cuEventSynchronize`).
    pub fn wait(&self) -> Result<(), BackendError> {
        // SAFETY: a live event.
        check(
            "cuEventSynchronize",
            unsafe { sys::cuEventSynchronize(self.0) },
            0,
        )
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: a live event, destroyed once. Nothing useful can be done
        // with a failure here.
        let _ = unsafe { sys::cuEventDestroy_v2(self.0) };
    }
}

/// Copy host bytes to device memory (synchronous).
pub fn copy_to_device(dst: u64, src: &[u8]) -> Result<(), BackendError> {
    // SAFETY: `src` is valid for its length; the caller owns `dst..+len`.
    let r = unsafe { sys::cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), src.len()) };
    check("cuMemcpyHtoD", r, 0)
}

/// Copy device memory to host bytes (synchronous).
pub fn copy_from_device(dst: &mut [u8], src: u64) -> Result<(), BackendError> {
    // SAFETY: `dst` is valid for its length; the caller owns `src..+len`.
    let r = unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len()) };
    check("cuMemcpyDtoH", r, 0)
}

/// Stream-ordered allocation from the device's default memory pool.
///
/// # Safety
/// `stream` is null (the legacy stream) or a live stream of the current context.
pub unsafe fn mem_alloc_async(size: usize, stream: sys::CUstream) -> Result<u64, BackendError> {
    let mut ptr: sys::CUdeviceptr = 0;
    // SAFETY: valid out-pointer; the stream is guaranteed by the caller.
    let r = unsafe { sys::cuMemAllocAsync(&mut ptr, size, stream) };
    check("cuMemAllocAsync", r, size)?;
    Ok(ptr)
}

/// Stream-ordered free of a pointer from `mem_alloc_async`.
///
/// # Safety
/// `stream` is null (the legacy stream) or a live stream of the current context.
pub unsafe fn mem_free_async(ptr: u64, stream: sys::CUstream) -> Result<(), BackendError> {
    // SAFETY: a pointer from `mem_alloc_async`, freed once; the stream is
    // guaranteed by the caller.
    check(
        "cuMemFreeAsync",
        unsafe { sys::cuMemFreeAsync(ptr, stream) },
        0,
    )
}
