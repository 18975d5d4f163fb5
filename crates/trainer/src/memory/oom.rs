//! Out-of-memory as a value: what a refused allocation reports.
//!
//! [`crate::backend::Backend::alloc`] is infallible (the model code would
//! otherwise thread a `Result` through every layer, and the memory plan must
//! run the very same code). When a tracker limit or the device allocator
//! refuses a buffer, the backend records an [`OutOfMemory`] in its
//! recorded-failure channel, hands out a buffer that holds no memory, and
//! skips every operation until the failure is taken, exactly as a device
//! backend does after a failed launch. The training loop takes it with
//! [`crate::backend::Backend::take_failure`] at each step and evaluation
//! ([`crate::backend::Failure::OutOfMemory`]): the step's buffers are freed
//! when the step returns, parameters and optimiser state were not touched
//! (the step stops before the update when [`crate::backend::Backend::failed`]),
//! and the loop retries with smaller micro-batches.

/// An allocation the memory budget refused.
#[derive(Clone, Debug, PartialEq)]
pub struct OutOfMemory {
    /// Bytes asked for.
    pub requested: usize,
    /// Bytes live (allocated) when the request failed.
    pub live: usize,
    /// The limit in bytes that would have been exceeded: the lease, or the
    /// device's capacity when the device itself was full.
    pub limit: usize,
    /// Name of the buffer that was being allocated.
    pub buffer: String,
    /// The device allocator's own report (fragmentation, largest free
    /// block, what to change) when it refused the buffer; its
    /// [`source`](std::error::Error::source).
    pub allocator: Option<Box<gpu_mem::OutOfMemory>>,
}

impl std::fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
        write!(
            f,
            "out of memory allocating `{}` ({} bytes, {:.1} MiB) with {} bytes ({:.1} MiB) live \
             of a {} byte ({:.1} MiB) limit",
            self.buffer,
            self.requested,
            mib(self.requested),
            self.live,
            mib(self.live),
            self.limit,
            mib(self.limit)
        )
    }
}

impl std::error::Error for OutOfMemory {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.allocator
            .as_deref()
            .map(|a| a as &(dyn std::error::Error + 'static))
    }
}

impl OutOfMemory {
    /// The caching allocator's out-of-memory for buffer `buffer` of
    /// `requested` bytes, as the trainer's (what every device backend
    /// records).
    pub fn from_allocator(buffer: &str, requested: usize, oom: &gpu_mem::OutOfMemory) -> Self {
        OutOfMemory {
            requested,
            live: oom.allocated as usize,
            limit: oom.limit.unwrap_or(oom.device_total),
            buffer: buffer.to_string(),
            allocator: Some(Box::new(oom.clone())),
        }
    }
}

/// The recorded-failure channel of a backend that fails only by running out
/// of memory: the first refusal, kept until it is taken.
#[derive(Debug, Default)]
pub(crate) struct RecordedOom(std::sync::Mutex<Option<OutOfMemory>>);

impl RecordedOom {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<OutOfMemory>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `oom` unless a refusal is already pending.
    pub(crate) fn record(&self, oom: OutOfMemory) {
        self.lock().get_or_insert(oom);
    }

    pub(crate) fn is_pending(&self) -> bool {
        self.lock().is_some()
    }

    /// The pending refusal, which ends the failed state.
    pub(crate) fn take(&self) -> Result<(), crate::backend::Failure> {
        match self.lock().take() {
            Some(oom) => Err(oom.into()),
            None => Ok(()),
        }
    }
}
