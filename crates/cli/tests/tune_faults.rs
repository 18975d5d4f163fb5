//! The study runner under faults, on `gpu-mem`'s simulated device (real
//! training-loop allocations through the real allocator, no compute), so
//! each trial takes milliseconds: workers aborted mid-trial, sticky device
//! errors, OOM injected at random allocations, configurations that cannot
//! fit, and the runner itself killed with SIGKILL at random moments, then
//! resumed. Every run must end with exactly `n_trials` finished trials, no
//! COMPLETE trial lost or duplicated, and every failure recorded with its
//! kind.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value as Json;
use store::{Storage, TrialFilter, TrialState};

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// `memtune --storage DB tune --no-progress [EXTRA] --config CONFIG`, with
/// no storage or fault from the environment.
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

fn tune(db: &Path, config: &Path, fault: Option<&str>) -> std::process::Output {
    let mut cmd = tune_cmd(db, config, &[]);
    if let Some(f) = fault {
        cmd.env("MEMTUNE_FAULT", f);
    }
    cmd.output().unwrap()
}

fn trials(db: &Path, study: &str) -> Vec<store::FrozenTrial> {
    // A runner killed while creating the file leaves no schema: no trials.
    let Ok(s) = Storage::open_existing(db) else {
        return Vec::new();
    };
    match s.study(study) {
        Ok(st) => s.trials(st.study_id, &TrialFilter::default()).unwrap(),
        // Killed before the study was created.
        Err(_) => Vec::new(),
    }
}

/// Finished trials as counted toward n_trials: FAIL ones that were retried
/// do not count.
fn finished(ts: &[store::FrozenTrial]) -> usize {
    let retried: Vec<u64> = ts
        .iter()
        .filter_map(|t| t.system_attrs.get("retry_history"))
        .filter_map(Json::as_array)
        .flatten()
        .filter_map(Json::as_u64)
        .collect();
    ts.iter()
        .filter(|t| match t.state {
            TrialState::Complete | TrialState::Pruned => true,
            TrialState::Fail => !retried.contains(&t.number),
            _ => false,
        })
        .count()
}

fn attr<'a>(t: &'a store::FrozenTrial, key: &str) -> Option<&'a Json> {
    t.user_attrs.get(key)
}

#[test]
fn a_study_on_the_simulated_device_finishes_and_records_memory() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let cfg = write(
        dir.path(),
        "s.toml",
        &common::sim_study("plain", 10, "24GiB", ""),
    );
    let out = tune(&db, &cfg, None);
    let summary = common::ok(out);
    assert!(summary.contains("best: trial"), "{summary}");
    let ts = trials(&db, "plain");
    assert_eq!(ts.len(), 10);
    assert!(ts.iter().all(|t| t.state == TrialState::Complete));
    for t in &ts {
        let micro = attr(t, "micro_batch").and_then(Json::as_u64).unwrap();
        let acc = attr(t, "accumulation_steps")
            .and_then(Json::as_u64)
            .unwrap();
        assert!(micro >= 1 && acc >= 1);
        let lease = attr(t, "lease_bytes").and_then(Json::as_u64).unwrap();
        let peak = attr(t, "peak_bytes").and_then(Json::as_u64).unwrap();
        assert!(
            peak <= lease,
            "trial {} used {peak} > lease {lease}",
            t.number
        );
        assert_eq!(t.intermediate_values.len(), 2);
    }
}

#[test]
fn configurations_that_cannot_fit_are_infeasible_constraints_not_crashes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    // 4 GiB: bert-base (1.8 GB of weights, gradients and AdamW state, plus
    // the process overhead) fits at small micro-batches; bert-large (5.4 GB
    // before any activation) never does. With a constraint every trial
    // meets, a trial that cannot fit is still infeasible.
    let loose = "\n[[constraint]]\nmetric = \"peak_memory\"\nmax = \"100GiB\"\n";
    for (name, extra) in [("small", ""), ("small_constrained", loose)] {
        let text = common::sim_study(name, 8, "4GiB", "") + extra;
        let cfg = write(dir.path(), &format!("{name}.toml"), &text);
        common::ok(tune(&db, &cfg, None));
        every_bert_large_trial_is_infeasible(&trials(&db, name));
    }
}

