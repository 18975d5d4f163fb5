//! Samplers (random, TPE, Gaussian process) and pruners for hyperparameter optimisation.
//!
//! Given the history of a study as a plain in-memory slice of frozen trials,
//! a sampler proposes the next parameters and a pruner decides whether a
//! running trial should stop early. Semantics follow Optuna 5.0's, so results
//! are comparable. Asking is cheap: a Parzen density sums every kernel in
//! one branch-free vectorised pass, discrete cell masses are kept across
//! asks by (value, kernel), a candidate that provably cannot win is ruled
//! out from a few kernels' exact terms instead of its full density (the
//! likely winner, by a cheap `f32` guess, is tried first), and a
//! long-lived sampler reuses across asks what did not change
//! (observations, sorted centres, unchanged estimators; an estimator whose
//! trials changed by a few is updated in place), with results
//! identical to a fresh sampler's. docs/benchmarks.md ("hpo-sampler")
//! has the cost of an ask against Optuna's.
//!
//! # Example
//!
//! An in-memory [`Study`] asks a TPE sampler for `x`, reports a learning
//! curve to a median pruner and tells the result:
//!
//! ```
//! use hpo_sampler::study::space_of;
//! use hpo_sampler::{
//!     Distribution, MedianPruner, Study, StudyDirection, TpeConfig, TpeSampler, TrialState,
//! };
//!
//! # fn main() -> hpo_sampler::Result<()> {
//! let sampler = TpeSampler::new(TpeConfig { seed: Some(7), ..TpeConfig::default() });
//! let mut study = Study::new("quadratic", StudyDirection::Minimize, sampler, MedianPruner::default())?;
//! let space = space_of("x", Distribution::float(-10.0, 10.0, false, None)?);
//! for _ in 0..40 {
//!     let trial = study.ask(&space)?;
//!     let x = study.param(trial, "x")?.as_f64().unwrap();
//!     let loss = (x - 2.0).powi(2);
//!     // Three "epochs" whose loss shrinks towards the final one.
//!     let mut pruned = false;
//!     for epoch in 0..3 {
//!         if study.report(trial, epoch, loss * (3 - epoch) as f64)? {
//!             pruned = true;
//!             break;
//!         }
//!     }
//!     if pruned {
//!         study.tell(trial, TrialState::Pruned, None)?;
//!     } else {
//!         study.tell(trial, TrialState::Complete, Some(loss))?;
//!     }
//! }
//! let best = study.best_trial().expect("a trial completed");
//! assert!(best.value().unwrap() < 0.1, "TPE found x near 2: {best:?}");
//! # Ok(())
//! # }
//! ```
//!
//! It is also where Optuna's data model lives, once for the project:
//! [`Distribution`], [`ParamValue`], [`Param`], [`TrialState`],
//! [`StudyDirection`] and [`FrozenTrial`], as `optuna.distributions` and
//! `optuna.trial` define them; the `store` crate reads and writes these.
//!
//! It deliberately does not persist anything (the caller stores trials), nor
//! read or write JSON text (Optuna's JSON forms are the `store` crate's),
//! nor know about GPUs, memory or models: it depends on none of the other
//! crates.
//!
//! # Seams
//!
//! - **History in**: [`FrozenTrial`], Optuna's (number, trial id, state,
//!   params as [`Param`]`{distribution, internal}`, values, intermediate
//!   values, times, user and system attributes as JSON values; constraint
//!   values under the [`CONSTRAINTS_KEY`] system attribute) in a
//!   [`StudyView`] (study name, direction, trials). The `store` crate
//!   returns these; [`FrozenTrial::check`] holds a history written by
//!   others to what a sampler relies on. Nothing here writes anywhere.
//! - **Search spaces**: [`Distribution`] (Optuna's float, int and
//!   categorical distributions, validated as Optuna validates them and
//!   equal as Optuna's `__eq__` says) and internal `f64` values
//!   ([`Distribution::to_internal`] / [`Distribution::to_external`]).
//!   Optuna's JSON for them is a storage and interop matter, read and
//!   written by the `store` crate.
//! - **Sampling**: the [`Sampler`] trait (Optuna's relative/independent
//!   protocol), implemented by [`RandomSampler`], [`TpeSampler`], [`GpSampler`]
//!   (Optuna's `GPSampler`, for short studies of expensive trials) and
//!   [`AutoSampler`] (GP while the study is small, TPE beyond; NSGA-II
//!   once a study of several objectives is large); use it
//!   through a define-by-run [`Trial`] (`suggest_float`, `suggest_int`,
//!   `suggest_categorical`) or [`ask()`] for a fixed space. A seeded sampler
//!   is deterministic.
//! - **Gaussian process alone**: [`sampler::gp::GpRegressor`] (the GP
//!   sampler's Matérn-5/2 regressor, built from given
//!   [`sampler::gp::KernelParams`], with its posterior mean and variance)
//!   is public for users who want the regressor alone; fitting the
//!   hyperparameters is internal ([`GpSampler::last_fit`] returns the
//!   sampler's latest fit).
//! - **Pruning**: the [`Pruner`] trait returns a [`PruneDecision`]: whether to
//!   prune plus the system attributes the caller must store on the trial
//!   (successive halving records rung values there, as Optuna does).
//! - **Importance**: [`importance::fanova_importances`], Optuna's
//!   `FanovaImportanceEvaluator` with its default settings (a random forest
//!   and its fANOVA decomposition) over finished trials.
//! - **Several objectives**: a [`StudyView`] built with
//!   [`StudyView::with_directions`]; [`TpeSampler`] is then Optuna's
//!   multi-objective TPE, [`NsgaIISampler`] is Optuna's `NSGAIISampler`, and
//!   [`GpSampler`] fits one random (ParEGO) scalarisation per ask instead of
//!   Optuna's expected hypervolume improvement (which
//!   [`GpConfig::hypervolume_improvement`] turns on for two objectives,
//!   exact rather than sampled). [`multi`] has the Pareto
//!   front (`study.best_trials`), non-dominated sorting and hypervolume.
//!   Constraints (`FrozenTrial::constraints`, Optuna's `constraints` system
//!   attribute) are honoured by every sampler.
//!
//! # Where we differ from Optuna 5.0, deliberately
//!
//! - [`TpeConfig::default`] is Optuna's `TPESampler()`
//!   ([`TpeConfig::optuna`]) but on numeric spaces of one objective. On a
//!   continuous one [`TpeConfig::continuous`] draws 96 EI candidates, lets
//!   the 8 of highest `l(x)` compete on `l(x) / g(x)` and counts 15% of
//!   the trials "below" (better optima on COCO's bbob), and from 10
//!   parameters [`TpeConfig::continuous_wide`] the 4 of highest `l(x)`
//!   and 5% (better at bbob's 10 dimensions); on one with
//!   integers [`TpeConfig::integer`] lets the 8 of highest `l(x)` of
//!   Optuna's 24 compete for the first 20 finished trials per parameter
//!   (better on COCO's bbob-mixint at 10 and 20 evaluations per
//!   dimension). Under each of these rules the "below" trials weigh by
//!   rank ([`sampler::BELOW_RANK_WEIGHT`]), where Optuna weighs them
//!   alike. On a space (or group) with a categorical parameter, as most of
//!   the study runner's are, it is Optuna's.
//!   [`TpeConfig::many_candidates`] (96 candidates, 4 finalists, on every
//!   space) is an option (all measured in docs/benchmarks.md).
//! - Our own seeded RNG (xoshiro256++), so a seed gives the same study here
//!   forever but not the same numbers as numpy.
//! - Samples are clipped into `[low, high]` after `exp` (Optuna can return
//!   a log-float a rounding error above `high`), and a stored value whose
//!   distribution no longer matches the parameter's (model-dependent ranges)
//!   is converted, or skipped if it falls outside, rather than raising.
//! - Among exactly equal observations, which kernel gets which width
//!   follows a stable sort; Optuna's follows numpy's unstable argsort.
//! - A stored number outside its distribution (Optuna's `enqueue_trial`
//!   stores one with a warning, and its samplers read it as it is) is read
//!   by every sampler as a parameter the trial does not have; in the TPE's
//!   joint model that leaves the trial out.
//! - A float on a `step` grid far from 0 is on it within a few ulps of the
//!   bounds, not Optuna's fixed 1e-8 steps, which most of Optuna's own
//!   draws there miss ([`Distribution::contains`]).
//! - [`ask()`] and [`Trial`] refuse, naming the trial, a history that
//!   Optuna could not read back or never stores ([`StudyView::check`]): a
//!   value that is not a finite number or a categorical index out of
//!   range, a NaN COMPLETE value or NaN constraint, a COMPLETE trial's
//!   values not one per objective, and two trials of one number. A
//!   long-lived sampler checks each finished trial once
//!   ([`Sampler::checked_trials`]).
//! - A [`TpeSampler`] caches what finished trials contribute, so one
//!   instance serves one study (as Optuna's intersection cache also assumes).
//! - Under a [`HyperbandPruner`] a sampler sees every trial of the study;
//!   Optuna shows it only the asking trial's bracket (`_filter_study`), so
//!   that each bracket spends its own startup trials. The pruner itself
//!   judges a trial among its bracket's, as Optuna's does.
//! - [`HyperbandPruner::new`] refuses a fixed `max_resource` below
//!   `min_resource`, which Optuna accepts and then never prunes (an
//!   automatic one found below it never prunes here either).

