//! A study over every model of the simulated search space (BERT, RoBERTa
//! and DeBERTa-v3 base and large, XLM-RoBERTa-base) on a simulated 24 GiB
//! device, run by `memtune tune`: each model's largest trial (and
//! DeBERTa's at 128 tokens, where its peak is not affine in the
//! micro-batch) completes without an out-of-memory retry, and the peak the
//! runner predicted from the memory plan is exactly the peak the simulated
//! trial requested.

mod common;

use std::path::Path;

use cli::tune::simulate::space;
use serde_json::{Value as Json, json};
use store::{Storage, StudyDirection, TrialFilter, TrialState};

/// (model, effective batch, max length) of the enqueued trials.
fn enqueued() -> Vec<(&'static str, u64, u64)> {
    let mut t: Vec<_> = space::MODELS.iter().map(|&m| (m, 64, 512)).collect();
    t.extend([("deberta-v3-base", 8, 128), ("deberta-v3-large", 8, 128)]);
    t
}

fn study(models: &[&str]) -> String {
    let tables: String = models
        .iter()
        .map(|m| format!("[models.{m}]\nsim = \"{m}\"\n\n"))
        .collect();
    let choices = models
        .iter()
        .map(|m| format!("\"{m}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"
[study]
name = "seven"
n_trials = {n}

[objective]
metric = "accuracy"

{tables}
[[param]]
name = "model"
type = "categorical"
choices = [{choices}]

[[param]]
name = "learning_rate"
type = "float"
low = 1e-5
high = 1e-4
log = true

[[param]]
name = "batch_size"
type = "categorical"
choices = [8, 64]

[[param]]
name = "max_length"
type = "categorical"
choices = [128, 512]

[fixed]
epochs = 1

[sampler]
kind = "random"
seed = 3

[pruner]
kind = "none"

[runner]
device = "sim"
sim_memory = "24GiB"
max_workers = 2
"#,
        n = enqueued().len()
    )
}

fn attr(t: &store::FrozenTrial, key: &str) -> u64 {
    t.user_attrs
        .get(key)
        .and_then(Json::as_u64)
        .unwrap_or_else(|| panic!("trial {} has no `{key}`: {:?}", t.number, t.user_attrs))
}

fn model_of(t: &store::FrozenTrial) -> String {
    match t.params["model"].value() {
        store::ParamValue::Str(s) => s,
        other => panic!("model = {other}"),
    }
}

#[test]
fn every_simulated_model_runs_its_largest_trial_at_the_predicted_peak() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let config = dir.path().join("s.toml");
    std::fs::write(&config, study(&space::MODELS)).unwrap();
    {
        // One trial per model at the space's largest batch and length, and
        // DeBERTa's short ones, enqueued as Optuna's `enqueue_trial` does.
        let s = Storage::open(&db).unwrap();
        let st = s
            .create_study("seven", &[StudyDirection::Maximize])
            .unwrap();
        for (model, batch, length) in enqueued() {
            let trial = store::NewTrial {
                system_attrs: vec![(
                    "fixed_params".into(),
                    json!({"model": model, "batch_size": batch, "max_length": length}),
                )],
                ..Default::default()
            };
            s.enqueue_trial(st.study_id, &trial).unwrap();
        }
    }
    common::ok(common::memtune(
        &db,
        &[
            "tune",
            "--no-progress",
            "--config",
            config.to_str().unwrap(),
        ],
    ));
    let s = Storage::open_existing(Path::new(&db)).unwrap();
    let st = s.study("seven").unwrap();
    let trials = s.trials(st.study_id, &TrialFilter::default()).unwrap();
    let mut seen: Vec<String> = trials.iter().map(model_of).collect();
    seen.sort();
    let mut expected: Vec<String> = enqueued().iter().map(|t| t.0.to_string()).collect();
    expected.sort();
    assert_eq!(seen, expected);
    for t in &trials {
        let model = model_of(t);
        assert_eq!(t.state, TrialState::Complete, "{model}: {:?}", t.user_attrs);
        let retries = t.user_attrs["oom_retries"].as_array().unwrap();
        assert!(retries.is_empty(), "{model}: {retries:?}");
        let predicted = attr(t, "predicted_peak_bytes");
        assert_eq!(attr(t, "requested_peak_bytes"), predicted, "{model}");
        assert!(attr(t, "peak_bytes") <= attr(t, "lease_bytes"), "{model}");
        let batch = t.params["batch_size"].internal as u64;
        let (micro, accumulation) = (attr(t, "micro_batch"), attr(t, "accumulation_steps"));
        assert!(
            micro * accumulation >= batch,
            "{model}: {micro} x {accumulation}"
        );
    }
}
