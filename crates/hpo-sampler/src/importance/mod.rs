//! Hyperparameter importance by fANOVA on a random forest, as Optuna's
//! `FanovaImportanceEvaluator` with its default settings computes it: 64 trees of depth at
//! most 64 fitted to the COMPLETE trials' values; each parameter's share
//! of every tree's variance, averaged over the trees with any variance,
//! normalised to sum to 1.
//!
//! Encoding as Optuna's (`_SearchSpaceTransform` without log or step
//! transforms): a float or int parameter is one column of its raw value
//! within `[low, high]` (a log parameter too), a categorical one a one-hot
//! column per choice within `[0, 1]`, whose columns are marginalised
//! together. Parameters with one possible value get 0.
//!
//! Optuna scores only the parameters every COMPLETE trial has. A
//! conditional parameter (present in some trials only) is scored here on
//! the trials that have it, against the parameters all of those share, and
//! reported beside the others with its trial count.
//!
//! The forest is grown as scikit-learn grows its `RandomForestRegressor`
//! (`forest.rs`) and each tree's variance decomposed over its leaves' boxes
//! (`tree.rs`), Optuna's `_FanovaTree`; a fixed seed gives the same
//! importances for the same trials.
//!
//! ```
//! use hpo_sampler::importance::fanova_importances;
//! use hpo_sampler::{Distribution, FrozenTrial, Param, SearchSpace};
//!
//! let x = Distribution::float(0.0, 1.0, false, None).unwrap();
//! let noise = Distribution::float(0.0, 1.0, false, None).unwrap();
//! let trials: Vec<(FrozenTrial, f64)> = (0..40u64)
//!     .map(|i| {
//!         let (xi, ni) = ((i as f64 * 0.618).fract(), (i as f64 * 0.377).fract());
//!         let mut t = FrozenTrial::new(i);
//!         for (name, d, v) in [("x", &x, xi), ("noise", &noise, ni)] {
//!             t.params.insert(name.into(), Param { distribution: d.clone(), internal: v });
//!         }
//!         (t, (xi - 0.3).powi(2) + 0.01 * ni) // the value depends on x
//!     })
//!     .collect();
//! let space = SearchSpace::from([("x".into(), x), ("noise".into(), noise)]);
//! let scored: Vec<(&FrozenTrial, f64)> = trials.iter().map(|(t, v)| (t, *v)).collect();
//! let importances = fanova_importances(&scored, &space)?;
//! assert_eq!(importances[0].name, "x");
//! assert!(importances[0].importance > 0.9, "{importances:?}");
//! # Ok::<(), hpo_sampler::Error>(())
//! ```

mod forest;
mod tree;

use std::collections::BTreeMap;

use crate::error::Error;
use crate::{Distribution, FrozenTrial};

use self::tree::FanovaTree;

/// Trees in the fANOVA random forest (Optuna's `FanovaImportanceEvaluator`
/// default `n_trees=64`).
pub const N_TREES: usize = 64;
/// The depth limit of each tree (Optuna's default `max_depth=64`).
pub const MAX_DEPTH: usize = 64;
/// A fixed seed: the same study gives the same report.
const SEED: u64 = 0;

/// One parameter's importance.
#[derive(Clone, Debug, PartialEq)]
pub struct Importance {
    /// The parameter's name.
    pub name: String,
    /// Its share of the variance, normalised within its fit.
    pub importance: f64,
    /// The trials it was fitted on.
    pub trials: usize,
    /// Present in only some COMPLETE trials (scored on those).
    pub conditional: bool,
}

