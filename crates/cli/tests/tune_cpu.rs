//! `memtune tune` on the CPU with real fine-tunes of a tiny BERT (random
//! weights, written by `trainer::testing`) on the embedded data set: the
//! whole path a default study takes, in seconds. Faults here are the CPU's:
//! a worker aborted mid-trial, an OOM injected at a random tensor
//! allocation (retried with half the micro-batch), a lease too small for
//! any micro-batch. The result must open in `optuna.load_study`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;
use store::{Storage, TrialFilter, TrialState};

fn tiny_model(dir: &Path) -> PathBuf {
    let words = trainer::testing::sentiment_words(600);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let model = dir.join("tiny");
    trainer::testing::write_tiny_model(&model, &trainer::testing::tiny_config(), &words, 3)
        .unwrap();
    model
}

fn study(name: &str, model: &Path, n_trials: usize, runner_extra: &str) -> String {
    format!(
        r#"
[study]
name = "{name}"
n_trials = {n_trials}
seed = 1

[data]
source = "embedded"

[objective]
metric = "accuracy"

[models.tiny]
dir = "{model}"

[[param]]
name = "learning_rate"
type = "float"
low = 5e-4
high = 5e-3
log = true

[[param]]
name = "batch_size"
type = "categorical"
choices = [16, 32]

[[param]]
name = "head_layers"
type = "int"
low = 0
high = 1

# Three epochs: after two the tiny random model is still on the edge of
# learning (its accuracy then moves from 0.53 to 0.58 with which examples
# share a batch), after three it is well above the majority class.
[fixed]
max_length = 32
epochs = 3
patience = 0

[sampler]
kind = "tpe"
n_startup_trials = 3

[pruner]
kind = "median"
n_startup_trials = 2

[runner]
device = "cpu"
threads_per_worker = 1
heartbeat = "500ms"
stale_after = "5s"
{runner_extra}
"#,
        model = model.display()
    )
}

fn run(db: &Path, cfg: &Path, fault: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtune"));
    cmd.arg("--storage")
        .arg(common::url(db))
        .args(["tune", "--no-progress", "--config"])
        .arg(cfg)
        .env_remove("MEMTUNE_STORAGE")
        .env_remove("MEMTUNE_FAULT");
    if let Some(f) = fault {
        cmd.env("MEMTUNE_FAULT", f);
    }
    cmd.output().unwrap()
}

fn trials(db: &Path, name: &str) -> Vec<store::FrozenTrial> {
    let s = Storage::open_existing(db).unwrap();
    let st = s.study(name).unwrap();
    s.trials(st.study_id, &TrialFilter::default()).unwrap()
}

#[test]
fn a_cpu_study_trains_records_and_survives_faults() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let db = dir.path().join("cpu.db");
    let cfg = dir.path().join("study.toml");
    std::fs::write(&cfg, study("cpu", &model, 6, "")).unwrap();
    // A random allocation of trial 2 fails: the step is retried with half
    // the micro-batch, or (before the first step) the trial is an OOM.
    let alloc = 30 + std::process::id() as u64 % 300;
    let fault = format!("abort@1:epoch=0; oom@2:alloc={alloc}");
    let out = run(&db, &cfg, Some(&fault));
    // Shown with --nocapture, and when an assertion below fails.
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let summary = common::ok(out);
    eprintln!("{summary}");
    assert!(summary.contains("best: trial"), "{summary}");

    let ts = trials(&db, "cpu");
    assert_eq!(ts.len(), 6);
    let aborted = &ts[1];
    assert_eq!(aborted.state, TrialState::Fail);
    assert_eq!(aborted.user_attrs["error_kind"], "worker_died");
    let oom = &ts[2];
    match oom.state {
        TrialState::Complete | TrialState::Pruned if oom.user_attrs.contains_key("oom_retries") => {
            assert!(
                !oom.user_attrs["oom_retries"].as_array().unwrap().is_empty()
                    || oom.user_attrs.get("oom") == Some(&Json::Bool(true)),
                "{:?}",
                oom.user_attrs
            );
        }
        TrialState::Pruned => assert_eq!(oom.user_attrs["oom"], Json::Bool(true)),
        s => panic!("trial 2 ended {s:?}: {:?}", oom.user_attrs),
    }
    for t in ts.iter().filter(|t| ![1, 2].contains(&t.number)) {
        assert!(
            matches!(t.state, TrialState::Complete | TrialState::Pruned),
            "trial {} {:?}: {:?}",
            t.number,
            t.state,
            t.user_attrs
        );
        assert!(!t.intermediate_values.is_empty());
        // The tiny model learns something: better than the majority class.
        if t.state == TrialState::Complete {
            assert!(
                t.value().unwrap() > 0.55,
                "trial {}: {:?}",
                t.number,
                t.value()
            );
        }
    }
    // `memtune trials` shows the failure with its kind.
    let listed = common::ok(common::memtune(
        &db,
        &["trials", "--study", "cpu", "--attr", "error_kind"],
    ));
    assert!(listed.contains("worker_died"), "{listed}");

    // Optuna reads the study.
    let Some(python) = python() else { return };
    let script = format!(
        "import optuna\n\
         s = optuna.load_study(study_name='cpu', storage='{}')\n\
         print(len(s.trials), s.best_trial.number, sorted(s.best_trial.params))",
        common::url(&db)
    );
    let out = Command::new(python).args(["-c", &script]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(printed.starts_with("6 "), "{printed}");
    assert!(printed.contains("learning_rate"), "{printed}");
}

