//! Misuse and bad input, tried as a new user would: every case must end in
//! a clear error that names what is wrong (or in success where the input
//! is in fact good), never a panic, and must leave what is stored intact.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{fails, memtune, ok};
use serde_json::Value as Json;
use store::{Storage, TrialFilter, TrialState};

fn create(db: &Path, study: &str) {
    ok(memtune(db, &["create-study", "--study-name", study]));
}

fn ask(db: &Path, study: &str, space: &str) -> Output {
    memtune(
        db,
        &[
            "ask",
            "--study-name",
            study,
            "--sampler",
            "random",
            "--search-space",
            space,
        ],
    )
}

fn trials(db: &Path, study: &str) -> Vec<store::FrozenTrial> {
    let Ok(s) = Storage::open_existing(db) else {
        return Vec::new();
    };
    match s.study(study) {
        Ok(st) => s.trials(st.study_id, &TrialFilter::default()).unwrap(),
        Err(_) => Vec::new(),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const X: &str = r#"{"x": {"name": "FloatDistribution", "attributes": {"low": 0.0, "high": 1.0}}}"#;

// ---- 1. numbers in every form Python prints ------------------------------

#[test]
fn tell_takes_every_float_form_python_prints() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    create(&db, "s");
    let forms = [
        ("-1.6185280968878197e-05", -1.6185280968878197e-05),
        ("-1e-05", -1e-05),
        ("-inf", f64::NEG_INFINITY),
        ("-0.0", -0.0),
        ("1e+300", 1e300),
        ("inf", f64::INFINITY),
    ];
    for (i, (text, _)) in forms.iter().enumerate() {
        ok(ask(&db, "s", X));
        let n = i.to_string();
        ok(memtune(
            &db,
            &[
                "tell",
                "--study-name",
                "s",
                "--trial-number",
                &n,
                "--values",
                text,
                "--state",
                "complete",
            ],
        ));
    }
    let ts = trials(&db, "s");
    for (t, (text, want)) in ts.iter().zip(forms) {
        let got = t.values.as_ref().unwrap()[0];
        assert_eq!(t.state, TrialState::Complete, "{text}");
        // SQLite stores -0.0 as 0 (so does Optuna's storage).
        assert_eq!(got, want, "{text}");
    }
    // NaN parses, and (as Optuna) fails the trial rather than storing it.
    ok(ask(&db, "s", X));
    let n = forms.len().to_string();
    let out = memtune(
        &db,
        &[
            "tell",
            "--study",
            "s",
            "--trial-number",
            &n,
            "--values",
            "nan",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("FAIL"), "{err}");
    // Several values, the second in exponent form, then another flag.
    let mo = dir.path().join("mo.db");
    ok(memtune(
        &mo,
        &[
            "create-study",
            "--study",
            "mo",
            "--directions",
            "minimize",
            "minimize",
        ],
    ));
    ok(ask(&mo, "mo", X));
    ok(memtune(
        &mo,
        &[
            "tell",
            "--study",
            "mo",
            "--trial-number",
            "0",
            "--values",
            "-2.5",
            "-3e-07",
            "--state",
            "complete",
        ],
    ));
    assert_eq!(trials(&mo, "mo")[0].values, Some(vec![-2.5, -3e-07]));
}

/// `--study` and `--study-name` are one option on every command that
/// names a study, `train` included.
#[test]
fn every_command_takes_study_name_for_study() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    create(&db, "s");
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    for args in [
        vec!["best", "--study-name", "s"],
        vec!["train", "--study-name", "s", "--output", out],
    ] {
        let output = memtune(&db, &args);
        let err = String::from_utf8_lossy(&output.stderr);
        // Parsed: what it says is about the study, not the arguments.
        assert!(
            !err.contains("unexpected argument") && !err.contains("Usage:"),
            "{args:?}: {err}"
        );
        assert!(
            output.status.success() || err.contains("study"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_negative_trial_number_is_a_domain_error_not_a_parse_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    create(&db, "s");
    let err = fails(memtune(
        &db,
        &[
            "tell",
            "--study",
            "s",
            "--trial-number",
            "-1",
            "--values",
            "1.0",
        ],
    ));
    assert!(!err.contains("unexpected argument"), "{err}");
    assert!(
        err.contains("--trial-number") && err.contains("-1"),
        "{err}"
    );
}

// ---- 2. distribution compatibility ----------------------------------------

#[test]
fn ask_refuses_a_distribution_that_contradicts_the_stored_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    create(&db, "s");
    let space = |x: &str, c: &str| {
        format!(
            r#"{{"x": {x}, "c": {{"name": "CategoricalDistribution", "attributes": {{"choices": {c}}}}}}}"#
        )
    };
    let float = r#"{"name": "FloatDistribution", "attributes": {"low": 0.1, "high": 1.0}}"#;
    let float_log =
        r#"{"name": "FloatDistribution", "attributes": {"low": 0.1, "high": 1.0, "log": true}}"#;
    let float_wider = r#"{"name": "FloatDistribution", "attributes": {"low": 0.0, "high": 2.0}}"#;
    let int = r#"{"name": "IntDistribution", "attributes": {"low": 0, "high": 1}}"#;
    ok(ask(&db, "s", &space(float, r#"["a", "b"]"#)));
    // Optuna allows another range of the same kind and log setting.
    ok(ask(&db, "s", &space(float_wider, r#"["a", "b"]"#)));
    for (bad, param, words) in [
        (space(float_log, r#"["a", "b"]"#), "x", "log"),
        (space(float, r#"["a", "b", "c"]"#), "c", "choices"),
        (space(int, r#"["a", "b"]"#), "x", "kind"),
    ] {
        let err = fails(ask(&db, "s", &bad));
        assert!(err.contains(&format!("`{param}`")), "{err}");
        assert!(err.contains(words), "{err}");
        let both = if param == "x" {
            [
                "FloatDistribution",
                if words == "kind" {
                    "IntDistribution"
                } else {
                    "log=true"
                },
            ]
        } else {
            [r#"choices=["a", "b"])"#, r#"choices=["a", "b", "c"])"#]
        };
        for d in both {
            assert!(err.contains(d), "{d} in {err}");
        }
    }
    // Nothing was created by the refused asks.
    assert_eq!(trials(&db, "s").len(), 2);
}

/// A legacy-setup-kind study on the simulated device: trials take milliseconds.
fn sim_study(name: &str, n_trials: usize, lr_extra: &str, extra: &str) -> String {
    format!(
        r#"
[study]
name = "{name}"
n_trials = {n_trials}

[objective]
metric = "accuracy"

[models.bert-base]
sim = "bert-base"

[[param]]
name = "learning_rate"
type = "float"
low = 1e-5
high = 1e-4
{lr_extra}

[[param]]
name = "batch_size"
type = "categorical"
choices = [8, 16]

[fixed]
model = "bert-base"
max_length = 128
epochs = 2

[sampler]
kind = "random"
seed = 1

[pruner]
kind = "none"

[runner]
device = "sim"
heartbeat = "200ms"
stale_after = "2s"
max_workers = 2
{extra}
"#
    )
}

fn tune_cmd(db: &Path, config: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtune"));
    cmd.arg("--storage")
        .arg(common::url(db))
        .args(["tune", "--no-progress"])
        .args(extra)
        .arg("--config")
        .arg(config)
        .env_remove("MEMTUNE_STORAGE")
        .env_remove("MEMTUNE_FAULT");
    cmd
}

/// Starts `tune` and returns once one of its trials runs on a worker (or
/// after two minutes, when the assertions that follow will say why).
fn start_until_a_trial_runs(db: &Path, config: &Path, study: &str) -> std::process::Child {
    let child = tune_cmd(db, config, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline
        && !trials(db, study)
            .iter()
            .any(|t| t.state == TrialState::Running && t.user_attrs.contains_key("lease_bytes"))
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

fn tune(db: &Path, config: &Path, extra: &[&str]) -> Output {
    tune_cmd(db, config, extra).output().unwrap()
}

/// A refused run: non-zero exit, no panic; returns stderr.
fn refused(out: Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "expected failure:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// `--storage` (or MEMTUNE_STORAGE) wins over the study file's `storage`,
/// and says so; the file's storage is not touched.
#[test]
fn tune_says_when_the_command_line_storage_replaces_the_file_s() {
    let dir = tempfile::tempdir().unwrap();
    let (db, named) = (dir.path().join("s.db"), dir.path().join("named.db"));
    let text = sim_study("s", 1, "", "").replacen(
        "[study]\n",
        &format!("[study]\nstorage = \"{}\"\n", common::url(&named)),
        1,
    );
    let cfg = write(dir.path(), "s.toml", &text);
    let out = tune(&db, &cfg, &[]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{err}");
    let note = format!(
        "storage from --storage or MEMTUNE_STORAGE: {}; {}'s `{}` is not used",
        common::url(&db),
        cfg.display(),
        common::url(&named)
    );
    assert!(err.contains(&note), "{err}");
    assert_eq!(trials(&db, "s").len(), 1);
    assert!(!named.exists());
    // Without a `storage` in the file there is nothing to say.
    let plain = write(dir.path(), "plain.toml", &sim_study("p", 1, "", ""));
    let out = tune(&db, &plain, &[]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success() && !err.contains("is not used"),
        "{err}"
    );
}

#[test]
fn tune_refuses_to_resume_with_a_changed_space() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let cfg = write(dir.path(), "s.toml", &sim_study("s", 2, "", ""));
    ok(tune(&db, &cfg, &[]));
    assert_eq!(trials(&db, "s").len(), 2);
    let changed = write(
        dir.path(),
        "changed.toml",
        &sim_study("s", 4, "log = true", ""),
    );
    let err = refused(tune(&db, &changed, &[]));
    assert!(err.contains("`learning_rate`"), "{err}");
    assert!(err.contains("log"), "{err}");
    assert_eq!(trials(&db, "s").len(), 2, "{err}");

    // Another metric, of the same direction or not: its values would mix
    // with the stored ones.
    for metric in ["metric = \"f1_macro\"", "metric = \"loss\""] {
        let other = sim_study("s", 4, "", "").replace("metric = \"accuracy\"", metric);
        let other = write(dir.path(), "other.toml", &other);
        let out = tune(&db, &other, &[]);
        assert_eq!(out.status.code(), Some(2), "{metric}");
        let err = refused(out);
        assert!(
            err.contains("other.toml: objective:") && err.contains("accuracy"),
            "{err}"
        );
        assert_eq!(trials(&db, "s").len(), 2, "{err}");
    }
}

/// A trial's `constraints` values are `measured - max` under the study
/// file's limits: a run with other constraints would mix limits in one
/// study (a trial feasible under the old limit counted feasible under the
/// new), so it is refused, as another objective is.
#[test]
fn tune_refuses_to_resume_with_other_constraints() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let limited = |max: &str| {
        sim_study("s", 4, "", "").replace(
            "[models.bert-base]",
            &format!(
                "[[constraint]]\nmetric = \"peak_memory\"\nmax = \"{max}\"\n\n[models.bert-base]"
            ),
        )
    };
    let cfg = write(dir.path(), "s.toml", &sim_study("s", 2, "", ""));
    ok(tune(&db, &cfg, &[]));
    for (name, text) in [
        ("added.toml", limited("1MiB")),
        ("other.toml", limited("20GiB")),
    ] {
        let other = write(dir.path(), name, &text);
        let err = refused(tune(&db, &other, &[]));
        assert!(
            err.contains(&format!(
                "{name}: constraint: study `s` was run with the constraints []"
            )),
            "{err}"
        );
        assert_eq!(trials(&db, "s").len(), 2, "{err}");
    }
    // The same file resumes.
    let more = write(dir.path(), "more.toml", &sim_study("s", 3, "", ""));
    ok(tune(&db, &more, &[]));
    assert_eq!(trials(&db, "s").len(), 3);
}

/// The log is appended to: naming a file of a model's directory (or the
/// study file) would damage it, so the run is refused and the file kept.
#[test]
fn a_log_file_inside_a_model_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let model = dir.path().join("mymodel");
    std::fs::create_dir(&model).unwrap();
    let config_json = write(&model, "config.json", "{\"model_type\": \"bert\"}");
    let text = sim_study("s", 2, "", "log_file = \"mymodel/config.json\"")
        .replace(
            "[models.bert-base]\nsim = \"bert-base\"",
            "[models.mine]\ndir = \"mymodel\"",
        )
        .replace("model = \"bert-base\"", "model = \"mine\"")
        .replace("device = \"sim\"", "device = \"cpu\"");
    let cfg = write(dir.path(), "s.toml", &text);
    let err = refused(tune(&db, &cfg, &[]));
    assert!(
        err.contains("`runner.log_file`") && err.contains("in a model's directory"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&config_json).unwrap(),
        "{\"model_type\": \"bert\"}"
    );
    let text = sim_study("s", 2, "", "log_file = \"s.toml\"");
    let cfg = write(dir.path(), "s.toml", &text);
    let err = refused(tune(&db, &cfg, &[]));
    assert!(err.contains("is the study file"), "{err}");
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), text);
}

/// A retry waiting in the study keeps its params (Optuna's retry copies
/// them): a file without one of them cannot run it, so the resumed run is
/// refused before it writes anything, naming the trial and the param.
#[test]
fn tune_refuses_to_resume_without_a_param_a_waiting_retry_holds() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let study = sim_study("s", 40, "", "").replace("epochs = 2", "epochs = 6");
    let cfg = write(dir.path(), "s.toml", &study);
    let child = start_until_a_trial_runs(&db, &cfg, "s");
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    let before = trials(&db, "s");
    let waiting = before
        .iter()
        .find(|t| t.state == TrialState::Waiting && t.params.contains_key("batch_size"))
        .expect("the interrupted trial waits for its retry");
    let without = without_batch_size_param(&study);
    assert!(!without.contains("name = \"batch_size\""), "{without}");
    let without = write(dir.path(), "without.toml", &without);
    let out = tune(&db, &without, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = refused(out);
    assert!(err.contains("`batch_size`"), "{err}");
    assert!(err.contains(&format!("trial {}", waiting.number)), "{err}");
    let after = trials(&db, "s");
    let states = |ts: &[store::FrozenTrial]| ts.iter().map(|t| t.state).collect::<Vec<_>>();
    assert_eq!(states(&after), states(&before), "{err}");
}

/// `study` with `batch_size` fixed rather than searched.
fn without_batch_size_param(study: &str) -> String {
    study
        .replace(
            "[[param]]\nname = \"batch_size\"\ntype = \"categorical\"\nchoices = [8, 16]\n",
            "",
        )
        .replace("[fixed]\n", "[fixed]\nbatch_size = 8\n")
}

/// A runner killed with `-9` leaves its trials RUNNING; the next runner
/// takes them over as retries with their stored params, so a study file
/// without one of those params is refused as it is for a WAITING retry.
#[test]
fn tune_refuses_to_resume_without_a_param_a_killed_runners_trial_holds() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let study = sim_study("s", 40, "", "").replace("epochs = 2", "epochs = 6");
    let cfg = write(dir.path(), "s.toml", &study);
    let mut child = start_until_a_trial_runs(&db, &cfg, "s");
    child.kill().unwrap();
    child.wait().unwrap();
    let before = trials(&db, "s");
    let running = before
        .iter()
        .find(|t| t.state == TrialState::Running && t.params.contains_key("batch_size"))
        .expect("the killed runner's trial is still RUNNING");
    let without = without_batch_size_param(&study);
    let without = write(dir.path(), "without.toml", &without);
    let out = tune(&db, &without, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = refused(out);
    assert!(err.contains("`batch_size`"), "{err}");
    assert!(
        err.contains(&format!("RUNNING trial {}", running.number)),
        "{err}"
    );
}

// ---- 3. the whole model is checked before the first trial -----------------

fn cpu_study(name: &str, model: &Path, data: &str) -> String {
    format!(
        r#"
[study]
name = "{name}"
n_trials = 2

{data}

[objective]
metric = "accuracy"

[models.tiny]
dir = "{model}"

[[param]]
name = "learning_rate"
type = "float"
low = 5e-4
high = 5e-3

[fixed]
max_length = 32
epochs = 1

[sampler]
kind = "random"
seed = 1

[pruner]
kind = "none"

[runner]
device = "cpu"
"#,
        model = model.display()
    )
}

fn tiny_model(dir: &Path) -> PathBuf {
    let words = trainer::testing::sentiment_words(300);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let model = dir.join("tiny");
    trainer::testing::write_tiny_model(&model, &trainer::testing::tiny_config(), &words, 3)
        .unwrap();
    model
}

#[test]
fn a_broken_model_stops_the_study_before_any_trial() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let weights = model.join("model.safetensors");
    let good = std::fs::read(&weights).unwrap();
    let cfg = write(
        dir.path(),
        "s.toml",
        &cpu_study("s", &model, "[data]\nsource = \"embedded\""),
    );
    let db = dir.path().join("s.db");
    let config_json = model.join("config.json");
    let good_config = std::fs::read_to_string(&config_json).unwrap();
    let tokenizer = model.join("tokenizer.json");

    // Truncated weights.
    std::fs::write(&weights, &good[..good.len() / 2]).unwrap();
    let err = refused(tune(&db, &cfg, &[]));
    assert!(err.contains("model.safetensors"), "{err}");
    assert!(trials(&db, "s").is_empty(), "{err}");
    std::fs::write(&weights, &good).unwrap();

    // A config whose shapes the weights do not have.
    let mut c: Json = serde_json::from_str(&good_config).unwrap();
    let wrong = c["intermediate_size"].as_u64().unwrap() * 2;
    c["intermediate_size"] = Json::from(wrong);
    std::fs::write(&config_json, c.to_string()).unwrap();
    let err = refused(tune(&db, &cfg, &[]));
    assert!(err.contains("shape"), "{err}");
    assert!(trials(&db, "s").is_empty(), "{err}");
    std::fs::write(&config_json, &good_config).unwrap();

    // A tokenizer that does not load (`tokenizer.json` wins over `vocab.txt`).
    std::fs::write(&tokenizer, b"{ not json").unwrap();
    let err = refused(tune(&db, &cfg, &[]));
    assert!(err.contains("tokenizer.json"), "{err}");
    assert!(trials(&db, "s").is_empty(), "{err}");
}

/// `memtune tune 2>&1 | head -2`: the reader of stderr leaves after two
/// lines; the study goes on to its end (exit 0, every trial finished),
/// its lines in the log file only.
#[test]
fn a_closed_stderr_loses_lines_not_the_study() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let n_trials = 20;
    let cfg = write(dir.path(), "s.toml", &sim_study("pipe", n_trials, "", ""));
    let mut child = tune_cmd(&db, &cfg, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    for _ in 0..2 {
        lines.next();
    }
    drop(lines);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let ts = trials(&db, "pipe");
    assert_eq!(ts.len(), n_trials);
    assert!(ts.iter().all(|t| t.state.is_finished()), "{ts:?}");
}

// ---- 4. SIGTERM is Ctrl-C --------------------------------------------------

/// SIGTERM (a scheduler's stop) and SIGHUP (the terminal or SSH session
/// closed) both stop the study cleanly: exit 130, the trials in flight
/// failed as interrupted and re-enqueued, nothing left RUNNING.
#[test]
fn sigterm_and_sighup_fail_and_requeue_the_trials_in_flight() {
    for signal in [libc::SIGTERM, libc::SIGHUP] {
        a_signal_fails_and_requeues_the_trials_in_flight(signal);
    }
}

fn a_signal_fails_and_requeues_the_trials_in_flight(signal: i32) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let n_trials = 40;
    let cfg = write(
        dir.path(),
        "s.toml",
        &sim_study("term", n_trials, "", "").replace("epochs = 2", "epochs = 6"),
    );
    let child = start_until_a_trial_runs(&db, &cfg, "term");
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, signal);
    }
    let out = child.wait_with_output().unwrap();
    let ts = trials(&db, "term");
    // Shown with --nocapture.
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    if out.status.success() {
        let done = ts.iter().filter(|t| t.state.is_finished()).count();
        assert!(done >= n_trials, "finished before the signal landed");
        return;
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Exited by itself (not killed by the signal) as interrupted, with its
    // summary.
    assert_eq!(out.status.code(), Some(130), "signal {signal}: {stdout}");
    assert!(stdout.contains("interrupted"), "{stdout}");
    assert!(!ts.iter().any(|t| t.state == TrialState::Running));
    let interrupted = ts
        .iter()
        .filter(|t| {
            t.state == TrialState::Fail
                && matches!(
                    t.user_attrs.get("error_kind").and_then(Json::as_str),
                    Some("interrupted" | "not_started")
                )
        })
        .count();
    assert!(interrupted >= 1);
    let waiting = ts.iter().filter(|t| t.state == TrialState::Waiting).count();
    assert!(waiting >= interrupted);
}

// ---- 5. file names from the study name -------------------------------------

#[test]
fn the_study_name_cannot_escape_or_make_directories() {
    let dir = tempfile::tempdir().unwrap();
    let studies = dir.path().join("studies");
    std::fs::create_dir(&studies).unwrap();
    let db = studies.join("s.db");
    // The last is `a\b` in TOML's escapes.
    for (toml_name, name) in [
        ("../escaped", "../escaped"),
        ("exp/1", "exp/1"),
        ("..", ".."),
        ("a\\\\b", "a\\b"),
    ] {
        let cfg = write(dir.path(), "s.toml", &sim_study(toml_name, 1, "", ""));
        let out = tune(&db, &cfg, &[]);
        ok(out);
        assert_eq!(trials(&db, name).len(), 1, "{name}");
    }
    // Only files, all inside the storage's directory, nothing beside it.
    assert_eq!(sorted_names(dir.path()), ["s.toml", "studies"]);
    for e in std::fs::read_dir(&studies).unwrap() {
        let e = e.unwrap();
        assert!(e.file_type().unwrap().is_file(), "{:?}", e.path());
    }
    let logs = std::fs::read_dir(&studies)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension() == Some("log".as_ref()))
        .count();
    assert_eq!(logs, 4);
}

/// A random-weight preset's directory is named as the log is: a study and
/// a model named to escape (`../x`) write the preset's tokenizer and
/// weights inside the storage's directory, nothing beside it.
#[test]
fn a_preset_directory_cannot_escape_the_storage_directory() {
    let dir = tempfile::tempdir().unwrap();
    let studies = dir.path().join("studies");
    std::fs::create_dir(&studies).unwrap();
    let db = studies.join("s.db");
    two_class_csv(dir.path(), 16);
    let study = r#"
[study]
name = "../escaped"
n_trials = 1

[data]
source = "files"
files = ["d.csv"]
num_classes = 2

[objective]
metric = "accuracy"

[models."../m"]
preset = "minilm-l6"

[[param]]
name = "learning_rate"
type = "float"
low = 1e-5
high = 1e-4

[fixed]
batch_size = 8
epochs = 1
max_length = 16

[sampler]
kind = "random"
seed = 1

[runner]
device = "cpu"
max_workers = 1
"#;
    let cfg = write(dir.path(), "s.toml", study);
    ok(tune(&db, &cfg, &[]));
    assert_eq!(trials(&db, "../escaped").len(), 1);
    assert_eq!(sorted_names(dir.path()), ["d.csv", "s.toml", "studies"]);
    let presets: Vec<_> = sorted_names(&studies)
        .into_iter()
        .map(|name| studies.join(name))
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(presets.len(), 1, "{presets:?}");
    let models = sorted_names(&presets[0]);
    assert_eq!(models.len(), 1, "{models:?}");
    assert!(trainer::preset::has_random_weights(
        &presets[0].join(&models[0])
    ));
}

/// The names of the entries of `dir`, sorted.
fn sorted_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

// ---- 6. read-only files, either journal mode --------------------------------

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// The memtune binary where user `nobody` can run it: linked (or copied)
/// into `dir`, since the build directory may sit in a home only root enters.
fn binary_for_nobody(dir: &Path) -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_memtune"));
    let there = dir.join("memtune");
    if std::fs::hard_link(exe, &there).is_err() {
        std::fs::copy(exe, &there).unwrap();
    }
    set_mode(&there, 0o755);
    there
}

/// Runs memtune (`exe`) as user `nobody` when we are root (root ignores
/// file modes), else as ourselves.
fn as_reader(exe: &Path, db: &Path, args: &[&str]) -> Output {
    let mut cmd = if is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        c.arg(exe);
        c
    } else {
        Command::new(exe)
    };
    cmd.arg("--storage")
        .arg(common::url(db))
        .args(args)
        .env_remove("MEMTUNE_STORAGE")
        .output()
        .unwrap()
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn side_files(db: &Path) -> Vec<PathBuf> {
    ["-wal", "-shm", "-journal"]
        .iter()
        .map(|s| PathBuf::from(format!("{}{s}", db.display())))
        .filter(|p| p.exists())
        .collect()
}

#[test]
fn read_commands_work_on_read_only_files_in_either_journal_mode() {
    for mode in ["wal", "delete"] {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("ro");
        std::fs::create_dir(&sub).unwrap();
        let db = sub.join("s.db");
        create(&db, "s");
        ok(ask(&db, "s", X));
        {
            let c = rusqlite::Connection::open(&db).unwrap();
            let m: String = c
                .query_row(&format!("PRAGMA journal_mode={mode}"), [], |r| r.get(0))
                .unwrap();
            assert_eq!(m, mode);
        }
        assert!(side_files(&db).is_empty(), "{:?}", side_files(&db));
        if mode == "delete" {
            // Optuna's default mode: a write with memtune leaves it so.
            ok(ask(&db, "s", X));
            let header = std::fs::read(&db).unwrap();
            assert_eq!(header[18], 1, "left in WAL mode");
        }
        let exe = if is_root() {
            binary_for_nobody(dir.path())
        } else {
            PathBuf::from(env!("CARGO_BIN_EXE_memtune"))
        };
        // Readable by everyone, writable by no one.
        set_mode(dir.path(), 0o755);
        set_mode(&sub, 0o555);
        set_mode(&db, 0o444);
        for args in [
            &["studies"][..],
            &["trials", "--study", "s"],
            &["best", "--study", "s"],
            &["export", "--study", "s", "--format", "json"],
        ] {
            let out = ok(as_reader(&exe, &db, args));
            assert!(!out.is_empty());
        }
        assert!(side_files(&db).is_empty(), "{mode}: {:?}", side_files(&db));
        // A writable directory: a reader still leaves no side files (they
        // would be the reader's, and lock the owner out).
        set_mode(&sub, 0o777);
        ok(as_reader(&exe, &db, &["trials", "--study", "s"]));
        assert!(side_files(&db).is_empty(), "{mode}: {:?}", side_files(&db));
        set_mode(&sub, 0o755);
    }
}

// ---- 7. cargo bench -- <criterion flags> ---------------------------------

#[test]
fn no_library_target_takes_criterion_flags_meant_for_benches() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let workspace: toml::Table =
        toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).unwrap();
    let members = workspace["workspace"]["members"].as_array().unwrap();
    let mut manifests = Vec::new();
    for m in members {
        let m = m.as_str().unwrap();
        match m.strip_suffix("/*") {
            Some(parent) => {
                for e in std::fs::read_dir(root.join(parent)).unwrap() {
                    let p = e.unwrap().path().join("Cargo.toml");
                    if p.exists() {
                        manifests.push(p);
                    }
                }
            }
            None => manifests.push(root.join(m).join("Cargo.toml")),
        }
    }
    assert!(manifests.len() >= 5);
    for path in manifests {
        let manifest: toml::Table =
            toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let has_lib = manifest.contains_key("lib") || path.with_file_name("src/lib.rs").exists();
        if !has_lib {
            continue;
        }
        let bench = manifest
            .get("lib")
            .and_then(|l| l.get("bench"))
            .and_then(toml::Value::as_bool);
        assert_eq!(
            bench,
            Some(false),
            "{}: [lib] bench = false",
            path.display()
        );
    }
}

// ---- 8. messages -------------------------------------------------------------

#[test]
fn an_infinite_or_nan_bound_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    for (value, word) in [("inf", "inf"), ("nan", "NaN"), ("-inf", "-inf")] {
        let text = sim_study("s", 1, "", "").replace("high = 1e-4", &format!("high = {value}"));
        let cfg = write(dir.path(), "s.toml", &text);
        let err = refused(tune(&db, &cfg, &[]));
        assert!(!err.contains("null"), "{err}");
        assert!(err.contains("high") && err.contains(word), "{err}");
        assert!(err.contains("finite"), "{err}");
    }
}

#[test]
fn a_directory_as_storage_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["studies"][..], &["create-study", "--study", "s"]] {
        let err = fails(memtune(dir.path(), args));
        assert!(err.contains("is a directory"), "{err}");
        assert!(!err.contains("disk I/O"), "{err}");
    }
}

#[test]
fn the_trials_table_shows_control_characters_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    create(&db, "s");
    let space = r#"{"a\nb": {"name": "CategoricalDistribution", "attributes": {"choices": ["x\ny", "z\tw"]}}}"#;
    ok(ask(&db, "s", space));
    ok(memtune(
        &db,
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
    let out = ok(memtune(&db, &["trials", "--study", "s"]));
    // Header, one trial, the count.
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(out.contains(r"a\nb"), "{out}");
    let best = ok(memtune(&db, &["best", "--study", "s"]));
    assert_eq!(best.lines().count(), 2, "{best}");
}

#[test]
fn n_trials_zero_is_refused_before_the_data_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let model = dir.path().join("no-model");
    let cfg = write(
        dir.path(),
        "s.toml",
        &cpu_study(
            "s",
            &model,
            "[data]\nfiles = [\"missing.csv\"]\nnum_classes = 2",
        ),
    );
    let err = refused(tune(&db, &cfg, &["--n-trials", "0"]));
    assert!(err.contains("--n-trials"), "{err}");
    assert!(!err.contains("missing.csv"), "{err}");
}

/// An empty or blank study name is a wrong command line (exit 2, the
/// option named) for every command that creates or writes a study, and in
/// a study file; nothing is created.
#[test]
fn an_empty_or_blank_study_name_is_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    create(&db, "s");
    for name in ["", "   ", "\t"] {
        for args in [
            &["create-study", "--study-name", name][..],
            &["ask", "--study-name", name, "--search-space", X],
            &[
                "tell",
                "--study-name",
                name,
                "--trial-number",
                "0",
                "--values",
                "0.5",
            ],
        ] {
            let out = memtune(&db, args);
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            let err = fails(out);
            assert!(
                err.contains("--study-name") && err.contains("must not be empty"),
                "{args:?}: {err}"
            );
        }
        let cfg = write(
            dir.path(),
            "s.toml",
            &sim_study("s", 1, "", "").replace("name = \"s\"", &format!("name = {name:?}")),
        );
        let out = tune(&db, &cfg, &[]);
        assert_eq!(out.status.code(), Some(2));
        let err = refused(out);
        assert!(
            err.contains("s.toml")
                && err.contains("`study.name`")
                && err.contains("must not be empty"),
            "{err}"
        );
    }
    let studies = Storage::open_existing(&db).unwrap().studies().unwrap();
    let names: Vec<&str> = studies.iter().map(|s| s.study.name.as_str()).collect();
    assert_eq!(names, ["s"]);
}

#[test]
fn study_and_study_name_are_both_accepted_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    for flag in ["--study", "--study-name"] {
        let name = format!("s{flag}");
        ok(memtune(&db, &["create-study", flag, &name]));
        ok(memtune(&db, &["ask", flag, &name, "--search-space", X]));
        ok(memtune(
            &db,
            &[
                "tell",
                flag,
                &name,
                "--trial-number",
                "0",
                "--values",
                "0.5",
            ],
        ));
        for cmd in [&["trials"][..], &["best"], &["export", "--format", "csv"]] {
            let mut args = cmd.to_vec();
            args.extend([flag, name.as_str()]);
            ok(memtune(&db, &args));
        }
    }
}

#[test]
fn a_non_utf8_byte_names_its_line_and_can_be_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("d.csv");
    let mut bytes = b"text,label\ngood one,1\nbad \xff one,0\n".to_vec();
    for i in 0..20 {
        bytes.extend(format!("row {i},{}\n", i % 2).as_bytes());
    }
    std::fs::write(&data, &bytes).unwrap();
    let options = |policy| trainer::data::LoadOptions {
        bad_records: policy,
        ..trainer::data::LoadOptions::new(2)
    };
    let err = trainer::data::load_file(&data, &options(trainer::data::BadRecordPolicy::Reject))
        .unwrap_err()
        .to_string();
    assert!(err.contains("d.csv") && err.contains('3'), "{err}");
    assert!(err.contains("UTF-8"), "{err}");
    let loaded =
        trainer::data::load_file(&data, &options(trainer::data::BadRecordPolicy::Skip)).unwrap();
    assert_eq!(loaded.examples.len(), 21);
    assert_eq!(loaded.report.skipped.len(), 1);
    let skipped = loaded.report.skipped[0].to_string();
    assert!(
        skipped.contains('3') && skipped.contains("UTF-8"),
        "{skipped}"
    );

    // The same through the study file, which names the line too.
    let db = dir.path().join("s.db");
    let model = tiny_model(dir.path());
    let cfg = write(
        dir.path(),
        "s.toml",
        &cpu_study(
            "s",
            &model,
            &format!(
                "[data]\nfiles = [\"{}\"]\nnum_classes = 2\nbad_records = \"reject\"",
                data.display()
            ),
        ),
    );
    let err = refused(tune(&db, &cfg, &[]));
    assert!(err.contains("d.csv:3") || err.contains("line 3"), "{err}");
}

/// A model that breaks mid-study (the pre-check passed) stops the study:
/// the trial that met it is re-enqueued rather than counted, and once the
/// file is fixed the same command finishes all `n_trials`.
#[test]
fn a_model_broken_mid_study_stops_it_without_consuming_trials() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let weights = model.join("model.safetensors");
    let good = std::fs::read(&weights).unwrap();
    let text = cpu_study("s", &model, "[data]\nsource = \"embedded\"")
        .replace("n_trials = 2", "n_trials = 3")
        .replace("device = \"cpu\"", "device = \"cpu\"\nmax_workers = 1");
    let cfg = write(dir.path(), "s.toml", &text);
    let db = dir.path().join("s.db");
    let child = start_until_a_trial_runs(&db, &cfg, "s");
    std::fs::write(&weights, &good[..good.len() / 2]).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = refused(out);
    assert!(err.contains("model.safetensors"), "{err}");
    let ts = trials(&db, "s");
    assert!(!ts.iter().any(|t| t.state == TrialState::Running), "{err}");
    let kind = |t: &store::FrozenTrial| {
        t.user_attrs
            .get("error_kind")
            .and_then(Json::as_str)
            .map(str::to_string)
    };
    assert!(
        ts.iter().any(|t| kind(t).as_deref() == Some("environment")),
        "{err}"
    );
    for t in ts.iter().filter(|t| t.state == TrialState::Fail) {
        assert!(
            matches!(
                kind(t).as_deref(),
                Some("environment" | "interrupted" | "not_started")
            ),
            "trial {} failed as {:?}",
            t.number,
            kind(t)
        );
    }
    let waiting = ts.iter().filter(|t| t.state == TrialState::Waiting).count();
    let failed = ts.iter().filter(|t| t.state == TrialState::Fail).count();
    assert_eq!(waiting, failed, "every failed trial is re-enqueued");

    std::fs::write(&weights, &good).unwrap();
    ok(tune(&db, &cfg, &[]));
    let done = trials(&db, "s")
        .iter()
        .filter(|t| t.state == TrialState::Complete)
        .count();
    assert_eq!(done, 3);
}

// ---- 9. a long study left alone ------------------------------------------------

/// The families' BERT classifier fixture (96 positions, 3 labels).
fn bert_classifier(dir: &Path) -> PathBuf {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../trainer/tests/fixtures/families/bert");
    let model = dir.join("bert");
    std::fs::create_dir_all(&model).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(fixture.join(f), model.join(f)).unwrap();
    }
    model
}