/// Importances of every parameter of `params` over `trials` (finished
/// trials, each with its value), most important first; an
/// [`Error::Importance`] says why there are none. Trials whose value is
/// not finite are left out first, as Optuna's `_get_filtered_trials`
/// does. A stored value outside its parameter's distribution in `params`
/// (a range narrowed since, a choice list changed) is read as a parameter
/// the trial does not have, as the samplers read it: the trees' cells are
/// cut within the distribution's bounds.
pub fn fanova_importances(
    trials: &[(&FrozenTrial, f64)],
    params: &BTreeMap<String, Distribution>,
) -> Result<Vec<Importance>, Error> {
    let trials: Vec<(&FrozenTrial, f64)> = trials
        .iter()
        .copied()
        .filter(|(_, v)| v.is_finite())
        .collect();
    let trials = trials.as_slice();
    if trials.len() < 2 {
        return Err(Error::Importance {
            reason: format!(
                "fANOVA needs at least 2 COMPLETE trials with a value; the study has {}",
                trials.len()
            ),
        });
    }
    let common: Vec<&String> = params
        .keys()
        .filter(|name| trials.iter().all(|(t, _)| has(t, name, params)))
        .collect();
    let mut out = evaluate(trials, params, &common)
        .map_err(|reason| Error::Importance { reason })?
        .into_iter()
        .map(|(name, importance)| Importance {
            name,
            importance,
            trials: trials.len(),
            conditional: false,
        })
        .collect::<Vec<_>>();
    for name in params.keys().filter(|n| !common.contains(n)) {
        let subset: Vec<(&FrozenTrial, f64)> = trials
            .iter()
            .filter(|(t, _)| has(t, name, params))
            .copied()
            .collect();
        if subset.len() < 2 {
            continue;
        }
        let shared: Vec<&String> = params
            .keys()
            .filter(|n| subset.iter().all(|(t, _)| has(t, n, params)))
            .collect();
        // A subset whose values do not vary says nothing of this parameter.
        if let Ok(scores) = evaluate(&subset, params, &shared)
            && let Some((_, importance)) = scores.into_iter().find(|(n, _)| n == name)
        {
            out.push(Importance {
                name: name.clone(),
                importance,
                trials: subset.len(),
                conditional: true,
            });
        }
    }
    out.sort_by(|a, b| {
        b.importance
            .total_cmp(&a.importance)
            .then(a.name.cmp(&b.name))
    });
    Ok(out)
}

/// Whether trial `t` has parameter `name` as `params` describes it: a value
/// inside the distribution, and for a categorical the same choices (an
/// index means nothing under another list).
fn has(t: &FrozenTrial, name: &str, params: &BTreeMap<String, Distribution>) -> bool {
    match (t.params.get(name), params.get(name)) {
        (Some(p), Some(d @ Distribution::Categorical { .. })) => {
            p.distribution == *d && d.contains(p.internal)
        }
        (Some(p), Some(d)) => d.contains(p.internal),
        _ => false,
    }
}

/// One column group per parameter: its encoded columns and their bounds.
struct Encoding<'a> {
    name: &'a str,
    dist: &'a Distribution,
    columns: Vec<usize>,
}

fn single(d: &Distribution) -> bool {
    match d {
        Distribution::Float { low, high, .. } => low == high,
        Distribution::Int { low, high, .. } => low == high,
        Distribution::Categorical { choices } => choices.len() <= 1,
    }
}

