//! Out-of-memory as an unwind: how an allocation failure deep inside a
//! kernel call reaches the training loop without a `Result` on every
//! backend operation.
//!
//! [`crate::backend::Backend::alloc`] is infallible (the model code would
//! otherwise thread a `Result` through every layer, and the memory plan must
//! run the very same code). When a tracker limit, an injected fault or the
//! device allocator refuses a buffer, the backend unwinds with
//! `std::panic::panic_any(OutOfMemory)`. The training loop catches it at a
//! step boundary with [`catch_oom`]: every buffer is RAII, so unwinding has
//! already freed everything the failed step allocated, and the loop can
//! retry the step with smaller micro-batches. Any other panic is resumed
//! unchanged.
//!
//! The default panic hook would print "thread panicked at ..." for every
//! such recoverable event; [`quiet_oom_panics`] (installed by
//! [`catch_oom`]) wraps the current hook so that it stays silent for this
//! payload only, and still reports every real panic.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Once;

/// An allocation the memory budget refused.
#[derive(Clone, Debug, PartialEq)]
pub struct OutOfMemory {
    /// Bytes asked for.
    pub requested: usize,
    /// Bytes live (allocated) when the request failed.
    pub live: usize,
    /// The limit in bytes that would have been exceeded: the lease, or the
    /// device's capacity when the device itself was full; `usize::MAX` for
    /// an injected fault without a limit.
    pub limit: usize,
    /// Name of the buffer that was being allocated.
    pub buffer: String,
    /// True when fault injection caused it rather than a real limit.
    pub injected: bool,
    /// The device allocator's own report (fragmentation, largest free
    /// block, what to change) when it refused the buffer; its
    /// [`source`](std::error::Error::source).
    pub allocator: Option<Box<gpu_mem::OutOfMemory>>,
}

impl std::fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: usize| b as f64 / (1024.0 * 1024.0);
        if self.injected {
            write!(f, "injected ")?;
        }
        write!(
            f,
            "out of memory allocating `{}` ({} bytes, {:.1} MiB) with {} bytes ({:.1} MiB) live",
            self.buffer,
            self.requested,
            mib(self.requested),
            self.live,
            mib(self.live)
        )?;
        if self.limit != usize::MAX {
            write!(
                f,
                " of a {} byte ({:.1} MiB) limit",
                self.limit,
                mib(self.limit)
            )?;
        }
        Ok(())
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
    /// raises).
    pub fn from_allocator(buffer: &str, requested: usize, oom: &gpu_mem::OutOfMemory) -> Self {
        OutOfMemory {
            requested,
            live: oom.allocated as usize,
            limit: oom.limit.unwrap_or(oom.device_total),
            buffer: buffer.to_string(),
            injected: false,
            allocator: Some(Box::new(oom.clone())),
        }
    }

    /// Unwinds with this error as the panic payload (see the module doc).
    pub fn raise(self) -> ! {
        quiet_oom_panics();
        std::panic::panic_any(self)
    }
}

/// Runs `f`; an [`OutOfMemory`] unwind inside it becomes `Err`, any other
/// panic continues unwinding.
pub fn catch_oom<T>(f: impl FnOnce() -> T) -> Result<T, OutOfMemory> {
    quiet_oom_panics();
    // Unwind safety: callers only retry after the state the closure touched
    // is reset (gradients are zeroed at the start of each step; parameters
    // and optimiser state change only after the step's last allocation).
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => Ok(value),
        Err(payload) => match payload.downcast::<OutOfMemory>() {
            Ok(oom) => Err(*oom),
            Err(other) => resume_unwind(other),
        },
    }
}

/// Makes the panic hook silent for [`OutOfMemory`] payloads (installed once
/// per process, wrapping whatever hook was set before).
pub fn quiet_oom_panics() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<OutOfMemory>() {
                previous(info);
            }
        }));
    });
}
