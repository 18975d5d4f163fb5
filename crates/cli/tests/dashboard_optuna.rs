//! optuna-dashboard (the version `benches/requirements.txt` pins) reads
//! what memtune stores: a study run by `memtune tune` on the simulated
//! device (completed trials with intermediate values, an enqueued trial
//! pruned because it fits nowhere) and one made by `create-study` / `ask`
//! / `tell` (complete, pruned, failed and running trials), in a SQLite
//! file and in a PostgreSQL database. The dashboard runs as its users
//! start it, on 127.0.0.1, and its JSON API must list both studies with
//! their names and directions and show every stored trial with its number,
//! state, values, params, intermediate values, user attributes, fixed
//! params and constraints.
//!
//! Needs `MEMTUNE_PYTHON` (the reference venv, with optuna-dashboard);
//! skipped without it unless `CI` is set.

mod common;
mod dashboard;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dashboard::Dashboard;
use serde_json::{Value as Json, json};
use store::{FrozenTrial, OpenOptions, Storage, StudyDirection, TrialFilter, TrialState};

const ASKED_SPACE: &str = r#"{"x": {"name": "FloatDistribution", "attributes": {"step": null, "low": -1.0, "high": 1.0, "log": false}},
 "layers": {"name": "IntDistribution", "attributes": {"log": false, "step": 1, "low": 1, "high": 8}},
 "opt": {"name": "CategoricalDistribution", "attributes": {"choices": ["adamw", "sgd"]}}}"#;

/// The reference Python and the `optuna-dashboard` command beside it, or
/// `None` after saying which is missing.
fn dashboard_command() -> Option<(PathBuf, PathBuf)> {
    let py = common::reference_python()?;
    let Some(cmd) = Dashboard::command_beside(&py) else {
        common::skip_or_fail(&format!(
            "optuna-dashboard beside {} (benches/requirements.txt pins it)",
            py.display()
        ));
        return None;
    };
    Some((py, cmd))
}

/// Runs memtune in `dir` against `url`; its stdout.
fn run(dir: &Path, url: &str, args: &[&str]) -> String {
    common::ok(common::memtune_in(dir, url, args))
}

/// Trials of study "tuned": six, on a 4 GiB simulated device.
const TUNED_TRIALS: usize = 6;

/// Study "tuned": two trials enqueued with fixed params, bert-large (it
/// fits nowhere on 4 GiB, so it ends PRUNED with a violated constraint)
/// and bert-base (it completes), then `memtune tune` runs them and four
/// sampled ones, each bert-base trial with two intermediate values.
fn make_tuned_study(dir: &Path, url: &str) {
    {
        let s = Storage::open_url(url, &OpenOptions::default()).unwrap();
        let st = s
            .create_study("tuned", &[StudyDirection::Maximize])
            .unwrap();
        for model in ["bert-large", "bert-base"] {
            let fixed = json!({"model": model, "batch_size": 64, "max_length": 256});
            let trial = store::NewTrial {
                system_attrs: vec![("fixed_params".into(), fixed)],
                ..Default::default()
            };
            s.enqueue_trial(st.study_id, &trial).unwrap();
        }
    }
    let config = dir.join("tuned.toml");
    let toml = common::sim_study("tuned", TUNED_TRIALS, "4GiB", "");
    std::fs::write(&config, toml).unwrap();
    let config = config.to_str().unwrap();
    run(dir, url, &["tune", "--no-progress", "--config", config]);
}

/// Study "asked", by `create-study`, `ask` and `tell`: trial 0 COMPLETE,
/// 1 FAIL, 2 PRUNED, 3 still RUNNING.
fn make_asked_study(dir: &Path, url: &str) {
    let memtune = |args: &[&str]| run(dir, url, args);
    memtune(&[
        "create-study",
        "--study",
        "asked",
        "--direction",
        "minimize",
    ]);
    let ask = [
        "ask",
        "--study",
        "asked",
        "--search-space",
        ASKED_SPACE,
        "--seed",
        "3",
    ];
    let endings: [&[&str]; 3] = [
        &["--values", "0.25"],
        &["--state", "fail"],
        &["--state", "pruned"],
    ];
    for (n, ending) in endings.iter().enumerate() {
        let asked: Json = serde_json::from_str(&memtune(&ask)).unwrap();
        assert_eq!(asked["number"], n);
        let n = n.to_string();
        memtune(&[&["tell", "--study", "asked", "--trial-number", &n], *ending].concat());
    }
    memtune(&ask);
}

#[test]
fn optuna_dashboard_shows_memtunes_sqlite_studies() {
    let Some((py, cmd)) = dashboard_command() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = common::url(&dir.path().join("studies.db"));
    dashboard_shows_memtunes_studies(&py, &cmd, &url, dir.path());
}

