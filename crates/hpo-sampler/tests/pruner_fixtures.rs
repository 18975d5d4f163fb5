//! Replays the learning-curve scenarios recorded from Optuna 5.0's pruners
//! (benches/sampler/pruner_fixtures.py writes fixtures/pruners/*.json) and
//! asserts that every prune decision is reproduced.

use hpo_sampler::pruner::MinResource;
use hpo_sampler::{
    FrozenTrial, HyperbandPruner, MedianPruner, NopPruner, PatientPruner, PercentilePruner, Pruner,
    StudyDirection, StudyView, SuccessiveHalvingPruner, ThresholdPruner, TrialState,
};
use serde_json::Value;
use std::path::Path;

fn int(spec: &Value, key: &str, default: i64) -> i64 {
    spec.get(key).and_then(Value::as_i64).unwrap_or(default)
}

fn float(spec: &Value, key: &str) -> Option<f64> {
    spec.get(key).and_then(Value::as_f64)
}

fn make_pruner(spec: &Value) -> Box<dyn Pruner + Send> {
    let kind = spec["type"].as_str().unwrap();
    match kind {
        "nop" => Box::new(NopPruner),
        "median" => Box::new(
            MedianPruner::new(
                int(spec, "n_startup_trials", 5) as usize,
                int(spec, "n_warmup_steps", 0),
                int(spec, "interval_steps", 1),
                int(spec, "n_min_trials", 1) as usize,
            )
            .unwrap(),
        ),
        "percentile" => Box::new(
            PercentilePruner::new(
                float(spec, "percentile").unwrap(),
                int(spec, "n_startup_trials", 5) as usize,
                int(spec, "n_warmup_steps", 0),
                int(spec, "interval_steps", 1),
                int(spec, "n_min_trials", 1) as usize,
            )
            .unwrap(),
        ),
        "successive_halving" => Box::new(
            SuccessiveHalvingPruner::new(
                match spec.get("min_resource").and_then(Value::as_i64) {
                    Some(r) => MinResource::Fixed(r),
                    None => MinResource::Auto,
                },
                int(spec, "reduction_factor", 4),
                int(spec, "min_early_stopping_rate", 0),
                int(spec, "bootstrap_count", 0) as usize,
            )
            .unwrap(),
        ),
        "hyperband" => Box::new(
            HyperbandPruner::new(
                int(spec, "min_resource", 1),
                spec.get("max_resource").and_then(Value::as_i64),
                int(spec, "reduction_factor", 3),
                int(spec, "bootstrap_count", 0) as usize,
            )
            .unwrap(),
        ),
        "threshold" => Box::new(
            ThresholdPruner::new(
                float(spec, "lower"),
                float(spec, "upper"),
                int(spec, "n_warmup_steps", 0),
                int(spec, "interval_steps", 1),
            )
            .unwrap(),
        ),
        "patient" => Box::new(
            PatientPruner::new(
                spec.get("wrapped")
                    .filter(|w| !w.is_null())
                    .map(make_pruner),
                int(spec, "patience", 0) as usize,
                float(spec, "min_delta").unwrap_or(0.0),
            )
            .unwrap(),
        ),
        other => panic!("unknown pruner type {other}"),
    }
}

fn replay(path: &Path) -> usize {
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let name = fixture["study_name"].as_str().unwrap();
    let direction = match fixture["direction"].as_str().unwrap() {
        "minimize" => StudyDirection::Minimize,
        _ => StudyDirection::Maximize,
    };
    let mut pruner = make_pruner(&fixture["pruner"]);
    let mut trials: Vec<FrozenTrial> = Vec::new();
    let mut checked = 0;
    for (i, event) in fixture["events"].as_array().unwrap().iter().enumerate() {
        let number = event["trial"].as_u64().unwrap();
        // Optuna numbers trials in ask order; ask creates them lazily here.
        while trials.len() as u64 <= number {
            trials.push(FrozenTrial::new(trials.len() as u64));
        }
        let idx = number as usize;
        if let Some(state) = event.get("tell").and_then(Value::as_str) {
            let t = &mut trials[idx];
            if state == "COMPLETE" {
                t.state = TrialState::Complete;
                t.values = Some(vec![event["value"].as_f64().unwrap()]);
            } else {
                t.state = TrialState::Pruned;
            }
            continue;
        }
        let step = event["step"].as_i64().unwrap();
        let value = event["value"].as_f64().unwrap_or(f64::NAN);
        trials[idx].intermediate_values.insert(step, value);
        let current = trials[idx].clone();
        let study = StudyView::new(name, direction, &trials);
        let decision = pruner.prune(&study, &current);
        let want = event["prune"].as_bool().unwrap();
        assert_eq!(
            decision.prune,
            want,
            "{}: event {i} (trial {number}, step {step}, value {value})",
            path.display()
        );
        for (k, v) in decision.system_attrs {
            trials[idx].system_attrs.insert(k, v.into());
        }
        checked += 1;
    }
    checked
}

#[test]
fn reproduces_every_optuna_pruning_decision() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pruners");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 10, "fixtures missing in {}", dir.display());
    for path in paths {
        let n = replay(&path);
        assert!(n > 0, "{} has no decisions", path.display());
    }
}

/// A `max_resource` near `i64::MAX` (64 brackets, budgets past `u64`):
/// decisions, not an arithmetic overflow, and every trial in the first
/// bracket, as Optuna's unbounded integers put it.
#[test]
fn hyperband_takes_the_largest_max_resource() {
    let mut pruner = HyperbandPruner::new(1, Some(i64::MAX), 2, 0).unwrap();
    let mut trial = FrozenTrial::new(0);
    trial.intermediate_values.insert(0, 0.5);
    let trials = vec![trial.clone()];
    let study = StudyView::new("s", StudyDirection::Minimize, &trials);
    assert!(!pruner.prune(&study, &trial).prune);
    assert_eq!(pruner.bracket_id("s", 0), 0);
    assert_eq!(pruner.bracket_id("s", 12345), 0);
}

/// "auto" takes `max_resource` from the last step of a COMPLETE trial plus
/// one; a step of `i64::MAX` (any integer Optuna stores) gives the largest,
/// not an overflow.
#[test]
fn hyperband_auto_takes_a_last_step_of_i64_max() {
    let mut pruner = HyperbandPruner::new(1, None, 2, 0).unwrap();
    let mut done = FrozenTrial::new(0);
    done.state = hpo_sampler::TrialState::Complete;
    done.values = Some(vec![0.5]);
    done.intermediate_values.insert(i64::MAX, 0.5);
    let mut trial = FrozenTrial::new(1);
    trial.intermediate_values.insert(0, 0.5);
    let trials = vec![done, trial.clone()];
    let study = StudyView::new("s", StudyDirection::Minimize, &trials);
    assert!(!pruner.prune(&study, &trial).prune);
    assert_eq!(pruner.bracket_id("s", 12345), 0);
}
