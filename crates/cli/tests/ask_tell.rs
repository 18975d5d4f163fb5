//! `memtune create-study` / `ask` / `tell` run as the real binary: a round
//! trip, Optuna's tell semantics, every refused input leaving the storage
//! untouched, and a short TPE loop that must improve on its random start.

mod common;

use common::{fails, memtune, ok};
use serde_json::{Value as Json, json};
use std::path::{Path, PathBuf};
use std::process::Output;
use store::{Storage, TrialFilter, TrialState};

const SPACE: &str = r#"{"x": {"name": "FloatDistribution", "attributes": {"step": null, "low": -1.0, "high": 1.0, "log": false}},
 "lr": {"name": "FloatDistribution", "attributes": {"step": null, "low": 1e-05, "high": 0.1, "log": true}},
 "layers": {"name": "IntDistribution", "attributes": {"log": false, "step": 2, "low": 1, "high": 9}},
 "opt": {"name": "CategoricalDistribution", "attributes": {"choices": ["adamw", "sgd", 3, null]}}}"#;

/// A fresh storage with a study `s` (direction given).
fn study(dir: &Path, direction: &str) -> PathBuf {
    let db = dir.join("study.db");
    let name = ok(memtune(
        &db,
        &[
            "create-study",
            "--study-name",
            "s",
            "--direction",
            direction,
        ],
    ));
    assert_eq!(name, "s\n");
    db
}

/// A fresh storage with a study `s` of several objectives.
fn study_of(dir: &Path, directions: &[&str]) -> PathBuf {
    let db = dir.join("study.db");
    let mut args = vec!["create-study", "--study-name", "s", "--directions"];
    args.extend_from_slice(directions);
    ok(memtune(&db, &args));
    db
}

fn ask(db: &Path, extra: &[&str]) -> Json {
    let mut args = vec!["ask", "--study", "s", "--search-space", SPACE];
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(memtune(db, &args))).unwrap()
}

fn tell(db: &Path, number: &Json, extra: &[&str]) -> Output {
    let n = number.to_string();
    let mut args = vec!["tell", "--study-name", "s", "--trial-number", &n];
    args.extend_from_slice(extra);
    memtune(db, &args)
}

/// `n` asks on the 2-D `space` (params x and y), each told
/// `(x - 0.5)^2 + (y + 0.3)^2`; the values in trial order.
fn ask_tell_loop(db: &Path, space: &str, extra: &[&str], n: usize) -> Vec<f64> {
    let mut values = Vec::new();
    for _ in 0..n {
        let mut args = vec!["ask", "--study", "s", "--search-space", space];
        args.extend_from_slice(extra);
        let asked: Json = serde_json::from_str(&ok(memtune(db, &args))).unwrap();
        let (x, y) = (
            asked["params"]["x"].as_f64().unwrap(),
            asked["params"]["y"].as_f64().unwrap(),
        );
        let v = (x - 0.5).powi(2) + (y + 0.3).powi(2);
        values.push(v);
        ok(tell(db, &asked["number"], &["--values", &v.to_string()]));
    }
    values
}

/// A stored parameter's row in `trial_params`, as written.
struct ParamRow {
    distribution_json: String,
}

/// The row of the parameter `name` (of the study's only trial with it).
fn stored_row(db: &Path, name: &str) -> ParamRow {
    let s = Storage::open_existing(db).unwrap();
    let rows = s
        .query_text(&format!(
            "SELECT distribution_json FROM trial_params WHERE param_name = '{name}'"
        ))
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    ParamRow {
        distribution_json: rows[0][0].clone().unwrap(),
    }
}

fn trials(db: &Path) -> Vec<store::FrozenTrial> {
    let s = Storage::open_existing(db).unwrap();
    let st = s.study("s").unwrap();
    s.trials(st.study_id, &TrialFilter::default()).unwrap()
}