/// Optuna's evaluation over `names` (sorted), normalised to sum to 1.
fn evaluate(
    trials: &[(&FrozenTrial, f64)],
    params: &BTreeMap<String, Distribution>,
    names: &[&String],
) -> Result<Vec<(String, f64)>, String> {
    let mut encodings = Vec::new();
    let mut bounds = Vec::new();
    let mut singles = Vec::new();
    for &name in names {
        let dist = &params[name];
        if single(dist) {
            singles.push(name.clone());
            continue;
        }
        let start = bounds.len();
        match dist {
            Distribution::Float { low, high, .. } => bounds.push((*low, *high)),
            Distribution::Int { low, high, .. } => bounds.push((*low as f64, *high as f64)),
            Distribution::Categorical { choices } => {
                bounds.extend(choices.iter().map(|_| (0.0, 1.0)))
            }
        }
        encodings.push(Encoding {
            name,
            dist,
            columns: (start..bounds.len()).collect(),
        });
    }
    if encodings.is_empty() {
        return Err("no parameter takes more than one value".into());
    }
    let rows: Vec<Vec<f64>> = trials
        .iter()
        .map(|(t, _)| {
            let mut row = Vec::with_capacity(bounds.len());
            for e in &encodings {
                let v = t.params.get(e.name).map_or(f64::NAN, |p| p.internal);
                match e.dist {
                    Distribution::Categorical { choices } => {
                        row.extend((0..choices.len()).map(|c| f64::from(u8::from(v == c as f64))))
                    }
                    _ => row.push(v),
                }
            }
            row
        })
        .collect();
    let y: Vec<f64> = trials.iter().map(|(_, v)| *v).collect();
    let forest = forest::fit(&rows, &y, N_TREES, MAX_DEPTH, SEED);
    let trees: Vec<FanovaTree> = forest.iter().map(|t| FanovaTree::new(t, &bounds)).collect();
    if trees.iter().all(|t| t.variance <= 0.0) {
        let (low, high) = y
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
                (l.min(*v), h.max(*v))
            });
        return Err(if low == high {
            "the objective value does not vary over the trials".into()
        } else {
            // The trees stop splitting at an absolute variance of
            // f64::EPSILON, as scikit-learn's do (so Optuna's too).
            format!(
                "the objective's values ({low:e} to {high:e}) vary by less than the trees \
                 resolve (a variance of 2.2e-16, as scikit-learn's): rescale the objective \
                 to see importances"
            )
        });
    }
    let raw: Vec<f64> = encodings
        .iter()
        .map(|e| {
            let fractions: Vec<f64> = trees
                .iter()
                .filter(|t| t.variance > 0.0)
                .map(|t| t.marginal_variance(&e.columns) / t.variance)
                .collect();
            fractions.iter().sum::<f64>() / fractions.len() as f64
        })
        .collect();
    let total: f64 = raw.iter().sum();
    let mut out: Vec<(String, f64)> = encodings
        .iter()
        .zip(&raw)
        .map(|(e, &r)| {
            (
                e.name.to_string(),
                if total > 0.0 { r / total } else { 0.0 },
            )
        })
        .collect();
    out.extend(singles.into_iter().map(|n| (n, 0.0)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Param, TrialState};

    /// 30 trials of `x` and `n` on `[0, 1]` whose value depends mostly on
    /// `x`, and their space.
    fn x_and_n() -> (Vec<(FrozenTrial, f64)>, BTreeMap<String, Distribution>) {
        let x = Distribution::float(0.0, 1.0, false, None).unwrap();
        let n = Distribution::float(0.0, 1.0, false, None).unwrap();
        let owned = (0..30u64)
            .map(|i| {
                let (xi, ni) = ((i as f64 * 0.618).fract(), (i as f64 * 0.377).fract());
                let t = trial(i, &[("x", xi, &x), ("n", ni, &n)]);
                (t, (xi - 0.3).powi(2) + 0.01 * ni)
            })
            .collect();
        (
            owned,
            BTreeMap::from([("x".to_string(), x), ("n".to_string(), n)]),
        )
    }

    /// A non-finite value leaves its trial out, as Optuna filters it.
    #[test]
    fn non_finite_values_are_left_out() {
        let (mut owned, space) = x_and_n();
        let (x, n) = (space["x"].clone(), space["n"].clone());
        let refs: Vec<(&FrozenTrial, f64)> = owned.iter().map(|(t, v)| (t, *v)).collect();
        let expected = fanova_importances(&refs, &space).unwrap();
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            owned.push((trial(99, &[("x", 0.9, &x), ("n", 0.1, &n)]), bad));
            let refs: Vec<(&FrozenTrial, f64)> = owned.iter().map(|(t, v)| (t, *v)).collect();
            assert_eq!(
                fanova_importances(&refs, &space).unwrap(),
                expected,
                "{bad}"
            );
            owned.pop();
        }
    }

    /// A value outside the distribution (the range narrowed since) is a
    /// parameter the trial does not have: scored on the others, never in a
    /// cell beyond the bounds.
    #[test]
    fn values_outside_the_distribution_are_missing() {
        let (mut owned, space) = x_and_n();
        let n = space["n"].clone();
        let wide = Distribution::float(0.0, 5.0, false, None).unwrap();
        let refs: Vec<(&FrozenTrial, f64)> = owned.iter().map(|(t, v)| (t, *v)).collect();
        let score = |imp: &[Importance]| {
            let x = imp.iter().find(|i| i.name == "x").unwrap();
            (x.importance, x.trials, x.conditional)
        };
        let (expected, ..) = score(&fanova_importances(&refs, &space).unwrap());
        owned.push((trial(30, &[("x", 3.0, &wide), ("n", 0.5, &n)]), 100.0));
        owned.push((trial(31, &[("x", 5.0, &wide), ("n", 0.5, &n)]), -100.0));
        let refs: Vec<(&FrozenTrial, f64)> = owned.iter().map(|(t, v)| (t, *v)).collect();
        let got = fanova_importances(&refs, &space).unwrap();
        assert_eq!(score(&got), (expected, 30, true), "{got:?}");
    }

    fn trial(number: u64, params: &[(&str, f64, &Distribution)]) -> FrozenTrial {
        let mut t = FrozenTrial::new(number);
        t.state = TrialState::Complete;
        t.params = params
            .iter()
            .map(|(n, v, d)| {
                let p = Param {
                    distribution: (*d).clone(),
                    internal: *v,
                };
                (n.to_string(), p)
            })
            .collect();
        t
    }

    #[test]
    fn the_parameter_the_value_depends_on_dominates() {
        let x = Distribution::Float {
            low: 0.0,
            high: 1.0,
            log: false,
            step: None,
        };
        let c = Distribution::Categorical {
            choices: vec!["a".into(), "b".into(), "c".into()],
        };
        let trials: Vec<FrozenTrial> = (0..60)
            .map(|i| {
                let xi = (i as f64 * 0.618).fract();
                let ci = (i % 3) as f64;
                trial(i, &[("x", xi, &x), ("c", ci, &c)])
            })
            .collect();
        let with_values: Vec<(&FrozenTrial, f64)> = trials
            .iter()
            .map(|t| {
                let xi = t.params.get("x").unwrap().internal;
                let ci = t.params.get("c").unwrap().internal;
                (t, 10.0 * xi * xi + 0.3 * ci)
            })
            .collect();
        let params = BTreeMap::from([("x".to_string(), x), ("c".to_string(), c)]);
        let imp = fanova_importances(&with_values, &params).unwrap();
        assert_eq!(imp[0].name, "x", "{imp:?}");
        assert!(imp[0].importance > 0.8, "{imp:?}");
        let sum: f64 = imp.iter().map(|i| i.importance).sum();
        assert!((sum - 1.0).abs() < 1e-9);
    }

    #[test]
    fn one_trial_or_a_flat_objective_has_no_importance() {
        let x = Distribution::Float {
            low: 0.0,
            high: 1.0,
            log: false,
            step: None,
        };
        let params = BTreeMap::from([("x".to_string(), x.clone())]);
        let trials: Vec<FrozenTrial> = (0..5)
            .map(|i| trial(i, &[("x", i as f64 / 5.0, &x)]))
            .collect();
        let one = [(&trials[0], 1.0)];
        assert!(
            fanova_importances(&one, &params)
                .unwrap_err()
                .to_string()
                .contains("at least 2")
        );
        let flat: Vec<(&FrozenTrial, f64)> = trials.iter().map(|t| (t, 1.0)).collect();
        assert!(
            fanova_importances(&flat, &params)
                .unwrap_err()
                .to_string()
                .contains("does not vary")
        );
        // Values that vary below the trees' resolution are not called flat.
        let tiny: Vec<(&FrozenTrial, f64)> = trials
            .iter()
            .enumerate()
            .map(|(i, t)| (t, 1e-9 * i as f64))
            .collect();
        let err = fanova_importances(&tiny, &params).unwrap_err().to_string();
        assert!(
            err.contains("vary by less than the trees resolve") && err.contains("0e0 to 4e-9"),
            "{err}"
        );
    }
}
