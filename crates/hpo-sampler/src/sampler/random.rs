//! Optuna's `RandomSampler`: uniform in the transformed space (log for
//! `log`, widened by half a step for steps), then mapped back and snapped to
//! the grid; categoricals uniformly.

use super::Sampler;
use super::transform::{from_transformed, numeric_bounds, transformed_range};
use crate::distribution::Distribution;
use crate::rng::Rng;
use crate::trial::StudyView;

/// Uniform sampling, independent of the history.
#[derive(Debug, Clone)]
pub struct RandomSampler {
    rng: Rng,
}

impl RandomSampler {
    /// A sampler seeded with `seed`, or from entropy when `None`.
    pub fn new(seed: Option<u64>) -> Self {
        RandomSampler {
            rng: seed.map_or_else(Rng::from_entropy, Rng::seed_from),
        }
    }

    /// One uniform draw from `distribution`, in internal representation.
    pub fn draw(&mut self, distribution: &Distribution) -> f64 {
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
