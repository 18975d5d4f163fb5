//! The real device: [`CudaDevice`] on cudarc's driver API, and buffers that
//! work wherever cudarc takes device memory ([`CudaBuffer`]).
//!
//! libcuda is loaded at run time; [`CudaDevice::new`] returns
//! [`BackendError::NoDriver`] on a machine without it instead of panicking.

mod buffer;
pub mod driver;

pub use buffer::CudaBuffer;
pub use cudarc;

use crate::backend::{Backend, BackendError, DevicePtr, MemInfo, StreamId};
use cudarc::driver::{CudaContext, CudaStream, sys};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One CUDA device's memory, for [`crate::CachingAllocator`].
///
/// Expandable segments map one `cuMemCreate` allocation per granularity
/// page, so any tail of a segment can be unmapped and released on its own.
///
/// Stream ids passed to an allocator over this device must be `StreamId(0)`
/// (the legacy default stream) or [`stream_id`] of a live stream of this
/// device's context; the driver is handed them as `CUstream` handles. A
/// stream must stay alive while the allocator holds blocks or expandable
/// segments for it (until they are freed and `empty_cache` has run), since
/// events are recorded on it and it is synchronised before unmapping.
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    device: sys::CUdevice,
    granularity: usize,
    /// Why the virtual-memory API (expandable segments) cannot be used on
    /// this device, if it cannot.
    no_virtual_memory: Option<String>,
    /// Physical handle of every mapped page, by page address.
    pages: Mutex<BTreeMap<DevicePtr, sys::CUmemGenericAllocationHandle>>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("ordinal", &self.ctx.ordinal())
            .field("granularity", &self.granularity)
            .finish()
    }
}

fn driver_err(call: &'static str, e: cudarc::driver::DriverError) -> BackendError {
    BackendError::Driver {
        call,
        message: format!("{e:?}"),
    }
}

/// The stream id of a cudarc stream.
pub fn stream_id(stream: &CudaStream) -> StreamId {
    StreamId(stream.cu_stream() as usize as u64)
}

fn cu_stream(stream: StreamId) -> sys::CUstream {
    stream.0 as usize as sys::CUstream
}

impl CudaDevice {
    /// Open device `ordinal` (its primary context). Fails cleanly when the
    /// driver library is missing or the device does not exist.
    pub fn new(ordinal: usize) -> Result<CudaDevice, BackendError> {
        if let Err(reason) = crate::libs::ensure_loaded() {
            return Err(BackendError::NoDriver(reason.clone()));
        }
        // SAFETY: only tries to load the library.
        if !unsafe { sys::is_culib_present() } {
            return Err(BackendError::NoDriver(
                "libcuda.so.1 was not found; install the NVIDIA driver or run on a machine with a GPU"
                    .into(),
            ));
        }
        let ctx =
            CudaContext::new(ordinal).map_err(|e| driver_err("cuDevicePrimaryCtxRetain", e))?;
        CudaDevice::with_context(ctx)
    }

    /// Use an existing cudarc context (its device).
    pub fn with_context(ctx: Arc<CudaContext>) -> Result<CudaDevice, BackendError> {
        ctx.bind_to_thread()
            .map_err(|e| driver_err("cuCtxSetCurrent", e))?;
        let device = ctx.cu_device();
        let vmm = driver::device_attribute(
            device,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
        )?;
        let (granularity, no_virtual_memory) = if vmm == 0 {
            (
                DEFAULT_GRANULARITY,
                Some(
                    "the device reports no virtual memory management \
                     (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0)"
                        .to_string(),
                ),
            )
        } else {
            match driver::granularity(&driver::device_prop(device)) {
                Ok(g) => (g, None),
                Err(e) => (
                    DEFAULT_GRANULARITY,
                    Some(format!("the allocation granularity is unavailable: {e}")),
                ),
            }
        };
        Ok(CudaDevice {
            ctx,
            device,
            granularity,
            no_virtual_memory,
            pages: Mutex::new(BTreeMap::new()),
        })
    }

