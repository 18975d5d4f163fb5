//! The write API's rules: finished trials are frozen, values are encoded as
//! Optuna encodes them, the queue hands each trial to exactly one worker,
//! stale trials are failed and retried as Optuna's callback does. Every rule
//! holds on both backends, SQLite and PostgreSQL.

#[macro_use]
mod common;

use common::{Backend, TestDb};
use serde_json::json;
use std::time::Duration;
use store::{
    Claim, Distribution, NewTrial, OpenOptions, Owner, Param, RetryPolicy, Storage, StoreError,
    StudyDirection, TrialFilter, TrialState,
};

fn owner(id: &str, stale_after_ms: u64) -> Owner {
    Owner {
        id: id.to_string(),
        stale_after: Duration::from_millis(stale_after_ms),
    }
}

backends!(
    finished_trials_are_frozen,
    value_rules,
    study_lifecycle,
    queue_hands_each_trial_to_one_worker,
    stale_trials_fail_and_retry_like_optuna,
    fail_running_trials_takes_every_running_trial_heartbeat_or_not,
    fail_trial_and_retry_fails_one_trial_and_enqueues_its_copy_at_once,
    best_trial_and_pareto_front,
    owners_judge_each_trial_by_its_own_owners_promise,
    a_trial_taken_over_without_labels_is_reported_once,
    unowned_running_trials_hold_no_place_in_the_budget,
    trials_since_reads_new_and_unfinished_trials_only,
    an_unreadable_heartbeat_counts_as_none,
    a_retry_keeps_python_non_finite_attributes,
    names_longer_than_optuna_stores_are_refused,
);

/// A float parameter's distribution on `[low, high]`.
fn float(low: f64, high: f64) -> Distribution {
    Distribution::float(low, high, false, None).unwrap()
}

/// `None` when the backend is unavailable here (the test then returns).
fn new_store(backend: Backend) -> Option<(TestDb, Storage)> {
    let db = common::fresh(backend, "api")?;
    let s = db.open();
    Some((db, s))
}

fn finished_trials_are_frozen(backend: Backend) {
    let Some((_d, s)) = new_store(backend) else {
        return;
    };
    let st = s.create_study("a", &[StudyDirection::Minimize]).unwrap();
    let t = s.create_trial(st.study_id).unwrap();
    s.finish(t.trial_id, TrialState::Complete, &[1.0]).unwrap();
    for err in [
        s.report_intermediate(t.trial_id, 1, 2.0).unwrap_err(),
        s.finish(t.trial_id, TrialState::Fail, &[]).unwrap_err(),
        s.set_param(t.trial_id, "x", 1.0, &float(0.0, 1.0))
            .unwrap_err(),
        s.set_trial_user_attr(t.trial_id, "k", &json!(1))
            .unwrap_err(),
        s.heartbeat(t.trial_id).unwrap_err(),
    ] {
        assert!(
            matches!(&err, StoreError::TrialFinished { number: 0, state } if state == "COMPLETE"),
            "{err}"
        );
    }
}

