//! Memory accounting: a tracker every backend allocation goes through, and
//! the memory plan built by running the real training step on a backend that
//! only allocates; a step's peak at every micro-batch priced exactly from a
//! few plans ([`peaks`], [`curve`]); out-of-memory as a recorded value the
//! training loop takes at step boundaries ([`oom`]).
//!
//! [`Precision`] is the width of stored floats (f32, or f64 for gradient
//! checks). The operand format of matrix products
//! ([`crate::backend::MatmulPrecision`]) is not part of a plan: buffers are
//! fp32 at every matmul precision and loss scaling allocates nothing, so a
//! bf16 or fp16 step holds exactly the bytes of an fp32 one.

pub mod curve;
pub mod oom;
pub mod peaks;
pub mod plan;
pub mod tracker;

pub use oom::OutOfMemory;

pub use curve::{CurveError, PeakCurve};
pub use peaks::{AffinePeak, PlanPeaks, plan_peak, step_curve};
pub use plan::{
    MemoryPlan, OptimizerKind, PlanError, PlanRequest, PlannedBuffer, PlannedStep, Precision,
    step_peaks,
};
pub use tracker::{Allocation, BufKind, MemTracker, TrackedBuffer};