fn edit_json(path: &Path, edit: impl FnOnce(&mut Json)) {
    let mut json: Json = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut json);
    std::fs::write(path, json.to_string()).unwrap();
}

/// A trial a `memtune tune` runner claimed is its runner's to tell: a
/// client's `tell` is refused (the runner would find it finished and drop
/// its real result) and changes nothing.
#[test]
fn tell_refuses_a_trial_a_runner_is_running() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    create(&db, "s");
    let s = Storage::open_existing(&db).unwrap();
    let study = s.study("s").unwrap();
    let owner = store::Owner {
        id: "host:1234:1".into(),
        stale_after: Duration::from_secs(60),
    };
    let t = s
        .claim_or_create_within(study.study_id, 10, &owner)
        .unwrap()
        .unwrap()
        .trial();
    let out = memtune(
        &db,
        &[
            "tell",
            "--study",
            "s",
            "--trial-number",
            &t.number.to_string(),
            "--values",
            "1",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("runner (host:1234:1) is running it"), "{err}");
    assert_eq!(s.trial(t.trial_id).unwrap().state, TrialState::Running);
}

/// A study name with a newline and a terminal escape is printed escaped.
#[test]
fn study_not_found_shows_the_name_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    create(&db, "s");
    let err = fails(memtune(&db, &["trials", "--study", "x\n\u{1b}[2Jy"]));
    assert!(err.contains(r"study `x\n\u{1b}[2Jy` not found"), "{err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
}

