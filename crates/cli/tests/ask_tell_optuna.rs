//! A study made by `memtune create-study` / `ask` / `tell` opens in
//! `optuna.load_study` with the same params, values and states, its stored
//! distribution JSON is byte-equal to Optuna's `distribution_to_json`, and
//! Optuna can go on asking in it; `memtune ask` hands out a trial Optuna
//! enqueued first, with its fixed params.
//! Needs `MEMTUNE_PYTHON` (a Python with optuna==5.0.0); skipped without it
//! unless `CI` is set.

mod common;

use common::{memtune, ok};
use serde_json::{Value as Json, json};

const SPACE: &str = r#"{"x": {"name": "FloatDistribution", "attributes": {"step": null, "low": -1.0, "high": 1.0, "log": false}},
 "lr": {"name": "FloatDistribution", "attributes": {"step": null, "low": 1e-05, "high": 0.1, "log": true}},
 "q": {"name": "FloatDistribution", "attributes": {"step": 0.25, "low": 0.0, "high": 2.0, "log": false}},
 "layers": {"name": "IntDistribution", "attributes": {"log": false, "step": 2, "low": 1, "high": 9}},
 "batch": {"name": "IntDistribution", "attributes": {"log": true, "step": 1, "low": 8, "high": 256}},
 "opt": {"name": "CategoricalDistribution", "attributes": {"choices": ["adamw", "sgd", 3, 0.5, true, null]}}}"#;

const LOAD: &str = r#"
import json, sys, warnings
warnings.simplefilter("ignore")
import optuna
from optuna.distributions import distribution_to_json, json_to_distribution
url, space = sys.argv[1], json.loads(sys.argv[2])
study = optuna.load_study(study_name="s", storage=url)
dists = {k: json_to_distribution(json.dumps(v)) for k, v in space.items()}
out = []
for t in study.get_trials(deepcopy=False):
    assert t.distributions == dists, (t.distributions, dists)
    out.append({"number": t.number, "state": t.state.name, "params": t.params, "values": t.values})
# The stored JSON is Optuna's own spelling.
con = __import__("sqlite3").connect(url[len("sqlite:///"):])
for name, stored in con.execute("SELECT param_name, distribution_json FROM trial_params"):
    assert stored == distribution_to_json(dists[name]), (stored, distribution_to_json(dists[name]))
# Optuna can continue the study.
trial = study.ask(dists)
study.tell(trial, 0.0)
print(json.dumps({"trials": out, "best": study.best_value, "n": len(study.trials)}))
"#;

use common::run_python;

#[test]
fn optuna_loads_a_study_made_by_ask_and_tell() {
    let Some(py) = common::reference_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("study.db");
    ok(memtune(
        &db,
        &["create-study", "--study", "s", "--direction", "minimize"],
    ));
    // A trial Optuna enqueues is the first one `memtune ask` hands out.
    let enqueue = r#"
import sys, warnings
warnings.simplefilter("ignore")
import optuna
optuna.load_study(study_name="s", storage=sys.argv[1]).enqueue_trial({"x": 0.5, "opt": "sgd"})
"#;
    run_python(&py, enqueue, &[&format!("sqlite:///{}", db.display())]);
    let mut expected = Vec::new();
    for i in 0..14 {
        let asked: Json = serde_json::from_str(&ok(memtune(
            &db,
            &[
                "ask",
                "--study",
                "s",
                "--search-space",
                SPACE,
                "--seed",
                "11",
            ],
        )))
        .unwrap();
        if i == 0 {
            assert_eq!(
                (&asked["params"]["x"], &asked["params"]["opt"]),
                (&json!(0.5), &json!("sgd"))
            );
        }
        let n = asked["number"].to_string();
        let (state, values) = match i % 7 {
            5 => {
                ok(memtune(
                    &db,
                    &[
                        "tell",
                        "--study",
                        "s",
                        "--trial-number",
                        &n,
                        "--state",
                        "fail",
                    ],
                ));
                ("FAIL", Json::Null)
            }
            6 => ("RUNNING", Json::Null),
            _ => {
                let v = asked["params"]["x"].as_f64().unwrap().powi(2) + i as f64;
                let text = v.to_string();
                ok(memtune(
                    &db,
                    &[
                        "tell",
                        "--study",
                        "s",
                        "--trial-number",
                        &n,
                        "--values",
                        &text,
                    ],
                ));
                ("COMPLETE", json!([v]))
            }
        };
        expected.push(json!({"number": asked["number"], "state": state,
                             "params": asked["params"], "values": values}));
    }
    let out = run_python(&py, LOAD, &[&format!("sqlite:///{}", db.display()), SPACE]);
    let seen: Json = serde_json::from_str(&out).unwrap();
    assert_eq!(seen["trials"], Json::Array(expected));
    assert_eq!(seen["n"], 15);
    assert_eq!(seen["best"], 0.0);
    // And memtune reads the trial Optuna added.
    let listed = ok(memtune(
        &db,
        &["trials", "--study", "s", "--state", "complete"],
    ));
    assert!(listed.trim_end().ends_with("11 trials"), "{listed}");
}

