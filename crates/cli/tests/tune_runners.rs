//! Several `memtune tune` runners on one study at once, on the simulated
//! device (each trial takes milliseconds): they must cooperate by
//! construction, so the study ends with exactly `n_trials` trials, all
//! COMPLETE, however their claims interleave.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use store::{Storage, TrialFilter, TrialState};

fn study_toml(name: &str, n_trials: usize) -> String {
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
log = true

[[param]]
name = "batch_size"
type = "categorical"
choices = [8, 16, 32]

[fixed]
model = "bert-base"
max_length = 128
epochs = 2
warmup_ratio = 0.1

[sampler]
kind = "tpe"
seed = 7

[pruner]
kind = "none"

[runner]
device = "sim"
sim_memory = "24GiB"
heartbeat = "200ms"
stale_after = "3s"
max_workers = 2
"#
    )
}

fn runner(db: &Path, config: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtune"));
    cmd.arg("--storage")
        .arg(common::url(db))
        .args(["tune", "--no-progress", "--config"])
        .arg(config)
        .env_remove("MEMTUNE_STORAGE")
        .env_remove("MEMTUNE_FAULT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Three runners started together on one 40-trial study, six rounds (a
/// fresh file each): every runner exits 0 and the study holds exactly 40
/// COMPLETE trials, none FAIL, none left RUNNING.
#[test]
fn three_runners_on_one_sqlite_file_finish_exactly_n_trials() {
    for round in 0..6 {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.db");
        let cfg = dir.path().join("s.toml");
        std::fs::write(&cfg, study_toml("shared", 40)).unwrap();
        let children: Vec<_> = (0..3).map(|_| runner(&db, &cfg).spawn().unwrap()).collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: a runner failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let s = Storage::open_existing(&db).unwrap();
        let study = s.study("shared").unwrap();
        let ts = s.trials(study.study_id, &TrialFilter::default()).unwrap();
        let states: Vec<_> = ts.iter().map(|t| (t.number, t.state)).collect();
        assert_eq!(ts.len(), 40, "round {round}: {states:?}");
        assert!(
            ts.iter().all(|t| t.state == TrialState::Complete),
            "round {round}: {states:?}"
        );
    }
}
