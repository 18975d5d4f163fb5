//! `memtune report` pages rendered by headless Chromium: a study run by
//! `memtune tune` on the simulated device, a study made by Optuna alone,
//! and an empty study. Each page must load without console messages, and
//! every chart's SVG must be in the rendered DOM with something drawn in
//! it; sections the study cannot fill say why instead.
//!
//! Needs Chromium (`/usr/bin/chromium`, or `MEMTUNE_CHROMIUM`; `cargo xtask
//! test` installs Debian's `chromium` under `CI=true`) and, for the Optuna
//! study, `MEMTUNE_PYTHON`. Skipped without them unless `CI` is set.
//! `MEMTUNE_REPORT_SCREENSHOT=PATH` also saves a 1280x4000 screenshot of the
//! simulated study's page there (how `docs/report.png` is made).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{memtune, ok};

fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MEMTUNE_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let default = PathBuf::from("/usr/bin/chromium");
    if default.exists() {
        return Some(default);
    }
    common::skip_or_fail("chromium (apt-get install chromium)");
    None
}

/// Runs headless Chromium on `page` with `extra` flags; returns stdout and
/// stderr.
fn browse(chromium: &Path, page: &Path, extra: &[&str]) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The rendered DOM of `page`, after checking that the page logged nothing
/// to the console; returns each chart's name and whether its SVG has
/// drawn elements.
fn render(chromium: &Path, page: &Path) -> (String, Vec<(String, bool)>) {
    let (dom, log) = browse(chromium, page, &["--dump-dom"]);
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:?}");
    assert!(dom.contains("</html>"), "no DOM dumped: {log}");
    let charts = dom
        .split("<figure class=\"chart\" data-chart=\"")
        .skip(1)
        .map(|chunk| {
            let name = chunk.split('"').next().unwrap().to_string();
            let figure = chunk.split("</figure>").next().unwrap();
            let drawn = figure
                .split_once("<svg")
                .and_then(|(_, rest)| rest.split_once('>'))
                .and_then(|(_, inner)| inner.split_once("</svg>"))
                .is_some_and(|(inner, _)| {
                    [
                        "<rect",
                        "<polyline",
                        "<circle",
                        "<polygon",
                        "<path",
                        "<line",
                    ]
                    .iter()
                    .any(|e| inner.contains(e))
                });
            (name, drawn)
        })
        .collect();
    (dom, charts)
}

fn names(charts: &[(String, bool)]) -> Vec<&str> {
    charts.iter().map(|(n, _)| n.as_str()).collect()
}

/// Every chart of `expected` is on the page.
fn assert_has(charts: &[(String, bool)], expected: &[&str]) {
    for chart in expected {
        assert!(
            names(charts).contains(chart),
            "no {chart} chart: {:?}",
            names(charts)
        );
    }
}

/// `memtune tune` of `study` (written as `study.toml` in `dir`) into `db`.
fn tune(dir: &Path, db: &Path, study: &str) {
    let config = dir.join("study.toml");
    std::fs::write(&config, study).unwrap();
    ok(memtune(
        db,
        &[
            "tune",
            "--no-progress",
            "--config",
            config.to_str().unwrap(),
        ],
    ));
}

fn assert_all_drawn(charts: &[(String, bool)]) {
    let empty: Vec<&String> = charts.iter().filter(|c| !c.1).map(|c| &c.0).collect();
    assert!(empty.is_empty(), "charts without a drawn SVG: {empty:?}");
}

/// A study whose trials fit, need accumulation, or fit nowhere (bert-large
/// at 512 tokens and batch 64 on a 6 GiB device), with a pruner.
const SIM_STUDY: &str = r#"
[study]
name = "sim-report"
n_trials = 14

[objective]
metric = "accuracy"

[models.bert-base]
sim = "bert-base"

[models.bert-large]
sim = "bert-large"

[[param]]
name = "model"
type = "categorical"
choices = ["bert-base", "bert-large"]

[[param]]
name = "learning_rate"
type = "float"
low = 1e-5
high = 1e-4
log = true

[[param]]
name = "batch_size"
type = "categorical"
choices = [8, 32, 64]

[[param]]
name = "max_length"
type = "categorical"
choices = [128, 512]

[[param]]
name = "warmup_ratio"
type = "float"
low = 0.0
high = 0.2

[fixed]
epochs = 3

[sampler]
kind = "random"
seed = 3

[pruner]
kind = "median"
n_startup_trials = 2
n_warmup_steps = 0

[runner]
device = "sim"
sim_memory = "6GiB"
safety_margin = "256MiB"
process_overhead = "256MiB"
max_workers = 2
"#;

