//! One runner over several simulated devices (`sim_devices`): each trial is
//! placed where it fits and records its device; a trial that fits only the
//! large card runs there; a device whose trials fail with device errors in
//! a row is drained and its running trials are retried on the others, so
//! the study still ends with `n_trials` finished trials.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use serde_json::Value as Json;
use store::{Storage, TrialFilter, TrialState};

/// The common simulated study on the simulated devices `sizes` (`max_workers`
/// is per device).
fn study(name: &str, n_trials: usize, sizes: &[&str]) -> String {
    let list: Vec<String> = sizes.iter().map(|s| format!("\"{s}\"")).collect();
    common::sim_study(name, n_trials, "0", "").replace(
        "sim_memory = \"0\"",
        &format!("sim_devices = [{}]", list.join(", ")),
    )
}

fn tune(dir: &Path, text: &str, fault: Option<&str>) -> (std::path::PathBuf, String) {
    let (db, out) = tune_output(dir, text, fault);
    (db, common::ok(out))
}

fn tune_output(
    dir: &Path,
    text: &str,
    fault: Option<&str>,
) -> (std::path::PathBuf, std::process::Output) {
    let cfg = dir.join("s.toml");
    std::fs::write(&cfg, text).unwrap();
    let db = dir.join("s.db");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtune"));
    cmd.arg("--storage")
        .arg(common::url(&db))
        .args(["tune", "--no-progress", "--config"])
        .arg(&cfg)
        .env_remove("MEMTUNE_STORAGE")
        .env_remove("MEMTUNE_FAULT");
    if let Some(f) = fault {
        cmd.env("MEMTUNE_FAULT", f);
    }
    (db, cmd.output().unwrap())
}

fn trials(db: &Path, study: &str) -> Vec<store::FrozenTrial> {
    let s = Storage::open_existing(db).unwrap();
    let st = s.study(study).unwrap();
    s.trials(st.study_id, &TrialFilter::default()).unwrap()
}

fn text<'a>(t: &'a store::FrozenTrial, key: &str) -> Option<&'a str> {
    t.user_attrs.get(key).and_then(Json::as_str)
}

#[test]
fn trials_are_placed_over_the_devices_and_large_ones_on_the_large_card() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _) = tune(
        dir.path(),
        &study("placed", 12, &["6GiB", "6GiB", "24GiB"]),
        None,
    );
    let ts = trials(&db, "placed");
    assert_eq!(ts.len(), 12);
    let names = ["simulated GPU 0", "simulated GPU 1", "simulated GPU 2"];
    let sizes = [6u64 << 30, 6 << 30, 24 << 30];
    let mut used = BTreeSet::new();
    let mut large = 0;
    for t in &ts {
        assert_eq!(t.state, TrialState::Complete, "{:?}", t.user_attrs);
        let device = text(t, "device").expect("each trial records its device");
        let d = names.iter().position(|n| *n == device).expect(device);
        used.insert(d);
        assert_eq!(
            t.user_attrs["device_capacity_bytes"].as_u64(),
            Some(sizes[d]),
            "{device}"
        );
        // bert-large's weights, gradients and AdamW state (5.4 GB) and a
        // worker's context leave no room on a 6 GiB card.
        if t.params["model"].value() == store::ParamValue::Str("bert-large".into()) {
            assert_eq!(d, 2, "trial {} ran bert-large on {device}", t.number);
            large += 1;
        }
    }
    assert!(large > 0, "no bert-large trial was sampled");
    assert!(used.len() >= 2, "one device took every trial: {used:?}");
    // The report's memory timeline has a row per device used.
    let html = std::fs::read_to_string(dir.path().join("placed-report.html")).unwrap();
    for d in used {
        assert!(html.contains(names[d]), "the report lacks {}", names[d]);
    }
}