/// Several objectives on real fine-tunes: each COMPLETE trial stores the
/// best epoch's accuracy, its measured peak, its epochs' seconds and its
/// model's parameters (more with a hidden head layer), and no
/// intermediate value; the best accuracy beats the majority class.
#[test]
fn a_cpu_study_of_several_objectives_records_real_figures() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let db = dir.path().join("mo.db");
    let cfg = dir.path().join("study.toml");
    let text = study("mo", &model, 4, "")
        .replace(
            "metric = \"accuracy\"",
            "metrics = [\"accuracy\", \"peak_memory\", \"train_seconds\", \"params\"]",
        )
        .replace("kind = \"median\"\nn_startup_trials = 2", "kind = \"none\"");
    assert!(text.contains("params\"]") && text.contains("kind = \"none\""));
    std::fs::write(&cfg, text).unwrap();
    let summary = common::ok(run(&db, &cfg, None));
    assert!(summary.contains("Pareto front:"), "{summary}");
    let ts = trials(&db, "mo");
    assert_eq!(ts.len(), 4);
    let mut params_by_head = std::collections::BTreeMap::new();
    for t in &ts {
        assert_eq!(t.state, TrialState::Complete, "{:?}", t.user_attrs);
        assert!(t.intermediate_values.is_empty());
        let v = t.values.as_deref().unwrap();
        assert_eq!(v.len(), 4);
        assert!((0.0..=1.0).contains(&v[0]), "accuracy {v:?}");
        assert_eq!(Some(v[1]), t.user_attrs["requested_peak_bytes"].as_f64());
        assert!(v[2] > 0.0, "train_seconds {v:?}");
        assert_eq!(Some(v[2]), t.user_attrs["train_seconds"].as_f64());
        // Where the time before the first step went.
        let startup = &t.user_attrs["startup_seconds"];
        for part in ["data", "device", "model"] {
            let s = startup[part].as_f64().unwrap_or(-1.0);
            assert!((0.0..60.0).contains(&s), "{part}: {startup}");
        }
        let head = t.params["head_layers"].internal;
        let count = *params_by_head.entry(head as u64).or_insert(v[3]);
        assert_eq!(v[3], count, "one count per head");
    }
    // The tiny model learns something: better than the majority class.
    let best = ts.iter().filter_map(|t| t.value()).fold(0.0, f64::max);
    assert!(best > 0.55, "best accuracy {best}");
    if let (Some(linear), Some(hidden)) = (params_by_head.get(&0), params_by_head.get(&1)) {
        assert!(hidden > linear, "{params_by_head:?}");
    }
}

