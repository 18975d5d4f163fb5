//! SIGKILL a writer at random moments, 50 times, and check after each kill
//! that the storage is sound (SQLite file or PostgreSQL database), no
//! finished trial was lost, and the trial the writer left RUNNING is failed
//! by `fail_stale_trials` after the grace.

#[macro_use]
mod common;

use common::Backend;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use store::{StudyDirection, TrialFilter, TrialState};

backends!(sigkill_loses_no_finished_trial);

const KILLS: usize = 50;
const GRACE: Duration = Duration::from_millis(50);

fn done_numbers(path: &std::path::Path) -> BTreeSet<i64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // The last line may be cut by the kill; only whole lines count.
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| l.trim().parse().expect("writer logs numbers only"))
        .collect()
}

fn sigkill_loses_no_finished_trial(backend: Backend) {
    let Some(db) = common::fresh(backend, "crash") else {
        return;
    };
    let done = db.dir.path().join("done.log");
    let storage = db.open();
    let study = storage
        .create_study("crash", &[StudyDirection::Minimize])
        .unwrap();
    drop(storage);

    let seed: u64 = std::env::var("STORE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    eprintln!("crash test seed {seed} (STORE_CRASH_SEED to replay)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut failed_total = 0;
    for kill in 0..KILLS {
        let mut child = Command::new(env!("CARGO_BIN_EXE_store-writer"))
            .arg("crash")
            .arg(&db.url)
            .arg("crash")
            .arg(&done)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.random_range(5..120)));
        // The last round kills only once a trial is done (a loaded machine
        // may start every writer too slowly to finish one in 120 ms).
        let deadline = Instant::now() + Duration::from_secs(60);
        while kill + 1 == KILLS && done_numbers(&done).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "kill {kill}: writer exited by itself ({status}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // SAFETY: plain syscall on the pid of our own live child.
        let rc = unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill {kill}: SIGKILL failed");
        child.wait().unwrap();
        db.wait_for_other_sessions();

        let storage = db.open_existing().unwrap();
        // A PostgreSQL server keeps its own files sound; a killed client
        // only aborts its transaction.
        if let Some(conn) = storage.connection() {
            let check: String = conn
                .query_row("PRAGMA integrity_check", [], |r| r.get(0))
                .unwrap();
            assert_eq!(check, "ok", "kill {kill}: integrity_check");
        }

        let trials = storage
            .trials(study.study_id, &TrialFilter::default())
            .unwrap();
        let numbers: Vec<i64> = trials.iter().map(|t| t.number as i64).collect();
        let dense: Vec<i64> = (0..trials.len() as i64).collect();
        assert_eq!(numbers, dense, "kill {kill}: numbers not dense");
        for n in done_numbers(&done) {
            let t = &trials[n as usize];
            assert_eq!(t.state, TrialState::Complete, "kill {kill}: trial {n}");
            assert_eq!(t.values, Some(vec![n as f64 + 0.25]), "trial {n} value");
            assert_eq!(t.params.len(), 1, "trial {n} params");
            assert_eq!(t.params["x"].internal, (n % 97) as f64 / 97.0);
            let expected: Vec<(i64, f64)> = (0..5).map(|s| (s, (n * 1000 + s) as f64)).collect();
            let got: Vec<(i64, f64)> = t
                .intermediate_values
                .iter()
                .map(|(&s, &v)| (s, v))
                .collect();
            assert_eq!(got, expected, "trial {n} intermediates");
        }

        // At most one trial can be left RUNNING by a single-threaded writer.
        let running: Vec<_> = trials
            .iter()
            .filter(|t| t.state == TrialState::Running)
            .collect();
        assert!(running.len() <= 1, "kill {kill}: {} running", running.len());
        std::thread::sleep(GRACE + Duration::from_millis(20));
        let failed = storage
            .fail_stale_trials(study.study_id, GRACE, None)
            .unwrap();
        // A trial killed before its first heartbeat is left alone, as in Optuna.
        let beaten: Vec<i64> = running
            .iter()
            .filter(|t| storage.last_heartbeat(t.trial_id).unwrap().is_some())
            .map(|t| t.trial_id)
            .collect();
        let failed_ids: Vec<i64> = failed.iter().map(|f| f.failed.trial_id).collect();
        assert_eq!(failed_ids, beaten, "kill {kill}: stale trials failed");
        for id in failed_ids {
            assert_eq!(storage.trial(id).unwrap().state, TrialState::Fail);
            failed_total += 1;
        }
        // Leave no unbeaten RUNNING trial behind for the next round's check.
        for t in running
            .iter()
            .filter(|t| storage.last_heartbeat(t.trial_id).unwrap().is_none())
        {
            storage.finish(t.trial_id, TrialState::Fail, &[]).unwrap();
        }
    }
    let finished = done_numbers(&done).len();
    eprintln!(
        "{KILLS} kills: {finished} finished trials intact, {failed_total} stale trials failed"
    );
    assert!(finished > 0, "the writer never finished a trial");
}