/// One study with a broken row does not hide the others from `memtune
/// studies`: it is named with its error, the rest are listed, and the
/// command exits 1.
#[test]
fn studies_lists_the_readable_studies_beside_a_broken_one() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    for name in ["first", "broken", "last"] {
        create(&db, name);
    }
    ok(memtune(
        &db,
        &["ask", "--study-name", "first", "--sampler", "random"],
    ));
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute(
        "UPDATE study_directions SET direction = 'SIDEWAYS' WHERE study_id = \
         (SELECT study_id FROM studies WHERE study_name = 'broken')",
        [],
    )
    .unwrap();
    drop(conn);
    let out = memtune(&db, &["studies"]);
    assert_eq!(out.status.code(), Some(1));
    let listed = String::from_utf8(out.stdout).unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 4, "{listed}");
    assert!(
        lines[1].starts_with("first ") && lines[1].contains(" 1 "),
        "{listed}"
    );
    assert!(
        lines[2].starts_with("broken ") && lines[2].contains("SIDEWAYS"),
        "{listed}"
    );
    assert!(lines[3].starts_with("last "), "{listed}");
    assert!(err.contains("study broken cannot be read"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// `memtune trials | head -1`: the reader leaves early; memtune ends
/// quietly with 0.
#[test]
fn a_reader_that_leaves_early_is_no_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    create(&db, "s");
    // Enough trials to overflow a pipe's buffer (64 KiB), in one transaction.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("BEGIN").unwrap();
    for n in 0..3000 {
        conn.execute(
            "INSERT INTO trials (number, study_id, state, datetime_start, datetime_complete) \
             VALUES (?1, 1, 'COMPLETE', '2026-11-26 10:00:00', '2026-11-26 10:00:01')",
            [n],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO trial_values (trial_id, objective, value, value_type) \
             VALUES (last_insert_rowid(), 0, 0.5, 'FINITE')",
            [],
        )
        .unwrap();
    }
    conn.execute_batch("COMMIT").unwrap();
    drop(conn);
    let mut child = Command::new(env!("CARGO_BIN_EXE_memtune"))
        .arg("--storage")
        .arg(common::url(&db))
        .args(["trials", "--study", "s"])
        .env_remove("MEMTUNE_STORAGE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    assert!(!first.is_empty());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{:?}: {err}", out.status);
    assert!(!err.contains("Broken pipe"), "{err}");
}

/// Numbers print as Python prints them: 1e+300, not 301 digits.
#[test]
fn huge_values_print_in_scientific_notation() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    create(&db, "s");
    ok(ask(&db, "s", X));
    ok(memtune(
        &db,
        &[
            "tell",
            "--study",
            "s",
            "--trial-number",
            "0",
            "--values",
            "1e300",
        ],
    ));
    let out = ok(memtune(&db, &["trials", "--study", "s"]));
    assert!(out.contains("1e+300"), "{out}");
    assert!(!out.contains("10000000000"), "{out}");
}

