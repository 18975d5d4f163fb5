//! The GPU bundle's `legacy` step, on the CPU. The baseline
//! (`benches/reference/legacy_study.py`: Optuna + PyTorch + transformers,
//! two trials at a time, OOM pruned): its search space is the packing
//! simulation's, and one tiny round on the CPU gives figures that add up
//! (needs the torch venv, `MEMTUNE_TORCH_PYTHON`). memtune's side: the
//! bundle's study file has the same space and runs on the simulated device,
//! and the step's verdict (`legacy_figures.py`, stdlib Python from
//! `MEMTUNE_PYTHON`) passes it against a weaker baseline and fails it
//! against a stronger one. Each skips without its Python, fails under CI.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use cli::tune::simulate::space;
use serde_json::Value as Json;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn script() -> PathBuf {
    root().join("benches/reference/legacy_study.py")
}

fn run(py: &Path, args: &[&str]) -> String {
    let out = Command::new(py).arg(script()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "legacy_study.py {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_baselines_space_is_the_packing_simulations() {
    let Some(py) = common::torch_python() else {
        return;
    };
    let printed: Json = serde_json::from_str(run(&py, &["--print-space"]).trim()).unwrap();
    let models: Vec<&str> = printed["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    assert_eq!(models, space::MODELS);
    let batches: Vec<u64> = printed["batch_sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = space::BATCH_SIZES.iter().map(|&b| b as u64).collect();
    assert_eq!(batches, expected);
    let (low, high, step) = (
        printed["lengths"][0].as_u64().unwrap() as usize,
        printed["lengths"][1].as_u64().unwrap() as usize,
        printed["lengths"][2].as_u64().unwrap() as usize,
    );
    let lengths: Vec<usize> = (low..=high).step_by(step).collect();
    assert_eq!(lengths, space::SEQ_LENS);
}

#[test]
fn one_tiny_cpu_round_reports_figures_that_add_up() {
    let Some(py) = common::torch_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("docs.jsonl");
    let json = dir.path().join("figures.json");
    // The documents memtune's study would read, then the round on them.
    run(
        &py,
        &[
            "--write-data",
            data.to_str().unwrap(),
            "--examples",
            "30",
            "--words",
            "120",
        ],
    );
    let docs = std::fs::read_to_string(&data).unwrap();
    assert_eq!(docs.lines().count(), 30);
    for line in docs.lines() {
        let doc: Json = serde_json::from_str(line).unwrap();
        let words = doc["text"].as_str().unwrap().split_whitespace().count();
        assert!(words >= 120, "{words} words: {line}");
        assert!(matches!(doc["label"].as_u64(), Some(0 | 1)), "{line}");
    }
    let printed = run(
        &py,
        &[
            "--device",
            "cpu",
            "--data",
            data.to_str().unwrap(),
            "--models",
            "bert-tiny,roberta-tiny",
            "--batch-sizes",
            "4,8",
            "--lengths",
            "32:96:32",
            "--epochs",
            "2",
            "--n-trials",
            "4",
            // A cap only: the four trials must all start, however slow the
            // machine.
            "--seconds",
            "3600",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    let summary: Json = serde_json::from_str(printed.trim()).unwrap();
    let figures: Json = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let trials = figures["trials"].as_array().unwrap();
    // Per class round(15 * 0.2) = 3 to validation, as memtune splits.
    assert_eq!(figures["train_examples"], 24);
    assert_eq!(figures["validation_examples"], 6);
    assert_eq!(figures["trials_started"], 4);
    assert_eq!(trials.len(), 4);
    assert_eq!(figures["trials_completed"], 4, "{figures}");
    assert_eq!(figures["trials_pruned_by_oom"], 0);
    assert_eq!(figures["trials_failed"], 0);
    assert_eq!(figures["oom_retries"], 0);
    // Every document is longer than the longest max length: each trained
    // example is exactly max_length tokens, every epoch.
    let mut useful = 0;
    for t in trials {
        assert_eq!(t["state"], "COMPLETE", "{t}");
        let max_length = t["max_length"].as_u64().unwrap();
        assert!([32, 64, 96].contains(&max_length), "{t}");
        assert!(["bert-tiny", "roberta-tiny"].contains(&t["model"].as_str().unwrap()));
        assert_eq!(t["tokens"].as_u64().unwrap(), 24 * max_length * 2, "{t}");
        let value = t["value"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&value), "{t}");
        assert!(t["end"].as_f64().unwrap() >= t["start"].as_f64().unwrap());
        useful += t["tokens"].as_u64().unwrap();
    }
    assert_eq!(figures["useful_tokens"].as_u64().unwrap(), useful);
    let seconds = figures["seconds"].as_f64().unwrap();
    let per_hour = figures["useful_tokens_per_hour"].as_f64().unwrap();
    assert!(
        (per_hour - useful as f64 / seconds * 3600.0).abs() <= 1e-6 * per_hour,
        "{figures}"
    );
    let in_flight = figures["mean_trials_in_flight"].as_f64().unwrap();
    assert!(in_flight > 0.0 && in_flight <= 2.0 + 1e-9, "{figures}");
    // The printed summary is the file without its per-trial records.
    assert_eq!(summary["useful_tokens"], figures["useful_tokens"]);
    assert!(summary.get("trials").is_none());
}

/// `n` documents of `words` words each, classes alternating, as
/// `legacy_study.py --write-data` writes them.
fn write_docs(path: &Path, n: usize, words: usize) {
    let text: String = (0..n)
        .map(|i| {
            let body: Vec<String> = (0..words)
                .map(|w| format!("w{}", (w * 7 + i) % 50))
                .collect();
            format!(
                "{}\n",
                serde_json::json!({"text": body.join(" "), "label": i % 2})
            )
        })
        .collect();
    std::fs::write(path, text).unwrap();
}

/// Runs the step's verdict on memtune's storage and a baseline whose
/// useful tokens are `baseline_tokens` in 100 s; its exit status and
/// figures.
fn verdict(py: &Path, dir: &Path, db: &Path, baseline_tokens: u64) -> (bool, Json, String) {
    let baseline = dir.join(format!("baseline-{baseline_tokens}.json"));
    let figures = dir.join(format!("figures-{baseline_tokens}.json"));
    std::fs::write(
        &baseline,
        serde_json::json!({
            "trials_started": 3, "trials_completed": 2, "trials_failed": 0,
            "trials_pruned_by_oom": 1, "oom_retries": 0, "train_examples": 32,
            "useful_tokens": baseline_tokens, "seconds": 100.0,
            "mean_trials_in_flight": 1.5, "device": "cpu",
        })
        .to_string(),
    )
    .unwrap();
    let smi = dir.join("memtune.smi");
    std::fs::write(&smi, "512\n20480\n1024\n").unwrap();
    let out = Command::new(py)
        .arg(root().join("xtask/src/gpu_bundle/legacy_figures.py"))
        .args(["--docs", dir.join("docs.jsonl").to_str().unwrap()])
        .args(["--memtune-db", db.to_str().unwrap()])
        .args(["--memtune-seconds", "100"])
        .args(["--memtune-smi", smi.to_str().unwrap()])
        .args(["--baseline-json", baseline.to_str().unwrap()])
        .args(["--baseline-seconds", "100"])
        .args(["--out", figures.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "legacy_figures.py crashed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Json = serde_json::from_str(&std::fs::read_to_string(&figures).unwrap()).unwrap();
    (out.status.success(), json, stdout)
}

#[test]
fn the_bundles_legacy_study_has_the_space_runs_on_the_sim_device_and_meets_the_gate() {
    let text = std::fs::read_to_string(root().join("xtask/src/gpu_bundle/legacy.toml")).unwrap();
    // The packing simulation's space, model for model.
    let models: Vec<String> = space::MODELS.iter().map(|m| format!("{m:?}")).collect();
    assert!(
        text.contains(&format!("choices = [{}]", models.join(", "))),
        "{text}"
    );
    for m in space::MODELS {
        assert!(
            text.contains(&format!("[models.{m}]\npreset = \"{m}\"")),
            "{m}"
        );
    }
    let batches: Vec<String> = space::BATCH_SIZES.iter().map(|b| b.to_string()).collect();
    assert!(text.contains(&format!("choices = [{}]", batches.join(", "))));
    let (low, high) = (
        space::SEQ_LENS[0],
        space::SEQ_LENS[space::SEQ_LENS.len() - 1],
    );
    assert!(text.contains(&format!("low = {low}\nhigh = {high}\nstep = 32")));
    assert!(text.contains("memory_limit = \"24GiB\""));

    // memtune's side on the simulated device, the same 24 GiB cap.
    let dir = tempfile::tempdir().unwrap();
    write_docs(&dir.path().join("docs.jsonl"), 40, 600);
    let sim = text.replace(
        "device = \"cuda\"\nprecision = \"bf16\"",
        "device = \"sim\"\nsim_memory = \"80GiB\"",
    );
    assert_ne!(sim, text);
    let config = dir.path().join("legacy.toml");
    std::fs::write(&config, sim).unwrap();
    let db = dir.path().join("legacy.db");
    common::ok(common::memtune(
        &db,
        &[
            "tune",
            "--no-progress",
            "--n-trials",
            "6",
            "--config",
            config.to_str().unwrap(),
        ],
    ));

    let Some(py) = common::reference_python() else {
        return;
    };
    let (passed, figures, stdout) = verdict(&py, dir.path(), &db, 1);
    assert!(passed, "{stdout}\n{figures}");
    let m = &figures["memtune"];
    assert_eq!(m["trials_started"], 6, "{figures}");
    assert_eq!(m["trials_completed"], 6, "{figures}");
    assert_eq!(m["lost_to_oom"], 0);
    assert_eq!(m["oom_retries"], 0);
    // 40 documents, per class round(20 * 0.2) = 4 to validation.
    assert_eq!(m["train_examples"], 32);
    assert!(m["useful_tokens"].as_u64().unwrap() >= 6 * 32 * 128);
    // Every trial's micro-batch holds at least one row of the shortest length.
    let tokens = &m["micro_batch_tokens"];
    assert!(tokens["min"].as_u64().unwrap() >= 128, "{figures}");
    assert!(tokens["median"].as_u64().unwrap() >= tokens["min"].as_u64().unwrap());
    // The simulated device computes nothing: no start-up to report.
    assert_eq!(
        m["startup_seconds_median"],
        serde_json::json!({"data": null, "device": null, "model": null}),
        "{figures}"
    );
    assert_eq!(m["peak_device_memory_mib"], 20480.0);
    assert_eq!(figures["baseline"]["lost_to_oom"], 1);
    assert_eq!(figures["baseline"]["peak_device_memory_mib"], Json::Null);
    let ratio = figures["useful_tokens_per_hour_ratio"].as_f64().unwrap();
    assert!(ratio >= 1.5, "{figures}");
    let max = figures["max_requested_over_predicted"].as_f64().unwrap();
    let min = figures["min_requested_over_predicted"].as_f64().unwrap();
    assert!(max <= 1.0 && min >= 0.99, "{figures}");

    // A baseline that trained more fails the step, and says why.
    let more = m["useful_tokens"].as_u64().unwrap() * 2;
    let (passed, figures, stdout) = verdict(&py, dir.path(), &db, more);
    assert!(!passed, "{stdout}");
    let failures = figures["failures"].to_string();
    assert!(failures.contains("below 1.5x"), "{failures}");
}