fn every_bert_large_trial_is_infeasible(ts: &[store::FrozenTrial]) {
    assert_eq!(finished(ts), 8);
    for t in ts {
        let large = t
            .params
            .get("model")
            .is_some_and(|p| p.value() == "bert-large".into());
        if large {
            assert_eq!(t.state, TrialState::Pruned, "trial {}", t.number);
            assert_eq!(attr(t, "oom"), Some(&Json::Bool(true)));
            assert!(attr(t, "oom_config").is_some());
            let c = t.system_attrs["constraints"].as_array().unwrap();
            assert!(
                c.iter().all(|v| v.as_f64().unwrap() > 0.0),
                "trial {}: {c:?}",
                t.number
            );
        } else {
            assert_eq!(t.state, TrialState::Complete, "trial {}", t.number);
        }
    }
}

#[test]
fn aborted_workers_sticky_errors_and_injected_ooms_cost_only_their_trial() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let cfg = write(
        dir.path(),
        "s.toml",
        &common::sim_study("faults", 12, "24GiB", ""),
    );
    let oom_at = 40 + (std::process::id() as u64 % 200);
    let fault = format!("abort@1:epoch=0; sticky@4:epoch=1; oom@6:alloc={oom_at}; abort@9:epoch=1");
    common::ok(tune(&db, &cfg, Some(&fault)));
    let ts = trials(&db, "faults");
    assert_eq!(ts.len(), 12);
    let by_number: BTreeMap<u64, &store::FrozenTrial> = ts.iter().map(|t| (t.number, t)).collect();
    for n in [1, 9] {
        let t = by_number[&n];
        assert_eq!(t.state, TrialState::Fail);
        assert_eq!(attr(t, "error_kind").unwrap(), "worker_died");
        let msg = attr(t, "error_msg").unwrap().as_str().unwrap();
        assert!(msg.contains("SIGABRT"), "{msg}");
        assert!(attr(t, "config").is_some());
    }
    let sticky = by_number[&4];
    assert_eq!(sticky.state, TrialState::Fail);
    assert_eq!(attr(sticky, "cuda_error"), Some(&Json::Bool(true)));
    assert!(
        attr(sticky, "cuda_error_msg")
            .unwrap()
            .as_str()
            .unwrap()
            .contains("illegal")
    );
    // The injected OOM: the step was retried with half the micro-batch and
    // the trial completed, or (injected before the first step) recorded as
    // an OOM with its configuration.
    let oom = by_number[&6];
    match oom.state {
        TrialState::Complete => {
            let retries = attr(oom, "oom_retries").unwrap().as_array().unwrap();
            assert!(!retries.is_empty(), "{:?}", oom.user_attrs);
        }
        TrialState::Pruned => assert_eq!(attr(oom, "oom"), Some(&Json::Bool(true))),
        s => panic!("trial 6 ended {s:?}: {:?}", oom.user_attrs),
    }
    for (n, t) in &by_number {
        if ![1, 4, 6, 9].contains(n) {
            assert_eq!(
                t.state,
                TrialState::Complete,
                "trial {n}: {:?}",
                t.user_attrs
            );
        }
    }
}

