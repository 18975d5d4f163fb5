//! Studies Optuna 5.0 wrote, with what Python's JSON allows and strict JSON
//! does not (`NaN` and `Infinity` inside attributes) and with Optuna 5.0's
//! named constraints (`Trial.set_constraint`), read as Optuna reads them:
//! `memtune best` gives Optuna's `best_trial` / `best_trials`, and every
//! read command reads the study.
//! Needs `MEMTUNE_PYTHON` (a Python with optuna==5.0.0); skipped without it
//! unless `CI` is set.

mod common;

use common::{memtune, ok, reference_python, run_python};
use serde_json::Value as Json;

const WRITE: &str = r#"
import json, sys, warnings
warnings.simplefilter("ignore")
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
url = sys.argv[1]
one = optuna.create_study(study_name="named", storage=url)
for value, mem in [(1.0, 5.0), (2.0, -1.0), (3.0, 0.0)]:
    t = one.ask()
    t.suggest_float("x", 0.0, 1.0)
    t.set_constraint("mem", mem)
    one.tell(t, value)
two = optuna.create_study(study_name="two", storage=url, directions=["minimize", "minimize"])
for a, b, mem in [(1.0, 3.0, 1.0), (2.0, 2.0, -1.0), (3.0, 1.0, -1.0), (0.5, 0.5, 2.0)]:
    t = two.ask()
    t.suggest_float("x", 0.0, 1.0)
    t.set_constraint("mem", mem)
    two.tell(t, [a, b])
nan = optuna.create_study(study_name="nan", storage=url)
nan.set_user_attr("history", {"best": float("inf")})
t = nan.ask()
t.suggest_float("x", 0.0, 1.0)
t.set_user_attr("losses", [0.5, float("nan"), float("-inf")])
nan.tell(t, 0.25)
print(json.dumps({"named": one.best_trial.number,
                  "two": sorted(t.number for t in two.best_trials)}))
"#;

#[test]
fn optuna_5_studies_read_as_optuna_reads_them() {
    let Some(py) = reference_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("optuna.db");
    let url = common::url(&db);
    let expected: Json = serde_json::from_str(&run_python(&py, WRITE, &[&url])).unwrap();
    assert_eq!(expected["named"], 1, "{expected}");

    let best = ok(memtune(&db, &["best", "--study", "named"]));
    assert!(best.starts_with("trial 1:"), "{best}");
    let front = ok(memtune(&db, &["best", "--study", "two"]));
    let mut numbers: Vec<i64> = front
        .lines()
        .filter_map(|l| l.trim().strip_prefix("trial "))
        .filter_map(|l| l.split(':').next()?.parse().ok())
        .collect();
    numbers.sort();
    let want: Vec<i64> = serde_json::from_value(expected["two"].clone()).unwrap();
    assert_eq!(numbers, want, "{front}");

    let studies = ok(memtune(&db, &["studies"]));
    assert!(studies.contains("nan"), "{studies}");
    for args in [
        &["trials", "--study", "nan"][..],
        &["best", "--study", "nan"],
        &["export", "--study", "nan", "--format", "json"],
    ] {
        ok(memtune(&db, args));
    }
    let json = ok(memtune(
        &db,
        &["export", "--study", "nan", "--format", "json"],
    ));
    assert!(json.contains("-Infinity"), "{json}");
}

const WRITE_WIDE: &str = r#"
import json, sys, warnings
warnings.simplefilter("ignore")
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(
    study_name="wide", storage=sys.argv[1], sampler=optuna.samplers.TPESampler(seed=1)
)
def objective(t):
    seed = t.suggest_int("seed", 0, 2**62)
    t.suggest_int("offset", -(2**63), 2**63 - 1, step=3)
    return seed / 2**62
study.optimize(objective, n_trials=12)
print(json.dumps({"best": study.best_trial.number, "seed": study.best_trial.params["seed"]}))
"#;

/// Optuna takes any int bounds (`suggest_int("seed", 0, 2**62)`) and holds
/// the values as floats; every read command reads such a study, `best`
/// agrees with Optuna's `best_trial`, and `ask` continues it in range.
#[test]
fn int_ranges_beyond_2_pow_53_read_and_continue() {
    let Some(py) = reference_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("optuna.db");
    let expected: Json =
        serde_json::from_str(&run_python(&py, WRITE_WIDE, &[&common::url(&db)])).unwrap();
    let best = ok(memtune(&db, &["best", "--study", "wide"]));
    assert!(
        best.starts_with(&format!("trial {}:", expected["best"]))
            && best.contains(&expected["seed"].to_string()),
        "{best} against Optuna's {expected}"
    );
    for args in [
        &["trials", "--study", "wide"][..],
        &["export", "--study", "wide", "--format", "csv"],
        &["export", "--study", "wide", "--format", "json"],
    ] {
        ok(memtune(&db, args));
    }
    let space = r#"{"seed": {"name": "IntDistribution", "attributes": {"low": 0, "high": 4611686018427387904}}}"#;
    let asked: Json = serde_json::from_str(&ok(memtune(
        &db,
        &["ask", "--study-name", "wide", "--search-space", space],
    )))
    .unwrap();
    let seed = asked["params"]["seed"].as_i64().expect("an integer seed");
    assert!((0..=1 << 62).contains(&seed), "{asked}");
}