#[test]
fn a_bad_study_file_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let db = dir.path().join("bad.db");
    let cfg = dir.path().join("study.toml");
    let text = study("bad", &model, 2, "").replace("high = 5e-3", "high = 5e-3\nhihg = 1");
    std::fs::write(&cfg, text).unwrap();
    let err = common::fails(run(&db, &cfg, None));
    assert!(err.contains("hihg") && err.contains("study.toml:"), "{err}");
    assert!(!db.exists(), "a refused study file created the storage");
}

#[test]
fn auto_falls_back_to_the_cpu_with_a_notice_and_cuda_is_explicit() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let db = dir.path().join("auto.db");
    let cfg = dir.path().join("study.toml");
    let text = study("auto", &model, 1, "").replace("device = \"cpu\"", "device = \"auto\"");
    std::fs::write(&cfg, text).unwrap();
    let out = run(&db, &cfg, None);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    common::ok(out);
    let notices: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("memtune: device = \"auto\": using the CPU ("))
        .collect();
    assert_eq!(notices.len(), 1, "one notice saying why: {stderr}");
    let ts = trials(&db, "auto");
    assert_eq!(ts.len(), 1);
    // Auto precision on the CPU is its own fp32.
    assert_eq!(ts[0].user_attrs["matmul_precision"], "fp32");
    assert_eq!(ts[0].user_attrs["skipped_steps"], 0);

    // An explicit CUDA device is never silently replaced by the CPU.
    let db = dir.path().join("cuda.db");
    let text = study("cuda", &model, 1, "").replace("device = \"cpu\"", "device = \"cuda:0\"");
    std::fs::write(&cfg, text).unwrap();
    let err = common::fails(run(&db, &cfg, None));
    assert!(err.contains("device = \"cuda:0\""), "{err}");
    assert!(!db.exists(), "a refused device created the storage");
}

#[test]
fn the_cpu_floors_on_the_safety_margin_and_workers_are_said_once() {
    // The CPU keeps 10% of its memory for the system, and runs no more
    // workers than its cores hold: a study file asking for less margin or
    // more workers is told so, once each.
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let db = dir.path().join("floors.db");
    let cfg = dir.path().join("study.toml");
    let extra = "safety_margin = 0.01\nmax_workers = 4096";
    std::fs::write(&cfg, study("floors", &model, 1, extra)).unwrap();
    let out = run(&db, &cfg, None);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    common::ok(out);
    for key in ["safety_margin", "max_workers"] {
        let said = stderr
            .lines()
            .filter(|l| l.starts_with(&format!("memtune: [runner] {key} = ")))
            .count();
        assert_eq!(said, 1, "{key}: {stderr}");
    }
    // The defaults are within the floors: nothing to say.
    let db = dir.path().join("defaults.db");
    std::fs::write(&cfg, study("defaults", &model, 1, "")).unwrap();
    let out = run(&db, &cfg, None);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    common::ok(out);
    assert!(!stderr.contains("memtune: [runner]"), "{stderr}");
}

#[test]
fn an_fp16_study_trains_with_loss_scaling_on_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let db = dir.path().join("fp16.db");
    let cfg = dir.path().join("study.toml");
    std::fs::write(&cfg, study("fp16", &model, 1, "precision = \"fp16\"")).unwrap();
    common::ok(run(&db, &cfg, None));
    let ts = trials(&db, "fp16");
    assert_eq!(ts.len(), 1);
    let t = &ts[0];
    assert_eq!(t.state, TrialState::Complete, "{:?}", t.user_attrs);
    assert_eq!(t.user_attrs["matmul_precision"], "fp16");
    assert!(t.user_attrs["skipped_steps"].is_u64(), "{:?}", t.user_attrs);
    assert!(t.value().unwrap() > 0.55, "{:?}", t.value());
}

#[test]
fn a_lone_trial_gets_every_core_unless_threads_are_set() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let cfg = dir.path().join("study.toml");
    let threads = |name: &str, text: String| {
        let db = dir.path().join(format!("{name}.db"));
        std::fs::write(&cfg, text).unwrap();
        common::ok(run(&db, &cfg, None));
        let ts = trials(&db, name);
        assert_eq!(ts.len(), 1);
        ts[0].user_attrs["threads"].as_u64().unwrap() as usize
    };
    let cores = std::thread::available_parallelism().unwrap().get();
    let free = study("lone", &model, 1, "").replace("threads_per_worker = 1\n", "");
    assert_eq!(threads("lone", free), cores);
    // An explicit `threads_per_worker` is kept (0: the worker's own pool).
    assert_eq!(threads("set", study("set", &model, 1, "")), 0);
}