fn value_rules(backend: Backend) {
    let Some((_d, s)) = new_store(backend) else {
        return;
    };
    let st = s
        .create_study("a", &[StudyDirection::Minimize, StudyDirection::Maximize])
        .unwrap();
    let t = s.create_trial(st.study_id).unwrap();
    assert!(matches!(
        s.finish(t.trial_id, TrialState::Complete, &[1.0])
            .unwrap_err(),
        StoreError::WrongNumberOfValues {
            expected: 2,
            got: 1,
            ..
        }
    ));
    assert!(matches!(
        s.finish(t.trial_id, TrialState::Complete, &[f64::NAN, 1.0])
            .unwrap_err(),
        StoreError::InvalidValue { .. }
    ));
    assert!(matches!(
        s.finish(t.trial_id, TrialState::Running, &[]).unwrap_err(),
        StoreError::NotAFinishedState { .. }
    ));
    assert!(matches!(
        s.set_param(t.trial_id, "x", f64::NAN, &float(0.0, 1.0))
            .unwrap_err(),
        StoreError::InvalidValue { .. }
    ));
    s.set_param(t.trial_id, "x", 0.5, &float(0.0, 1.0)).unwrap();
    assert!(matches!(
        s.set_param(t.trial_id, "x", 0.5, &float(0.0, 1.0))
            .unwrap_err(),
        StoreError::ParamExists { .. }
    ));
    // Rejected calls wrote nothing; the trial is still open.
    s.finish(
        t.trial_id,
        TrialState::Complete,
        &[f64::NEG_INFINITY, f64::INFINITY],
    )
    .unwrap();
    let got = s.trial(t.trial_id).unwrap();
    assert_eq!(got.values, Some(vec![f64::NEG_INFINITY, f64::INFINITY]));
    assert_eq!(got.params.len(), 1);
    assert!(got.datetime_complete.is_some());
    // Stored as Optuna stores it: NULL value with a type tag.
    let rows = s
        .query_text("SELECT value, value_type FROM trial_values ORDER BY objective")
        .unwrap();
    assert_eq!(
        rows,
        vec![
            vec![None, Some("INF_NEG".into())],
            vec![None, Some("INF_POS".into())]
        ]
    );
}

fn study_lifecycle(backend: Backend) {
    let Some((_d, s)) = new_store(backend) else {
        return;
    };
    assert!(matches!(
        s.create_study("x", &[]).unwrap_err(),
        StoreError::NoDirections { .. }
    ));
    let a = s.create_study("x", &[StudyDirection::Maximize]).unwrap();
    assert!(matches!(
        s.create_study("x", &[StudyDirection::Maximize])
            .unwrap_err(),
        StoreError::StudyExists { .. }
    ));
    assert_eq!(
        s.create_or_load_study("x", &[StudyDirection::Maximize])
            .unwrap(),
        a
    );
    assert!(matches!(
        s.create_or_load_study("x", &[StudyDirection::Minimize])
            .unwrap_err(),
        StoreError::DirectionMismatch { .. }
    ));
    let b = s
        .create_or_load_study("y", &[StudyDirection::Minimize])
        .unwrap();
    assert_ne!(a.study_id, b.study_id);
    let t = s.create_trial(a.study_id).unwrap();
    s.finish(t.trial_id, TrialState::Pruned, &[]).unwrap();
    let list = s.studies().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].n_trials, 1);
    assert_eq!(list[0].counts.get(&TrialState::Pruned), Some(&1));
    // Numbers are per study.
    assert_eq!(s.create_trial(b.study_id).unwrap().number, 0);
}