/// Run `refused` and check it failed with `expect` in its message and left
/// the file byte for byte as it was.
fn refused_without_change(db: &Path, args: &[&str], expect: &str) {
    let before = std::fs::read(db).unwrap();
    let rows = trials(db);
    let err = fails(memtune(db, args));
    assert!(err.contains(expect), "stderr {err:?} lacks {expect:?}");
    assert_eq!(trials(db), rows, "{args:?} changed the trials");
    assert!(
        std::fs::read(db).unwrap() == before,
        "{args:?} changed the file"
    );
}

#[test]
fn ask_then_tell_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let db = study(dir.path(), "minimize");
    let raw = ok(memtune(
        &db,
        &[
            "ask",
            "--study-name",
            "s",
            "--search-space",
            SPACE,
            "--seed",
            "7",
        ],
    ));
    // Optuna's json.dumps spelling, params in the search space's order.
    assert!(
        raw.starts_with(r#"{"number": 0, "params": {"x": "#),
        "{raw}"
    );
    let asked: Json = serde_json::from_str(&raw).unwrap();
    let p = &asked["params"];
    let x = p["x"].as_f64().unwrap();
    assert!((-1.0..=1.0).contains(&x));
    let lr = p["lr"].as_f64().unwrap();
    assert!((1e-5..=0.1).contains(&lr));
    let layers = p["layers"].as_i64().unwrap();
    assert!([1, 3, 5, 7, 9].contains(&layers), "{layers}");
    assert!([json!("adamw"), json!("sgd"), json!(3), Json::Null].contains(&p["opt"]));

    let t = &trials(&db)[0];
    assert_eq!(t.state, TrialState::Running);
    assert_eq!(t.params.len(), 4);
    for (name, param) in &t.params {
        assert_eq!(store::value_to_json(&param.value()), p[name]);
    }
    let opt = stored_row(&db, "opt");
    assert_eq!(
        opt.distribution_json,
        r#"{"name": "CategoricalDistribution", "attributes": {"choices": ["adamw", "sgd", 3, null]}}"#
    );

    ok(tell(&db, &asked["number"], &["--values", "-0.25"]));
    let t = &trials(&db)[0];
    assert_eq!(t.state, TrialState::Complete);
    assert_eq!(t.values, Some(vec![-0.25]));

    // A second ask is trial 1 with other values; the same seed on a fresh
    // storage with the same history repeats trial 0 exactly.
    let second = ask(&db, &["--seed", "7"]);
    assert_eq!(second["number"], 1);
    assert_ne!(second["params"], asked["params"]);
    let dir2 = tempfile::tempdir().unwrap();
    let db2 = study(dir2.path(), "minimize");
    assert_eq!(ask(&db2, &["--seed", "7"]), asked);
    let random = ask(
        &db2,
        &["--sampler", "random", "--sampler-kwargs", r#"{"seed": 7}"#],
    );
    assert_eq!(random["number"], 1);
}

/// Several values whose first is negative, in every form Python prints,
/// as Optuna's CLI takes them (`--values -1 2`).
#[test]
fn tell_takes_several_values_after_a_negative_first() {
    let dir = tempfile::tempdir().unwrap();
    let db = study_of(dir.path(), &["minimize", "minimize"]);
    for (values, want) in [
        (&["-1", "2"][..], [-1.0, 2.0]),
        (&["-1.5e-05", "2.5"], [-1.5e-05, 2.5]),
        (&["-inf", "-3"], [f64::NEG_INFINITY, -3.0]),
    ] {
        let asked = ask(&db, &[]);
        let mut extra = vec!["--values"];
        extra.extend_from_slice(values);
        ok(tell(&db, &asked["number"], &extra));
        let n = asked["number"].as_u64().unwrap();
        let t = trials(&db).into_iter().find(|t| t.number == n).unwrap();
        assert_eq!(t.values, Some(want.to_vec()), "{values:?}");
    }
}

#[test]
fn tell_follows_optunas_semantics() {
    let dir = tempfile::tempdir().unwrap();
    let db = study(dir.path(), "maximize");
    // PRUNED without values takes the last intermediate value.
    let pruned = ask(&db, &[]);
    {
        let s = Storage::open_existing(&db).unwrap();
        let id = trials(&db)[0].trial_id;
        s.report_intermediate(id, 1, 0.4).unwrap();
        s.report_intermediate(id, 3, 0.6).unwrap();
    }
    ok(tell(&db, &pruned["number"], &["--state", "pruned"]));
    // No --state with a NaN value: FAIL, as Optuna's tell does, with a warning.
    let nan = ask(&db, &[]);
    let out = tell(&db, &nan["number"], &["--values", "nan"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("FAIL"));
    ok(out);
    let failed = ask(&db, &[]);
    ok(tell(&db, &failed["number"], &["--state", "fail"]));
    let complete = ask(&db, &[]);
    ok(tell(
        &db,
        &complete["number"],
        &["--values", "1e3", "--state", "complete"],
    ));
    // --skip-if-finished: success, nothing changes.
    ok(tell(
        &db,
        &complete["number"],
        &["--values", "5", "--skip-if-finished"],
    ));

    let t = trials(&db);
    let states: Vec<_> = t.iter().map(|t| (t.state, t.values.clone())).collect();
    assert_eq!(
        states,
        [
            (TrialState::Pruned, Some(vec![0.6])),
            (TrialState::Fail, None),
            (TrialState::Fail, None),
            (TrialState::Complete, Some(vec![1000.0])),
        ]
    );
}

#[test]
fn refused_commands_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = study(dir.path(), "minimize");
    let done = ask(&db, &[]);
    ok(tell(&db, &done["number"], &["--values", "1"]));
    ask(&db, &[]); // trial 1 stays RUNNING
    let bad_low_high =
        r#"{"x": {"name": "FloatDistribution", "attributes": {"low": 2.0, "high": 1.0}}}"#;
    let bad_class = r#"{"y": {"name": "GaussDistribution", "attributes": {}}}"#;
    let bad_choices =
        r#"{"c": {"name": "CategoricalDistribution", "attributes": {"choices": []}}}"#;
    let cases: &[(&[&str], &str)] = &[
        (
            &["ask", "--study", "s", "--search-space", bad_low_high],
            "parameter 'x': `low <= high`",
        ),
        (
            &["ask", "--study", "s", "--search-space", bad_class],
            "GaussDistribution",
        ),
        (
            &["ask", "--study", "s", "--search-space", bad_choices],
            "parameter 'c'",
        ),
        (
            &["ask", "--study", "s", "--search-space", "{\"x\": "],
            "line 1",
        ),
        (
            &["ask", "--study", "nope", "--search-space", SPACE],
            "study `nope` not found",
        ),
        (
            &[
                "ask",
                "--study",
                "s",
                "--search-space",
                SPACE,
                "--sampler",
                "cmaes",
            ],
            "unknown --sampler",
        ),
        (
            &[
                "ask",
                "--study",
                "s",
                "--search-space",
                SPACE,
                "--sampler-kwargs",
                "{}",
            ],
            "without --sampler",
        ),
        (
            &[
                "ask",
                "--study",
                "s",
                "--sampler",
                "tpe",
                "--sampler-kwargs",
                r#"{"warn": 1}"#,
            ],
            "`warn`",
        ),
        (
            &[
                "tell",
                "--study",
                "nope",
                "--trial-number",
                "0",
                "--values",
                "1",
            ],
            "not found",
        ),
        (
            &[
                "tell",
                "--study",
                "s",
                "--trial-number",
                "9",
                "--values",
                "1",
            ],
            "trial 9",
        ),
        (
            &[
                "tell",
                "--study",
                "s",
                "--trial-number",
                "0",
                "--values",
                "2",
            ],
            "COMPLETE, not RUNNING",
        ),
        (
            &[
                "tell",
                "--study",
                "s",
                "--trial-number",
                "1",
                "--state",
                "complete",
            ],
            "--values are required",
        ),
        (
            &[
                "tell",
                "--study",
                "s",
                "--trial-number",
                "1",
                "--state",
                "pruned",
                "--values",
                "1",
            ],
            "cannot be given",
        ),
        (
            &[
                "tell",
                "--study",
                "s",
                "--trial-number",
                "1",
                "--values",
                "1",
                "2",
                "--state",
                "complete",
            ],
            "2 values given",
        ),
        (
            &["create-study", "--study", "s", "--direction", "maximize"],
            "already exists",
        ),
        (
            &[
                "ask",
                "--study",
                "s",
                "--search-space",
                r#"{"x": {"name": "FloatDistribution", "attributes": {"low": -1e308, "high": 1e308}}}"#,
            ],
            "parameter `x`: `high - low` overflows",
        ),
    ];
    for (args, expect) in cases {
        refused_without_change(&db, args, expect);
    }
    // A storage file that does not exist is not created by ask or tell.
    let missing = dir.path().join("missing.db");
    fails(memtune(
        &missing,
        &["ask", "--study", "s", "--search-space", SPACE],
    ));
    fails(memtune(
        &missing,
        &[
            "tell",
            "--study",
            "s",
            "--trial-number",
            "0",
            "--values",
            "1",
        ],
    ));
    assert!(!missing.exists());
}

/// 30 trials of a 2-D quadratic through the binary: the TPE phase must beat
/// the 10 random startup trials, and no two asks may repeat a point.
#[test]
fn tpe_loop_improves_on_its_random_start() {
    let dir = tempfile::tempdir().unwrap();
    let db = study(dir.path(), "minimize");
    let space = r#"{"x": {"name": "FloatDistribution", "attributes": {"low": -2.0, "high": 2.0}},
                    "y": {"name": "FloatDistribution", "attributes": {"low": -2.0, "high": 2.0}}}"#;
    let values = ask_tell_loop(&db, space, &["--seed", "3"], 30);
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let start = best(&values[..10]);
    let tpe = best(&values[10..]);
    assert!(
        tpe < start,
        "TPE best {tpe} did not beat the random start {start}"
    );
    // TPE concentrates its proposals near the optimum: its typical point is
    // far better than a random one (a sampler that ignored the history would
    // give about the same median in both phases).
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (random_median, tpe_median) = (median(&values[..10]), median(&values[10..]));
    assert!(
        tpe_median < random_median / 2.0,
        "TPE median {tpe_median} vs random-start median {random_median}"
    );
    let distinct: std::collections::BTreeSet<u64> = values.iter().map(|v| v.to_bits()).collect();
    assert_eq!(distinct.len(), 30, "two asks repeated the same point");
}

