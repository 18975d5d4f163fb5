//! The report's fANOVA importances agree with Optuna's
//! `FanovaImportanceEvaluator` (default settings) on a study where one parameter dominates:
//! Optuna samples and scores the study, we score the same stored trials,
//! and both must name the same top parameter, with a Spearman rank
//! correlation of at least 0.8 over the five parameters.
//!
//! Needs `MEMTUNE_PYTHON` (optuna==5.0.0 with scikit-learn, from
//! `benches/requirements.txt`); skipped without it unless `CI` is set.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

const STUDY: &str = r#"
import json, sys, warnings
warnings.simplefilter("ignore")
import optuna
from optuna.importance import FanovaImportanceEvaluator, get_param_importances
optuna.logging.set_verbosity(optuna.logging.WARNING)
shift = {"a": 0.0, "b": 3.0, "c": 1.5}
def objective(trial):
    x0 = trial.suggest_float("x0", 0.0, 1.0)
    x1 = trial.suggest_float("x1", 1e-4, 1e-1, log=True)
    x2 = trial.suggest_int("x2", 1, 10)
    x3 = trial.suggest_categorical("x3", ["a", "b", "c"])
    trial.suggest_float("x4", 0.0, 1.0)  # no effect
    u = (__import__("math").log10(x1) + 2.5) / 1.5
    return 10 * x0 ** 2 + 4 * u ** 2 + 0.3 * x2 + shift[x3]
study = optuna.create_study(study_name="dominant", storage=sys.argv[1],
                            sampler=optuna.samplers.RandomSampler(seed=0))
study.optimize(objective, n_trials=200)
print(json.dumps(get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=0))))
"#;

/// The reference Python, if it has scikit-learn (Optuna's fANOVA needs it).
fn python() -> Option<PathBuf> {
    let py = common::reference_python()?;
    let sklearn = Command::new(&py)
        .args(["-c", "import sklearn"])
        .status()
        .unwrap();
    if !sklearn.success() {
        common::skip_or_fail(&format!(
            "scikit-learn in {} (benches/requirements.txt pins it)",
            py.display()
        ));
        return None;
    }
    Some(py)
}

/// Ranks (1 = largest) of `values`, ties averaged.
fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]));
    let mut r = vec![0.0; values.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && values[order[j + 1]] == values[order[i]] {
            j += 1;
        }
        for k in i..=j {
            r[order[k]] = (i + j) as f64 / 2.0 + 1.0;
        }
        i = j + 1;
    }
    r
}

fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let (ra, rb) = (ranks(a), ranks(b));
    let n = ra.len() as f64;
    let mean = (n + 1.0) / 2.0;
    let cov: f64 = ra
        .iter()
        .zip(&rb)
        .map(|(x, y)| (x - mean) * (y - mean))
        .sum();
    let var = |r: &[f64]| r.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>();
    cov / (var(&ra) * var(&rb)).sqrt()
}

#[test]
fn importances_agree_with_optunas_fanova() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("dominant.db");
    let printed = common::run_python(&py, STUDY, &[&common::url(&db)]);
    let theirs: BTreeMap<String, f64> = serde_json::from_str(&printed).unwrap();

    let storage = store::Storage::open_existing(&db).unwrap();
    let input = cli::report::read(&storage, "dominant").unwrap();
    let completed: Vec<_> = input.completed().collect();
    let ours: BTreeMap<String, f64> =
        hpo_sampler::importance::fanova_importances(&completed, &input.params)
            .unwrap()
            .into_iter()
            .map(|i| (i.name, i.importance))
            .collect();

    eprintln!("optuna: {theirs:?}\nmemtune: {ours:?}");
    let names: Vec<&String> = theirs.keys().collect();
    assert_eq!(names, ours.keys().collect::<Vec<_>>());
    let top = |m: &BTreeMap<String, f64>| {
        m.iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .unwrap()
            .0
            .clone()
    };
    assert_eq!(top(&ours), "x0");
    assert_eq!(top(&theirs), "x0");
    let a: Vec<f64> = names.iter().map(|n| theirs[*n]).collect();
    let b: Vec<f64> = names.iter().map(|n| ours[*n]).collect();
    let rho = spearman(&a, &b);
    assert!(rho >= 0.8, "Spearman {rho} < 0.8");
    // Same algorithm, different random forests: close, not equal.
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() < 0.05, "optuna {x} against memtune {y}");
    }
}

#[test]
fn spearman_is_one_for_one_order_and_minus_one_reversed() {
    assert_eq!(spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), 1.0);
    assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), -1.0);
    assert_eq!(ranks(&[5.0, 1.0, 5.0]), vec![1.5, 3.0, 1.5]);
}
