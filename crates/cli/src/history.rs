//! A study's stored trials as a sampler or pruner gets them: the store
//! returns `hpo_sampler::FrozenTrial`s, and this holds them to what a
//! sampler relies on and a storage written by others cannot promise.

use hpo_sampler::FrozenTrial;

/// A stored trial a sampler cannot use (a value outside its distribution,
/// constraints that are not numbers); the message names the trial and the
/// parameter or attribute.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("stored history: {0}")]
pub struct HistoryError(#[from] pub hpo_sampler::Error);

/// `trials`, once each passed [`FrozenTrial::check`].
pub fn checked(trials: Vec<FrozenTrial>) -> Result<Vec<FrozenTrial>, HistoryError> {
    for t in &trials {
        t.check()?;
    }
    Ok(trials)
}
