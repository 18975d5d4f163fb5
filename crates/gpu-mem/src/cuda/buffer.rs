//! cudarc interop: a typed buffer from the caching allocator that cudarc
//! accepts wherever it takes device memory (`DeviceSlice`, `DevicePtr`,
//! `DevicePtrMut`). Dropping it returns the block to the cache.

use super::{CudaDevice, stream_id};
use crate::allocator::{CachingAllocator, DeviceBuffer};
use crate::error::AllocError;
use cudarc::driver::{
    CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, DeviceSlice, SyncOnDrop, sys,
};
use std::marker::PhantomData;
use std::sync::Arc;

/// `len` values of `T` in a cached block, owned by one stream.
///
/// Using it on another stream (through `device_ptr`/`device_ptr_mut` with a
/// different stream) records that stream, as PyTorch's `record_stream` does,
/// so the block is not reused before that stream's queued work is done.
/// Ordering reads and writes between streams is the caller's job.
pub struct CudaBuffer<T> {
    buffer: DeviceBuffer<CudaDevice>,
    stream: Arc<CudaStream>,
    len: usize,
    _type: PhantomData<T>,
}

impl<T> std::fmt::Debug for CudaBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBuffer")
            .field("ptr", &self.buffer.ptr())
            .field("len", &self.len)
            .finish()
    }
}

impl CachingAllocator<CudaDevice> {
    /// Allocate `len` values of `T` for use on `stream` (uninitialised).
    pub fn alloc_slice<T: DeviceRepr>(
        self: &Arc<Self>,
        len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<CudaBuffer<T>, AllocError> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
            AllocError::Invalid(format!("{len} elements overflow the address space"))
        })?;
        let buffer = self.allocate_buffer(bytes, stream_id(stream))?;
        Ok(CudaBuffer {
            buffer,
            stream: Arc::clone(stream),
            len,
            _type: PhantomData,
        })
    }
}

impl<T> CudaBuffer<T> {
    /// The device address.
    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.buffer.ptr()
    }

    fn note_stream(&self, stream: &CudaStream) {
        if stream.cu_stream() != self.stream.cu_stream() {
            // Only fails for a stale handle, which a live buffer never is.
            let _ = self.buffer.record_stream(stream_id(stream));
        }
    }
}

impl<T> DeviceSlice<T> for CudaBuffer<T> {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl<T> DevicePtr<T> for CudaBuffer<T> {
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        self.note_stream(stream);
        (self.buffer.ptr(), SyncOnDrop::Sync(None))
    }
}

impl<T> DevicePtrMut<T> for CudaBuffer<T> {
    fn device_ptr_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        self.note_stream(stream);
        (self.buffer.ptr(), SyncOnDrop::Sync(None))
    }
}
