//! Several objectives and constraints, run by `memtune tune` on the
//! simulated device: a study of accuracy against peak memory with a
//! `peak_memory` constraint never trains a trial the memory plan puts over
//! the max (PRUNED, with Optuna's `constraints` on it), completes the
//! others with both values within the max, and its Pareto front is the
//! one `optuna.load_study(...).best_trials` reads (with
//! `MEMTUNE_PYTHON`; that part is skipped without it unless `CI` is set).

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{memtune, ok};
use serde_json::{Value as Json, json};
use store::{FrozenTrial, Storage, StudyDirection, TrialFilter, TrialState};

const GIB: u64 = 1 << 30;

/// [`common::sim_study`] (bert-base, about 1.8 GiB of weights, gradients
/// and AdamW state, or bert-large, about 5.4 GiB; batch 8 to 64, length
/// 128 or 256, on a 24 GiB device) with `metrics` as its objectives,
/// `constraints` appended, and a seeded random sampler, so the same
/// configurations come in the same order whatever the timing.
fn study(name: &str, metrics: &str, constraints: &str, n_trials: usize) -> String {
    let text = common::sim_study(name, n_trials, "24GiB", "")
        .replace("metric = \"accuracy\"", &format!("metrics = {metrics}"))
        .replace("kind = \"tpe\"\nseed = 7", "kind = \"random\"\nseed = 5");
    assert!(text.contains(metrics) && text.contains("seed = 5"));
    format!("{text}\n{constraints}\n")
}