/// A parameter name longer than Optuna's schema stores (512 characters) is
/// refused before anything is written, on SQLite and PostgreSQL, naming
/// the limit; PostgreSQL's own errors carry the server's reason.
#[test]
fn a_600_character_parameter_name_is_refused_before_anything_is_stored() {
    let name = "p".repeat(600);
    let space = format!(
        r#"{{"{name}": {{"name": "FloatDistribution", "attributes": {{"low": 0.0, "high": 1.0}}}}}}"#
    );
    let dir = tempfile::tempdir().unwrap();
    let mut urls = vec![common::url(&dir.path().join("s.db"))];
    urls.extend(store::pg_server::test_database("longname"));
    for url in urls {
        ok(common::memtune_on(
            &url,
            &["create-study", "--study-name", "s"],
        ));
        let out = common::memtune_on(
            &url,
            &[
                "ask",
                "--study-name",
                "s",
                "--sampler",
                "random",
                "--search-space",
                &space,
            ],
        );
        let err = fails(out);
        assert!(
            err.contains("600 characters long") && err.contains("at most 512"),
            "{err}"
        );
        let s = Storage::open_url(&url, &store::OpenOptions::default()).unwrap();
        let study = s.study("s").unwrap();
        assert!(
            s.trials(study.study_id, &TrialFilter::default())
                .unwrap()
                .is_empty(),
            "{url}: a trial was left behind"
        );
    }
}

