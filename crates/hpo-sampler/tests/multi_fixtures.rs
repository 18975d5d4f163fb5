//! Several objectives against Optuna 5.0 on fixed inputs
//! (benches/sampler/multi_fixtures.py writes
//! fixtures/multi/optuna_multi.json): non-domination ranks with and without
//! penalties, hypervolume, greedy hypervolume subset selection,
//! multi-objective TPE's below/above split and `study.best_trials`.

use hpo_sampler::multi::{
    constrained_ranks, hypervolume, non_domination_ranks, pareto_front, select_by_hypervolume,
};
use hpo_sampler::sampler::split_trials;
use hpo_sampler::trial::CONSTRAINTS_KEY;
use hpo_sampler::{Distribution, FrozenTrial, Param, StudyDirection, StudyView, TrialState};
use serde_json::Value;

fn fixture() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/multi/optuna_multi.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn matrix(v: &Value) -> Vec<Vec<f64>> {
    serde_json::from_value(v.clone()).unwrap()
}

fn numbers(v: &Value) -> Vec<u64> {
    serde_json::from_value(v.clone()).unwrap()
}

fn directions(v: &Value) -> Vec<StudyDirection> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|d| match d.as_str().unwrap() {
            "maximize" => StudyDirection::Maximize,
            _ => StudyDirection::Minimize,
        })
        .collect()
}

fn trials(v: &Value) -> Vec<FrozenTrial> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let mut trial = FrozenTrial::new(t["number"].as_u64().unwrap());
            trial.state = match t["state"].as_str().unwrap() {
                "RUNNING" => TrialState::Running,
                _ => TrialState::Complete,
            };
            trial.values = serde_json::from_value(t["values"].clone()).unwrap();
            trial.params.insert(
                "x".into(),
                Param {
                    distribution: Distribution::float(0.0, 1.0, false, None).unwrap(),
                    internal: t["x"].as_f64().unwrap(),
                },
            );
            if t["constraints"].is_array() {
                trial
                    .system_attrs
                    .insert(CONSTRAINTS_KEY.into(), t["constraints"].clone());
            }
            trial
        })
        .collect()
}

#[test]
fn ranks_match_optuna() {
    let f = fixture();
    for (i, case) in f["ranks"].as_array().unwrap().iter().enumerate() {
        let losses = matrix(&case["losses"]);
        let n_below = case["n_below"].as_u64().map(|n| n as usize);
        let want: Vec<usize> = serde_json::from_value(case["ranks"].clone()).unwrap();
        let got = match case["penalty"].as_array() {
            Some(_) => {
                let penalty: Vec<f64> = serde_json::from_value(case["penalty"].clone()).unwrap();
                constrained_ranks(&losses, &penalty, n_below)
            }
            None => non_domination_ranks(&losses, n_below),
        };
        assert_eq!(got, want, "case {i}");
    }
}

#[test]
fn hypervolume_matches_optuna() {
    let f = fixture();
    for (i, case) in f["hypervolume"].as_array().unwrap().iter().enumerate() {
        let reference: Vec<f64> = serde_json::from_value(case["reference"].clone()).unwrap();
        let got = hypervolume(&matrix(&case["losses"]), &reference);
        let want = case["hypervolume"].as_f64().unwrap();
        assert!(
            (got - want).abs() <= 1e-12 * want.abs().max(1.0),
            "case {i}: {got} vs {want}"
        );
    }
}

#[test]
fn subset_selection_matches_optuna() {
    let f = fixture();
    for (i, case) in f["hssp"].as_array().unwrap().iter().enumerate() {
        let reference: Vec<f64> = serde_json::from_value(case["reference"].clone()).unwrap();
        let k = case["k"].as_u64().unwrap() as usize;
        let mut got = select_by_hypervolume(&matrix(&case["losses"]), k, &reference);
        got.sort_unstable();
        let want: Vec<usize> = serde_json::from_value(case["chosen"].clone()).unwrap();
        assert_eq!(got, want, "case {i}");
    }
}

#[test]
fn tpe_split_matches_optuna() {
    let f = fixture();
    for (i, case) in f["split"].as_array().unwrap().iter().enumerate() {
        let dirs = directions(&case["directions"]);
        let ts = trials(&case["trials"]);
        let study = StudyView::with_directions("s", &dirs, &ts);
        let n_below = case["n_below"].as_u64().unwrap() as usize;
        let (below, _) = split_trials(&study, n_below);
        assert_eq!(below, numbers(&case["below"]), "case {i}");
    }
}

#[test]
fn best_trials_match_optuna() {
    let f = fixture();
    for (i, case) in f["best"].as_array().unwrap().iter().enumerate() {
        let dirs = directions(&case["directions"]);
        let ts = trials(&case["trials"]);
        let constrained = ts.iter().any(|t| t.has_constraints());
        let got: Vec<u64> = pareto_front(&ts, &dirs, constrained)
            .iter()
            .map(|t| t.number)
            .collect();
        assert_eq!(got, numbers(&case["best"]), "case {i}");
    }
}