#[test]
fn a_simulated_study_shows_every_section() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sim.db");
    tune(dir.path(), &db, SIM_STUDY);
    // `tune` wrote the page beside the storage.
    let beside = dir.path().join("sim-report-report.html");
    assert!(beside.is_file(), "tune wrote no report beside the study");
    let page = dir.path().join("page.html");
    let printed = ok(memtune(
        &db,
        &[
            "report",
            "--study",
            "sim-report",
            "-o",
            page.to_str().unwrap(),
        ],
    ));
    assert!(printed.contains("page.html"), "{printed}");
    let (dom, charts) = render(&chromium, &page);
    assert_all_drawn(&charts);
    assert_has(
        &charts,
        &[
            "history",
            "intermediate",
            "importance",
            "slice-learning_rate",
            "slice-model",
            "parallel",
            "predicted-measured",
            "micro-batch",
            "config-map",
            "timeline",
            "leased",
        ],
    );
    assert!(!dom.contains("Not shown"), "a section was left out");
    assert!(
        dom.contains("infeasible"),
        "no infeasible configuration listed"
    );
    if let Some(shot) = std::env::var_os("MEMTUNE_REPORT_SCREENSHOT") {
        let shot = std::path::absolute(PathBuf::from(shot)).unwrap();
        browse(
            &chromium,
            &page,
            &[
                &format!("--screenshot={}", shot.display()),
                "--window-size=1280,4000",
                "--hide-scrollbars",
            ],
        );
        assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
    }
    // The device timeline as a Chrome trace: a complete event per started trial.
    let trace = dir.path().join("trace.json");
    ok(memtune(
        &db,
        &[
            "report",
            "--study",
            "sim-report",
            "--trace",
            trace.to_str().unwrap(),
        ],
    ));
    let trace: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let started = common::started_trials(&db);
    let complete = events.iter().filter(|e| e["ph"] == "X").count();
    assert_eq!(
        complete, started,
        "one trace event per trial that got a lease"
    );
    assert!(events.iter().any(|e| e["ph"] == "C"), "no memory counter");
}

#[test]
fn a_study_of_two_objectives_shows_its_front_and_hypervolume() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mo.db");
    let study = SIM_STUDY
        .replace(
            "name = \"sim-report\"\nn_trials = 14",
            "name = \"mo\"\nn_trials = 8",
        )
        .replace(
            "metric = \"accuracy\"",
            "metrics = [\"accuracy\", \"peak_memory\"]",
        )
        .replace(
            "kind = \"median\"\nn_startup_trials = 2\nn_warmup_steps = 0",
            "kind = \"none\"",
        );
    assert!(study.contains("peak_memory") && study.contains("n_trials = 8"));
    tune(dir.path(), &db, &study);
    let page = dir.path().join("mo-report.html");
    assert!(page.is_file(), "tune wrote no report beside the study");
    let (dom, charts) = render(&chromium, &page);
    assert_all_drawn(&charts);
    assert_has(
        &charts,
        &["pareto", "hypervolume", "history", "parallel", "config-map"],
    );
    assert!(dom.contains("Best trials (Pareto front)"), "no front table");
    assert!(dom.contains("peak_memory (GiB)"), "objective names missing");
    assert!(
        dom.contains("accuracy (maximize), peak_memory (minimize)"),
        "directions missing from the summary"
    );
}

const OPTUNA_STUDY: &str = r#"
import sys, warnings
warnings.simplefilter("ignore")
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
def objective(trial):
    x = trial.suggest_float("x", -2, 2)
    lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
    opt = trial.suggest_categorical("opt", ["adam", "sgd"])
    if opt == "sgd":
        trial.suggest_int("momentum_steps", 1, 8)
    if trial.number == 3:
        raise RuntimeError("diverged")
    for step in range(3):
        trial.report(x * x + step, step)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return x * x + abs(lr - 1e-3)
study = optuna.create_study(study_name="optuna-made", storage=sys.argv[1],
                            sampler=optuna.samplers.RandomSampler(seed=1),
                            pruner=optuna.pruners.MedianPruner(n_startup_trials=3))
study.optimize(objective, n_trials=20, catch=(RuntimeError,))
"#;

#[test]
fn an_optuna_study_has_no_memory_section_and_says_why() {
    let Some(chromium) = chromium() else { return };
    let Some(python) = common::reference_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("optuna.db");
    common::run_python(&python, OPTUNA_STUDY, &[&common::url(&db)]);
    let printed = ok(memtune(&db, &["report", "--study", "optuna-made"]));
    let page = dir.path().join("optuna-made-report.html");
    assert!(printed.contains(page.to_str().unwrap()), "{printed}");
    let (dom, charts) = render(&chromium, &page);
    assert_all_drawn(&charts);
    assert_has(
        &charts,
        &[
            "history",
            "intermediate",
            "importance",
            "slice-x",
            "slice-opt",
            "parallel",
        ],
    );
    assert!(!names(&charts).contains(&"timeline"));
    assert!(
        dom.contains("Not shown: no trial carries memtune"),
        "memory section not explained"
    );
    // Optuna keeps no reason for a failed trial; the row says so.
    assert!(
        dom.contains("<td>3</td><td>FAIL</td><td></td><td>no reason recorded</td>"),
        "the failed trial is missing"
    );
    // No timeline to export.
    let refused = memtune(
        &db,
        &[
            "report",
            "--study",
            "optuna-made",
            "--trace",
            dir.path().join("t.json").to_str().unwrap(),
        ],
    );
    let err = common::fails(refused);
    assert!(err.contains("no device timeline"), "{err}");
}

#[test]
fn an_empty_study_renders_with_reasons() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("empty.db");
    ok(memtune(
        &db,
        &[
            "create-study",
            "--study",
            "empty",
            "--direction",
            "minimize",
        ],
    ));
    let page = dir.path().join("empty.html");
    ok(memtune(
        &db,
        &["report", "--study", "empty", "-o", page.to_str().unwrap()],
    ));
    let (dom, charts) = render(&chromium, &page);
    assert!(charts.is_empty(), "charts in an empty study: {charts:?}");
    assert!(dom.contains("No COMPLETE trial"), "no summary");
    assert_eq!(
        dom.matches("Not shown:").count(),
        3,
        "history, parameters and memory say why"
    );
}