/// As Optuna's `study.ask`: an enqueued trial is claimed first; its stored
/// params and `fixed_params` (what Optuna's `enqueue_trial` writes) are
/// kept, the rest sampled.
#[test]
fn ask_claims_enqueued_trials_first() {
    let dir = tempfile::tempdir().unwrap();
    let db = study(dir.path(), "minimize");
    {
        let s = Storage::open_existing(&db).unwrap();
        let st = s.study("s").unwrap();
        let x = store::Distribution::Float {
            low: -1.0,
            high: 1.0,
            log: false,
            step: None,
        };
        let queued = store::NewTrial {
            params: vec![(
                "x".into(),
                store::Param {
                    distribution: x,
                    internal: 0.25,
                },
            )],
            system_attrs: vec![("fixed_params".into(), json!({"lr": 0.01, "opt": "sgd"}))],
            ..Default::default()
        };
        s.enqueue_trial(st.study_id, &queued).unwrap();
        let bad = store::NewTrial {
            system_attrs: vec![("fixed_params".into(), json!({"layers": 4}))],
            ..Default::default()
        };
        s.enqueue_trial(st.study_id, &bad).unwrap();
    }
    let first = ask(&db, &["--seed", "1"]);
    assert_eq!(first["number"], 0);
    assert_eq!(first["params"]["x"], 0.25);
    assert_eq!(first["params"]["lr"], 0.01);
    assert_eq!(first["params"]["opt"], "sgd");
    assert!(first["params"]["layers"].is_i64());
    let t = &trials(&db)[0];
    assert_eq!(t.state, TrialState::Running);
    assert_eq!(t.params.len(), 4);

    // layers=4 is not on the grid 1, 3, ..., 9: refused before the claim,
    // the enqueued trial left WAITING with its values.
    refused_without_change(
        &db,
        &["ask", "--study", "s", "--search-space", SPACE],
        "enqueued trial 1: fixed value 4 for parameter 'layers'",
    );
    assert_eq!(trials(&db)[1].state, TrialState::Waiting);
}

