//! Memory accounting: a tracker every backend allocation goes through, and
//! the memory plan built by running the real training step on a backend that
//! only allocates; a step's peak at every micro-batch priced exactly from a
//! few plans ([`peaks`], [`curve`]); out-of-memory raised as an unwind and
//! caught at step boundaries ([`oom`]).

pub mod curve;
pub mod oom;
pub mod peaks;
pub mod plan;
pub mod tracker;

pub use oom::{OutOfMemory, catch_oom, quiet_oom_panics};

pub use curve::{CurveError, PeakCurve};
pub use peaks::{AffinePeak, PlanPeaks, plan_peak, step_curve};
pub use plan::{
    MemoryPlan, OptimizerKind, PlanError, PlanRequest, PlannedBuffer, PlannedStep, Precision,
    step_peaks,
};
pub use tracker::{Allocation, BufKind, MemTracker, TrackedBuffer};