fn queue_hands_each_trial_to_one_worker(backend: Backend) {
    let Some((db, s)) = new_store(backend) else {
        return;
    };
    let st = s.create_study("q", &[StudyDirection::Minimize]).unwrap();
    let n = 40;
    for i in 0..n {
        let p = Param {
            distribution: float(0.0, 100.0),
            internal: i as f64,
        };
        s.enqueue_trial(
            st.study_id,
            &NewTrial {
                params: vec![("x".into(), p)],
                ..NewTrial::default()
            },
        )
        .unwrap();
    }
    // Four threads, each with its own connection, race to claim.
    let claimed: Vec<Vec<i64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let url = &db.url;
                scope.spawn(move || {
                    let s = Storage::open_url(url, &OpenOptions::default()).unwrap();
                    let mut mine = Vec::new();
                    while let Some(t) = s.claim_waiting(st.study_id).unwrap() {
                        mine.push(t.number);
                    }
                    mine
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<i64> = claimed.concat();
    all.sort();
    assert_eq!(all, (0..n).collect::<Vec<_>>(), "each claimed exactly once");
    let running = s
        .trials(
            st.study_id,
            &TrialFilter {
                states: vec![TrialState::Running],
                attr_key: None,
            },
        )
        .unwrap();
    assert_eq!(running.len(), n as usize);
    assert!(running.iter().all(|t| t.datetime_start.is_some()));
    // Queue empty: create_or_claim creates.
    assert!(matches!(
        s.create_or_claim_trial(st.study_id).unwrap(),
        Claim::Created(t) if t.number == n
    ));
}

fn stale_trials_fail_and_retry_like_optuna(backend: Backend) {
    let Some((_d, s)) = new_store(backend) else {
        return;
    };
    let st = s.create_study("h", &[StudyDirection::Minimize]).unwrap();
    let t = s.create_trial(st.study_id).unwrap();
    s.set_param(t.trial_id, "x", 0.5, &float(0.0, 1.0)).unwrap();
    s.set_trial_user_attr(t.trial_id, "batch", &json!(32))
        .unwrap();
    s.report_intermediate(t.trial_id, 0, 0.1).unwrap();
    s.heartbeat(t.trial_id).unwrap();
    let never_beats = s.create_trial(st.study_id).unwrap();
    let grace = Duration::from_millis(30);

    // Fresh heartbeat: nothing is stale.
    assert!(
        s.fail_stale_trials(st.study_id, Duration::from_secs(60), None)
            .unwrap()
            .is_empty()
    );
    std::thread::sleep(grace * 2);
    let policy = RetryPolicy {
        max_retry: Some(2),
        inherit_intermediate_values: true,
    };
    let out = s
        .fail_stale_trials(st.study_id, grace, Some(&policy))
        .unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].failed, t);
    assert_eq!(s.trial(t.trial_id).unwrap().state, TrialState::Fail);
    assert_eq!(
        s.trial(never_beats.trial_id).unwrap().state,
        TrialState::Running
    );
    let retry = out[0].retry.unwrap();
    let copy = s.trial(retry.trial_id).unwrap();
    assert_eq!(copy.state, TrialState::Waiting);
    assert_eq!(copy.params, s.trial(t.trial_id).unwrap().params);
    assert_eq!(copy.user_attrs["batch"], json!(32));
    assert_eq!(copy.system_attrs["failed_trial"], json!(0));
    assert_eq!(copy.system_attrs["retry_history"], json!([0]));
    assert_eq!(copy.intermediate_values.get(&0), Some(&0.1));

    // The retry dies too: history grows, failed_trial keeps the first number.
    let c = s.claim_waiting(st.study_id).unwrap().unwrap();
    assert_eq!(c, retry);
    s.heartbeat(c.trial_id).unwrap();
    std::thread::sleep(grace * 2);
    let out = s
        .fail_stale_trials(st.study_id, grace, Some(&policy))
        .unwrap();
    let copy2 = s.trial(out[0].retry.unwrap().trial_id).unwrap();
    assert_eq!(copy2.system_attrs["failed_trial"], json!(0));
    assert_eq!(
        copy2.system_attrs["retry_history"],
        json!([0, retry.number])
    );

    // Third failure exceeds max_retry = 2: failed, not re-enqueued.
    let c = s.claim_waiting(st.study_id).unwrap().unwrap();
    s.heartbeat(c.trial_id).unwrap();
    std::thread::sleep(grace * 2);
    let out = s
        .fail_stale_trials(st.study_id, grace, Some(&policy))
        .unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].retry, None);
}

fn fail_running_trials_takes_every_running_trial_heartbeat_or_not(backend: Backend) {
    let Some((_d, s)) = new_store(backend) else {
        return;
    };
    let st = s.create_study("r", &[StudyDirection::Minimize]).unwrap();
    let beaten = s.create_trial(st.study_id).unwrap();
    s.heartbeat(beaten.trial_id).unwrap();
    let never_beats = s.create_trial(st.study_id).unwrap();
    let done = s.create_trial(st.study_id).unwrap();
    s.finish(done.trial_id, TrialState::Complete, &[1.0])
        .unwrap();
    let policy = RetryPolicy {
        max_retry: Some(1),
        inherit_intermediate_values: false,
    };
    let out = s
        .fail_running_trials(
            st.study_id,
            Some(&policy),
            &[("error_kind", json!("stale"))],
        )
        .unwrap();
    let failed: Vec<_> = out.iter().map(|o| o.failed).collect();
    assert_eq!(failed, vec![beaten, never_beats]);
    assert!(out.iter().all(|o| o.retry.is_some()));
    assert_eq!(s.trial(done.trial_id).unwrap().state, TrialState::Complete);
    assert_eq!(
        s.trial(never_beats.trial_id).unwrap().user_attrs["error_kind"],
        json!("stale")
    );
    // The label is the failed trial's, not copied to its retry.
    let retry = s.trial(out[0].retry.unwrap().trial_id).unwrap();
    assert!(!retry.user_attrs.contains_key("error_kind"));
    assert_eq!(
        s.count_trials(st.study_id, &[TrialState::Waiting]).unwrap(),
        2
    );
    // Nothing left running: a second call does nothing.
    assert!(
        s.fail_running_trials(st.study_id, Some(&policy), &[])
            .unwrap()
            .is_empty()
    );
}