#[test]
fn devices_lists_the_cpu_and_says_why_cuda_is_or_is_not_there() {
    let out = Command::new(env!("CARGO_BIN_EXE_memtune"))
        .arg("devices")
        .output()
        .unwrap();
    let text = common::ok(out);
    let cores = std::thread::available_parallelism().unwrap().get();
    assert!(text.starts_with(&format!("cpu: {cores} cores, ")), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("cuda: unavailable: ") || l.starts_with("cuda:0: ")),
        "{text}"
    );
    assert!(text.contains("library libnvrtc: "), "{text}");
}

fn python() -> Option<String> {
    match std::env::var("MEMTUNE_PYTHON") {
        Ok(p) => Some(p),
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!("MEMTUNE_PYTHON is not set (cargo xtask test sets it)")
        }
        Err(_) => {
            eprintln!("skipping the optuna.load_study check: MEMTUNE_PYTHON is not set");
            None
        }
    }
}

/// A study on a RoBERTa directory as transformers saves it (the trainer's
/// parity fixture: byte-level BPE tokenizer, `roberta.`-prefixed weights, a
/// three-label `RobertaClassificationHead` that the two-label data set
/// replaces with a new output layer).
#[test]
fn a_cpu_study_runs_on_a_transformers_roberta_directory() {
    let dir = tempfile::tempdir().unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../trainer/tests/fixtures/families/roberta")
        .canonicalize()
        .unwrap();
    let db = dir.path().join("roberta.db");
    let cfg = dir.path().join("study.toml");
    std::fs::write(&cfg, study("roberta", &model, 3, "")).unwrap();
    let out = run(&db, &cfg, None);
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    let summary = common::ok(out);
    assert!(summary.contains("best: trial"), "{summary}");
    let ts = trials(&db, "roberta");
    assert_eq!(ts.len(), 3);
    for t in &ts {
        assert!(
            matches!(t.state, TrialState::Complete | TrialState::Pruned),
            "trial {} {:?}: {:?}",
            t.number,
            t.state,
            t.user_attrs
        );
        assert!(!t.intermediate_values.is_empty());
    }
}

/// Data a model cannot read (here pairs for a model of one token type)
/// stops the study before its first trial, naming the model's file and
/// field, instead of failing every trial.
#[test]
fn data_a_model_cannot_read_is_refused_before_the_first_trial() {
    let dir = tempfile::tempdir().unwrap();
    let words = trainer::testing::sentiment_words(600);
    let mut words: Vec<&str> = words.iter().map(String::as_str).collect();
    words.extend(["good", "bad", "film"]);
    let one_type = dir.path().join("one-type");
    let config = trainer::config::BertConfig {
        type_vocab_size: 1,
        ..trainer::testing::tiny_config()
    };
    trainer::testing::write_tiny_model(&one_type, &config, &words, 3).unwrap();
    let data = dir.path().join("pairs.csv");
    let rows: String = (0..20)
        .map(|i| format!("good film {i},bad film,{}\n", i % 2))
        .collect();
    std::fs::write(&data, format!("text,hyp,label\n{rows}")).unwrap();
    let data_section = format!(
        "source = \"files\"\nfiles = [\"{}\"]\ntext_pair = \"hyp\"\nnum_classes = 2",
        data.display()
    );
    let text = study("pairs", &one_type, 2, "").replace("source = \"embedded\"", &data_section);
    let cfg = dir.path().join("study.toml");
    std::fs::write(&cfg, &text).unwrap();
    let db = dir.path().join("pairs.db");
    let err = common::fails(run(&db, &cfg, None));
    assert!(
        err.contains("`type_vocab_size`") && err.contains("one-type/config.json"),
        "{err}"
    );
    assert!(!db.exists() || trials(&db, "pairs").is_empty(), "{err}");
}