/// `--sampler gp` (and `auto`, which picks the GP on this small numeric
/// study): after 10 random trials the GP's proposals beat the random start.
#[test]
fn gp_loop_improves_on_its_random_start() {
    for (sampler, kwargs) in [
        ("gp", r#"{"seed": 5, "deterministic_objective": true}"#),
        ("auto", r#"{"seed": 5}"#),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = study(dir.path(), "minimize");
        let space = r#"{"x": {"name": "FloatDistribution", "attributes": {"low": -2.0, "high": 2.0}},
                        "y": {"name": "FloatDistribution", "attributes": {"low": -2.0, "high": 2.0}}}"#;
        let values = ask_tell_loop(
            &db,
            space,
            &["--sampler", sampler, "--sampler-kwargs", kwargs],
            16,
        );
        let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let (start, gp) = (best(&values[..10]), best(&values[10..]));
        assert!(
            gp < start && gp < 0.05,
            "{sampler}: GP best {gp} vs random start {start}"
        );
    }
}

/// An ask whose answer cannot be printed (a reader that left, a full disk)
/// fails and marks its trial FAIL: no one learned its number, so no one
/// would ever tell it, and a RUNNING trial would stay so for good.
#[test]
fn an_ask_that_cannot_print_leaves_no_running_trial() {
    let dir = tempfile::tempdir().unwrap();
    let db = study(dir.path(), "minimize");
    // The read end is closed before the ask starts: printing meets a
    // broken pipe.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_memtune"))
        .args(["--storage", &common::url(&db)])
        .args(["ask", "--study", "s", "--search-space", SPACE])
        .env_remove("MEMTUNE_STORAGE")
        .stdout(writer)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("trial 0 was marked FAIL: cannot write output"),
        "{err}"
    );
    let trials = trials(&db);
    assert_eq!(trials.len(), 1);
    assert_eq!(trials[0].state, TrialState::Fail);
}