/// 1,000 floats (tiny, subnormal, huge, negative, integral, near the
/// switches of `repr` between fixed and exponent form), in two trials of
/// 500 parameters that Optuna enqueues; `optuna ask` prints
/// `json.dumps({"number": ..., "params": ...})`, so that is the line
/// `memtune ask` must print, byte for byte.
const FLOATS: &str = r#"
import json, random, sys, warnings
warnings.simplefilter("ignore")
import optuna
url, trial = sys.argv[1], int(sys.argv[2])
rng = random.Random(1000 + trial)
values = [5e-324, 2.2250738585072014e-308, 1e-05, 5e-05, 0.0001, 9.999e-05, 1e16,
          9999999999999998.0, 1e15, 2.0**53, 1.7976931348623157e308, 0.0, -0.0,
          1.0, -1.0, 0.1, 1/3, 123456789.0, 1e-07, 1.5e300]
while len(values) < 500:
    kind = len(values) % 4
    if kind == 0:
        values.append(rng.uniform(1, 10) * 10.0 ** rng.randint(-320, 300))
    elif kind == 1:
        values.append(-rng.uniform(1, 10) * 10.0 ** rng.randint(-30, 30))
    elif kind == 2:
        values.append(float(rng.randint(-10**17, 10**17)))
    else:
        values.append(round(rng.uniform(-1e6, 1e6), rng.randint(0, 12)))
names = ["p%03d" % i for i in range(len(values))]
space = {n: {"name": "FloatDistribution", "attributes": {"low": -1.7976931348623157e308,
         "high": 1.7976931348623157e308}} for n in names}
study = optuna.load_study(study_name="s", storage=url)
study.enqueue_trial(dict(zip(names, values)))
print(json.dumps({"space": space,
                  "line": json.dumps({"number": trial, "params": dict(zip(names, values))})}))
"#;

#[test]
fn ask_prints_floats_as_optuna_ask_does() {
    let Some(py) = common::reference_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("floats.db");
    ok(memtune(&db, &["create-study", "--study", "s"]));
    for trial in 0..2 {
        let out = run_python(
            &py,
            FLOATS,
            &[&format!("sqlite:///{}", db.display()), &trial.to_string()],
        );
        let made: Json = serde_json::from_str(&out).unwrap();
        let space = made["space"].to_string();
        let printed = ok(memtune(
            &db,
            &["ask", "--study", "s", "--search-space", &space],
        ));
        let want = made["line"].as_str().unwrap();
        let got = printed.trim_end();
        if got != want {
            let (g, w): (Vec<&str>, Vec<&str>) =
                (got.split(", ").collect(), want.split(", ").collect());
            let first = g.iter().zip(&w).find(|(a, b)| a != b);
            panic!("trial {trial}: first difference {first:?}");
        }
    }
}

/// Enqueues the same fixed params four times, for `optuna ask` and
/// `memtune ask` to claim one each, twice.
const ENQUEUE_TWICE: &str = r#"
import json, sys, warnings
warnings.simplefilter("ignore")
import optuna
url, params = sys.argv[1], json.loads(sys.argv[2])
study = optuna.load_study(study_name="s", storage=url)
for _ in range(4):
    study.enqueue_trial(params)
"#;

#[test]
fn ask_prints_the_line_optuna_ask_prints() {
    let Some(py) = common::reference_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("order.db");
    let url = format!("sqlite:///{}", db.display());
    ok(memtune(&db, &["create-study", "--study", "s"]));
    // Keys out of name order, and strings beyond ASCII.
    let space = r#"{"zeta": {"name": "FloatDistribution", "attributes": {"step": null, "low": 0.0, "high": 1.0, "log": false}},
 "alpha": {"name": "CategoricalDistribution", "attributes": {"choices": ["caf\u00e9", "\ud83d\ude00 x", "plain"]}},
 "mid": {"name": "IntDistribution", "attributes": {"log": false, "step": 1, "low": 1, "high": 9}}}"#;
    let fixed = r#"{"zeta": 5e-05, "alpha": "café", "mid": 3}"#;
    run_python(&py, ENQUEUE_TWICE, &[&url, fixed]);
    for flatten in [false, true] {
        let mut args = vec!["ask", "--study-name", "s", "--search-space", space];
        if flatten {
            args.push("--flatten");
        }
        let optuna_cli = "import sys, warnings; warnings.simplefilter('ignore'); \
                          from optuna.cli import main; sys.exit(main())";
        let theirs = run_python(&py, optuna_cli, &[&args[..], &["--storage", &url]].concat());
        let ours = ok(memtune(&db, &args));
        // The same fixed params in trials 0 and 1 (then 2 and 3).
        let n = if flatten { 2 } else { 0 };
        let ours = ours.replacen(
            &format!("\"number\": {}", n + 1),
            &format!("\"number\": {n}"),
            1,
        );
        assert_eq!(ours.trim_end(), theirs.trim_end());
        if !flatten {
            assert!(
                ours.starts_with(
                    r#"{"number": 0, "params": {"zeta": 5e-05, "alpha": "caf\u00e9", "mid": 3}}"#
                ),
                "{ours}"
            );
        }
    }
}
