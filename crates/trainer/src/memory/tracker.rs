//! Counts live and peak tensor bytes, and optionally records each buffer's
//! lifetime (allocation and free event numbers).
//!
//! A tracker can also refuse allocations: with a limit on live bytes (the
//! lease a trial gets on the CPU). A refused [`MemTracker::allocate`]
//! returns [`OutOfMemory`], which the backend records (see [`super::oom`]).

use std::sync::{Arc, Mutex};

use super::oom::OutOfMemory;

/// What a buffer holds; decides how the plan groups it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BufKind {
    /// Model parameters.
    Weight,
    /// Parameter gradients.
    Grad,
    /// Optimiser state (AdamW's moments).
    OptimizerState,
    /// Token ids, masks, labels of a batch.
    Input,
    /// Saved for backward (or a layer output).
    Activation,
    /// Temporaries: gradients of activations, scratch of one op.
    Workspace,
    /// Per-row statistics saved for backward (LayerNorm's mean and rstd,
    /// the attention's log-sum-exp): kept in the master type whatever the
    /// activations are stored as.
    Statistic,
    /// The backend's own buffers (cuBLAS workspace, kernel scratch), held
    /// for as long as the backend lives: [`super::StepBackend::buffers`].
    Backend,
}

/// One buffer's life as recorded by a tracker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrackedBuffer {
    /// The name the buffer was allocated under (a parameter's name,
    /// `grad.<param>`, `adam.m.<param>`, ...).
    pub name: String,
    /// What it holds.
    pub kind: BufKind,
    /// Its size in bytes.
    pub bytes: usize,
    /// Event number (allocations and frees counted together) of allocation.
    pub alloc_event: usize,
    /// Event number of the free; `None` while live.
    pub free_event: Option<usize>,
    /// Live bytes right after this allocation.
    pub live_after_alloc: usize,
}

#[derive(Default)]
struct State {
    live: usize,
    peak: usize,
    events: usize,
    record: bool,
    buffers: Vec<TrackedBuffer>,
    /// Live bytes may not exceed this.
    limit: Option<usize>,
    /// Allocation requests so far (refused ones included).
    requests: u64,
}

/// Shared by a backend and all its buffers.
#[derive(Default)]
pub struct MemTracker {
    state: Mutex<State>,
}

impl MemTracker {
    /// A tracker with nothing live and no limit; with `record`, it keeps
    /// every buffer's life for [`MemTracker::buffers`].
    pub fn new(record: bool) -> Arc<Self> {
        let t = Self::default();
        t.state.lock().unwrap().record = record;
        Arc::new(t)
    }

    /// Registers `bytes` as allocated; the returned handle frees on drop.
    /// A request over the limit is refused with the figures of the refusal.
    pub fn allocate(
        self: &Arc<Self>,
        name: &str,
        kind: BufKind,
        bytes: usize,
    ) -> Result<Allocation, OutOfMemory> {
        let mut s = self.state.lock().unwrap();
        s.requests += 1;
        if let Some(limit) = s.limit
            && s.live.saturating_add(bytes) > limit
        {
            return Err(OutOfMemory {
                requested: bytes,
                live: s.live,
                limit,
                buffer: name.to_string(),
                allocator: None,
            });
        }
        s.live += bytes;
        s.peak = s.peak.max(s.live);
        let event = s.events;
        s.events += 1;
        let index = if s.record {
            let live = s.live;
            s.buffers.push(TrackedBuffer {
                name: name.to_string(),
                kind,
                bytes,
                alloc_event: event,
                free_event: None,
                live_after_alloc: live,
            });
            Some(s.buffers.len() - 1)
        } else {
            None
        };
        Ok(Allocation {
            tracker: Arc::clone(self),
            bytes,
            index,
        })
    }

    /// Caps live bytes (`None`: no cap). Bytes already live stay; later
    /// requests that would go over fail.
    pub fn set_limit(&self, limit: Option<usize>) {
        self.state.lock().unwrap().limit = limit;
    }

    /// The cap on live bytes (`None`: no cap).
    pub fn limit(&self) -> Option<usize> {
        self.state.lock().unwrap().limit
    }

    /// Allocation requests so far, refused ones included.
    pub fn allocation_requests(&self) -> u64 {
        self.state.lock().unwrap().requests
    }

    fn free(&self, bytes: usize, index: Option<usize>) {
        let mut s = self.state.lock().unwrap();
        s.live -= bytes;
        let event = s.events;
        s.events += 1;
        if let Some(i) = index {
            s.buffers[i].free_event = Some(event);
        }
    }

    /// Bytes allocated and not yet freed.
    pub fn live_bytes(&self) -> usize {
        self.state.lock().unwrap().live
    }

    /// The most bytes live at once since the tracker was made or
    /// [`MemTracker::reset_peak`] last ran.
    pub fn peak_bytes(&self) -> usize {
        self.state.lock().unwrap().peak
    }

    /// Starts a new peak measurement from the current live bytes.
    pub fn reset_peak(&self) {
        let mut s = self.state.lock().unwrap();
        s.peak = s.live;
    }

    /// Every buffer recorded so far (empty unless created with `record`).
    pub fn buffers(&self) -> Vec<TrackedBuffer> {
        self.state.lock().unwrap().buffers.clone()
    }
}

/// A live allocation; dropping it returns its bytes to the tracker.
pub struct Allocation {
    tracker: Arc<MemTracker>,
    bytes: usize,
    index: Option<usize>,
}

impl Allocation {
    /// Its size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        self.tracker.free(self.bytes, self.index);
    }
}

impl std::fmt::Debug for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Allocation({} bytes)", self.bytes)
    }
}