/// The runner killed with SIGKILL at random moments (and right after it
/// hands a trial to a worker) at least 20 times, each time resumed by the
/// same command asking for one more trial than before; at the end the
/// study holds exactly the requested number of finished trials.
#[test]
fn runner_killed_twenty_times_then_resumed_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let cfg = write(
        dir.path(),
        "s.toml",
        &common::sim_study("kills", 1, "24GiB", ""),
    );
    let mut rng = (std::process::id() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut completed_before: BTreeMap<u64, f64> = BTreeMap::new();
    let (mut kills, mut target) = (0, 2usize);
    while kills < 20 {
        let existing = if db.exists() {
            trials(&db, "kills").len()
        } else {
            0
        };
        let n = target.to_string();
        let mut cmd = tune_cmd(&db, &cfg, &["--n-trials", &n]);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        let kill_at_start = kills % 3 == 2;
        if kill_at_start {
            // SIGKILL itself right after handing the next trial to a worker.
            cmd.env("MEMTUNE_FAULT", format!("kill-runner@{existing}"));
        }
        let mut child = cmd.spawn().unwrap();
        let status = if kill_at_start {
            child.wait().unwrap()
        } else {
            std::thread::sleep(Duration::from_millis(next() % 800));
            child.kill().ok();
            child.wait().unwrap()
        };
        if !status.success() {
            kills += 1;
        }
        target += 1;
        if !db.exists() {
            continue;
        }
        let ts = trials(&db, "kills");
        // No COMPLETE trial is lost or changed.
        for (n, v) in &completed_before {
            let t = ts.iter().find(|t| t.number == *n).unwrap();
            assert_eq!(t.state, TrialState::Complete, "trial {n}");
            assert_eq!(t.value(), Some(*v), "trial {n}");
        }
        for t in ts.iter().filter(|t| t.state == TrialState::Complete) {
            completed_before.insert(t.number, t.value().unwrap());
        }
        assert!(finished(&ts) <= target, "more trials than asked");
    }
    // The same command once more finishes what the last kill interrupted.
    let n = target.to_string();
    let out = tune_cmd(&db, &cfg, &["--n-trials", &n]).output().unwrap();
    common::ok(out);
    let ts = trials(&db, "kills");
    assert_eq!(finished(&ts), target);
    for (n, v) in &completed_before {
        let t = ts.iter().find(|t| t.number == *n).unwrap();
        assert_eq!((t.state, t.value()), (TrialState::Complete, Some(*v)));
    }
    assert!(ts.iter().all(|t| matches!(
        t.state,
        TrialState::Complete | TrialState::Fail | TrialState::Pruned
    )));
    for t in ts.iter().filter(|t| t.state == TrialState::Fail) {
        assert!(
            attr(t, "error_kind").is_some(),
            "trial {} has no kind",
            t.number
        );
    }
}

/// Ctrl-C, which the terminal sends to the whole process group: the
/// runner stops its workers, fails their trials as `interrupted` (a claimed
/// one not yet started as `not_started`) with WAITING retries, and the same
/// command continues.
#[test]
fn ctrl_c_fails_and_requeues_the_trials_in_flight_then_the_same_command_resumes() {
    stop_the_group_then_resume("ctrlc", libc::SIGINT);
}

/// SIGHUP to the process group (the terminal or SSH session closed) means
/// what Ctrl-C does: the workers outlive it, and the runner interrupts.
#[test]
fn sighup_to_the_group_fails_and_requeues_the_trials_in_flight_like_ctrl_c() {
    stop_the_group_then_resume("hangup", libc::SIGHUP);
}

/// Spawns `cmd` (output piped) in a process group of its own, which a test
/// then signals as a terminal signals its foreground job, with `signal`'s
/// default action: the test may itself run with it ignored (a background
/// job ignores SIGINT, `nohup` SIGHUP), and workers would inherit that.
fn spawn_as_a_terminal_would(mut cmd: Command, signal: i32) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    // SAFETY: `signal` is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(signal, libc::SIG_DFL);
            Ok(())
        });
    }
    cmd.process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Runs a study in a process group of its own, sends `signal` to the group
