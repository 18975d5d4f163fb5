//! Reuse of freed float buffers, invisible to the memory tracker.
//!
//! A training step allocates and frees the same large buffers every step.
//! Fresh large allocations come from the kernel as untouched pages, and
//! first-touch page faults cost about as much as a whole elementwise pass, so
//! the CPU backend keeps freed buffers of at least `MIN_POOLED_BYTES` here
//! and hands them out again for a request of exactly the same length.
//!
//! The tracker is never told: it still sees one allocation per logical
//! buffer and one free when the buffer is dropped, so the measured peak is
//! the plan's. The pool is bounded by that same peak: a buffer is kept only
//! while `live + pooled` stays within the tracker's peak, and before a fresh
//! allocation pooled buffers are released until `live + pooled + new` fits
//! in `max(peak, live + new)`. So the process never holds more float memory
//! than the tracker reports as its peak.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::memory::MemTracker;

/// Smaller buffers come from the allocator's heap, already faulted in.
pub(crate) const MIN_POOLED_BYTES: usize = 1 << 16;

/// Freed float buffers of element type `T`, by length, kept for reuse
/// within the tracker's peak (see the module doc); shared by a
/// [`super::CpuBackend`] and its buffers.
pub struct BufferPool<T> {
    state: Mutex<State<T>>,
}

struct State<T> {
    /// Free buffers by capacity (`len == capacity` for every one).
    free: HashMap<usize, Vec<Vec<T>>>,
    bytes: usize,
}

impl<T> Default for BufferPool<T> {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                free: HashMap::new(),
                bytes: 0,
            }),
        }
    }
}

impl<T> BufferPool<T> {
    /// A pooled buffer of exactly `len` elements, with stale contents; or
    /// `None` after making room (see the module doc) for a fresh one.
    /// Called once `tracker` counts the new buffer (so its peak covers it).
    pub fn take(&self, len: usize, tracker: &MemTracker) -> Option<Vec<T>> {
        let mut s = self.state.lock().unwrap();
        if let Some(v) = s.free.get_mut(&len).and_then(Vec::pop) {
            s.bytes -= len * size_of::<T>();
            return Some(v);
        }
        let live = tracker.live_bytes();
        let limit = tracker.peak_bytes();
        while s.bytes > 0 && live + s.bytes > limit {
            // Release the largest free buffers first: fewest releases.
            let Some(&cap) = s
                .free
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(c, _)| c)
                .max()
            else {
                break;
            };
            drop(s.free.get_mut(&cap).and_then(Vec::pop));
            s.bytes -= cap * size_of::<T>();
        }
        None
    }

    /// Called while the buffer's own allocation is still live in `tracker`.
    pub fn give(&self, v: Vec<T>, tracker: &MemTracker) {
        let bytes = v.capacity() * size_of::<T>();
        if bytes < MIN_POOLED_BYTES || v.len() != v.capacity() {
            return;
        }
        let mut s = self.state.lock().unwrap();
        if s.bytes + tracker.live_bytes() <= tracker.peak_bytes() {
            s.bytes += bytes;
            s.free.entry(v.capacity()).or_default().push(v);
        }
    }

    /// Bytes held for reuse.
    pub fn pooled_bytes(&self) -> usize {
        self.state.lock().unwrap().bytes
    }
}