#[test]
fn optuna_dashboard_shows_memtunes_postgres_studies() {
    let Some((py, cmd)) = dashboard_command() else {
        return;
    };
    let Some(url) = store::pg_server::test_database("dashboard") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    dashboard_shows_memtunes_studies(&py, &cmd, &url, dir.path());
}

fn dashboard_shows_memtunes_studies(py: &Path, cmd: &Path, url: &str, dir: &Path) {
    make_tuned_study(dir, url);
    make_asked_study(dir, url);
    let storage = Storage::open_url(url, &OpenOptions::default()).unwrap();
    let stored = storage.studies().unwrap();
    let server = Dashboard::start(py, cmd, url, dir);

    let listed = server.get("/api/studies");
    let listed = listed["study_summaries"].as_array().unwrap();
    let names: Vec<&Json> = listed.iter().map(|s| &s["study_name"]).collect();
    assert_eq!(names, [&json!("tuned"), &json!("asked")]);
    assert_eq!(listed.len(), stored.len());
    let mut states = BTreeMap::new();
    for (summary, shown) in stored.iter().zip(listed) {
        let study = &summary.study;
        assert_eq!(shown["study_id"], study.study_id);
        assert_eq!(
            shown["directions"],
            json!(directions(&study.directions)),
            "{}",
            study.name
        );
        assert_attrs(&summary.user_attrs, &shown["user_attrs"], &study.name);

        let detail = server.get(&format!("/api/studies/{}?after=0", study.study_id));
        assert_eq!(detail["name"], study.name);
        assert_eq!(detail["directions"], shown["directions"]);
        let trials = storage
            .trials(study.study_id, &TrialFilter::default())
            .unwrap();
        let shown_trials = detail["trials"].as_array().unwrap();
        assert_eq!(shown_trials.len(), trials.len(), "{}", study.name);
        for (trial, shown) in trials.iter().zip(shown_trials) {
            assert_trial(
                trial,
                shown,
                &format!("{} trial {}", study.name, trial.number),
            );
            *states.entry((study.name.clone(), trial.state)).or_insert(0) += 1;
        }
        let best = best_number(&trials, study.directions[0]);
        let shown_best = detail["best_trials"][0]["number"].as_i64();
        assert_eq!(shown_best, best, "{}", study.name);
    }
    // The studies hold what they were made to: nothing here passes on
    // empty studies.
    let count = |study: &str, state| states.get(&(study.to_string(), state)).copied();
    let (complete, pruned) = (
        count("tuned", TrialState::Complete),
        count("tuned", TrialState::Pruned),
    );
    assert!(complete >= Some(1) && pruned >= Some(1), "{states:?}");
    assert_eq!(
        complete.unwrap() + pruned.unwrap(),
        TUNED_TRIALS,
        "{states:?}"
    );
    for state in [
        TrialState::Complete,
        TrialState::Fail,
        TrialState::Pruned,
        TrialState::Running,
    ] {
        assert_eq!(count("asked", state), Some(1), "{state}");
    }
}

fn directions(ds: &[StudyDirection]) -> Vec<String> {
    ds.iter().map(|d| d.as_str().to_lowercase()).collect()
}

/// The number of the best COMPLETE trial of a single-objective study.
fn best_number(trials: &[FrozenTrial], direction: StudyDirection) -> Option<i64> {
    let complete = trials.iter().filter(|t| t.state == TrialState::Complete);
    let value = |t: &&FrozenTrial| t.values.as_ref().unwrap()[0];
    let best = match direction {
        StudyDirection::Maximize => complete.max_by(|a, b| value(a).total_cmp(&value(b))),
        _ => complete.min_by(|a, b| value(a).total_cmp(&value(b))),
    };
    best.map(|t| t.number as i64)
}

/// A stored parameter as Optuna's `trial_params` row holds it.
struct ParamRow {
    name: String,
    internal_value: f64,
    distribution_json: String,
}

/// The trial's parameters by name, as rows.
fn param_rows(trial: &FrozenTrial) -> Vec<ParamRow> {
    trial
        .params
        .iter()
        .map(|(name, p)| ParamRow {
            name: name.clone(),
            internal_value: p.internal,
            distribution_json: store::distribution_to_json(&p.distribution),
        })
        .collect()
}