/// once a trial runs, checks the run was interrupted as Ctrl-C interrupts
/// it, and finishes the study with the same command.
fn stop_the_group_then_resume(study: &str, signal: i32) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let n_trials = 24;
    let cfg = write(
        dir.path(),
        "s.toml",
        &common::sim_study(study, n_trials, "24GiB", ""),
    );
    let child = spawn_as_a_terminal_would(tune_cmd(&db, &cfg, &[]), signal);
    // Wait until some trial is running, then interrupt.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        // The file may exist before its schema does: read it once it opens.
        let running = Storage::open_existing(&db).is_ok()
            && trials(&db, study).iter().any(|t| {
                t.state == TrialState::Running && t.user_attrs.contains_key("lease_bytes")
            });
        if running || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling the process group our child leads.
    unsafe {
        libc::kill(-(child.id() as i32), signal);
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ts = trials(&db, study);
    if out.status.success() {
        // The study finished before the signal landed: nothing to check.
        assert_eq!(finished(&ts), n_trials);
        return;
    }
    assert_eq!(out.status.code(), Some(130), "{stdout}");
    assert!(stdout.contains("interrupted"), "{stdout}");
    let outcomes = || {
        ts.iter()
            .map(|t| (t.number, t.state, attr(t, "error_kind").cloned()))
            .collect::<Vec<_>>()
    };
    // A trial a worker was running fails as `interrupted`; one claimed but
    // not yet handed to a worker (the signal can land in between) as
    // `not_started`. Both are re-enqueued; no worker died of the signal.
    let interrupted: Vec<_> = ts
        .iter()
        .filter(|t| {
            matches!(
                attr(t, "error_kind").and_then(Json::as_str),
                Some("interrupted" | "not_started")
            )
        })
        .collect();
    assert!(!interrupted.is_empty(), "{:?}", outcomes());
    assert!(
        ts.iter()
            .filter(|t| t.state == TrialState::Fail)
            .all(|t| interrupted.iter().any(|i| i.number == t.number)),
        "{:?}",
        outcomes()
    );
    assert!(!ts.iter().any(|t| t.state == TrialState::Running));
    let waiting = ts.iter().filter(|t| t.state == TrialState::Waiting).count();
    assert!(waiting >= interrupted.len());

    common::ok(tune(&db, &cfg, None));
    let ts = trials(&db, study);
    assert_eq!(finished(&ts), n_trials);
    assert!(
        !ts.iter()
            .any(|t| matches!(t.state, TrialState::Running | TrialState::Waiting))
    );
}

/// A second Ctrl-C ends a runner stuck in a call that does not return
/// (`stall-runner`, standing for a database server that hangs mid-query)
/// at once, exit 130; the next run takes up the trial it left RUNNING, as
/// after `kill -9`.
#[test]
fn a_second_ctrl_c_ends_a_stuck_runner_and_the_next_run_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let cfg = write(
        dir.path(),
        "s.toml",
        &common::sim_study("stuck", 3, "24GiB", ""),
    );
    let mut cmd = tune_cmd(&db, &cfg, &[]);
    cmd.env("MEMTUNE_FAULT", "stall-runner@0");
    let mut child = spawn_as_a_terminal_would(cmd, libc::SIGINT);
    // Trial 0 handed to its worker: the runner stalls right after.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !(Storage::open_existing(&db).is_ok()
        && trials(&db, "stuck")
            .iter()
            .any(|t| t.number == 0 && t.user_attrs.contains_key("lease_bytes")))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "trial 0 never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let group = -(child.id() as i32);
    let ctrl_c = || {
        // SAFETY: signalling the process group our child leads.
        unsafe { libc::kill(group, libc::SIGINT) };
    };
    std::thread::sleep(Duration::from_millis(300));
    ctrl_c();
    // The first only asks, and the stalled loop does not look (for an hour).
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the runner was not stuck"
    );
    ctrl_c();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("a second Ctrl-C did not end the stuck runner");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    let ts = trials(&db, "stuck");
    assert!(
        ts.iter()
            .any(|t| t.number == 0 && t.state == TrialState::Running),
        "left as a kill leaves it"
    );
    common::ok(tune(&db, &cfg, None));
    let ts = trials(&db, "stuck");
    assert_eq!(finished(&ts), 3);
    assert!(!ts.iter().any(|t| t.state == TrialState::Running));
}

