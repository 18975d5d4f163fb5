//! Interop with Optuna 5.0.0 both ways, on SQLite and on PostgreSQL: Optuna
//! reads studies we write, we read studies Optuna wrote, both views of the
//! same storage agree, and the schema we create is the one Optuna creates.
//! Needs `MEMTUNE_PYTHON` (a Python with optuna==5.0.0 and psycopg2);
//! skipped without it unless `CI` is set.

#[macro_use]
mod common;

use common::{Backend, TestDb};
use serde_json::{Value as Json, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use store::{
    Distribution, NewTrial, Param, ParamValue, Storage, StudyDirection, TrialFilter, TrialState,
    distribution_to_json, json_to_distribution, value_from_json, value_to_json,
};

backends!(
    optuna_loads_what_we_write,
    we_read_what_optuna_writes,
    schema_is_identical_to_optunas
);

fn python() -> Option<PathBuf> {
    match std::env::var_os("MEMTUNE_PYTHON") {
        Some(p) => Some(PathBuf::from(p)),
        None if std::env::var_os("CI").is_some() => {
            panic!("MEMTUNE_PYTHON is not set; CI must run the Optuna interop tests")
        }
        None => {
            eprintln!("skipping: MEMTUNE_PYTHON is not set (a Python with optuna==5.0.0)");
            None
        }
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(name)
}

fn run_py(py: &Path, name: &str, url: &str) -> String {
    let out = Command::new(py)
        .arg(script(name))
        .arg(url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Non-finite floats as the dump script writes them.
fn enc(v: f64) -> Json {
    if v.is_nan() {
        json!("nan")
    } else if v == f64::INFINITY {
        json!("inf")
    } else if v == f64::NEG_INFINITY {
        json!("-inf")
    } else {
        json!(v)
    }
}

fn enc_json(v: &Json) -> Json {
    match v {
        Json::Number(n) if n.as_f64().is_some_and(|f| !f.is_finite()) => enc(n.as_f64().unwrap()),
        Json::Array(a) => Json::Array(a.iter().map(enc_json).collect()),
        Json::Object(o) => Json::Object(o.iter().map(|(k, v)| (k.clone(), enc_json(v))).collect()),
        other => other.clone(),
    }
}

/// The same structure `dump_study.py` prints, built from our reading.
fn our_view(storage: &Storage) -> Json {
    let mut out = serde_json::Map::new();
    for summary in storage.studies().unwrap() {
        let s = &summary.study;
        let trials: Vec<Json> = storage
            .trials(s.study_id, &TrialFilter::default())
            .unwrap()
            .iter()
            .map(|t| {
                let params: serde_json::Map<String, Json> = t
                    .params
                    .iter()
                    .map(|(name, p)| (name.clone(), enc_json(&value_to_json(&p.value()))))
                    .collect();
                let dists: serde_json::Map<String, Json> = t
                    .params
                    .iter()
                    .map(|(name, p)| {
                        let d = distribution_to_json(&p.distribution);
                        (name.clone(), serde_json::from_str(&d).unwrap())
                    })
                    .collect();
                let inter: serde_json::Map<String, Json> = t
                    .intermediate_values
                    .iter()
                    .map(|(k, &v)| (k.to_string(), enc(v)))
                    .collect();
                json!({
                    "number": t.number,
                    "state": t.state.as_str(),
                    "values": t.values.as_ref().map(|v| v.iter().map(|&x| enc(x)).collect::<Vec<_>>()),
                    "params": params,
                    "distributions": dists,
                    "intermediate_values": inter,
                    "user_attrs": enc_json(&json!(t.user_attrs)),
                    "system_attrs": enc_json(&json!(t.system_attrs)),
                    "has_start": t.datetime_start.is_some(),
                    "has_complete": t.datetime_complete.is_some(),
                })
            })
            .collect();
        out.insert(
            s.name.clone(),
            json!({
                "directions": s.directions.iter().map(|d| d.as_str()).collect::<Vec<_>>(),
                "user_attrs": enc_json(&json!(summary.user_attrs)),
                "trials": trials,
            }),
        );
    }
    Json::Object(out)
}

fn param(name: &str, d: &Distribution, external: Json) -> (String, Param) {
    let internal = d.to_internal(&value_from_json(&external).unwrap()).unwrap();
    let distribution = d.clone();
    (
        name.into(),
        Param {
            distribution,
            internal,
        },
    )
}

fn write_ours(storage: &Storage) {
    let lr = Distribution::Float {
        low: 1e-5,
        high: 1e-1,
        log: true,
        step: None,
    };
    let bs = Distribution::Int {
        low: 8,
        high: 64,
        log: false,
        step: 8,
    };
    let opt = Distribution::Categorical {
        choices: vec![
            ParamValue::Str("adam".into()),
            ParamValue::Str("sgd".into()),
            ParamValue::None,
            ParamValue::Float(1.5),
        ],
    };
    let s = storage
        .create_study("ours", &[StudyDirection::Minimize])
        .unwrap();
    storage
        .set_study_user_attr(s.study_id, "owner", &json!({"team": "nlp"}))
        .unwrap();

    let t0 = storage.create_trial(s.study_id).unwrap();
    for (name, p) in [
        param("lr", &lr, json!(0.001)),
        param("batch_size", &bs, json!(32)),
        param("optimizer", &opt, json!("sgd")),
    ] {
        storage
            .set_param(t0.trial_id, &name, p.internal, &p.distribution)
            .unwrap();
    }
    for (step, v) in [
        (0, 0.5),
        (1, f64::NAN),
        (2, f64::INFINITY),
        (3, f64::NEG_INFINITY),
    ] {
        storage.report_intermediate(t0.trial_id, step, v).unwrap();
    }
    storage
        .set_trial_user_attr(t0.trial_id, "peak_mb", &json!(123.5))
        .unwrap();
    storage
        .set_trial_user_attr(t0.trial_id, "tags", &json!(["a", "b"]))
        .unwrap();
    storage
        .finish(t0.trial_id, TrialState::Complete, &[0.125])
        .unwrap();

    let t1 = storage.create_trial(s.study_id).unwrap();
    let (name, p) = param("optimizer", &opt, Json::Null);
    storage
        .set_param(t1.trial_id, &name, p.internal, &p.distribution)
        .unwrap();
    storage
        .set_trial_user_attr(t1.trial_id, "oom", &json!(true))
        .unwrap();
    storage.finish(t1.trial_id, TrialState::Fail, &[]).unwrap();

    let t2 = storage.create_trial(s.study_id).unwrap();
    storage.report_intermediate(t2.trial_id, 0, 0.9).unwrap();
    storage
        .finish(t2.trial_id, TrialState::Pruned, &[0.9])
        .unwrap();

    let t3 = storage.create_trial(s.study_id).unwrap();
    storage
        .finish(t3.trial_id, TrialState::Complete, &[f64::INFINITY])
        .unwrap();

    storage
        .enqueue_trial(
            s.study_id,
            &NewTrial {
                params: vec![param("lr", &lr, json!(0.01))],
                system_attrs: vec![("source".into(), json!("manual"))],
                ..NewTrial::default()
            },
        )
        .unwrap();
    let t5 = storage.create_trial(s.study_id).unwrap();
    storage.heartbeat(t5.trial_id).unwrap();

    let m = storage
        .create_study(
            "ours-multi",
            &[StudyDirection::Minimize, StudyDirection::Maximize],
        )
        .unwrap();
    let t = storage.create_trial(m.study_id).unwrap();
    storage
        .finish(t.trial_id, TrialState::Complete, &[1.0, f64::NEG_INFINITY])
        .unwrap();
}

fn optuna_loads_what_we_write(backend: Backend) {
    let Some(py) = python() else { return };
    let Some(db) = common::fresh(backend, "ours") else {
        return;
    };
    let storage = db.open();
    write_ours(&storage);

    let theirs: Json = serde_json::from_str(&run_py(&py, "dump_study.py", &db.url)).unwrap();
    // Explicit expectations, independent of our own reader.
    let ours = &theirs["ours"];
    assert_eq!(ours["directions"], json!(["MINIMIZE"]));
    assert_eq!(ours["user_attrs"], json!({"owner": {"team": "nlp"}}));
    let t = &ours["trials"];
    assert_eq!(t.as_array().unwrap().len(), 6);
    assert_eq!(t[0]["state"], "COMPLETE");
    assert_eq!(t[0]["values"], json!([0.125]));
    assert_eq!(
        t[0]["params"],
        json!({"lr": 0.001, "batch_size": 32, "optimizer": "sgd"})
    );
    assert_eq!(
        t[0]["intermediate_values"],
        json!({"0": 0.5, "1": "nan", "2": "inf", "3": "-inf"})
    );
    assert_eq!(
        t[0]["user_attrs"],
        json!({"peak_mb": 123.5, "tags": ["a", "b"]})
    );
    assert_eq!(t[1]["state"], "FAIL");
    assert_eq!(t[1]["params"], json!({"optimizer": null}));
    assert_eq!(t[1]["user_attrs"], json!({"oom": true}));
    assert_eq!(t[1]["values"], Json::Null);
    assert_eq!(t[2]["state"], "PRUNED");
    assert_eq!(t[2]["values"], json!([0.9]));
    assert_eq!(t[3]["values"], json!(["inf"]));
    assert_eq!(t[4]["state"], "WAITING");
    assert_eq!(t[4]["params"], json!({"lr": 0.01}));
    assert_eq!(t[4]["system_attrs"], json!({"source": "manual"}));
    assert_eq!(t[4]["has_start"], json!(false));
    assert_eq!(t[5]["state"], "RUNNING");
    let multi = &theirs["ours-multi"];
    assert_eq!(multi["directions"], json!(["MINIMIZE", "MAXIMIZE"]));
    assert_eq!(multi["trials"][0]["values"], json!([1.0, "-inf"]));
    // And the whole of Optuna's view equals ours.
    assert_eq!(our_view(&storage), theirs);
}

fn we_read_what_optuna_writes(backend: Backend) {
    let Some(py) = python() else { return };
    let Some(db) = common::fresh(backend, "theirs") else {
        return;
    };
    run_py(&py, "write_study.py", &db.url);
    let theirs: Json = serde_json::from_str(&run_py(&py, "dump_study.py", &db.url)).unwrap();
    let storage = db.open_existing().unwrap();
    let ours = our_view(&storage);
    assert_eq!(ours, theirs);

    // Spot checks through the typed API.
    let s = storage.study("optuna-single").unwrap();
    assert_eq!(s.directions, vec![StudyDirection::Maximize]);
    let fails = storage
        .trials(
            s.study_id,
            &TrialFilter {
                states: vec![TrialState::Fail],
                attr_key: Some("oom".into()),
            },
        )
        .unwrap();
    assert_eq!(fails.iter().map(|t| t.number).collect::<Vec<_>>(), vec![2]);
    let best = storage.best_trial(s.study_id).unwrap().unwrap();
    assert_eq!(best.state, TrialState::Complete);
    // We can keep writing to Optuna's file: claim the queued trial.
    let claimed = storage.claim_waiting(s.study_id).unwrap().unwrap();
    assert_eq!(claimed.number, 5);
    storage
        .finish(claimed.trial_id, TrialState::Complete, &[0.0])
        .unwrap();
    let after: Json = serde_json::from_str(&run_py(&py, "dump_study.py", &db.url)).unwrap();
    assert_eq!(after["optuna-single"]["trials"][5]["state"], "COMPLETE");
}

/// The schema as text: SQLite's `sqlite_master` rows, or PostgreSQL's
/// `pg_dump --schema-only`.
fn schema_of(db: &TestDb) -> Vec<String> {
    if let Some(dump) = db.pg_dump(true) {
        return dump;
    }
    db.open_existing()
        .unwrap()
        .query_text("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        .unwrap()
        .into_iter()
        .map(|row| format!("{row:?}"))
        .collect()
}

fn schema_is_identical_to_optunas(backend: Backend) {
    let Some(py) = python() else { return };
    let (Some(theirs), Some(ours)) = (
        common::fresh(backend, "theirs"),
        common::fresh(backend, "ours"),
    ) else {
        return;
    };
    let out = Command::new(&py)
        .args([
            "-c",
            "import sys, optuna; optuna.storages.RDBStorage(sys.argv[1])",
            &theirs.url,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(ours.open());
    let (ours_schema, theirs_schema) = (schema_of(&ours), schema_of(&theirs));
    assert!(ours_schema.len() > 20, "{ours_schema:?}");
    assert_eq!(ours_schema, theirs_schema);
    let versions = |db: &TestDb| {
        db.open_existing()
            .unwrap()
            .query_text(
                "SELECT schema_version, library_version, version_num FROM version_info, alembic_version",
            )
            .unwrap()
    };
    assert_eq!(versions(&ours), versions(&theirs));
    assert_eq!(
        versions(&ours),
        vec![vec![
            Some("12".to_string()),
            Some("5.0.0".to_string()),
            Some("v3.2.0.a".to_string())
        ]]
    );
}

/// Every form of distribution JSON Optuna reads (current classes, pre-3.0
/// ones, the short `{"type": ...}` form) reads here as the distribution
/// Optuna reads, written back as the bytes Optuna writes. Ranges are on
/// their grids: fitting `high` to a step is the sampler's part.
#[test]
fn reads_distribution_json_as_optuna_does() {
    let Some(py) = python() else { return };
    let forms = [
        r#"{"name": "FloatDistribution", "attributes": {"step": null, "low": 1e-05, "high": 0.1, "log": true}}"#,
        r#"{"name": "FloatDistribution", "attributes": {"low": 0, "high": 1}}"#,
        r#"{"name": "FloatDistribution", "attributes": {"low": -2.5, "high": 2.5, "step": 0.5}}"#,
        r#"{"name": "IntDistribution", "attributes": {"low": 16.0, "high": 256, "step": 16}}"#,
        r#"{"name": "IntDistribution", "attributes": {"low": 1, "high": 1000, "log": true}}"#,
        r#"{"name": "CategoricalDistribution", "attributes": {"choices": ["adam", "été", null, 1.0, 2, true]}}"#,
        r#"{"name": "UniformDistribution", "attributes": {"low": 0.0, "high": 1.0}}"#,
        r#"{"name": "LogUniformDistribution", "attributes": {"low": 1e-05, "high": 1.0}}"#,
        r#"{"name": "DiscreteUniformDistribution", "attributes": {"low": 0.0, "high": 1.0, "q": 0.25}}"#,
        r#"{"name": "IntUniformDistribution", "attributes": {"low": 1, "high": 9, "step": 2}}"#,
        r#"{"name": "IntLogUniformDistribution", "attributes": {"low": 1, "high": 64}}"#,
        r#"{"type": "float", "low": 1e-05, "high": 0.01, "log": true}"#,
        r#"{"type": "float", "low": 0, "high": 1, "step": 0.125}"#,
        r#"{"type": "int", "low": 0, "high": 12, "step": 3}"#,
        r#"{"type": "categorical", "choices": ["a", 1, null]}"#,
    ];
    let mut child = Command::new(&py)
        .arg(script("read_distributions.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{}\n", forms.join("\n")).as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "read_distributions.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs = String::from_utf8(out.stdout).unwrap();
    let theirs: Vec<&str> = theirs.lines().collect();
    assert_eq!(theirs.len(), forms.len());
    for (form, optuna) in forms.iter().zip(theirs) {
        let ours = distribution_to_json(
            &json_to_distribution(form).unwrap_or_else(|e| panic!("{form}: {e}")),
        );
        assert_eq!(ours, optuna, "{form}");
    }
}