/// Ctrl-C between creating (or claiming) a trial and printing it: the ask
/// exits 130 printing nothing, and no trial is left RUNNING for no one to
/// tell; an enqueued trial claimed so is enqueued again.
#[test]
fn an_interrupted_ask_leaves_no_running_trial_and_keeps_an_enqueued_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = study(dir.path(), "minimize");
    let interrupted_ask = |number: u32| {
        std::process::Command::new(env!("CARGO_BIN_EXE_memtune"))
            .arg("--storage")
            .arg(common::url(&db))
            .args(["ask", "--study", "s", "--search-space", SPACE])
            .env_remove("MEMTUNE_STORAGE")
            .env("MEMTUNE_FAULT", format!("interrupt-ask@{number}"))
            .output()
            .unwrap()
    };
    let out = interrupted_ask(0);
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted"));
    assert_eq!(trials(&db)[0].state, TrialState::Fail);

    let s = Storage::open_existing(&db).unwrap();
    let queued = store::NewTrial {
        system_attrs: vec![("fixed_params".into(), json!({"lr": 0.01}))],
        ..Default::default()
    };
    s.enqueue_trial(s.study("s").unwrap().study_id, &queued)
        .unwrap();
    drop(s);
    let out = interrupted_ask(1);
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    let ts = trials(&db);
    assert_eq!(ts[1].state, TrialState::Fail);
    assert_eq!(ts[2].state, TrialState::Waiting);
    assert!(ts[2].params.is_empty(), "nothing sampled is kept: {ts:?}");
    let next = ask(&db, &[]);
    assert_eq!(
        (next["number"].clone(), next["params"]["lr"].clone()),
        (json!(2), json!(0.01))
    );
    assert!(
        trials(&db)
            .iter()
            .all(|t| t.state != TrialState::Running || t.number == 2)
    );
}