    /// The CUDA context this device's calls run in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn bind(&self) -> Result<(), BackendError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| driver_err("cuCtxSetCurrent", e))
    }

    fn pages(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<DevicePtr, sys::CUmemGenericAllocationHandle>> {
        self.pages.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Unmap and release pages `[from, to)` that this device mapped.
    fn unmap_pages(&self, from: DevicePtr, to: DevicePtr) -> Result<(), BackendError> {
        let g = self.granularity as u64;
        let mut pages = self.pages();
        let mut page = from;
        while page < to {
            let handle = pages
                .get(&page)
                .copied()
                .ok_or_else(|| BackendError::Invalid(format!("page {page:#x} is not mapped")))?;
            driver::mem_unmap(page, self.granularity)?;
            pages.remove(&page);
            driver::mem_release(handle)?;
            page += g;
        }
        Ok(())
    }
}

/// The end of `[addr, addr + size)`, refused when it runs past the address
/// space.
fn range_end(addr: DevicePtr, size: usize) -> Result<DevicePtr, BackendError> {
    addr.checked_add(size as u64).ok_or_else(|| {
        BackendError::Invalid(format!(
            "range {addr:#x}+{size} runs past the end of the address space"
        ))
    })
}

/// The page size assumed when the driver cannot say (every current GPU
/// maps 2 MiB pages); it then only rounds classic segment sizes.
const DEFAULT_GRANULARITY: usize = 2 << 20;

impl Backend for CudaDevice {
    type Event = driver::Event;

    fn virtual_memory_unsupported(&self) -> Option<String> {
        self.no_virtual_memory.clone()
    }

    fn mem_info(&self) -> Result<MemInfo, BackendError> {
        self.bind()?;
        let (free, total) = driver::mem_get_info()?;
        Ok(MemInfo { free, total })
    }

    fn granularity(&self) -> usize {
        self.granularity
    }

    fn malloc(&self, size: usize) -> Result<DevicePtr, BackendError> {
        self.bind()?;
        driver::mem_alloc(size)
    }

    fn free(&self, ptr: DevicePtr, _size: usize) -> Result<(), BackendError> {
        self.bind()?;
        driver::mem_free(ptr)
    }

    fn reserve(&self, size: usize) -> Result<DevicePtr, BackendError> {
        if let Some(reason) = &self.no_virtual_memory {
            return Err(BackendError::Driver {
                call: "cuMemAddressReserve",
                message: format!("not supported: {reason}"),
            });
        }
        self.bind()?;
        driver::address_reserve(size, self.granularity)
    }

    fn release_reservation(&self, base: DevicePtr, size: usize) -> Result<(), BackendError> {
        self.bind()?;
        driver::address_free(base, size)
    }

    fn map(&self, addr: DevicePtr, size: usize) -> Result<(), BackendError> {
        let g = self.granularity;
        if !addr.is_multiple_of(g as u64) || !size.is_multiple_of(g) || size == 0 {
            return Err(BackendError::Invalid(format!(
                "map of {addr:#x}+{size} is not whole {g}-byte pages"
            )));
        }
        let end = range_end(addr, size)?;
        self.bind()?;
        let prop = driver::device_prop(self.device);
        let mut page = addr;
        let result = (|| {
            while page < end {
                let handle = driver::mem_create(&prop, g)?;
                if let Err(e) = driver::mem_map(page, g, handle) {
                    let _ = driver::mem_release(handle);
                    return Err(e);
                }
                self.pages().insert(page, handle);
                page += g as u64;
            }
            driver::set_access(addr, size, self.device)
        })();
        if let Err(e) = result {
            // Roll back what this call mapped, so the range is all-or-nothing.
            let _ = self.unmap_pages(addr, page.min(end));
            return Err(e);
        }
        Ok(())
    }

    fn unmap(&self, addr: DevicePtr, size: usize) -> Result<(), BackendError> {
        let end = range_end(addr, size)?;
        self.bind()?;
        self.unmap_pages(addr, end)
    }

    fn synchronize(&self, stream: StreamId) -> Result<(), BackendError> {
        self.bind()?;
        // SAFETY: stream ids given to this backend come from `stream_id` of
        // live streams of this context, or are 0 (see `CudaDevice`).
        unsafe { driver::stream_synchronize(cu_stream(stream)) }
    }

    fn synchronize_device(&self) -> Result<(), BackendError> {
        self.bind()?;
        self.ctx
            .synchronize()
            .map_err(|e| driver_err("cuCtxSynchronize", e))
    }

    fn record_event(&self, stream: StreamId) -> Result<driver::Event, BackendError> {
        self.bind()?;
        // SAFETY: as in `synchronize`.
        unsafe { driver::Event::record(cu_stream(stream)) }
    }

    fn event_done(&self, event: &driver::Event) -> Result<bool, BackendError> {
        self.bind()?;
        event.is_done()
    }

    fn event_wait(&self, event: &driver::Event) -> Result<(), BackendError> {
        self.bind()?;
        event.wait()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_past_the_address_space_are_refused() {
        assert_eq!(range_end(0x1000, 0x2000), Ok(0x3000));
        assert!(matches!(
            range_end(u64::MAX - 10, 100),
            Err(BackendError::Invalid(_))
        ));
    }
}