fn fail_trial_and_retry_fails_one_trial_and_enqueues_its_copy_at_once(backend: Backend) {
    let Some((_d, s)) = new_store(backend) else {
        return;
    };
    let st = s.create_study("one", &[StudyDirection::Minimize]).unwrap();
    let mine = s.create_trial(st.study_id).unwrap();
    s.set_param(mine.trial_id, "x", 0.5, &float(0.0, 1.0))
        .unwrap();
    let other = s.create_trial(st.study_id).unwrap();
    let policy = RetryPolicy {
        max_retry: Some(1),
        inherit_intermediate_values: false,
    };
    let out = s
        .fail_trial_and_retry(mine, &policy, &[("error_kind", json!("interrupted"))])
        .unwrap()
        .unwrap();
    assert_eq!(out.failed, mine);
    let failed = s.trial(mine.trial_id).unwrap();
    assert_eq!(failed.state, TrialState::Fail);
    assert_eq!(failed.user_attrs["error_kind"], json!("interrupted"));
    let copy = s.trial(out.retry.unwrap().trial_id).unwrap();
    assert_eq!(copy.state, TrialState::Waiting);
    assert_eq!(copy.params, failed.params);
    assert_eq!(copy.system_attrs["retry_history"], json!([mine.number]));
    // Only that trial; and a finished trial is not failed again.
    assert_eq!(s.trial(other.trial_id).unwrap().state, TrialState::Running);
    assert!(
        s.fail_trial_and_retry(mine, &policy, &[])
            .unwrap()
            .is_none()
    );
}