/// `predict --format` reads a file whose name does not say its format,
/// and a bad record of a JSON array is named once.
#[test]
fn predict_takes_a_format_and_names_a_bad_record_once() {
    let dir = tempfile::tempdir().unwrap();
    let model = bert_classifier(dir.path());
    let texts = write(
        dir.path(),
        "texts.txt",
        r#"[{"text": "good"}, {"txt": "bad"}]"#,
    );
    let predict = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_memtune"))
            .args(["predict", "--model"])
            .arg(&model)
            .arg("--data")
            .arg(&texts)
            .args(extra)
            .output()
            .unwrap()
    };
    let err = fails(predict(&[]));
    assert!(err.contains("--format"), "{err}");
    let out = predict(&["--format", "json_array"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 1);
    let line = err.lines().find(|l| l.contains("texts.txt")).unwrap();
    assert_eq!(line.matches("(record 1)").count(), 1, "{err}");
}

/// Sizes no model has in a model's config.json: exit 2 naming the file
/// and the field, from `predict` and from `tune`, before allocating them.
#[test]
fn absurd_model_sizes_are_refused_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let texts = write(dir.path(), "texts.jsonl", "{\"text\": \"good\"}\n");
    for (field, value) in [
        ("num_labels", 1_000_000_000u64),
        ("max_position_embeddings", 1_000_000_000),
    ] {
        let model = bert_classifier(&dir.path().join(field));
        edit_json(&model.join("config.json"), |c| {
            c.as_object_mut().unwrap().remove("id2label");
            c[field] = Json::from(value);
        });
        let out = Command::new(env!("CARGO_BIN_EXE_memtune"))
            .args(["predict", "--model"])
            .arg(&model)
            .arg("--data")
            .arg(&texts)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{field}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.contains("config.json") && err.contains(&format!("`{field}` = {value}")),
            "{err}"
        );
    }
    let model = bert_classifier(&dir.path().join("hidden"));
    edit_json(&model.join("config.json"), |c| {
        c["hidden_size"] = Json::from(1_000_000_000u64)
    });
    let cfg = write(dir.path(), "s.toml", &cpu_study("big", &model, ""));
    let out = tune(&dir.path().join("s.db"), &cfg, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("config.json") && err.contains("`hidden_size` = 1000000000"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// A `max_length` beyond a model directory's positions is refused before
/// any trial (exit 2, naming the study file and the model's config), as it
/// is for simulated and builtin models: otherwise every trial fails alike.
#[test]
fn max_length_beyond_a_model_directorys_positions_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let model = bert_classifier(dir.path());
    let cfg = write(
        dir.path(),
        "s.toml",
        &cpu_study("long", &model, "").replace("max_length = 32", "max_length = 4096"),
    );
    let db = dir.path().join("s.db");
    let out = tune(&db, &cfg, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("s.toml")
            && err.contains("max_length 4096 is more than the 96 token positions")
            && err.contains("config.json"),
        "{err}"
    );
    assert!(trials(&db, "long").is_empty());
}

/// Data whose split leaves one side empty (every text the same: one
/// group of duplicates, kept whole in training) is refused before any
/// trial: exit 2, the counts and the fraction named, nothing stored.
#[test]
fn data_that_cannot_split_is_refused_before_any_trial() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let rows: String = (0..40)
        .map(|i| format!("the same words,{}\n", i % 2))
        .collect();
    write(dir.path(), "dup.csv", &format!("text,label\n{rows}"));
    let data = "[data]\nsource = \"files\"\nfiles = [\"dup.csv\"]\nnum_classes = 2";
    let cfg = write(dir.path(), "s.toml", &cpu_study("dup", &model, data));
    let db = dir.path().join("s.db");
    let out = tune(&db, &cfg, &[]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the split leaves the validation set empty: 40 examples in 1 groups"),
        "{err}"
    );
    assert!(trials(&db, "dup").is_empty());
}

