//! Samplers behind one trait, with Optuna's two-stage protocol: at the start
//! of a trial the sampler may sample a *relative* search space jointly
//! (multivariate TPE); every parameter outside it is sampled
//! *independently* when the trial asks for it.

pub mod gp;
pub mod nsga2;
mod observations;
pub(crate) mod parzen;
mod random;
mod tpe;
mod transform;

pub use gp::{AutoConfig, AutoPick, AutoSampler};
pub use gp::{GpConfig, GpSampler};
pub use nsga2::{NsgaIIConfig, NsgaIISampler};
pub use random::RandomSampler;
pub use tpe::{
    BELOW_RANK_WEIGHT, CandidateRule, TpeConfig, TpeSampler, continuous_gamma, default_gamma,
    default_gamma_multi_objective, default_weights, split_trials, wide_continuous_gamma,
};

use crate::distribution::Distribution;
use crate::trial::{CheckedTrials, SearchSpace, StudyView};
use std::collections::BTreeMap;

/// A sampler proposes parameter values from a study's history. Values are
/// internal representations (see [`Distribution::to_internal`]).
///
/// Implementations keep their own seeded RNG, so a seeded sampler replayed
/// on the same history proposes the same values.
pub trait Sampler {
    /// Trial `trial_number` is about to be asked (Optuna's `before_trial`):
    /// what a sampler kept for one trial's parameters is dropped here
    /// (default: nothing kept). [`crate::Trial::new`] calls it; a caller
    /// that samples without a `Trial` calls it before each trial's first
    /// parameter, since a sampler may read the history once for all of a
    /// trial's parameters ([`TpeSampler`] does), and a wrapper forwards it.
    fn before_trial(&mut self, _study: &StudyView<'_>, _trial_number: u64) {}

    /// The parameters to sample jointly for trial `trial_number`
    /// (default: none).
    fn infer_relative_search_space(
        &mut self,
        _study: &StudyView<'_>,
        _trial_number: u64,
    ) -> SearchSpace {
        SearchSpace::new()
    }

    /// Sample `space` (from `infer_relative_search_space`) jointly; may
    /// return fewer parameters (or none), which are then sampled independently.
    fn sample_relative(
        &mut self,
        _study: &StudyView<'_>,
        _trial_number: u64,
        _space: &SearchSpace,
    ) -> BTreeMap<String, f64> {
        BTreeMap::new()
    }

    /// Sample one parameter on its own.
    ///
    /// # Panics
    ///
    /// `distribution` must pass [`Distribution::validate`] ([`crate::Trial`]
    /// and [`crate::ask()`] check that first): a sampler may panic on one
    /// that does not (a categorical without choices, `low > high`, a NaN
    /// bound, a step of 0), as [`RandomSampler::draw`] does.
    fn sample_independent(
        &mut self,
        study: &StudyView<'_>,
        trial_number: u64,
        name: &str,
        distribution: &Distribution,
    ) -> f64;

    /// Why this sampler cannot sample, if it cannot: an option out of its
    /// documented range (as [`TpeConfig::check`], [`GpConfig::check`] and
    /// [`NsgaIIConfig::check`] say), or a user function that returned
    /// values it cannot use ([`TpeConfig::weights`], checked at each
    /// call). [`crate::Trial`] and [`crate::ask()`] ask before and after
    /// each draw and return the error instead of a value; a caller of the
    /// `sample_*` methods should do the same. Meanwhile such a sampler
    /// draws uniformly at random rather than panic. Default: `Ok`.
    fn check(&self) -> crate::Result<()> {
        Ok(())
    }

    /// Where a sampler that serves one study remembers which of its
    /// finished trials passed [`StudyView::check`], so that
    /// [`crate::ask()`] and [`crate::Trial`] check each trial once rather
    /// than the whole history on every ask (default: none, every ask
    /// checks every trial). The sampling methods assume a history that
    /// passed the check.
    fn checked_trials(&mut self) -> Option<&mut CheckedTrials> {
        None
    }

    /// System attributes the caller should store on trial `trial_number`
    /// once it is asked (NSGA-II's generation, an integer as Optuna
    /// stores it); default none.
    fn system_attrs(
        &mut self,
        _study: &StudyView<'_>,
        _trial_number: u64,
    ) -> BTreeMap<String, serde_json::Value> {
        BTreeMap::new()
    }
}