#[test]
fn a_device_failing_twice_in_a_row_is_drained_and_its_trials_run_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    // The first four trials start together, two a device (the least
    // loaded first), and each fails with a sticky device error after its
    // first epoch: the first device to fail twice is drained, the other,
    // the last one left, is not.
    let faults = "sticky@0:epoch=0; sticky@1:epoch=0; sticky@2:epoch=0; sticky@3:epoch=0";
    let text_ =
        study("drain", 12, &["24GiB", "24GiB"]).replace("max_workers = 3", "max_workers = 2");
    let (db, out) = tune(dir.path(), &text_, Some(faults));
    let drained: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("device drained: "))
        .collect();
    assert_eq!(drained.len(), 1, "{out}");
    let gone = ["simulated GPU 0", "simulated GPU 1"]
        .into_iter()
        .find(|n| drained[0].starts_with(n))
        .unwrap();
    let ts = trials(&db, "drain");
    // Every trial the drain stopped was retried, and the retry finished on
    // the device left.
    let lost: Vec<&store::FrozenTrial> = ts
        .iter()
        .filter(|t| text(t, "error_kind") == Some("device_lost"))
        .collect();
    for t in &lost {
        assert_eq!(t.state, TrialState::Fail);
        assert_eq!(text(t, "device"), Some(gone));
        let retry = ts
            .iter()
            .find(|r| {
                r.system_attrs
                    .get("retry_history")
                    .and_then(Json::as_array)
                    .is_some_and(|h| h.iter().any(|n| n.as_u64() == Some(t.number)))
            })
            .unwrap_or_else(|| panic!("trial {} has no retry", t.number));
        assert_eq!(retry.state, TrialState::Complete);
        assert_ne!(text(retry, "device"), Some(gone));
    }
    let retried_line = out
        .lines()
        .find_map(|l| l.strip_prefix("trials retried after their device was drained: "));
    match retried_line {
        Some(n) => assert_eq!(n.trim().parse::<usize>().unwrap(), lost.len(), "{out}"),
        None => assert!(lost.is_empty(), "{out}"),
    }
    // n_trials finished: the device errors count, the drained ones are
    // stood for by their retries; nothing is left running or waiting.
    let counted = ts
        .iter()
        .filter(|t| {
            matches!(
                t.state,
                TrialState::Complete | TrialState::Pruned | TrialState::Fail
            )
        })
        .count()
        - lost.len();
    assert_eq!(counted, 12, "{out}");
    assert!(
        !ts.iter()
            .any(|t| matches!(t.state, TrialState::Running | TrialState::Waiting))
    );
    let errors = ts
        .iter()
        .filter(|t| t.user_attrs.get("cuda_error") == Some(&Json::Bool(true)))
        .count();
    assert!((2..=4).contains(&errors), "{errors} device errors");
}

#[test]
fn memtune_devices_shows_what_running_trials_lease_on_each_device() {
    let dir = tempfile::tempdir().unwrap();
    // The runner kills itself right after handing trial 3 to a worker: its
    // trials stay RUNNING in the store with their leases recorded.
    let (db, out) = tune_output(
        dir.path(),
        &study("leases", 12, &["24GiB", "24GiB"]),
        Some("kill-runner@3"),
    );
    assert!(!out.status.success());
    let running: Vec<store::FrozenTrial> = trials(&db, "leases")
        .into_iter()
        .filter(|t| t.state == TrialState::Running && t.user_attrs.contains_key("lease_bytes"))
        .collect();
    assert!(!running.is_empty());
    let shown = common::ok(common::memtune(&db, &["devices"]));
    for name in ["simulated GPU 0", "simulated GPU 1"] {
        let mine: Vec<&store::FrozenTrial> = running
            .iter()
            .filter(|t| text(t, "device") == Some(name))
            .collect();
        let line = shown
            .lines()
            .find(|l| l.starts_with(&format!("lease {name}:")));
        if mine.is_empty() {
            assert!(line.is_none(), "{shown}");
            continue;
        }
        let leased: u64 = mine
            .iter()
            .map(|t| t.user_attrs["lease_bytes"].as_u64().unwrap())
            .sum();
        let line = line.unwrap_or_else(|| panic!("no lease line for {name}: {shown}"));
        assert!(
            line.contains(&format!(
                "{} leased by {} running trial(s)",
                gpu_mem::human_bytes(leased),
                mine.len()
            )),
            "{line}"
        );
        assert!(line.contains("free of"), "{line}");
    }
}

#[test]
fn no_trial_starts_under_the_token_floor_while_the_empty_device_fits_more() {
    let dir = tempfile::tempdir().unwrap();
    // 40 GiB holds one bert-large at 16 x 256 (4,096 tokens) and little
    // beside it, so trials meet a busy device; alone, each fits the floor.
    let text = common::sim_study("floor", 12, "40GiB", "min_micro_tokens = 4096");
    let (db, _) = tune(dir.path(), &text, None);
    let ts = trials(&db, "floor");
    assert_eq!(ts.len(), 12);
    for t in &ts {
        assert_eq!(t.state, TrialState::Complete, "{:?}", t.user_attrs);
        let micro = t.user_attrs["micro_batch"].as_u64().unwrap();
        let param = |name: &str| match t.params[name].value() {
            store::ParamValue::Int(v) => v as u64,
            store::ParamValue::Float(v) => v as u64,
            other => panic!("{name}: {other:?}"),
        };
        let (batch, length) = (param("batch_size"), param("max_length"));
        assert!(
            micro >= batch.min(4096_u64.div_ceil(length)),
            "trial {}: micro-batch {micro} at length {length} (batch {batch})",
            t.number
        );
    }
}