/// A study keeps working when its history holds values Optuna reads
/// back: a float drawn on a fine grid far from 0 (`(x - low) / step`
/// misses an integer by more than 1e-8, as most of Optuna's own random
/// draws there do) and a value outside its distribution (what Optuna's
/// `enqueue_trial` runs with a warning). Every later ask, with each
/// sampler, draws a value in the distribution.
#[test]
fn a_history_optuna_reads_back_never_stops_an_ask() {
    let dir = tempfile::tempdir().unwrap();
    let db = study(dir.path(), "minimize");
    let far = r#"{"x": {"name": "FloatDistribution", "attributes": {"low": 1000000.0, "high": 1000001.0, "step": 0.001}}}"#;
    // An ask by `sampler`, its x checked to lie in the range.
    let ask_far = |sampler: &str| {
        let args = [
            "ask",
            "--study",
            "s",
            "--search-space",
            far,
            "--sampler",
            sampler,
        ];
        let asked: Json = serde_json::from_str(&ok(memtune(&db, &args))).unwrap();
        let x = asked["params"]["x"].as_f64().unwrap();
        assert!((1e6..=1e6 + 1.0).contains(&x), "{sampler}: {x}");
        (asked, x)
    };
    for sampler in ["random", "tpe", "gp", "auto", "random", "tpe", "gp"] {
        let (asked, x) = ask_far(sampler);
        ok(tell(
            &db,
            &asked["number"],
            &["--values", &(x - 1e6).to_string()],
        ));
    }
    {
        let s = Storage::open_existing(&db).unwrap();
        let st = s.study("s").unwrap();
        let x = store::Distribution::Float {
            low: 1e6,
            high: 1e6 + 1.0,
            log: false,
            step: Some(1e-3),
        };
        let outside = store::NewTrial {
            params: vec![(
                "x".into(),
                store::Param {
                    distribution: x,
                    internal: 5.0,
                },
            )],
            ..Default::default()
        };
        let t = s.enqueue_trial(st.study_id, &outside).unwrap();
        assert!(s.claim_waiting(st.study_id).unwrap().is_some());
        s.finish(t.trial_id, TrialState::Complete, &[0.1]).unwrap();
    }
    for sampler in ["random", "tpe", "gp", "auto"] {
        ask_far(sampler);
    }
}