#![warn(missing_docs)]

pub mod ask;
pub mod distribution;
pub mod error;
pub mod importance;
pub mod multi;
pub mod pruner;
mod rng;
pub mod sampler;
pub mod search_space;
mod special;
pub mod study;
pub mod trial;

/// Internals that the crate's own fixture tests hold to Optuna's and
/// numpy's numbers (the RNG, `erf`, the Parzen estimator, the GP
/// regressor's hyperparameter fit), behind the `testing` feature: not
/// API. The regressor itself, [`sampler::gp::GpRegressor`] with
/// [`sampler::gp::KernelParams`], is public API as well.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod internals {
    pub use crate::rng::Rng;
    pub use crate::sampler::gp::regressor::{
        GpRegressor, KernelParams, Noise, OPTUNA_MINIMUM_NOISE, fit as fit_gp,
    };
    pub use crate::sampler::parzen::{Parzen, ParzenParams};
    pub use crate::special::{erf, erfc};
}

pub use ask::{Trial, ask, check_against_history};
pub use distribution::{CategoricalChoice, Distribution, ParamValue};
pub use error::{Error, Result};
pub use pruner::{
    HyperbandPruner, MedianPruner, NopPruner, PatientPruner, PercentilePruner, PruneDecision,
    Pruner, SuccessiveHalvingPruner, ThresholdPruner,
};
pub use sampler::{
    AutoConfig, AutoPick, AutoSampler, CandidateRule, GpConfig, GpSampler, NsgaIIConfig,
    NsgaIISampler, RandomSampler, Sampler, TpeConfig, TpeSampler,
};
pub use study::Study;
pub use trial::{
    CONSTRAINTS_KEY, CheckedTrials, FrozenTrial, NAMED_CONSTRAINT_PREFIX, Param, SearchSpace,
    StudyDirection, StudyView, TrialState, json_f64,
};