/// Ctrl-C while the runner is still pricing a trial (a replay of every
/// epoch of its run: 10,000 here, minutes in a debug build) stops the
/// replay between epochs: the runner exits as interrupted and the trial
/// waits for the next run, never failed for it.
#[test]
fn ctrl_c_during_a_long_pricing_replay_is_honoured_between_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let study = common::bert_base_sim_study("long", 1, 10_000, "kind = \"random\"", "");
    let cfg = write(dir.path(), "s.toml", &study);
    let mut child = spawn_as_a_terminal_would(tune_cmd(&db, &cfg, &[]), libc::SIGINT);
    // Claimed and being priced: RUNNING, with no lease yet.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !(Storage::open_existing(&db).is_ok()
        && trials(&db, "long")
            .iter()
            .any(|t| t.state == TrialState::Running))
    {
        assert!(std::time::Instant::now() < deadline, "no trial was claimed");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling the process group our child leads.
    unsafe {
        libc::kill(-(child.id() as i32), libc::SIGINT);
    }
    // A replay to the end takes minutes; between epochs, a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the runner was still pricing a minute after Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{stdout}");
    let ts = trials(&db, "long");
    let states: Vec<_> = ts
        .iter()
        .map(|t| (t.state, attr(t, "error_kind").cloned()))
        .collect();
    assert!(
        ts.iter().all(|t| match t.state {
            TrialState::Fail => matches!(
                attr(t, "error_kind").and_then(Json::as_str),
                Some("interrupted" | "not_started")
            ),
            state => state == TrialState::Waiting,
        }),
        "{states:?}"
    );
    assert!(
        ts.iter().any(|t| t.state == TrialState::Waiting),
        "{states:?}"
    );
}

#[test]
fn a_device_assert_fails_its_trial_alone_and_the_study_finishes() {
    // The legacy setup's worst failure, on the simulated device: after
    // trial 2's first epoch its device loses the context, as after a
    // device-side assert; its next step fails with the sticky error.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let cfg = write(
        dir.path(),
        "s.toml",
        &common::sim_study("assert", 6, "24GiB", ""),
    );
    let summary = common::ok(tune(&db, &cfg, Some("assert@2:epoch=0")));
    let ts = trials(&db, "assert");
    assert_eq!(ts.len(), 6);
    for t in &ts {
        if t.number == 2 {
            assert_eq!(t.state, TrialState::Fail);
            assert_eq!(attr(t, "cuda_error"), Some(&Json::Bool(true)));
            let msg = attr(t, "cuda_error_msg").unwrap().as_str().unwrap();
            assert!(msg.contains("CUDA_ERROR_ASSERT"), "{msg}");
            assert_eq!(t.intermediate_values.len(), 1, "it ran one epoch");
        } else {
            assert_eq!(t.state, TrialState::Complete, "trial {}", t.number);
        }
    }
    let device_errors = summary
        .lines()
        .find(|l| l.trim_start().starts_with("device errors"))
        .unwrap();
    assert!(device_errors.trim_end().ends_with(" 1"), "{summary}");
}

/// How long a faulted run of a few simulated trials may take before the
/// test calls it a hang.
const HANG: Duration = Duration::from_secs(120);

/// `tune` with `fault`, failing the test if the run does not end.
fn tune_within(db: &Path, config: &Path, fault: &str) -> std::process::Output {
    common::output_within(tune_cmd(db, config, &[]).env("MEMTUNE_FAULT", fault), HANG)
}

fn all_complete<'a>(ts: impl IntoIterator<Item = &'a store::FrozenTrial>) {
    for t in ts {
        assert_eq!(
            t.state,
            TrialState::Complete,
            "trial {}: {:?}",
            t.number,
            t.user_attrs
        );
    }
}

