//! Memory accounting: a tracker every backend allocation goes through, and
//! the memory plan built by running the real training step on a backend that
//! only allocates; out-of-memory raised as an unwind and caught at step
//! boundaries ([`oom`]).

pub mod oom;
pub mod plan;
pub mod tracker;

pub use oom::{OutOfMemory, catch_oom, quiet_oom_panics};

pub use plan::{
    MemoryPlan, OptimizerKind, PlanError, PlanRequest, PlannedBuffer, PlannedStep, Precision,
    step_peaks,
};
pub use tracker::{Allocation, BufKind, MemTracker, TrackedBuffer};