/// Every trial failing with the same error that setup cannot see (here
/// each worker aborts in its first epoch, as a broken install would kill
/// every one alike; data that cannot split is refused before any trial)
/// stops the study after the first 3, with exit 1 and that error, instead
/// of burning the budget.
#[test]
fn the_same_error_on_the_first_trials_stops_the_study() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "s.toml", &sim_study("dup", 12, "", ""));
    let db = dir.path().join("s.db");
    let faults: Vec<String> = (0..6).map(|n| format!("abort@{n}:epoch=0")).collect();
    let out = tune_cmd(&db, &cfg, &[])
        .env("MEMTUNE_FAULT", faults.join("; "))
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the first 3 trials all failed with the same error"),
        "{err}"
    );
    let ts = trials(&db, "dup");
    let failed = ts.iter().filter(|t| t.state == TrialState::Fail).count();
    assert!(ts.iter().all(|t| t.state != TrialState::Running), "{ts:?}");
    assert!(
        failed >= 3 && ts.len() < 12,
        "{} trials, {failed} failed",
        ts.len()
    );
    // The trials the stop cut short say what stopped them.
    let cut_short: Vec<_> = ts
        .iter()
        .filter(|t| {
            ["interrupted", "not_started"]
                .map(serde_json::Value::from)
                .iter()
                .any(|k| t.user_attrs.get("error_kind") == Some(k))
        })
        .collect();
    for t in cut_short {
        let msg = t.user_attrs["error_msg"].as_str().unwrap();
        assert!(
            msg.contains("all failed with the same error"),
            "trial {}: {msg}",
            t.number
        );
    }
}

