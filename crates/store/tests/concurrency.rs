//! 8 processes x 250 trials x 10 intermediate values on one storage (an
//! SQLite file, a PostgreSQL database): every trial and value lands, numbers
//! are dense and unique, and no writer ever sees "database is locked" or a
//! serialization failure (a writer exits non-zero on any error).

#[macro_use]
mod common;

use common::Backend;
use std::collections::BTreeSet;
use std::process::Command;
use store::{OpenOptions, Storage, StudyDirection, TrialFilter, TrialState};

backends!(
    eight_processes_lose_nothing,
    claims_within_a_budget_never_overshoot
);

const WORKERS: usize = 8;
const TRIALS: usize = 250;
const STEPS: i64 = 10;

fn eight_processes_lose_nothing(backend: Backend) {
    let Some(db) = common::fresh(backend, "load") else {
        return;
    };
    let storage = db.open();
    let study = storage
        .create_study("load", &[StudyDirection::Minimize])
        .unwrap();

    // synchronous=NORMAL keeps the test fast on slow CI disks; durability
    // against process kills is the same (see the crash test).
    let children: Vec<_> = (0..WORKERS)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_store-writer"))
                .args(["load"])
                .arg(&db.url)
                .args(["load", &TRIALS.to_string(), &STEPS.to_string(), "normal"])
                .output_async()
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "worker {i} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprint!("worker {i}: {}", String::from_utf8_lossy(&out.stdout));
    }

    let trials = storage
        .trials(study.study_id, &TrialFilter::default())
        .unwrap();
    assert_eq!(trials.len(), WORKERS * TRIALS);
    let numbers: BTreeSet<i64> = trials.iter().map(|t| t.number as i64).collect();
    assert_eq!(numbers, (0..(WORKERS * TRIALS) as i64).collect());
    for t in &trials {
        assert_eq!(t.state, TrialState::Complete, "trial {}", t.number);
        assert_eq!(t.values, Some(vec![t.number as f64 + 0.25]));
        assert_eq!(t.params.len(), 1);
        let expected: Vec<(i64, f64)> = (0..STEPS)
            .map(|s| (s, (t.number as i64 * 1000 + s) as f64))
            .collect();
        let got: Vec<(i64, f64)> = t
            .intermediate_values
            .iter()
            .map(|(&s, &v)| (s, v))
            .collect();
        assert_eq!(got, expected, "trial {}", t.number);
    }
}

trait SpawnPiped {
    fn output_async(&mut self) -> std::process::Child;
}

impl SpawnPiped for Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// Eight connections claiming from one study with a budget of 40, while
/// two trials wait in the queue and one FAIL was retried (it does not
/// count): every WAITING trial is claimed exactly once, exactly 40 trials
/// count, and every claimed trial has its first heartbeat.
fn claims_within_a_budget_never_overshoot(backend: Backend) {
    const BUDGET: usize = 40;
    let Some(db) = common::fresh(backend, "budget") else {
        return;
    };
    let storage = db.open();
    let study = storage
        .create_study("budget", &[StudyDirection::Maximize])
        .unwrap();
    let failed = storage.create_trial(study.study_id).unwrap();
    storage.heartbeat(failed.trial_id).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let policy = store::RetryPolicy {
        max_retry: Some(1),
        inherit_intermediate_values: false,
    };
    let stale = storage
        .fail_stale_trials(
            study.study_id,
            std::time::Duration::from_millis(1),
            Some(&policy),
        )
        .unwrap();
    assert_eq!(stale.len(), 1);
    storage
        .enqueue_trial(study.study_id, &store::NewTrial::default())
        .unwrap();
    assert_eq!(storage.counted_trials(study.study_id).unwrap(), 2);

    let claimed: Vec<Vec<store::Claim>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..WORKERS)
            .map(|_| {
                let url = &db.url;
                scope.spawn(move || {
                    let s = Storage::open_url(url, &OpenOptions::default()).unwrap();
                    let owner = store::Owner {
                        id: format!("{:?}", std::thread::current().id()),
                        stale_after: std::time::Duration::from_secs(60),
                    };
                    let mut mine = Vec::new();
                    while let Some(c) = s
                        .claim_or_create_within(study.study_id, BUDGET, &owner)
                        .unwrap()
                    {
                        s.finish(c.trial().trial_id, TrialState::Complete, &[1.0])
                            .unwrap();
                        mine.push(c);
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all: Vec<store::Claim> = claimed.into_iter().flatten().collect();
    let queued = all
        .iter()
        .filter(|c| matches!(c, store::Claim::Claimed(_)))
        .count();
    assert_eq!(queued, 2, "each WAITING trial claimed once");
    // The retried FAIL does not count; its WAITING retry does.
    assert_eq!(all.len(), BUDGET);
    assert_eq!(storage.counted_trials(study.study_id).unwrap(), BUDGET);
    assert_eq!(storage.owned_running_trials(study.study_id).unwrap(), 0);
    let trials = storage
        .trials(study.study_id, &TrialFilter::default())
        .unwrap();
    assert_eq!(trials.len(), BUDGET + 1);
    let hb = storage
        .query_text("SELECT count(*) FROM trial_heartbeats")
        .unwrap();
    assert_eq!(
        hb,
        vec![vec![Some((BUDGET + 1).to_string())]],
        "every claim beats at once"
    );
}