fn best_trial_and_pareto_front(backend: Backend) {
    let Some((_d, s)) = new_store(backend) else {
        return;
    };
    let st = s.create_study("b", &[StudyDirection::Maximize]).unwrap();
    for v in [0.3, 0.9, f64::NEG_INFINITY, 0.9] {
        let t = s.create_trial(st.study_id).unwrap();
        s.finish(t.trial_id, TrialState::Complete, &[v]).unwrap();
    }
    let t = s.create_trial(st.study_id).unwrap();
    s.finish(t.trial_id, TrialState::Pruned, &[5.0]).unwrap();
    assert_eq!(s.best_trial(st.study_id).unwrap().unwrap().number, 1);
    assert_eq!(
        s.count_trials(st.study_id, &[TrialState::Complete])
            .unwrap(),
        4
    );
    assert_eq!(s.count_trials(st.study_id, &[]).unwrap(), 5);
    assert_eq!(
        s.trial_by_number(st.study_id, 4).unwrap().unwrap().state,
        TrialState::Pruned
    );
    assert!(s.trial_by_number(st.study_id, 5).unwrap().is_none());

    let m = s
        .create_study("m", &[StudyDirection::Minimize, StudyDirection::Maximize])
        .unwrap();
    assert!(matches!(
        s.best_trial(m.study_id).unwrap_err(),
        StoreError::MultiObjective { objectives: 2, .. }
    ));
    for v in [[1.0, 1.0], [2.0, 2.0], [2.0, 0.5], [0.5, 0.5]] {
        let t = s.create_trial(m.study_id).unwrap();
        s.finish(t.trial_id, TrialState::Complete, &v).unwrap();
    }
    let front = |id| -> Vec<u64> {
        s.best_trials(id)
            .unwrap()
            .iter()
            .map(|t| t.number)
            .collect()
    };
    assert_eq!(front(m.study_id), vec![0, 1, 3]);

    // As Optuna's `best_trial(s)`: a trial that violates a constraint is
    // passed over; one without constraints, or with all <= 0, is feasible.
    let c = s
        .create_study("c", &[StudyDirection::Minimize, StudyDirection::Maximize])
        .unwrap();
    for (v, constraints) in [
        ([1.0, 1.0], Some(json!([0.0, -1.0]))),
        ([0.5, 3.0], Some(json!([-2.0, 0.5]))),
        ([2.0, 0.5], None),
        ([3.0, 3.0], Some(json!([-1.0, -1.0]))),
    ] {
        let t = s.create_trial(c.study_id).unwrap();
        if let Some(constraints) = constraints {
            s.set_trial_system_attr(t.trial_id, "constraints", &constraints)
                .unwrap();
        }
        s.finish(t.trial_id, TrialState::Complete, &v).unwrap();
    }
    assert_eq!(
        front(c.study_id),
        vec![0, 3],
        "trial 1 dominates but violates"
    );
    let one = s.create_study("c1", &[StudyDirection::Minimize]).unwrap();
    for (v, violation) in [(1.0, 0.0), (0.5, 0.25), (0.8, -1.0)] {
        let t = s.create_trial(one.study_id).unwrap();
        s.set_trial_system_attr(t.trial_id, "constraints", &json!([violation]))
            .unwrap();
        s.finish(t.trial_id, TrialState::Complete, &[v]).unwrap();
    }
    assert_eq!(s.best_trial(one.study_id).unwrap().unwrap().number, 2);
    assert_eq!(front(one.study_id), vec![2]);
}

/// Taken over with neither labels nor a retry, an abandoned trial is FAIL
/// with no `error_kind`, as one an Optuna client failed: it is still
/// reported once, as taken over, not also as adopted.
fn a_trial_taken_over_without_labels_is_reported_once(backend: Backend) {
    let Some((_d, s)) = new_store(backend) else {
        return;
    };
    let st = s.create_study("o", &[StudyDirection::Minimize]).unwrap();
    let gone = s
        .claim_or_create_within(st.study_id, 10, &owner("gone", 50))
        .unwrap()
        .unwrap()
        .trial();
    std::thread::sleep(Duration::from_millis(150));
    let out = s
        .fail_abandoned_trials(st.study_id, &owner("judge", 50), None, &[])
        .unwrap();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!((out[0].failed, out[0].adopted), (gone, false));
    assert_eq!(s.trial(gone.trial_id).unwrap().state, TrialState::Fail);
}

