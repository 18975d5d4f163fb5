//! Memory accounting: a tracker every backend allocation goes through, and
//! the memory plan built by running the real training step on a backend that
//! only allocates.

pub mod plan;
pub mod tracker;

pub use plan::{MemoryPlan, OptimizerKind, PlanRequest, PlannedBuffer, Precision};
pub use tracker::{Allocation, BufKind, MemTracker, TrackedBuffer};