/// A trial whose settings its model cannot run (DeBERTa takes no hidden
/// head layers) is recorded FAIL before it runs, and says so on stderr,
/// even when it is the study's only trial; such trials do not stop the
/// study as a systematic failure. A fixed head_layers that a model can
/// never carry is refused before anything is stored, naming the key.
#[test]
fn a_trial_its_model_cannot_run_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let deberta =
        sim_study("head", 4, "", "").replace("sim = \"bert-base\"", "sim = \"deberta-v3-base\"");
    let fixed = deberta.replace("epochs = 2", "epochs = 2\nhead_layers = 1");
    let cfg = write(dir.path(), "s.toml", &fixed);
    let db = dir.path().join("s.db");
    let out = tune(&db, &cfg, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("fixed.head_layers = 1") && err.contains("no hidden head layers"),
        "{err}"
    );
    assert!(trials(&db, "head").is_empty(), "{err}");

    // Drawn per trial: the trials that draw a hidden layer are not run,
    // the others are, and the study runs to its end.
    let drawn = deberta.replace(
        "[fixed]",
        "[[param]]\nname = \"head_layers\"\ntype = \"int\"\nlow = 0\nhigh = 1\n\n[fixed]",
    );
    let cfg = write(dir.path(), "s.toml", &drawn);
    let out = tune(&db, &cfg, &[]);
    let err = String::from_utf8(out.stderr).unwrap();
    let ts = trials(&db, "head");
    assert_eq!(ts.len(), 4, "{err}");
    for t in &ts {
        let hidden = t.params["head_layers"].value() == hpo_sampler::ParamValue::Int(1);
        let want = if hidden {
            TrialState::Fail
        } else {
            TrialState::Complete
        };
        assert_eq!(t.state, want, "trial {}: {err}", t.number);
    }
    if ts.iter().any(|t| t.state == TrialState::Fail) {
        assert!(
            err.contains("not run: ") && err.contains("no hidden head layers"),
            "{err}"
        );
    }

    // A param that never draws 0 where no model carries hidden layers
    // would fail every trial: refused before anything is stored, at its
    // line.
    let never_zero = drawn.replace("low = 0\nhigh = 1", "low = 1\nhigh = 2");
    let cfg = write(dir.path(), "s.toml", &never_zero);
    let other = dir.path().join("other.db");
    let out = tune(&other, &cfg, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    let line = never_zero
        .lines()
        .position(|l| l == "name = \"head_layers\"")
        .unwrap();
    assert!(
        err.contains(&format!(
            "s.toml:{line}: param `head_layers`: every value is at least 1"
        )) && err.contains("no hidden head layers"),
        "{err}"
    );
    assert!(
        !other.exists() || trials(&other, "head").is_empty(),
        "{err}"
    );
}

/// An enqueued trial whose fixed value the study's space does not allow
/// (Optuna's `enqueue_trial` takes any) is recorded FAIL before it runs,
/// says why on stderr and is counted among the run's errors.
#[test]
fn an_enqueued_value_outside_the_space_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "s.toml", &sim_study("enq", 1, "", ""));
    let db = dir.path().join("s.db");
    assert!(tune(&db, &cfg, &[]).status.success());
    {
        let s = Storage::open_existing(&db).unwrap();
        let id = s.study("enq").unwrap().study_id;
        let queued = store::NewTrial {
            system_attrs: vec![("fixed_params".into(), serde_json::json!({"batch_size": 48}))],
            ..Default::default()
        };
        s.enqueue_trial(id, &queued).unwrap();
    }
    let out = tune(&db, &cfg, &["--n-trials", "3"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let summary = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("trial 1: not run: enqueued trial 1: fixed value 48"),
        "{err}"
    );
    let errors = summary
        .lines()
        .find(|l| l.contains("other errors"))
        .unwrap_or_default();
    assert!(errors.trim_end().ends_with(" 1"), "{summary}");
    let t = &trials(&db, "enq")[1];
    assert_eq!(t.state, TrialState::Fail);
    assert_eq!(t.user_attrs["error_kind"], "config");
}

/// A stored history no sampler can use (two trials of one number, as
/// Optuna's storage can write on a PostgreSQL database left at REPEATABLE
/// READ) is refused before a trial is claimed or created, not met by
/// every trial's sampler in turn.
#[test]
fn a_history_with_a_number_twice_is_refused_before_any_trial() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(dir.path(), "s.toml", &sim_study("dup", 2, "", ""));
    let db = dir.path().join("s.db");
    assert!(tune(&db, &cfg, &[]).status.success());
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute("UPDATE trials SET number = 0 WHERE number = 1", [])
        .unwrap();
    let before = trials(&db, "dup");
    let err = refused(tune(&db, &cfg, &["--n-trials", "4"]));
    assert!(
        err.contains(&format!("{}: study `dup`: stored history", db.display()))
            && err.contains("trial 0: two trials of the study have this number"),
        "{err}"
    );
    assert_eq!(trials(&db, "dup"), before);
}

// ---- 10. sizes and data the study file gets wrong -------------------------