/// A trial is taken over when its heartbeat is older than its own
/// owner's `stale_after`, by any judge but its owner; a trial no owner
/// claimed (an Optuna client that beats, `ask`) is never taken over; an
/// owned trial that an Optuna client failed as stale (FAIL, no
/// `error_kind`) is adopted: labelled and retried.
fn owners_judge_each_trial_by_its_own_owners_promise(backend: Backend) {
    let Some((_d, s)) = new_store(backend) else {
        return;
    };
    let st = s.create_study("o", &[StudyDirection::Minimize]).unwrap();
    let patient = owner("patient", 60_000);
    let hasty = owner("hasty", 50);
    let judge = owner("judge", 50);
    let a = s
        .claim_or_create_within(st.study_id, 10, &patient)
        .unwrap()
        .unwrap()
        .trial();
    let b = s
        .claim_or_create_within(st.study_id, 10, &hasty)
        .unwrap()
        .unwrap()
        .trial();
    let mine = s
        .claim_or_create_within(st.study_id, 10, &judge)
        .unwrap()
        .unwrap()
        .trial();
    let optuna = s.create_trial(st.study_id).unwrap();
    s.heartbeat(optuna.trial_id).unwrap();
    assert_eq!(s.trial_owner(a.trial_id).unwrap(), Some(patient.clone()));
    assert_eq!(s.trial_owner(optuna.trial_id).unwrap(), None);
    assert_eq!(s.owned_running_trials(st.study_id).unwrap(), 3);
    std::thread::sleep(Duration::from_millis(150));
    let policy = RetryPolicy::default();
    let label = [("error_kind", json!("stale"))];
    let out = s
        .fail_abandoned_trials(st.study_id, &judge, Some(&policy), &label)
        .unwrap();
    // Only the hasty owner's: the patient one is within its promise, the
    // judge's own is alive, the Optuna client's is its client's business.
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!((out[0].failed, out[0].adopted), (b, false));
    let retry = s.trial(out[0].retry.unwrap().trial_id).unwrap();
    assert_eq!(retry.state, TrialState::Waiting);
    assert!(
        !retry.system_attrs.contains_key(store::OWNER_KEY),
        "a retry is claimed afresh"
    );
    for t in [a, mine, optuna] {
        assert_eq!(s.trial(t.trial_id).unwrap().state, TrialState::Running);
    }
    // Its own owner never judges its trial stale, however late its beat.
    let late = s
        .claim_or_create_within(st.study_id, 10, &hasty)
        .unwrap()
        .unwrap()
        .trial();
    std::thread::sleep(Duration::from_millis(150));
    let out = s
        .fail_abandoned_trials(st.study_id, &hasty, Some(&policy), &label)
        .unwrap();
    assert!(out.iter().all(|o| o.failed != late), "{out:?}");
    assert_eq!(s.trial(late.trial_id).unwrap().state, TrialState::Running);

    // An Optuna client fails the patient owner's trial as stale (its own
    // rule), without a retry: adopted once (beside the late trial, which
    // any other judge takes over).
    s.finish(a.trial_id, TrialState::Fail, &[]).unwrap();
    let out = s
        .fail_abandoned_trials(st.study_id, &judge, Some(&policy), &label)
        .unwrap();
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!((out[0].failed, out[0].adopted), (late, false));
    assert_eq!((out[1].failed, out[1].adopted), (a, true));
    assert!(out[1].retry.is_some());
    assert_eq!(
        s.trial(a.trial_id).unwrap().user_attrs["error_kind"],
        json!("stale")
    );
    assert!(
        s.fail_abandoned_trials(st.study_id, &judge, Some(&policy), &label)
            .unwrap()
            .is_empty(),
        "adopted twice"
    );
}

/// Trials an owner claimed count toward the budget while they run; an
/// ask/tell client's RUNNING trial counts only once it is told, so one
/// never told holds no place.
fn unowned_running_trials_hold_no_place_in_the_budget(backend: Backend) {
    let Some((_d, s)) = new_store(backend) else {
        return;
    };
    let st = s.create_study("b", &[StudyDirection::Minimize]).unwrap();
    let me = owner("me", 60_000);
    let asked = s.create_trial(st.study_id).unwrap();
    assert_eq!(s.counted_trials(st.study_id).unwrap(), 0);
    let claimed = s
        .claim_or_create_within(st.study_id, 2, &me)
        .unwrap()
        .unwrap();
    let second = s
        .claim_or_create_within(st.study_id, 2, &me)
        .unwrap()
        .unwrap();
    assert_eq!(s.counted_trials(st.study_id).unwrap(), 2);
    assert!(
        s.claim_or_create_within(st.study_id, 2, &me)
            .unwrap()
            .is_none()
    );
    for c in [claimed, second] {
        s.finish(c.trial().trial_id, TrialState::Complete, &[1.0])
            .unwrap();
    }
    assert_eq!(s.counted_trials(st.study_id).unwrap(), 2);
    s.finish(asked.trial_id, TrialState::Complete, &[1.0])
        .unwrap();
    assert_eq!(s.counted_trials(st.study_id).unwrap(), 3);
}

