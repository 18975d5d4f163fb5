//! `memtune tune` on the CPU with a DeBERTa-v3 directory beside a RoBERTa
//! one (the trainer's tiny HF fixtures: config, weights, tokenizer.json):
//! every trial trains to completion, admitted under a lease from the
//! architecture's own memory plan.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use store::{Storage, TrialFilter, TrialState};
use trainer::finetune::read_model_config;
use trainer::memory::{PlanPeaks, plan_peak};
use trainer::model::{HeadConfig, ModelConfig};

fn fixture(family: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../trainer/tests/fixtures/families")
        .join(family)
}

fn study(name: &str, key: &str, model: &Path) -> String {
    format!(
        r#"
[study]
name = "{name}"
n_trials = 2
seed = 1

[data]
source = "embedded"

[objective]
metric = "accuracy"

[models.{key}]
dir = "{model}"

[[param]]
name = "learning_rate"
type = "float"
low = 1e-3
high = 5e-3
log = true

[[param]]
name = "batch_size"
type = "categorical"
choices = [16, 32]

[fixed]
max_length = 24
epochs = 2
patience = 0

[sampler]
kind = "random"

[pruner]
kind = "median"
n_startup_trials = 2

[runner]
device = "cpu"
threads_per_worker = 1
heartbeat = "500ms"
stale_after = "5s"
"#,
        model = model.display()
    )
}

#[test]
fn deberta_and_roberta_studies_complete_every_trial() {
    let dir = tempfile::tempdir().unwrap();
    for (key, family) in [("deberta", "deberta-v2"), ("roberta", "roberta")] {
        let db = dir.path().join(format!("{key}.db"));
        let cfg = dir.path().join(format!("{key}.toml"));
        std::fs::write(&cfg, study(key, key, &fixture(family))).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_memtune"))
            .arg("--storage")
            .arg(common::url(&db))
            .args(["tune", "--no-progress", "--config"])
            .arg(&cfg)
            .env_remove("MEMTUNE_STORAGE")
            .env_remove("MEMTUNE_FAULT")
            .output()
            .unwrap();
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        let summary = common::ok(out);
        assert!(summary.contains("best: trial"), "{summary}");
        let storage = Storage::open_existing(&db).unwrap();
        let st = storage.study(key).unwrap();
        let trials = storage
            .trials(st.study_id, &TrialFilter::default())
            .unwrap();
        assert_eq!(trials.len(), 2, "{key}");
        for t in &trials {
            assert_eq!(
                t.state,
                TrialState::Complete,
                "{key} trial {}: {:?}",
                t.number,
                t.user_attrs
            );
            assert_eq!(t.intermediate_values.len(), 2, "{key}: one per epoch");
            assert!(t.value().is_some_and(f64::is_finite), "{key}");
        }
    }
}

#[test]
fn the_runner_plans_deberta_with_its_own_model() {
    let config = read_model_config(&fixture("deberta-v2").join("config.json")).unwrap();
    assert!(matches!(config, ModelConfig::Deberta(_)), "{config:?}");
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    // The runner's peaks are the full plan's (at seq 8, micro-batch 3 the
    // five-plan decomposition would be 1 KiB short: see `step_curve`).
    for seq in [8, 24] {
        let peaks = PlanPeaks::new(&config, &head, seq).unwrap();
        for micro in [1, 3, 16] {
            let full = plan_peak(&config, &head, seq, micro).unwrap();
            assert_eq!(
                peaks.peak(micro).unwrap(),
                full,
                "seq {seq}, micro-batch {micro}"
            );
        }
    }
}