/// Trials by number; every trial but `failed` must be COMPLETE.
fn all_complete_but(ts: &[store::FrozenTrial], failed: u64) -> &store::FrozenTrial {
    all_complete(ts.iter().filter(|t| t.number != failed));
    let t = ts.iter().find(|t| t.number == failed).unwrap();
    assert_eq!(t.state, TrialState::Fail, "{:?}", t.user_attrs);
    t
}

#[test]
fn a_device_error_that_leaves_the_context_usable_fails_its_trial_and_the_run_ends() {
    // A missing CUDA library, a context that could not be created, an
    // invalid value: the worker reports a device error and lives on.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let cfg = write(
        dir.path(),
        "s.toml",
        &common::sim_study("device-error", 4, "24GiB", ""),
    );
    let summary = common::ok(tune_within(&db, &cfg, "device-error@1:check=2"));
    let ts = trials(&db, "device-error");
    assert_eq!(ts.len(), 4);
    let failed = all_complete_but(&ts, 1);
    assert_eq!(attr(failed, "cuda_error"), Some(&Json::Bool(true)));
    let msg = attr(failed, "cuda_error_msg").unwrap().as_str().unwrap();
    assert!(msg.contains("CUDA_ERROR_INVALID_VALUE"), "{msg}");
    assert!(summary.contains("device errors"), "{summary}");
}

#[test]
fn an_epoch_the_runner_cannot_read_fails_its_trial_and_ends_its_worker() {
    // A NaN objective, which JSON cannot carry: the worker waits for an
    // answer to an epoch the runner could not read.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let cfg = write(
        dir.path(),
        "s.toml",
        &common::sim_study("nan", 4, "24GiB", ""),
    );
    common::ok(tune_within(&db, &cfg, "nan@1:epoch=0"));
    let ts = trials(&db, "nan");
    assert_eq!(ts.len(), 4);
    let failed = all_complete_but(&ts, 1);
    assert_eq!(
        attr(failed, "error_kind").and_then(Json::as_str),
        Some("worker_protocol")
    );
    let msg = attr(failed, "error_msg").unwrap().as_str().unwrap();
    assert!(msg.contains("null"), "the line it could not read: {msg}");
}

/// A line that looks like a message, written between two trials (after
/// trial 0 ended, before the worker took trial 1) and read by the runner
/// after it handed the worker trial 1, is logged: trial 1 is not failed.
#[test]
fn a_stray_line_between_trials_fails_no_trial() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let study = common::bert_base_sim_study(
        "stray",
        3,
        1,
        "kind = \"random\"\nseed = 3",
        "max_workers = 1",
    );
    let cfg = write(dir.path(), "s.toml", &study);
    common::ok(tune_within(&db, &cfg, "stray-line@0"));
    let ts = trials(&db, "stray");
    assert_eq!(ts.len(), 3);
    all_complete(&ts);
    let log = std::fs::read_to_string(dir.path().join("stray.log")).unwrap();
    assert!(
        log.contains("unexpected output: {\"after trial\": 0"),
        "{log}"
    );
}

#[test]
fn a_trial_past_its_trial_timeout_is_ended_with_its_worker() {
    // A worker stuck in a driver call, or stopped: alive, and silent.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let study = common::sim_study("hang", 4, "24GiB", "")
        .replace("n_trials = 4", "n_trials = 4\ntrial_timeout = \"10s\"");
    let cfg = write(dir.path(), "s.toml", &study);
    common::ok(tune_within(&db, &cfg, "hang@1:epoch=0"));
    let ts = trials(&db, "hang");
    assert_eq!(ts.len(), 4);
    let failed = all_complete_but(&ts, 1);
    assert_eq!(
        attr(failed, "error_kind").and_then(Json::as_str),
        Some("timeout")
    );
    let msg = attr(failed, "error_msg").unwrap().as_str().unwrap();
    assert!(msg.contains("trial_timeout (10.0s)"), "{msg}");
}

