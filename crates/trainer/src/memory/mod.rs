//! Memory accounting: a tracker every backend allocation goes through, and
//! the memory plan built by running the real training step on a backend that
//! only allocates; a step's peak at every micro-batch priced exactly from a
//! few plans ([`peaks`], [`curve`]); out-of-memory as a recorded value the
//! training loop takes at step boundaries ([`oom`]); the memory of
//! prediction planned the same way ([`inference`]).
//!
//! [`Precision`] is the width of stored floats (f32, or f64 for gradient
//! checks). A request also names the backend that runs the step
//! ([`StepBackend`]: the buffers it holds for itself are part of the plan)
//! and the operand format of its matrix products
//! ([`crate::backend::MatmulPrecision`]), which the plan's backend reports
//! to the model code as the real backend does, so whatever the model
//! stores differently at a precision is planned as it runs.

pub mod backend_buffers;
pub mod curve;
pub mod inference;
pub mod oom;
pub mod peaks;
pub mod plan;
pub mod tracker;

pub use oom::OutOfMemory;

pub use backend_buffers::{BackendBuffer, StepBackend};
pub use curve::{CurveError, PeakCurve};
pub use inference::inference_peak;
pub use peaks::{AffinePeak, PlanPeaks, plan_peak, step_curve};
pub use plan::{
    MemoryPlan, OptimizerKind, PlanError, PlanRequest, PlannedBuffer, PlannedStep, Precision,
    step_peaks,
};
pub use tracker::{Allocation, BufKind, MemTracker, TrackedBuffer};