/// `[runner] process_overhead` that leaves a trial no room is refused
/// before anything is stored (exit 2), naming the key, the overhead and
/// the device's size: in the file where the card's size is known (a
/// simulated device, a memory limit), at setup for the machine's own.
#[test]
fn a_process_overhead_beyond_the_device_names_the_key_and_both_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let sim = sim_study(
        "s",
        2,
        "",
        "sim_memory = \"8GiB\"\nprocess_overhead = \"16GiB\"",
    );
    let cfg = write(dir.path(), "s.toml", &sim);
    let out = tune(&db, &cfg, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = refused(out);
    assert!(
        err.contains("s.toml:")
            && err.contains("`runner.process_overhead`")
            && err.contains("16.00 GiB")
            && err.contains("8.00 GiB"),
        "{err}"
    );
    assert!(trials(&db, "s").is_empty(), "{err}");

    let model = tiny_model(dir.path());
    let cpu = cpu_study("c", &model, "").replace(
        "device = \"cpu\"",
        "device = \"cpu\"\nprocess_overhead = \"1000000GiB\"",
    );
    let cfg = write(dir.path(), "c.toml", &cpu);
    let out = tune(&db, &cfg, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = refused(out);
    assert!(
        err.contains("c.toml")
            && err.contains("`runner.process_overhead`")
            && err.contains("1000000.00 GiB")
            && err.contains("on CPU ("),
        "{err}"
    );
    assert!(trials(&db, "c").is_empty(), "{err}");

    // A limit or a margin that leaves no room is named, not the default
    // overhead of the simulated device.
    for (extra, key) in [
        ("memory_limit = \"1B\"", "`runner.memory_limit`"),
        ("safety_margin = 0.99", "`runner.safety_margin`"),
    ] {
        let cfg = write(dir.path(), "m.toml", &sim_study("m", 2, "", extra));
        let out = tune(&db, &cfg, &[]);
        assert_eq!(out.status.code(), Some(2), "{extra}");
        let err = refused(out);
        assert!(
            err.contains("m.toml") && err.contains(key) && err.contains("(the default)"),
            "{err}"
        );
        // Only what the file sets is named.
        assert!(!err.contains("sim_memory"), "{err}");
    }

    // A limit above the simulated device's size is said to be unused.
    let cfg = write(
        dir.path(),
        "l.toml",
        &sim_study("l", 1, "", "memory_limit = \"100GiB\""),
    );
    let out = tune(&db, &cfg, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("memory_limit = 100.00 GiB is more than the 24.00 GiB simulated device"),
        "{err}"
    );
}

/// A study on the simulated device with its `[data]` section in place of
/// the embedded set.
fn sim_study_with_data(name: &str, data: &str) -> String {
    sim_study(name, 2, "", "").replace("[objective]", &format!("[data]\n{data}\n\n[objective]"))
}

fn two_class_csv(dir: &Path, rows: usize) {
    let rows: String = (0..rows)
        .map(|i| {
            format!(
                "review number {i} says {},{}\n",
                ["bad", "good"][i % 2],
                i % 2
            )
        })
        .collect();
    write(dir, "d.csv", &format!("text,label\n{rows}"));
}

/// `num_classes` beyond any model's `num_labels` is refused where the file
/// is read, naming the key and the limit; one beyond the classes the data
/// has is refused when the data is read, naming the count: both before
/// anything is sized by it (a billion classes once took the machine's
/// memory) and before anything is stored.
#[test]
fn num_classes_beyond_the_limit_or_the_data_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    two_class_csv(dir.path(), 40);
    for (n, expected) in [
        (
            "1000000000",
            "`data.num_classes`: 1000000000 is more than the limit of 100000 classes",
        ),
        (
            "5",
            "num_classes = 5, but the examples have 2 distinct labels (none has label 2)",
        ),
    ] {
        let data = format!("source = \"files\"\nfiles = [\"d.csv\"]\nnum_classes = {n}");
        let cfg = write(dir.path(), "s.toml", &sim_study_with_data("s", &data));
        let out = tune(&db, &cfg, &[]);
        assert_eq!(out.status.code(), Some(2), "{n}");
        let err = refused(out);
        assert!(err.contains(expected), "{err}");
        assert!(trials(&db, "s").is_empty(), "{err}");
    }
    let data = "source = \"files\"\nfiles = [\"d.csv\"]\nlabel_names = [\"0\", \"1\", \"2\"]";
    let cfg = write(dir.path(), "s.toml", &sim_study_with_data("s", data));
    let err = refused(tune(&db, &cfg, &[]));
    assert!(
        err.contains("label_names lists 3 classes, but no example has label `2`"),
        "{err}"
    );
    let data = "source = \"files\"\nfiles = [\"d.csv\"]\nlabel_names = [\"0\", \"0\"]";
    let cfg = write(dir.path(), "s.toml", &sim_study_with_data("s", data));
    let out = tune(&db, &cfg, &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = refused(out);
    assert!(
        err.contains("`data.label_names`: `0` is listed twice (entry 1)"),
        "{err}"
    );
}

/// The simulated device reads and checks the data as the CPU and CUDA
/// devices do (a study file is tried there before a long run): a missing
/// file, a missing column and data too small to split are each refused
/// with exit 2, naming the file or the field, before any trial.
#[test]
fn the_simulated_device_checks_the_data_as_the_others_do() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let files = "source = \"files\"\nnum_classes = 2\nfiles = ";
    // One example of each class: nothing left for validation.
    two_class_csv(dir.path(), 2);
    for (data, expected) in [
        (format!("{files}[\"missing.csv\"]"), "missing.csv"),
        (
            format!("{files}[\"d.csv\"]\ntext = \"sentence\""),
            "no column `sentence`",
        ),
        (format!("{files}[\"d.csv\"]"), "the split leaves the"),
    ] {
        let cfg = write(dir.path(), "s.toml", &sim_study_with_data("s", &data));
        let out = tune(&db, &cfg, &[]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(2), "{data}: {err}");
        assert!(err.contains(expected) && err.contains("data"), "{err}");
        assert!(trials(&db, "s").is_empty(), "{err}");
    }
    // The same study with good data runs.
    two_class_csv(dir.path(), 40);
    let cfg = write(
        dir.path(),
        "s.toml",
        &sim_study_with_data("s", &format!("{files}[\"d.csv\"]")),
    );
    ok(tune(&db, &cfg, &[]));
    assert_eq!(trials(&db, "s").len(), 2);
}

/// A model directory whose config.json was edited away from its weights
/// is refused before any trial (exit 2), naming config.json, the field and
/// the tensor's shape, not listing tensors as missing.
#[test]
fn a_config_that_contradicts_the_weights_names_the_field_and_the_shape() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let config_json = model.join("config.json");
    let good: Json = serde_json::from_str(&std::fs::read_to_string(&config_json).unwrap()).unwrap();
    let cfg = write(dir.path(), "s.toml", &cpu_study("s", &model, ""));
    let db = dir.path().join("s.db");
    for (field, value, expected) in [
        (
            "hidden_size",
            64,
            "embeddings.word_embeddings.weight has shape [",
        ),
        (
            "num_hidden_layers",
            3,
            "model.safetensors has 2 encoder layers",
        ),
        (
            "intermediate_size",
            128,
            "encoder.layer.0.intermediate.dense.weight has shape [64, 32]",
        ),
        (
            "type_vocab_size",
            4,
            "embeddings.token_type_embeddings.weight has shape [2, 32]",
        ),
    ] {
        let mut c = good.clone();
        c[field] = Json::from(value);
        std::fs::write(&config_json, c.to_string()).unwrap();
        let out = tune(&db, &cfg, &[]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(2), "{field}: {err}");
        assert!(
            err.contains("config.json")
                && err.contains(&format!("field `{field}` = {value}"))
                && err.contains(expected)
                && !err.contains("missing"),
            "{field}: {err}"
        );
        assert!(trials(&db, "s").is_empty(), "{err}");
    }
}