/// What a reader that keeps finished trials must read again: new trials
/// and the ones it saw unfinished, whatever happened to them since.
fn trials_since_reads_new_and_unfinished_trials_only(backend: Backend) {
    let Some((_d, s)) = new_store(backend) else {
        return;
    };
    let st = s.create_study("a", &[StudyDirection::Minimize]).unwrap();
    let other = s.create_study("b", &[StudyDirection::Minimize]).unwrap();
    let done = s.create_trial(st.study_id).unwrap();
    s.finish(done.trial_id, TrialState::Complete, &[1.0])
        .unwrap();
    let open = s.create_trial(st.study_id).unwrap();
    s.set_param(open.trial_id, "x", 0.5, &float(0.0, 1.0))
        .unwrap();
    let ids = |v: &[store::FrozenTrial]| v.iter().map(|t| t.trial_id).collect::<Vec<_>>();

    let all = s.trials_since(st.study_id, None, &[]).unwrap();
    assert_eq!(ids(&all), [done.trial_id, open.trial_id]);
    let seen = Some(open.trial_id);
    assert!(s.trials_since(st.study_id, seen, &[]).unwrap().is_empty());

    // The open trial finishes, another study gets a trial, this one a new one.
    s.finish(open.trial_id, TrialState::Complete, &[0.25])
        .unwrap();
    s.create_trial(other.study_id).unwrap();
    let new = s.create_trial(st.study_id).unwrap();
    let again = s.trials_since(st.study_id, seen, &[open.trial_id]).unwrap();
    assert_eq!(ids(&again), [open.trial_id, new.trial_id]);
    assert_eq!(again[0].state, TrialState::Complete);
    assert_eq!(again[0].values, Some(vec![0.25]));
    assert_eq!(again[0].params["x"].internal, 0.5);
    assert_eq!(again[1].state, TrialState::Running);
}

/// A heartbeat that does not read as a time (a year past Python's 9999,
/// a month 13, text) neither panics nor stops the judging: the trial is
/// judged as one that never beat (left to its client), the others as ever.
fn an_unreadable_heartbeat_counts_as_none(backend: Backend) {
    let Some((_d, s)) = new_store(backend) else {
        return;
    };
    let st = s.create_study("hb", &[StudyDirection::Minimize]).unwrap();
    let gone = owner("gone", 50);
    // PostgreSQL's timestamp column holds only calendar times, up to year
    // 294276; an SQLite file holds any text.
    let beats: &[&str] = if backend == Backend::Postgres {
        &["200000-01-01 00:00:00"]
    } else {
        &["300000-01-01 00:00:00", "2001-13-01 00:00:00", "yesterday"]
    };
    let mut odd = Vec::new();
    for beat in beats {
        let t = s
            .claim_or_create_within(st.study_id, 10, &gone)
            .unwrap()
            .unwrap()
            .trial();
        s.execute_batch(&format!(
            "UPDATE trial_heartbeats SET heartbeat = '{beat}' WHERE trial_id = {}",
            t.trial_id
        ))
        .unwrap();
        odd.push(t);
    }
    let stale = s
        .claim_or_create_within(st.study_id, 10, &gone)
        .unwrap()
        .unwrap()
        .trial();
    std::thread::sleep(Duration::from_millis(150));
    let judge = owner("judge", 50);
    let label = [("error_kind", json!("stale"))];
    let out = s
        .fail_abandoned_trials(st.study_id, &judge, Some(&RetryPolicy::default()), &label)
        .unwrap();
    assert_eq!(
        out.iter().map(|o| o.failed).collect::<Vec<_>>(),
        vec![stale],
        "{out:?}"
    );
    for t in odd {
        assert_eq!(s.trial(t.trial_id).unwrap().state, TrialState::Running);
    }
}

