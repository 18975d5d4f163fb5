//! The startup trials' design: a Latin hypercube kept by the history
//! itself. Each parameter's range (transformed as for uniform sampling:
//! log first, widened by half a step) is cut into one stratum per startup
//! trial (one per value where a parameter has fewer values), and each trial
//! draws uniformly within a stratum that the study's trials so far, in any
//! state, have used least. `n` independent uniform draws leave whole parts
//! of a parameter's range unsampled; this gives the first GP fit all of
//! them.
//!
//! The strata come from the history, not from the sampler's memory, so
//! workers in separate processes (each `memtune ask`) and RUNNING trials
//! keep the design too. A grid of more values than strata is stratified
//! up to the grid's rounding at stratum edges.

use super::super::random::from_unit;
use super::super::transform::{numeric_bounds, transformed_range};
use crate::distribution::Distribution;
use crate::rng::Rng;
use crate::trial::StudyView;

/// How many strata `distribution` is cut into for `n` startup trials.
fn strata(distribution: &Distribution, n: usize) -> usize {
    let values = match distribution {
        Distribution::Categorical { choices } => choices.len(),
        // In i128: `high - low` of i64 bounds may overflow an i64.
        Distribution::Int {
            low, high, step, ..
        } => ((i128::from(*high) - i128::from(*low)) / i128::from(*step) + 1)
            .try_into()
            .unwrap_or(usize::MAX),
        Distribution::Float {
            low,
            high,
            step: Some(step),
            ..
        } => ((high - low) / step + 1.5) as usize,
        Distribution::Float { step: None, .. } => usize::MAX,
    };
    n.min(values).max(1)
}

/// Where an internal value lies in `[0, 1)` of the transformed range (a
/// categorical choice at the middle of its share).
fn to_unit(internal: f64, distribution: &Distribution) -> f64 {
    let (low, high, log, step) = match numeric_bounds(distribution) {
        Ok(bounds) => bounds,
        Err(n) => return (internal + 0.5) / n as f64,
    };
    let (a, b) = transformed_range(low, high, log, step);
    let t = if log { internal.ln() } else { internal };
    if b > a { (t - a) / (b - a) } else { 0.5 }
}

/// A value of parameter `name` for the next startup trial of `study`, one
/// of `n` startup trials.
pub(crate) fn draw(
    rng: &mut Rng,
    n: usize,
    study: &StudyView<'_>,
    name: &str,
    distribution: &Distribution,
) -> f64 {
    let k = strata(distribution, n);
    let mut used = vec![0usize; k];
    for p in study.trials.iter().filter_map(|t| t.params.get(name)) {
        if p.distribution == *distribution
            && let Some(v) = p.internal_in_distribution()
        {
            let s = (to_unit(v, distribution) * k as f64).floor();
            used[(s.max(0.0) as usize).min(k - 1)] += 1;
        }
    }
    let least = used.iter().copied().min().unwrap_or(0);
    let free: Vec<usize> = (0..k).filter(|s| used[*s] == least).collect();
    let stratum = free[rng.below(free.len())];
    from_unit((stratum as f64 + rng.next_f64()) / k as f64, distribution)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trial::{FrozenTrial, Param, StudyDirection, TrialState};
    use crate::{CategoricalChoice, ParamValue};

    /// Over each block of `n` startup trials every stratum of a float, an
    /// int grid and a categorical is used equally, RUNNING trials included.
    #[test]
    fn strata_fill_evenly() {
        let n = 5;
        let x = Distribution::float(-2.0, 8.0, false, None).unwrap();
        let c = Distribution::int(0, 9, false, 1).unwrap();
        let choices: Vec<CategoricalChoice> = ["a", "b", "c"]
            .iter()
            .map(|s| ParamValue::Str((*s).into()))
            .collect();
        let cat = Distribution::categorical(choices).unwrap();
        let mut rng = Rng::seed_from(3);
        let mut trials: Vec<FrozenTrial> = Vec::new();
        for number in 0..3 * n as u64 {
            let study = StudyView {
                name: "s",
                direction: StudyDirection::Minimize,
                directions: &[],
                trials: &trials,
            };
            let mut t = FrozenTrial::new(number);
            t.state = TrialState::Running;
            for (name, d) in [("x", &x), ("c", &c), ("k", &cat)] {
                let internal = draw(&mut rng, n, &study, name, d);
                assert!(d.contains(internal), "{name}: {internal}");
                let param = Param {
                    distribution: d.clone(),
                    internal,
                };
                t.params.insert(name.into(), param);
            }
            trials.push(t);
            let count = |name: &str, cells: usize, cell: &dyn Fn(f64) -> usize| {
                let mut v = vec![0; cells];
                for t in &trials {
                    v[cell(t.params[name].internal)] += 1;
                }
                v
            };
            let done = trials.len();
            if done.is_multiple_of(n) {
                let per = done / n;
                // Ten integers in five strata: two per stratum.
                assert_eq!(count("x", n, &|v| ((v + 2.0) / 2.0) as usize), vec![per; n]);
                assert_eq!(count("c", n, &|v| (v / 2.0) as usize), vec![per; n]);
            }
            let k = count("k", 3, &|v| v as usize);
            assert!(
                k.iter().max().unwrap() - k.iter().min().unwrap() <= 1,
                "{k:?}"
            );
        }
    }
}
