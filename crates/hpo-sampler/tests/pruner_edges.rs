//! Pruners at the edges of their input, each case as Optuna 5.0 decides
//! it: infinite values beside the percentile, an automatic `max_resource`
//! below `min_resource`, a patience that never runs out.

use hpo_sampler::{
    FrozenTrial, HyperbandPruner, MedianPruner, PatientPruner, PercentilePruner, Pruner,
    StudyDirection, StudyView, TrialState,
};
use serde_json::json;

fn complete(number: u64, value: f64, curve: &[(i64, f64)]) -> FrozenTrial {
    let mut t = FrozenTrial::new(number);
    t.state = TrialState::Complete;
    t.values = Some(vec![value]);
    t.intermediate_values = curve.iter().copied().collect();
    t
}

fn running(number: u64, curve: &[(i64, f64)]) -> FrozenTrial {
    let mut t = FrozenTrial::new(number);
    t.state = TrialState::Running;
    t.intermediate_values = curve.iter().copied().collect();
    t
}

/// Optuna: `np.nanpercentile([1, 2, inf], 50)` is NaN (numpy lerps with
/// the next element even at an exact index: 2 + (inf - 2) * 0), so
/// `PercentilePruner.prune` returns False (`if math.isnan(p): return False`).
///   study.add_trial(create_trial(value=v, intermediate_values={0: v})) for v in 1, 2, inf
///   MedianPruner(n_startup_trials=0): trial reporting 5.0 at step 0 -> not pruned.
#[test]
fn median_with_an_infinite_neighbour_is_nan_as_numpy() {
    let mut trials: Vec<FrozenTrial> = [1.0, 2.0, f64::INFINITY]
        .iter()
        .enumerate()
        .map(|(i, &v)| complete(i as u64, v, &[(0, v)]))
        .collect();
    trials.push(running(3, &[(0, 5.0)]));
    let study = StudyView::new("s", StudyDirection::Minimize, &trials);
    let mut pruner = MedianPruner::new(0, 0, 1, 1).unwrap();
    assert!(
        !pruner.prune(&study, &trials[3]).prune,
        "Optuna keeps the trial (percentile NaN)"
    );
}

/// Same with two values: np.nanpercentile([1, inf], 0) is NaN too.
#[test]
fn percentile_zero_with_an_infinite_value_is_nan_as_numpy() {
    let mut trials: Vec<FrozenTrial> = [1.0, f64::INFINITY]
        .iter()
        .enumerate()
        .map(|(i, &v)| complete(i as u64, v, &[(0, v)]))
        .collect();
    trials.push(running(2, &[(0, 5.0)]));
    let study = StudyView::new("s", StudyDirection::Minimize, &trials);
    let mut pruner = PercentilePruner::new(0.0, 0, 0, 1, 1).unwrap();
    assert!(!pruner.prune(&study, &trials[2]).prune);
}

/// Optuna: HyperbandPruner(min_resource=10) with max_resource "auto" whose
/// first COMPLETE trial stopped at step 4 (max_resource 5) gets
/// floor(log_3(5/10)) + 1 = 0 brackets and never prunes: the next two
/// trials run to step 11 unpruned, the second far worse than the first.
#[test]
fn hyperband_with_min_resource_above_max_resource_never_prunes() {
    let mut trials = vec![complete(
        0,
        0.0,
        &(0..5).map(|s| (s, 0.0)).collect::<Vec<_>>(),
    )];
    let mut pruner = HyperbandPruner::new(10, None, 3, 0).unwrap();
    let mut pruned = Vec::new();
    for (number, value) in [(1u64, 0.0), (2, 100.0)] {
        trials.push(running(number, &[]));
        let mut at = None;
        for step in 0..12 {
            let i = trials.len() - 1;
            trials[i].intermediate_values.insert(step, value);
            let study = StudyView::new("s", StudyDirection::Minimize, &trials);
            let d = pruner.prune(&study, &trials[i]);
            for (k, v) in d.system_attrs {
                trials[i].system_attrs.insert(k, json!(v));
            }
            if d.prune {
                at = Some(step);
                break;
            }
        }
        let i = trials.len() - 1;
        trials[i].state = if at.is_some() {
            TrialState::Pruned
        } else {
            TrialState::Complete
        };
        trials[i].values = Some(vec![value]);
        pruned.push(at);
    }
    assert_eq!(pruned, vec![None, None], "Optuna never prunes here");
}

/// Optuna's PatientPruner takes any patience (`patience < 0` is the only
/// error): `usize::MAX`, a natural "never lose patience", keeps the trial.
#[test]
fn patient_pruner_with_huge_patience_does_not_overflow() {
    let trials = vec![running(0, &[(0, 1.0), (1, 2.0), (2, 3.0)])];
    let study = StudyView::new("s", StudyDirection::Minimize, &trials);
    let mut pruner = PatientPruner::new(None, usize::MAX, 0.0).unwrap();
    let d = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pruner.prune(&study, &trials[0])
    }));
    assert!(matches!(d, Ok(ref d) if !d.prune), "{d:?}");
}
