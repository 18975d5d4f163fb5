//! `[runner] recompute` on the simulated device, run by `memtune tune`:
//! bert-large at batch 1 and 512 tokens needs a 7.23 GB lease keeping its
//! activations and 6.12 GB recomputing them. On a 7 GiB card (6.65 GiB
//! usable) it cannot start unless it recomputes: "never" records it
//! infeasible, "auto" (the default) trains it recomputing, at the peak the
//! plan predicted for that, while a trial that fits as it is keeps its
//! activations. A `peak_memory` constraint is met the same way.

mod common;

use std::path::Path;

use serde_json::{Value as Json, json};
use store::{FrozenTrial, Storage, StudyDirection, TrialFilter, TrialState};

fn study(name: &str, sim_memory: &str, runner: &str, extra: &str) -> String {
    format!(
        r#"
[study]
name = "{name}"
n_trials = 2

[objective]
metric = "accuracy"

[models.big]
sim = "bert-large"

[[param]]
name = "learning_rate"
type = "float"
low = 1e-5
high = 1e-4

[[param]]
name = "max_length"
type = "categorical"
choices = [128, 512]

[fixed]
epochs = 1
batch_size = 1

[sampler]
kind = "random"
seed = 1

[pruner]
kind = "none"
{extra}
[runner]
device = "sim"
sim_memory = "{sim_memory}"
{runner}
"#
    )
}

/// Runs `text` with one trial at 512 tokens, then one at 128, enqueued.
fn run(dir: &Path, name: &str, text: &str) -> Vec<FrozenTrial> {
    let db = dir.join(format!("{name}.db"));
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, text).unwrap();
    {
        let s = Storage::open(&db).unwrap();
        let st = s.create_study(name, &[StudyDirection::Maximize]).unwrap();
        for length in [512, 128] {
            let trial = store::NewTrial {
                system_attrs: vec![("fixed_params".into(), json!({"max_length": length}))],
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
    let s = Storage::open_existing(&db).unwrap();
    let st = s.study(name).unwrap();
    let mut trials = s.trials(st.study_id, &TrialFilter::default()).unwrap();
    trials.sort_by_key(|t| t.number);
    assert_eq!(trials.len(), 2);
    assert_eq!(length(&trials[0]), 512);
    assert_eq!(length(&trials[1]), 128);
    trials
}

fn length(t: &FrozenTrial) -> u64 {
    t.params["max_length"].value().to_string().parse().unwrap()
}

fn attr<'a>(t: &'a FrozenTrial, key: &str) -> &'a Json {
    t.user_attrs
        .get(key)
        .unwrap_or_else(|| panic!("trial {} has no `{key}`: {:?}", t.number, t.user_attrs))
}

fn u64_attr(t: &FrozenTrial, key: &str) -> u64 {
    attr(t, key).as_u64().unwrap()
}

/// A COMPLETE trial that ran as `recompute` says, at its predicted peak.
fn assert_ran(t: &FrozenTrial, recompute: bool) {
    assert_eq!(t.state, TrialState::Complete, "{:?}", t.user_attrs);
    assert_eq!(
        attr(t, "recompute"),
        &json!(recompute),
        "trial {}",
        t.number
    );
    assert!(attr(t, "oom_retries").as_array().unwrap().is_empty());
    assert_eq!(
        u64_attr(t, "requested_peak_bytes"),
        u64_attr(t, "predicted_peak_bytes"),
        "trial {}",
        t.number
    );
}