/// NSGA-II's generation is stored as an integer, as Optuna's NSGA-II
/// stores it (its parent cache is keyed by the generation's text, and
/// `1.0` is not `1`).
#[test]
fn nsga2_stores_its_generation_as_optuna_does() {
    let dir = tempfile::tempdir().unwrap();
    let db = study_of(dir.path(), &["minimize", "minimize"]);
    let space = r#"{"x": {"name": "FloatDistribution", "attributes": {"low": 0, "high": 1}}}"#;
    let nsga2_ask = |kwargs: &'static str| {
        [
            "ask",
            "--study",
            "s",
            "--search-space",
            space,
            "--sampler",
            "nsga2",
            "--sampler-kwargs",
            kwargs,
        ]
    };
    for _ in 0..6 {
        let args = nsga2_ask(r#"{"population_size": 2, "seed": 3}"#);
        let asked: Json = serde_json::from_str(&ok(memtune(&db, &args))).unwrap();
        let x = asked["params"]["x"].as_f64().unwrap();
        let values = [x.to_string(), (1.0 - x).to_string()];
        ok(tell(
            &db,
            &asked["number"],
            &["--values", &values[0], &values[1]],
        ));
    }
    let generations: Vec<Json> = trials(&db)
        .iter()
        .map(|t| t.system_attrs["NSGAIISampler:generation"].clone())
        .collect();
    assert!(generations.iter().all(Json::is_i64), "{generations:?}");
    assert_eq!(generations.last(), Some(&json!(2)), "{generations:?}");
    // A generation is held in memory: a mistyped size is refused before
    // a trial is created.
    refused_without_change(
        &db,
        &nsga2_ask(r#"{"population_size": 4611686018427387904}"#),
        "`population_size` must be at least 2 and at most 1048576",
    );
}

/// A history whose COMPLETE trial has another count of values than the
/// study has objectives is refused, naming the storage, before the ask
/// claims or creates a trial: an enqueued trial stays WAITING and nothing
/// is written.
#[test]
fn a_history_with_the_wrong_count_of_values_is_refused_before_anything_is_claimed() {
    let dir = tempfile::tempdir().unwrap();
    let db = study_of(dir.path(), &["minimize", "maximize"]);
    {
        let s = Storage::open_existing(&db).unwrap();
        let id = s.study("s").unwrap().study_id;
        let t = s.create_trial(id).unwrap();
        s.finish(t.trial_id, TrialState::Complete, &[1.0, 2.0])
            .unwrap();
        s.enqueue_trial(id, &store::NewTrial::default()).unwrap();
    }
    // A value lost by another writer (the store itself refuses to write
    // such a trial).
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute("DELETE FROM trial_values WHERE objective = 1", [])
        .unwrap();
    refused_without_change(
        &db,
        &["ask", "--study", "s", "--search-space", SPACE],
        &format!(
            "{}: stored history: trial 0: 1 values for 2 objectives",
            db.display()
        ),
    );
    assert_eq!(trials(&db)[1].state, TrialState::Waiting);
}

/// A range no value can be drawn from (`high - low` overflows) is asked
/// when the enqueued trial the ask claims fixes that param, as Optuna's CLI
/// asks it; when the trial to be claimed does not fix it, the ask is
/// refused before the claim and that trial stays WAITING.
#[test]
fn an_undrawable_range_is_asked_only_where_the_enqueued_trial_fixes_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = study(dir.path(), "minimize");
    let space =
        r#"{"x": {"name": "FloatDistribution", "attributes": {"low": -1e308, "high": 1e308}}}"#;
    {
        let s = Storage::open_existing(&db).unwrap();
        let id = s.study("s").unwrap().study_id;
        let fixing = store::NewTrial {
            system_attrs: vec![("fixed_params".into(), json!({"x": 2.5}))],
            ..Default::default()
        };
        s.enqueue_trial(id, &fixing).unwrap();
        s.enqueue_trial(id, &store::NewTrial::default()).unwrap();
    }
    let args = ["ask", "--study", "s", "--search-space", space];
    let asked: Json = serde_json::from_str(&ok(memtune(&db, &args))).unwrap();
    assert_eq!(asked["params"]["x"], 2.5);
    refused_without_change(&db, &args, "parameter `x`: `high - low` overflows");
    assert_eq!(trials(&db)[1].state, TrialState::Waiting);
}

/// A space the next enqueued trial's fixed value lies outside is refused
/// before that trial is claimed: it stays WAITING with its values, for an
/// ask whose space holds them.
#[test]
fn a_space_the_enqueued_values_do_not_fit_leaves_the_trial_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let db = study(dir.path(), "minimize");
    {
        let s = Storage::open_existing(&db).unwrap();
        let fixing = store::NewTrial {
            system_attrs: vec![("fixed_params".into(), json!({"x": 5.0}))],
            ..Default::default()
        };
        s.enqueue_trial(s.study("s").unwrap().study_id, &fixing)
            .unwrap();
    }
    let narrow = r#"{"x": {"name": "FloatDistribution", "attributes": {"low": 0, "high": 1}}}"#;
    let args = ["ask", "--study", "s", "--search-space", narrow];
    refused_without_change(&db, &args, "enqueued trial 0: fixed value 5");
    assert_eq!(trials(&db)[0].state, TrialState::Waiting);
    let wide = r#"{"x": {"name": "FloatDistribution", "attributes": {"low": 0, "high": 10}}}"#;
    let asked: Json = serde_json::from_str(&ok(memtune(
        &db,
        &["ask", "--study", "s", "--search-space", wide],
    )))
    .unwrap();
    assert_eq!(
        (asked["number"].clone(), asked["params"]["x"].clone()),
        (json!(0), json!(5.0))
    );
}
