//! Samplers (random, TPE) and pruners for hyperparameter optimisation.
//!
//! Given the history of a study as a plain in-memory slice of frozen trials,
//! a sampler proposes the next parameters and a pruner decides whether a
//! running trial should stop early. Semantics follow Optuna 5.0's, so results
//! are comparable, and the hot path is allocation-light so that asking costs
//! microseconds even with thousands of trials in the history.
//!
//! It deliberately does not persist anything (the caller stores trials), nor
//! know about GPUs, memory or models: it depends on none of the other crates.
//!
//! # Seams
//!
//! - **History in**: [`FrozenTrial`] (number, state, params as
//!   [`Param`]`{distribution, internal}`, values, intermediate values,
//!   constraints, numeric system attrs) in a [`StudyView`] (study name,
//!   direction, trials). Whoever persists trials (the `store` crate, via
//!   `cli`) builds these; nothing here writes anywhere.
//! - **Search spaces**: [`Distribution`] with Optuna's exact JSON
//!   ([`json::distribution_to_json`], [`json::search_space_from_json`], the
//!   form `optuna ask --search-space` takes), and internal `f64` values
//!   ([`Distribution::to_internal`] / [`Distribution::to_external`]).
//! - **Sampling**: the [`Sampler`] trait (Optuna's relative/independent
//!   protocol), implemented by [`RandomSampler`] and [`TpeSampler`]; use it
//!   through a define-by-run [`Trial`] (`suggest_float`, `suggest_int`,
//!   `suggest_categorical`) or [`ask`] for a fixed space. A seeded sampler
//!   is deterministic.
//! - **Pruning**: the [`Pruner`] trait returns a [`PruneDecision`]: whether to
//!   prune plus the system attributes the caller must store on the trial
//!   (successive halving records rung values there, as Optuna does).
//!
//! Only single-objective studies are supported (`values[0]` is the objective).

pub mod ask;
pub mod distribution;
pub mod error;
pub mod json;
pub mod pruner;
pub mod rng;
pub mod sampler;
pub mod search_space;
pub mod special;
pub mod trial;

pub use ask::{Trial, ask};
pub use distribution::{CategoricalChoice, Distribution, ParamValue};
pub use error::{Error, Result};
pub use pruner::{
    HyperbandPruner, MedianPruner, NopPruner, PatientPruner, PercentilePruner, PruneDecision,
    Pruner, SuccessiveHalvingPruner, ThresholdPruner,
};
pub use sampler::{RandomSampler, Sampler, TpeConfig, TpeSampler};
pub use trial::{FrozenTrial, Param, SearchSpace, StudyDirection, StudyView, TrialState};