/// An abandoned trial's retry holds its attributes as stored: Python's
/// `json.dumps` writes non-finite floats as `NaN`, `Infinity` and
/// `-Infinity`, and the copy keeps those tokens, not strings.
fn a_retry_keeps_python_non_finite_attributes(backend: Backend) {
    let Some((_d, s)) = new_store(backend) else {
        return;
    };
    let st = s.create_study("nf", &[StudyDirection::Minimize]).unwrap();
    let t = s
        .claim_or_create_within(st.study_id, 10, &owner("gone", 50))
        .unwrap()
        .unwrap()
        .trial();
    let stored = [
        (
            "trial_user_attributes",
            "loss_curve",
            "[0.5, NaN, Infinity]",
        ),
        ("trial_user_attributes", "best", "-Infinity"),
        (
            "trial_system_attributes",
            "memtune:spread",
            "{\"lo\": -Infinity, \"hi\": NaN}",
        ),
    ];
    for (table, key, json) in stored {
        s.execute_batch(&format!(
            "INSERT INTO {table} (trial_id, \"key\", value_json) VALUES ({}, '{key}', '{json}')",
            t.trial_id
        ))
        .unwrap();
    }
    std::thread::sleep(Duration::from_millis(150));
    let out = s
        .fail_abandoned_trials(
            st.study_id,
            &owner("judge", 50),
            Some(&RetryPolicy::default()),
            &[],
        )
        .unwrap();
    let retry = out[0].retry.unwrap();
    for (table, key, json) in stored {
        let copied = s
            .query_text(&format!(
                "SELECT value_json FROM {table} WHERE trial_id = {} AND \"key\" = '{key}'",
                retry.trial_id
            ))
            .unwrap();
        assert_eq!(copied, vec![vec![Some(json.to_string())]], "{key}");
    }
    let copy = s.trial(retry.trial_id).unwrap();
    assert!(!copy.system_attrs.contains_key(store::OWNER_KEY));
    assert_eq!(copy.system_attrs["retry_history"], json!([t.number]));
}

/// Optuna's schema keeps study names and attribute keys in `VARCHAR(512)`
/// (PostgreSQL enforces it, SQLite does not): a longer one is refused on
/// both, named, before anything is written; 512 characters are stored.
fn names_longer_than_optuna_stores_are_refused(backend: Backend) {
    let Some((_d, s)) = new_store(backend) else {
        return;
    };
    let long = "a".repeat(600);
    let longest = "é".repeat(512);
    let refused = |e: StoreError, what: &str| {
        assert!(
            matches!(&e, StoreError::NameTooLong { what: w, chars: 600, .. } if *w == what),
            "{e}"
        );
        assert!(e.to_string().starts_with(&format!("{what} `aaaa")), "{e}");
    };
    let dirs = [StudyDirection::Minimize];
    refused(s.create_study(&long, &dirs).unwrap_err(), "study name");
    refused(
        s.create_or_load_study(&long, &dirs).unwrap_err(),
        "study name",
    );
    assert!(s.studies().unwrap().is_empty());
    let st = s.create_study(&longest, &dirs).unwrap();
    let t = s.create_trial(st.study_id).unwrap();
    let v = json!(1);
    refused(
        s.set_study_user_attr(st.study_id, &long, &v).unwrap_err(),
        "attribute key",
    );
    refused(
        s.set_study_system_attr(st.study_id, &long, &v).unwrap_err(),
        "attribute key",
    );
    refused(
        s.set_trial_user_attr(t.trial_id, &long, &v).unwrap_err(),
        "attribute key",
    );
    refused(
        s.set_trial_system_attr(t.trial_id, &long, &v).unwrap_err(),
        "attribute key",
    );
    let queued = NewTrial {
        user_attrs: vec![(long.clone(), v.clone())],
        ..NewTrial::default()
    };
    refused(
        s.enqueue_trial(st.study_id, &queued).unwrap_err(),
        "attribute key",
    );
    s.set_trial_user_attr(t.trial_id, &longest, &v).unwrap();
    let stored = s.trial(t.trial_id).unwrap();
    assert_eq!(stored.user_attrs.keys().collect::<Vec<_>>(), vec![&longest]);
    assert!(stored.system_attrs.is_empty());
    assert_eq!(
        s.trials(st.study_id, &TrialFilter::default())
            .unwrap()
            .len(),
        1
    );
}
