//! Optuna's `RandomSampler`: uniform in the transformed space (log for
//! `log`, widened by half a step for steps), then mapped back and snapped to
//! the grid; categoricals uniformly.

use super::Sampler;
use super::transform::{from_transformed, numeric_bounds, transformed_range};
use crate::distribution::Distribution;
use crate::rng::Rng;
use crate::trial::{CheckedTrials, StudyView};

/// Uniform sampling, independent of the history.
#[derive(Debug, Clone)]
pub struct RandomSampler {
    rng: Rng,
    /// The finished trials that passed [`crate::StudyView::check`].
    checked: CheckedTrials,
}

impl RandomSampler {
    /// A sampler seeded with `seed`, or from entropy when `None`.
    pub fn new(seed: Option<u64>) -> Self {
        RandomSampler {
            rng: seed.map_or_else(Rng::from_entropy, Rng::seed_from),
            checked: CheckedTrials::default(),
        }
    }

    /// One uniform draw from `distribution`, in internal representation.
    ///
    /// # Panics
    ///
    /// On a distribution built from its fields that no constructor would
    /// build and the samplers cannot draw from: `low > high`, a NaN bound,
    /// a step of 0 or below, a categorical without choices
    /// ([`Distribution::validate`] refuses these, as [`crate::Trial`] and
    /// [`crate::ask()`] do before drawing).
    pub fn draw(&mut self, distribution: &Distribution) -> f64 {
        assert!(
            distribution.drawable(),
            "cannot draw from {distribution}: Distribution::validate refuses it"
        );
        sample_uniform(&mut self.rng, distribution)
    }
}

/// Uniform draw in transformed space, mapped back into the distribution.
pub(crate) fn sample_uniform(rng: &mut Rng, distribution: &Distribution) -> f64 {
    if let Distribution::Categorical { choices } = distribution {
        return rng.below(choices.len()) as f64;
    }
    from_unit(rng.next_f64(), distribution)
}

/// The point at fraction `u` in `[0, 1)` of the transformed range, mapped
/// back into the distribution (the choice `floor(u n)` of a categorical).
pub(crate) fn from_unit(u: f64, distribution: &Distribution) -> f64 {
    let (low, high, log, step) = match numeric_bounds(distribution) {
        Ok(bounds) => bounds,
        Err(n) => return ((u * n as f64) as usize).min(n - 1) as f64,
    };
    let (a, b) = transformed_range(low, high, log, step);
    from_transformed(a + (b - a) * u, low, high, log, step)
}

impl Sampler for RandomSampler {
    fn checked_trials(&mut self) -> Option<&mut CheckedTrials> {
        Some(&mut self.checked)
    }

    fn sample_independent(
        &mut self,
        _study: &StudyView<'_>,
        _trial_number: u64,
        _name: &str,
        distribution: &Distribution,
    ) -> f64 {
        self.draw(distribution)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A distribution the samplers cannot draw from panics with a message
    /// that names it, as documented, rather than returning NaN (a step of
    /// 0) or failing inside `clamp` or the RNG.
    #[test]
    fn an_undrawable_distribution_panics_naming_it() {
        let bad = crate::distribution::unchecked_bad_distributions();
        for d in bad {
            let drawn = std::panic::catch_unwind(|| RandomSampler::new(Some(1)).draw(&d));
            let message = match drawn {
                Ok(v) => panic!("{d:?}: drew {v}"),
                Err(p) => p.downcast::<String>().map(|s| *s).unwrap_or_default(),
            };
            assert!(
                message.contains("Distribution::validate"),
                "{d:?}: {message}"
            );
        }
        let ok = Distribution::int(0, 10, false, 2).unwrap();
        assert!(ok.contains(RandomSampler::new(Some(1)).draw(&ok)));
    }
}