/// One trial of the dashboard's study detail against the stored trial.
fn assert_trial(trial: &FrozenTrial, shown: &Json, what: &str) {
    assert_eq!(shown["trial_id"], trial.trial_id, "{what}");
    assert_eq!(shown["number"], trial.number, "{what}");
    // The dashboard spells states `Complete`, `Fail`, ...
    let state = shown["state"].as_str().unwrap().to_uppercase();
    assert_eq!(state, trial.state.as_str(), "{what}");

    let values = shown.get("values").map(|v| floats(v, what));
    assert_eq!(values, trial.values, "{what}: values");

    let steps: BTreeMap<i64, f64> = shown["intermediate_values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["step"].as_i64().unwrap(), v["value"].as_f64().unwrap()))
        .collect();
    assert_eq!(
        steps, trial.intermediate_values,
        "{what}: intermediate values"
    );

    let params = shown["params"].as_array().unwrap();
    assert_eq!(params.len(), trial.params.len(), "{what}: {params:?}");
    for (p, shown) in param_rows(trial).iter().zip(params) {
        let what = format!("{what}: param {}", p.name);
        assert_eq!(shown["name"], p.name, "{what}");
        assert_eq!(
            shown["param_internal_value"].as_f64(),
            Some(p.internal_value),
            "{what}"
        );
        let external = store::value_to_json(&trial.params[&p.name].value());
        assert_python_str(&external, &shown["param_external_value"], &what);
        let dist: Json = serde_json::from_str(&p.distribution_json).unwrap();
        assert_eq!(shown["distribution"]["type"], dist["name"], "{what}");
    }

    assert_attrs(&trial.user_attrs, &shown["user_attrs"], what);
    let fixed = trial
        .system_attrs
        .get("fixed_params")
        .cloned()
        .unwrap_or(json!({}));
    let fixed = fixed.as_object().unwrap();
    let shown_fixed = shown["fixed_params"].as_array().unwrap();
    assert_eq!(shown_fixed.len(), fixed.len(), "{what}: {shown_fixed:?}");
    for f in shown_fixed {
        let name = f["name"].as_str().unwrap();
        assert_python_str(&fixed[name], &f["param_external_value"], what);
    }
    let constraints = trial.system_attrs.get("constraints").cloned();
    assert_eq!(
        shown["constraints"],
        constraints.unwrap_or(json!([])),
        "{what}"
    );

    // Optuna's naive `YYYY-MM-DD HH:MM:SS[.ffffff]`, in ISO form.
    let start = shown
        .get("datetime_start")
        .map(|d| d.as_str().unwrap().replacen('T', " ", 1));
    assert_eq!(start, trial.datetime_start, "{what}: start");
    let end = shown
        .get("datetime_complete")
        .map(|d| d.as_str().unwrap().replacen('T', " ", 1));
    assert_eq!(end, trial.datetime_complete, "{what}: end");
}

fn floats(v: &Json, what: &str) -> Vec<f64> {
    let v = v.as_array().unwrap_or_else(|| panic!("{what}: {v}"));
    v.iter().map(|x| x.as_f64().unwrap()).collect()
}

/// Attributes as the dashboard lists them (`[{"key", "value"}]`, each value
/// a string) against the stored ones, every one of them.
fn assert_attrs(stored: &BTreeMap<String, Json>, shown: &Json, what: &str) {
    let shown: BTreeMap<&str, &Json> = shown
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["key"].as_str().unwrap(), &a["value"]))
        .collect();
    let keys: Vec<&str> = stored.keys().map(String::as_str).collect();
    assert_eq!(
        shown.keys().copied().collect::<Vec<_>>(),
        keys,
        "{what}: attribute keys"
    );
    for (key, value) in stored {
        assert_python_str(
            value,
            shown[key.as_str()],
            &format!("{what}: attribute {key}"),
        );
    }
}

/// How the dashboard shows a value: Python's `str` for strings and
/// numbers, `json.dumps` for the rest, cut at 1024 characters.
fn assert_python_str(stored: &Json, shown: &Json, what: &str) {
    let shown = shown
        .as_str()
        .unwrap_or_else(|| panic!("{what}: {shown} is not a string"));
    match stored {
        Json::String(s) => assert_eq!(shown, s, "{what}"),
        Json::Bool(b) => assert_eq!(shown, if *b { "True" } else { "False" }, "{what}"),
        Json::Number(n) => {
            let parsed: f64 = shown
                .parse()
                .unwrap_or_else(|e| panic!("{what}: {shown}: {e}"));
            assert_eq!(parsed, n.as_f64().unwrap(), "{what}");
        }
        Json::Null if shown == "None" => {}
        _ if shown.len() == 1024 => {
            let full = serde_json::to_string(stored).unwrap();
            assert!(full.len() > 1024, "{what}: cut short: {shown}");
        }
        _ => {
            let parsed: Json =
                serde_json::from_str(shown).unwrap_or_else(|e| panic!("{what}: {shown}: {e}"));
            assert_eq!(&parsed, stored, "{what}");
        }
    }
}
