//! Host-to-device uploads that do not wait for the GPU.
//!
//! An upload from pageable memory has to finish before the caller may free
//! its source, and the simple way to know that (the synchronous path of
//! `CudaBackend::copy_in`) waits for everything queued on the stream: a
//! training step would drain the GPU at each of its batch's uploads and
//! each embedding backward's index upload, then run launch-bound until the
//! host gets ahead again. With [`Uploads::Staged`] an upload is copied into
//! a slice of a pinned host ring and sent with an asynchronous copy on the
//! stream, which keeps the order of kernels and copies; an event recorded
//! after the copy guards the slice until the copy has read it. The host
//! waits only when the ring comes round to a slice whose copy has not
//! run yet.
//!
//! The default ([`Uploads::from_env`]); `MEMTUNE_CUDA_UPLOADS=sync` selects
//! the synchronous path, which the backend also takes, saying so on
//! stderr, where the ring's pinned memory is refused and nobody asked for
//! staging. The GPU bundle checks the two against each other
//! (`cuda_ops::staged_uploads_land_as_synchronous_ones`) and times both.

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError, PinnedHostSlice, result};
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the CUDA backend uploads host data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Uploads {
    /// Copy, then wait for the stream (every upload drains the GPU).
    Synchronous,
    /// Through a pinned ring, without waiting (see the module doc).
    #[default]
    Staged,
}

/// `MEMTUNE_CUDA_UPLOADS` is neither `sync` nor `staged`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("MEMTUNE_CUDA_UPLOADS=`{0}`: expected \"sync\" or \"staged\"")]
pub struct UploadsVarError(pub String);

impl Uploads {
    /// `MEMTUNE_CUDA_UPLOADS` (`sync` or `staged`), or `None` when it is
    /// unset (the backend then stages, and waits instead where pinned
    /// memory is refused).
    pub fn from_env() -> Result<Option<Self>, UploadsVarError> {
        match std::env::var("MEMTUNE_CUDA_UPLOADS") {
            Err(_) => Ok(None),
            Ok(v) => Self::parse(&v).map(Some),
        }
    }

    fn parse(value: &str) -> Result<Self, UploadsVarError> {
        match value.trim() {
            "sync" => Ok(Self::Synchronous),
            "staged" => Ok(Self::Staged),
            other => Err(UploadsVarError(other.to_string())),
        }
    }
}

/// Where the next upload goes in a ring of `capacity` bytes, and which of
/// the uploads still in flight it must wait for. Generic over what marks
/// an upload done (a CUDA event on the device; a number in tests).
///
/// Uploads complete in the order they were queued (one stream), so waiting
/// for the newest upload that overlaps a slice waits for all older ones.
#[derive(Debug)]
pub(crate) struct Ring<T> {
    capacity: usize,
    /// The first free byte after the newest slice.
    cursor: usize,
    /// Slices still possibly being read, oldest first.
    in_flight: VecDeque<(Range<usize>, T)>,
}

/// Slices start on 16 bytes, as device buffers do.
const ALIGN: usize = 16;

impl<T> Ring<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            cursor: 0,
            in_flight: VecDeque::new(),
        }
    }

    /// Hands the oldest in-flight slices' markers to `spare` while `done`
    /// says they are done.
    pub(crate) fn retire(&mut self, mut done: impl FnMut(&T) -> bool, mut spare: impl FnMut(T)) {
        while self.in_flight.front().is_some_and(|(_, t)| done(t)) {
            if let Some((_, t)) = self.in_flight.pop_front() {
                spare(t);
            }
        }
    }

    /// A slice of `len` bytes (`None` if the ring is smaller), and the
    /// marker to wait for before writing it: the newest in-flight upload
    /// that overlaps it (it and every older one are forgotten).
    pub(crate) fn reserve(&mut self, len: usize) -> Option<(Range<usize>, Option<T>)> {
        if len == 0 || len > self.capacity {
            return None;
        }
        let start = if self.cursor + len <= self.capacity {
            self.cursor
        } else {
            0
        };
        let slice = start..start + len;
        let overlaps = |r: &Range<usize>| r.start < slice.end && slice.start < r.end;
        let newest = self.in_flight.iter().rposition(|(r, _)| overlaps(r));
        let wait = newest.and_then(|i| self.in_flight.drain(..=i).last().map(|(_, t)| t));
        self.cursor = (slice.end).next_multiple_of(ALIGN).min(self.capacity);
        Some((slice, wait))
    }

    /// Records that `slice` is being read until `marker` is done.
    pub(crate) fn push(&mut self, slice: Range<usize>, marker: T) {
        self.in_flight.push_back((slice, marker));
    }
}

/// Types whose values are exactly their bytes (no padding): what an
/// upload may read as bytes.
pub(crate) trait PlainData: Copy {}
impl PlainData for u8 {}
impl PlainData for u32 {}
impl PlainData for u64 {}
impl PlainData for f32 {}