#[test]
fn a_trial_too_large_for_the_card_recomputes_unless_told_never() {
    let dir = tempfile::tempdir().unwrap();
    let never = run(
        dir.path(),
        "never",
        &study("never", "7GiB", "recompute = \"never\"", ""),
    );
    assert_eq!(never[0].state, TrialState::Pruned);
    assert_eq!(attr(&never[0], "error_kind"), &json!("oom"));
    let why = attr(&never[0], "error_msg").as_str().unwrap();
    assert!(!why.contains("recomputed"), "{why}");
    assert_eq!(attr(&never[0], "recompute"), &json!(false));
    assert!(u64_attr(&never[0], "needed_bytes") > u64_attr(&never[0], "available_bytes"));
    assert_ran(&never[1], false);

    let auto = run(dir.path(), "auto", &study("auto", "7GiB", "", ""));
    assert_ran(&auto[0], true);
    assert!(u64_attr(&auto[0], "lease_bytes") <= u64_attr(&never[0], "available_bytes"));
    assert_ran(&auto[1], false);
    // The 128-token trial is the same run in both studies.
    assert_eq!(
        u64_attr(&auto[1], "predicted_peak_bytes"),
        u64_attr(&never[1], "predicted_peak_bytes")
    );

    // Told always, the short trial recomputes too, in less memory.
    let always = run(
        dir.path(),
        "always",
        &study("always", "7GiB", "recompute = \"always\"", ""),
    );
    assert_ran(&always[0], true);
    assert_eq!(
        u64_attr(&always[0], "predicted_peak_bytes"),
        u64_attr(&auto[0], "predicted_peak_bytes")
    );
    assert_ran(&always[1], true);
    assert!(
        u64_attr(&always[1], "predicted_peak_bytes") < u64_attr(&auto[1], "predicted_peak_bytes")
    );
}

#[test]
fn a_peak_memory_constraint_is_met_by_recomputing() {
    let dir = tempfile::tempdir().unwrap();
    // bert-large at 512 tokens: 6.65 GB keeping its activations, 5.54 GB
    // recomputing them.
    let constraint = "\n[[constraint]]\nmetric = \"peak_memory\"\nmax = \"5.5GiB\"\n";
    let never = run(
        dir.path(),
        "never",
        &study("never", "24GiB", "recompute = \"never\"", constraint),
    );
    assert_eq!(never[0].state, TrialState::Pruned);
    assert_eq!(attr(&never[0], "error_kind"), &json!("constraint"));
    assert_ran(&never[1], false);

    let auto = run(dir.path(), "auto", &study("auto", "24GiB", "", constraint));
    assert_ran(&auto[0], true);
    assert!(u64_attr(&auto[0], "requested_peak_bytes") <= 5 * (1 << 30) + (1 << 29));
    assert_ran(&auto[1], false);
}

#[test]
fn only_a_peak_memory_max_makes_a_trial_recompute() {
    let dir = tempfile::tempdir().unwrap();
    // bert-large has 335M parameters: over this max whatever it keeps, and
    // well under the peak_memory max keeping its activations.
    let constraints = "\n[[constraint]]\nmetric = \"params\"\nmax = 1000\n\n\
                       [[constraint]]\nmetric = \"peak_memory\"\nmax = \"20GiB\"\n";
    let db = dir.path().join("params.db");
    let config = dir.path().join("params.toml");
    std::fs::write(&config, study("params", "24GiB", "", constraints)).unwrap();
    // Every trial is over the params max: the run says so and fails.
    let out = common::memtune(
        &db,
        &[
            "tune",
            "--no-progress",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let s = Storage::open_existing(&db).unwrap();
    let st = s.study("params").unwrap();
    let trials = s.trials(st.study_id, &TrialFilter::default()).unwrap();
    assert!(!trials.is_empty());
    for t in &trials {
        assert_eq!(t.state, TrialState::Pruned);
        assert_eq!(attr(t, "error_kind"), &json!("constraint"));
        assert_eq!(attr(t, "recompute"), &json!(false), "trial {}", t.number);
        let why = attr(t, "error_msg").as_str().unwrap();
        assert!(
            why.starts_with("params ") && !why.contains("recomputed"),
            "{why}"
        );
        // Its peak_memory value is the peak keeping its activations.
        let c = t.constraints();
        assert!(c[0] > 0.0 && c[1] < 0.0, "{c:?}");
    }
}