/// `memtune tune` of `text` (written as `study.toml` in `dir`) into
/// `dir/study.db`: the storage file and what the command did.
fn tune(dir: &Path, text: &str) -> (PathBuf, Output) {
    let db = dir.join("study.db");
    let config = dir.join("study.toml");
    std::fs::write(&config, text).unwrap();
    let out = memtune(
        &db,
        &[
            "tune",
            "--no-progress",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    (db, out)
}

/// [`tune`], which must succeed; its stdout (the summary).
fn run(dir: &Path, text: &str) -> (PathBuf, String) {
    let (db, out) = tune(dir, text);
    (db, ok(out))
}

fn trials(db: &Path, name: &str) -> (store::Study, Vec<FrozenTrial>) {
    let storage = Storage::open_existing(db).unwrap();
    let study = storage.study(name).unwrap();
    let trials = storage
        .trials(study.study_id, &TrialFilter::default())
        .unwrap();
    (study, trials)
}

/// A param's value as JSON (`"bert-base"`, `64`).
fn param(t: &FrozenTrial, name: &str) -> Json {
    store::value_to_json(&t.params[name].value())
}

fn model(t: &FrozenTrial) -> Json {
    param(t, "model")
}

fn constraints(t: &FrozenTrial) -> Vec<f64> {
    t.constraints()
}

fn attr_u64(t: &FrozenTrial, key: &str) -> u64 {
    t.user_attrs[key]
        .as_u64()
        .unwrap_or_else(|| panic!("trial {}: no `{key}`", t.number))
}

#[test]
fn accuracy_against_peak_memory_with_a_memory_constraint() {
    let dir = tempfile::tempdir().unwrap();
    let max = 3 * GIB;
    let text = study(
        "mo",
        "[\"accuracy\", \"peak_memory\"]",
        "[[constraint]]\nmetric = \"peak_memory\"\nmax = \"3GiB\"",
        12,
    );
    let (db, out) = run(dir.path(), &text);
    assert!(out.contains("Pareto front:"), "{out}");
    let (study, trials) = trials(&db, "mo");
    assert_eq!(
        study.directions,
        [StudyDirection::Maximize, StudyDirection::Minimize]
    );
    assert_eq!(trials.len(), 12, "n_trials counts the infeasible ones");
    let storage = Storage::open_existing(&db).unwrap();
    assert_eq!(
        storage.study_system_attrs(study.study_id).unwrap()["study:metric_names"],
        json!(["accuracy", "peak_memory"])
    );

    let (mut infeasible, mut complete) = (0, 0);
    for t in &trials {
        // Several objectives: nothing reported per epoch (Optuna refuses it).
        assert!(t.intermediate_values.is_empty(), "trial {}", t.number);
        match t.state {
            TrialState::Pruned => {
                infeasible += 1;
                // bert-large's weights, gradients and AdamW state alone
                // are over 3 GiB: never trained, no lease, no worker.
                assert_eq!(model(t), json!("bert-large"), "trial {}", t.number);
                assert!(!t.user_attrs.contains_key("lease_bytes"));
                assert!(!t.user_attrs.contains_key("worker_pid"));
                assert_eq!(t.user_attrs["error_kind"], json!("constraint"));
                let why = t.user_attrs["error_msg"].as_str().unwrap();
                assert!(
                    why.contains("peak_memory") && why.contains("not trained"),
                    "{why}"
                );
                assert!(t.values.is_none());
                let c = constraints(t);
                assert_eq!(c.len(), 1);
                assert!(c[0] > 2.0 * GIB as f64, "predicted - max: {c:?}");
            }
            TrialState::Complete => {
                complete += 1;
                assert_eq!(model(t), json!("bert-base"), "trial {}", t.number);
                let v = t.values.as_deref().unwrap();
                assert_eq!(v.len(), 2);
                assert!(v[0] > 0.5 && v[0] <= 0.95, "accuracy {v:?}");
                // The measured peak, within the max (a batch too large for
                // 3 GiB runs as smaller micro-batches), and the plan's.
                let peak = attr_u64(t, "requested_peak_bytes");
                assert_eq!(v[1], peak as f64);
                assert!(peak <= max, "trial {} peaked at {peak}", t.number);
                assert_eq!(peak, attr_u64(t, "predicted_peak_bytes"));
                assert_eq!(constraints(t), vec![peak as f64 - max as f64]);
            }
            other => panic!("trial {} is {other}", t.number),
        }
    }
    assert!(infeasible > 0 && complete > 0, "{infeasible} / {complete}");
    let row = out
        .lines()
        .find(|l| l.contains("over a [[constraint]] (never trained)"))
        .unwrap_or_else(|| panic!("no constraint row in:\n{out}"));
    assert!(row.ends_with(&format!(" {infeasible}")), "{row}");
    // Most bert-base batches do not fit 3 GiB at once (64 x 256 tokens
    // would peak near 20 GiB): with the constraint they ran in smaller
    // micro-batches, within the max (checked above).
    let split = trials
        .iter()
        .filter(|t| t.state == TrialState::Complete)
        .filter(|t| attr_u64(t, "accumulation_steps") > 1)
        .count();
    assert!(split > 0, "no trial was split into micro-batches");

    // `memtune best` prints the front; Optuna's best_trials is the same.
    let best = ok(memtune(&db, &["best", "--study", "mo"]));
    let front: Vec<u64> = best
        .lines()
        .filter_map(|l| l.strip_prefix("trial "))
        .map(|l| l.split(':').next().unwrap().parse().unwrap())
        .collect();
    assert!(!front.is_empty(), "{best}");
    for n in &front {
        assert_eq!(trials[*n as usize].state, TrialState::Complete, "{best}");
    }
    let Some(py) = common::reference_python() else {
        return;
    };
    let optuna = common::run_python(&py, BEST_TRIALS, &[&common::url(&db), "mo"]);
    let optuna: Json = serde_json::from_str(optuna.trim()).unwrap();
    assert_eq!(optuna["directions"], json!(["MAXIMIZE", "MINIMIZE"]));
    assert_eq!(optuna["metric_names"], json!(["accuracy", "peak_memory"]));
    assert_eq!(
        optuna["best"],
        json!(front),
        "Optuna's best_trials vs memtune best:\n{best}"
    );
    // Optuna reads the constraints where its samplers do.
    assert_eq!(optuna["infeasible"], json!(infeasible));
}

/// Optuna's view of the study: directions, metric names, the numbers of
/// `best_trials`, and how many trials violate a constraint.
const BEST_TRIALS: &str = r#"
import json, sys, warnings
warnings.simplefilter("ignore")
import optuna
study = optuna.load_study(study_name=sys.argv[2], storage=sys.argv[1])
violated = [t for t in study.trials if any(v > 0 for v in t.constraints.values())]
print(json.dumps({
    "directions": [d.name for d in study.directions],
    "metric_names": study.metric_names,
    "best": sorted(t.number for t in study.best_trials),
    "infeasible": len(violated),
}))
"#;

#[test]
fn params_and_train_seconds_are_objectives_and_params_a_constraint() {
    let dir = tempfile::tempdir().unwrap();
    let text = study(
        "costs",
        "[\"accuracy\", \"params\", \"train_seconds\"]",
        "[[constraint]]\nmetric = \"params\"\nmax = 200000000\n\n\
         [[constraint]]\nmetric = \"train_seconds\"\nmax = \"1h\"",
        6,
    );
    let (db, _) = run(dir.path(), &text);
    let (_, trials) = trials(&db, "costs");
    let mut seen = (0, 0);
    for t in &trials {
        let c = constraints(t);
        assert_eq!(c.len(), 2, "one value per constraint: {c:?}");
        match t.state {
            TrialState::Complete => {
                seen.0 += 1;
                let v = t.values.as_deref().unwrap();
                // BertForSequenceClassification(bert-base-uncased, 2 labels).
                assert_eq!(v[1], 109_483_778.0, "trial {}", t.number);
                assert!(v[2] > 0.0 && v[2] < 3600.0, "train_seconds {v:?}");
                assert_eq!(c, vec![v[1] - 2e8, v[2] - 3600.0]);
            }
            TrialState::Pruned => {
                seen.1 += 1;
                assert_eq!(model(t), json!("bert-large"));
                assert!(c[0] > 0.0, "bert-large is over 200M parameters: {c:?}");
                assert_eq!(c[1], 0.0, "never trained: its time is not known");
            }
            other => panic!("trial {} is {other}", t.number),
        }
    }
    assert!(seen.0 > 0 && seen.1 > 0, "{seen:?}");
}

#[test]
fn a_study_whose_constraints_rule_out_every_trial_fails() {
    let dir = tempfile::tempdir().unwrap();
    let text = study(
        "none",
        "[\"accuracy\", \"params\"]",
        "[[constraint]]\nmetric = \"params\"\nmax = 1000",
        3,
    );
    let (db, out) = tune(dir.path(), &text);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no trial met the study's constraints: 3 of 3"),
        "{stderr}"
    );
    let (_, trials) = trials(&db, "none");
    assert!(
        trials
            .iter()
            .all(|t| t.state == TrialState::Pruned && !t.user_attrs.contains_key("lease_bytes"))
    );
}

#[test]
fn inference_memory_is_planned_before_training_and_can_be_constrained() {
    use trainer::memory::inference_peak;
    use trainer::model::{HeadConfig, ModelConfig};
    let dir = tempfile::tempdir().unwrap();
    // bert-base's fp32 weights are about 0.41 GiB, bert-large's 1.25 GiB.
    let text = study(
        "inference",
        "[\"accuracy\", \"inference_memory\"]",
        "[[constraint]]\nmetric = \"inference_memory\"\nmax = \"1GiB\"",
        6,
    )
    .replace(
        "metrics = [\"accuracy\", \"inference_memory\"]",
        "metrics = [\"accuracy\", \"inference_memory\"]\ninference_batch = 4",
    );
    assert!(text.contains("inference_batch = 4"));
    let (db, _) = run(dir.path(), &text);
    let (_, trials) = trials(&db, "inference");
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let mut seen = (0, 0);
    for t in &trials {
        let preset = model(t).as_str().unwrap().to_string();
        let length = param(t, "max_length").as_u64().unwrap() as usize;
        let config = ModelConfig::preset(&preset).unwrap();
        let planned = inference_peak(&config, &head, 4, length).unwrap() as f64;
        let c = constraints(t);
        assert_eq!(c, vec![planned - GIB as f64], "trial {}", t.number);
        match t.state {
            TrialState::Complete => {
                seen.0 += 1;
                assert_eq!(preset, "bert-base");
                assert_eq!(t.values.as_deref().unwrap()[1], planned);
            }
            TrialState::Pruned => {
                seen.1 += 1;
                assert_eq!(preset, "bert-large");
                assert_eq!(t.user_attrs["error_kind"], json!("constraint"));
                assert!(!t.user_attrs.contains_key("lease_bytes"));
            }
            other => panic!("trial {} is {other}", t.number),
        }
    }
    assert!(seen.0 > 0 && seen.1 > 0, "{seen:?}");
}