/// The pinned ring and the uploads in flight from it.
pub(crate) struct Staging {
    /// Pinned host memory of [`RING_BYTES`], owned here (freed on drop)
    /// and written through `base`.
    _host: PinnedHostSlice<u8>,
    base: *mut u8,
    ring: Ring<CudaEvent>,
    /// Events whose copies are done, recorded again by later uploads
    /// rather than created anew.
    spare: Vec<CudaEvent>,
}

// SAFETY: `base` points into `_host`, which the struct owns; the backend
// uses a `Staging` behind a mutex, one upload at a time.
unsafe impl Send for Staging {}

/// Bytes of the pinned ring: a step's uploads (ids, labels, index lists,
/// a few tables) are kilobytes to a few MiB.
pub const RING_BYTES: usize = 16 << 20;

impl Staging {
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> Result<Self, DriverError> {
        // SAFETY: each slice is written before a copy reads it. Plain
        // page-locked memory (no flags).
        let mut host = unsafe { ctx.alloc_pinned_with_flags::<u8>(RING_BYTES, 0) }?;
        let base = host.as_mut_ptr()?;
        Ok(Self {
            _host: host,
            base,
            ring: Ring::new(RING_BYTES),
            spare: Vec::new(),
        })
    }

    /// Copies `src` to device address `dst` on `stream` without waiting
    /// for the stream: how long it waited for an earlier copy out of the
    /// same slice, or `None` when `src` is larger than the ring (the caller
    /// copies it synchronously).
    pub(crate) fn upload(
        &mut self,
        dst: u64,
        src: &[u8],
        stream: &CudaStream,
    ) -> Result<Option<Duration>, DriverError> {
        let spare = &mut self.spare;
        self.ring.retire(CudaEvent::is_complete, |e| spare.push(e));
        let Some((slice, wait)) = self.ring.reserve(src.len()) else {
            return Ok(None);
        };
        let mut waited = Duration::ZERO;
        if let Some(event) = wait {
            let start = Instant::now();
            event.synchronize()?;
            waited = start.elapsed();
            self.spare.push(event);
        }
        // SAFETY: `slice` lies in the ring, and no copy in flight reads it
        // (the ring waited for the newest that did).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(slice.start), src.len());
            result::memcpy_htod_async(
                dst,
                std::slice::from_raw_parts(self.base.add(slice.start), src.len()),
                stream.cu_stream(),
            )?;
        }
        // Without its event the slice could be reused while the copy reads
        // it: wait for the copy instead.
        let recorded = match self.spare.pop() {
            Some(event) => event.record(stream).map(|()| event),
            None => stream.record_event(None),
        };
        let done = match recorded {
            Ok(done) => done,
            Err(e) => {
                let _ = stream.synchronize();
                return Err(e);
            }
        };
        self.ring.push(slice, done);
        Ok(Some(waited))
    }
}

impl Drop for Staging {
    /// The pinned memory outlives every copy that reads it.
    fn drop(&mut self) {
        for (_, event) in self.ring.in_flight.drain(..) {
            let _ = event.synchronize();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Uploads of the given sizes, none ever done: every slice handed out
    /// must not overlap any slice still in flight, and the waits must be
    /// the newest overlapping ones.
    #[test]
    fn a_slice_never_overlaps_one_in_flight() {
        let mut ring = Ring::new(100);
        let sizes = [30, 30, 30, 20, 5, 64, 100, 1, 99, 50, 50, 7];
        let mut live: Vec<(Range<usize>, usize)> = Vec::new();
        for (n, &len) in sizes.iter().enumerate() {
            let (slice, wait) = ring.reserve(len).expect("fits the ring");
            assert_eq!(slice.len(), len);
            assert!(slice.end <= 100);
            assert_eq!(slice.start % ALIGN, 0, "upload {n}");
            // What the caller waits for is done, and so is everything older.
            if let Some(w) = wait {
                live.retain(|&(_, m)| m > w);
            }
            for (r, m) in &live {
                assert!(
                    r.end <= slice.start || slice.end <= r.start,
                    "upload {n} at {slice:?} overlaps upload {m} at {r:?} still in flight"
                );
            }
            ring.push(slice.clone(), n);
            live.push((slice, n));
        }
    }

    #[test]
    fn finished_uploads_free_their_slices_without_a_wait() {
        let mut ring = Ring::new(64);
        for n in 0..10 {
            ring.retire(|_| true, drop);
            let (slice, wait) = ring.reserve(48).unwrap();
            assert_eq!(wait, None, "upload {n}");
            ring.push(slice, n);
        }
    }

    #[test]
    fn larger_than_the_ring_or_empty_is_refused() {
        let mut ring: Ring<u32> = Ring::new(64);
        assert!(ring.reserve(65).is_none());
        assert!(ring.reserve(0).is_none());
        assert!(ring.reserve(64).is_some());
    }

    #[test]
    fn the_variable_names_its_values() {
        assert_eq!(Uploads::parse("staged"), Ok(Uploads::Staged));
        assert_eq!(Uploads::parse(" sync "), Ok(Uploads::Synchronous));
        let err = Uploads::parse("async").unwrap_err();
        assert!(err.to_string().contains("MEMTUNE_CUDA_UPLOADS=`async`"));
    }
}
