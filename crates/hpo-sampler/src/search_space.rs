//! Which parameters a sampler can model jointly: Optuna's
//! `IntersectionSearchSpace` (parameters with the same distribution in every
//! COMPLETE trial, and every PRUNED one where it counts them) and
//! `_GroupDecomposedSearchSpace` (disjoint groups of parameters that always
//! occur together, for conditional spaces).

use crate::trial::{FrozenTrial, SearchSpace, TrialState};

fn counts(trial: &FrozenTrial) -> bool {
    matches!(trial.state, TrialState::Complete | TrialState::Pruned)
}

/// Parameters present with one identical distribution in every COMPLETE or
/// PRUNED trial (Optuna's `IntersectionSearchSpace(include_pruned=True)`).
pub fn intersection(trials: &[FrozenTrial]) -> SearchSpace {
    intersect_from(None, trials).unwrap_or_default()
}

/// Parameters present with one identical distribution in every COMPLETE
/// trial (Optuna's `IntersectionSearchSpace(include_pruned=False)`, which
/// its NSGA-II and GP samplers use): a trial pruned before it suggested a
/// parameter does not take that parameter out.
pub fn complete_intersection(trials: &[FrozenTrial]) -> SearchSpace {
    let complete = trials.iter().filter(|t| t.state == TrialState::Complete);
    intersect(None, complete).unwrap_or_default()
}

/// Incremental form: `start` is the intersection over earlier trials
/// (`None`: no counted trial yet).
pub(crate) fn intersect_from(
    start: Option<SearchSpace>,
    trials: &[FrozenTrial],
) -> Option<SearchSpace> {
    intersect(start, trials.iter().filter(|t| counts(t)))
}

fn intersect<'a>(
    start: Option<SearchSpace>,
    trials: impl Iterator<Item = &'a FrozenTrial>,
) -> Option<SearchSpace> {
    let mut space = start;
    for t in trials {
        match &mut space {
            None => {
                space = Some(
                    t.params
                        .iter()
                        .map(|(k, p)| (k.clone(), p.distribution.clone()))
                        .collect(),
                )
            }
            Some(s) => {
                // Usually nothing is removed: look up first, rebuild rarely.
                let keep = |(k, d): (&String, &crate::Distribution)| {
                    t.params.get(k).is_some_and(|p| &p.distribution == d)
                };
                if !s.iter().all(keep) {
                    s.retain(|k, d| keep((k, d)));
                }
            }
        }
    }
    space
}

/// Disjoint groups of parameters (Optuna's `_SearchSpaceGroup`): each
/// finished trial's parameter set splits the groups it cuts.
pub fn groups(trials: &[FrozenTrial]) -> Vec<SearchSpace> {
    let mut groups: Vec<SearchSpace> = Vec::new();
    for t in trials.iter().filter(|t| counts(t)) {
        let mut remaining: SearchSpace = t
            .params
            .iter()
            .map(|(k, p)| (k.clone(), p.distribution.clone()))
            .collect();
        let mut next = Vec::with_capacity(groups.len() * 2 + 1);
        for g in groups {
            let (inside, outside): (SearchSpace, SearchSpace) =
                g.into_iter().partition(|(k, _)| remaining.contains_key(k));
            for k in inside.keys() {
                remaining.remove(k);
            }
            next.push(inside);
            next.push(outside);
        }
        next.push(remaining);
        next.retain(|g| !g.is_empty());
        groups = next;
    }
    groups
}