fn kinds(ts: &[store::FrozenTrial]) -> Vec<(i64, TrialState, Option<&str>)> {
    ts.iter()
        .map(|t| {
            let kind = attr(t, "error_kind").and_then(Json::as_str);
            (t.number as i64, t.state, kind)
        })
        .collect()
}

/// A worker that dies idle, its next job sent but never read: the trial
/// never ran, so it is retried, not recorded as a death of its own.
#[test]
fn a_job_its_worker_never_took_is_retried() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let study = common::bert_base_sim_study(
        "idle",
        3,
        1,
        "kind = \"random\"\nseed = 3",
        "max_workers = 1",
    );
    let cfg = write(dir.path(), "s.toml", &study);
    common::ok(tune_within(&db, &cfg, "exit-before-start@1"));
    let ts = trials(&db, "idle");
    use TrialState::{Complete, Fail};
    assert_eq!(
        kinds(&ts),
        [
            (0, Complete, None),
            (1, Fail, Some("not_started")),
            (2, Complete, None),
            (3, Complete, None)
        ]
    );
    assert_eq!(finished(&ts), 3);
}

/// Workers that die before every job are not retried forever: after three
/// trials in a row their deaths are recorded, and counted.
#[test]
fn workers_that_die_before_every_job_are_recorded_after_three_retries() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let study = common::bert_base_sim_study(
        "dying",
        2,
        1,
        "kind = \"random\"\nseed = 3",
        "max_workers = 1",
    );
    let cfg = write(dir.path(), "s.toml", &study);
    let faults: Vec<String> = (0..8).map(|n| format!("exit-before-start@{n}")).collect();
    let out = tune(&db, &cfg, Some(&faults.join(";")));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    let ts = trials(&db, "dying");
    use TrialState::Fail;
    assert_eq!(
        kinds(&ts),
        [
            (0, Fail, Some("not_started")),
            (1, Fail, Some("not_started")),
            (2, Fail, Some("not_started")),
            (3, Fail, Some("worker_died")),
            (4, Fail, Some("worker_died"))
        ]
    );
}

/// Timeouts are the trials' own (a slow draw), not a systematic failure:
/// the first three trials timing out alike do not stop the study.
#[test]
fn trials_that_time_out_in_a_row_do_not_stop_the_study() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let study = common::sim_study("slow", 5, "80GiB", "")
        .replace("n_trials = 5", "n_trials = 5\ntrial_timeout = \"1s\"");
    let cfg = write(dir.path(), "s.toml", &study);
    common::ok(tune_within(
        &db,
        &cfg,
        "hang@0:epoch=0;hang@1:epoch=0;hang@2:epoch=0",
    ));
    let ts = trials(&db, "slow");
    assert_eq!(ts.len(), 5);
    let timed_out = ts
        .iter()
        .filter(|t| attr(t, "error_kind").and_then(Json::as_str) == Some("timeout"))
        .count();
    assert_eq!(timed_out, 3);
    assert_eq!(
        ts.iter()
            .filter(|t| t.state == TrialState::Complete)
            .count(),
        2
    );
}

/// The signals a runner takes as "stop" (Ctrl-C, SIGTERM, a closed
/// terminal's SIGHUP) reach its workers too, when sent to the process
/// group; a worker outlives them, so the runner records its trial as
/// interrupted and retries it rather than as a dead worker's.
#[test]
fn a_worker_outlives_the_signals_its_runner_takes_as_stop() {
    use std::io::{BufRead, BufReader};
    let mut worker = Command::new(env!("CARGO_BIN_EXE_memtune"))
        .arg("worker")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Its first line says it is up, its handlers in place.
    let mut ready = String::new();
    BufReader::new(worker.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert!(ready.contains("ready"), "{ready}");
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: signalling our own child.
        unsafe {
            libc::kill(worker.id() as i32, signal);
        }
    }
    // Input closed: it exits as a worker whose runner is done with it.
    drop(worker.stdin.take());
    let status = worker.wait().unwrap();
    assert!(status.success(), "the worker ended {status:?}");
}
