//! A storage that stops answering for a while: PostgreSQL connections
//! terminated by an administrator (`pg_terminate_backend`), a server
//! restart, a server that stays down; SQLite's I/O errors and a lock held
//! by another process. Every operation either lands exactly once after
//! the outage or, past `reconnect_for`, fails with `Unavailable`.
//!
//! Each PostgreSQL test here has a server of its own: restarts and
//! terminations must not reach the other tests' connections.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use store::pg_server::PgServer;
use store::{OpenOptions, Storage, StoreError, StudyDirection, TrialFilter, TrialState};

/// A server of this test's own with one empty database, or `None` (skip)
/// where none can be started outside CI.
fn own_server(db: &str) -> Option<(PgServer, String)> {
    match PgServer::start() {
        Ok(server) => {
            let url = server.create_database(db).unwrap();
            Some((server, url))
        }
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
            panic!("CI must run the PostgreSQL tests, but no server could be started: {e}")
        }
        Err(e) => {
            eprintln!("skipping: no PostgreSQL server could be started: {e}");
            None
        }
    }
}

fn owner() -> store::Owner {
    store::Owner {
        id: "test".into(),
        stale_after: Duration::from_secs(60),
    }
}

fn quick_options() -> OpenOptions {
    OpenOptions {
        max_backoff: Duration::from_millis(200),
        ..OpenOptions::default()
    }
}

/// `pg_terminate_backend` on the storage's connection between two
/// operations, and while a heartbeat thread writes: both carry on, on new
/// connections.
#[test]
fn a_terminated_postgres_connection_is_replaced() {
    let Some((server, url)) = own_server("terminated") else {
        return;
    };
    let storage = Storage::open_url(&url, &quick_options()).unwrap();
    let study = storage
        .create_study("s", &[StudyDirection::Maximize])
        .unwrap();
    let trial = storage.create_trial(study.study_id).unwrap();
    assert!(storage.recovered_at().is_none());
    assert!(server.terminate_connections("terminated").unwrap() >= 1);
    storage.heartbeat(trial.trial_id).unwrap();
    assert!(
        storage.recovered_at().is_some(),
        "the lost connection was noticed"
    );
    storage.report_intermediate(trial.trial_id, 0, 0.5).unwrap();
    server.terminate_connections("terminated").unwrap();
    storage
        .finish(trial.trial_id, TrialState::Complete, &[0.7])
        .unwrap();
    let t = storage.trial(trial.trial_id).unwrap();
    assert_eq!((t.state, t.value()), (TrialState::Complete, Some(0.7)));
}

/// Claims made in a loop while every connection to the database is
/// terminated every few milliseconds (so some are cut during `COMMIT`):
/// each claim the loop was given is one stored trial, none was made twice
/// or lost, and the numbers are dense. A claim whose `COMMIT` was cut is
/// resolved by asking the server whether it committed.
#[test]
fn claims_cut_off_at_any_moment_land_exactly_once() {
    let Some((server, url)) = own_server("cut") else {
        return;
    };
    let storage = Storage::open_url(&url, &quick_options()).unwrap();
    let study = storage
        .create_study("s", &[StudyDirection::Maximize])
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let cuts = Arc::new(AtomicU64::new(0));
    let killer = {
        let (stop, cuts) = (Arc::clone(&stop), Arc::clone(&cuts));
        std::thread::spawn(move || {
            let mut pause = 17u64;
            while !stop.load(Ordering::Relaxed) {
                pause = (pause * 7 + 13) % 61;
                std::thread::sleep(Duration::from_millis(20 + pause));
                let n = server.terminate_connections("cut").unwrap();
                cuts.fetch_add(n, Ordering::Relaxed);
            }
            server
        })
    };
    let mut claimed = BTreeSet::new();
    // Three seconds, and on a loaded machine until the connection has been
    // cut a dozen times.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3)
        || (cuts.load(Ordering::Relaxed) <= 10 && start.elapsed() < Duration::from_secs(120))
    {
        let claim = storage
            .claim_or_create_within(study.study_id, usize::MAX, &owner())
            .unwrap()
            .unwrap();
        assert!(
            claimed.insert(claim.trial().number),
            "trial {} claimed twice",
            claim.trial().number
        );
    }
    stop.store(true, Ordering::Relaxed);
    let _server = killer.join().unwrap();
    let cuts = cuts.load(Ordering::Relaxed);
    let stored: Vec<i64> = storage
        .trials(study.study_id, &TrialFilter::default())
        .unwrap()
        .iter()
        .map(|t| i64::try_from(t.number).unwrap())
        .collect();
    eprintln!("{} claims, {cuts} connections terminated", claimed.len());
    assert!(cuts > 10, "the connection was hardly cut ({cuts})");
    assert_eq!(stored, claimed.iter().copied().collect::<Vec<_>>());
    assert_eq!(stored, (0..stored.len() as i64).collect::<Vec<_>>());
}

/// The server commits, and the connection is cut before its answer
/// reaches us (a proxy drops it right after the server's `COMMIT`
/// completion): the write is reported done, and done once, not run again.
#[test]
fn a_commit_whose_answer_is_lost_is_neither_lost_nor_repeated() {
    let Some((server, url)) = own_server("lostcommit") else {
        return;
    };
    let proxy = CommitCutter::start(server.port());
    let through_proxy = url.replace(
        &format!(":{}/", server.port()),
        &format!(":{}/", proxy.port),
    );
    let storage = Storage::open_url(&through_proxy, &quick_options()).unwrap();
    let study = storage
        .create_study("s", &[StudyDirection::Maximize])
        .unwrap();
    proxy.arm.store(true, Ordering::SeqCst);
    let t = storage.create_trial(study.study_id).unwrap();
    assert!(!proxy.arm.load(Ordering::SeqCst), "the COMMIT was not cut");
    assert!(storage.recovered_at().is_some());
    let numbers: Vec<i64> = storage
        .trials(study.study_id, &TrialFilter::default())
        .unwrap()
        .iter()
        .map(|t| i64::try_from(t.number).unwrap())
        .collect();
    assert_eq!(
        numbers,
        vec![t.number],
        "the committed trial was made again"
    );
}

/// A TCP proxy in front of a server that, when armed, closes the client's
/// connection instead of passing on the server's `CommandComplete` for a
/// `COMMIT`, then disarms.
struct CommitCutter {
    port: u16,
    arm: Arc<AtomicBool>,
}

impl CommitCutter {
    fn start(upstream: u16) -> CommitCutter {
        use std::io::{Read, Write};
        use std::net::{Shutdown, TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let arm = Arc::new(AtomicBool::new(false));
        let armed = Arc::clone(&arm);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let server = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
                let (mut c_read, mut s_write) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 8192];
                    while let Ok(n) = c_read.read(&mut buf) {
                        if n == 0 || s_write.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_write.shutdown(Shutdown::Both);
                });
                let (mut s_read, mut c_write) = (server, client);
                let armed = Arc::clone(&armed);
                std::thread::spawn(move || {
                    // CommandComplete ('C', length 11, "COMMIT\0").
                    const DONE: &[u8] = b"C\0\0\0\x0bCOMMIT\0";
                    let mut buf = [0u8; 8192];
                    while let Ok(n) = s_read.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let chunk = &buf[..n];
                        if chunk.windows(DONE.len()).any(|w| w == DONE)
                            && armed.swap(false, Ordering::SeqCst)
                        {
                            let _ = c_write.shutdown(Shutdown::Both);
                            let _ = s_read.shutdown(Shutdown::Both);
                            return;
                        }
                        if c_write.write_all(chunk).is_err() {
                            break;
                        }
                    }
                    let _ = c_write.shutdown(Shutdown::Both);
                });
            }
        });
        CommitCutter { port, arm }
    }
}

/// A server restart (stopped, down for two seconds, started again) while
/// a writer and a heartbeat thread keep working: neither sees an error.
#[test]
fn a_postgres_restart_is_waited_out() {
    let Some((server, url)) = own_server("restart") else {
        return;
    };
    let storage = Storage::open_url(&url, &quick_options()).unwrap();
    let study = storage
        .create_study("s", &[StudyDirection::Maximize])
        .unwrap();
    let beating = storage.create_trial(study.study_id).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let beater = {
        let (url, stop) = (url.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let s = Storage::open_url(&url, &quick_options()).unwrap();
            let mut beats = 0;
            while !stop.load(Ordering::Relaxed) {
                s.heartbeat(beating.trial_id).unwrap();
                beats += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            beats
        })
    };
    let restarter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        server.restart(Duration::from_secs(2)).unwrap();
        server
    });
    let start = Instant::now();
    let mut made = 0;
    // Until the server is back (a loaded machine may start `pg_ctl` late).
    while start.elapsed() < Duration::from_secs(4) || !restarter.is_finished() {
        let t = storage.create_trial(study.study_id).unwrap();
        storage
            .finish(t.trial_id, TrialState::Complete, &[made as f64])
            .unwrap();
        made += 1;
    }
    let _server = restarter.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    assert!(beater.join().unwrap() > 0);
    assert!(storage.recovered_at().is_some(), "the restart was noticed");
    let ts = storage
        .trials(study.study_id, &TrialFilter::default())
        .unwrap();
    assert_eq!(ts.len(), made + 1);
    assert_eq!(
        ts.iter()
            .filter(|t| t.state == TrialState::Complete)
            .count(),
        made
    );
}

/// A storage opened while a server this process has reached is down (a
/// restart) waits for it; a server never reached where nothing listens
/// (a mistyped port) is an error at once.
#[test]
fn opening_a_restarting_server_waits_and_a_wrong_port_does_not() {
    let Some((server, url)) = own_server("reopen") else {
        return;
    };
    drop(Storage::open_url(&url, &quick_options()).unwrap());
    let port = server.port();
    server.stop().unwrap();
    let restarter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        server.start_again().unwrap();
        server
    });
    let storage = Storage::open_url(&url, &quick_options()).unwrap();
    let study = storage
        .create_study("s", &[StudyDirection::Maximize])
        .unwrap();
    let _server = restarter.join().unwrap();
    assert_eq!(storage.study("s").unwrap().study_id, study.study_id);

    let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let wrong = url.replace(
        &format!(":{port}/"),
        &format!(":{}/", unused.local_addr().unwrap().port()),
    );
    drop(unused);
    assert_ne!(wrong, url);
    let start = Instant::now();
    let err = match Storage::open_url(&wrong, &quick_options()) {
        Ok(_) => panic!("nothing listens on {wrong}"),
        Err(e) => e,
    };
    assert!(start.elapsed() < Duration::from_secs(5), "{err}");
    assert!(matches!(err, StoreError::Postgres { .. }), "{err:?}");
}

/// A server that stays down longer than `reconnect_for`: the operation
/// fails with `Unavailable`, naming the storage and how long it tried,
/// never with the password.
#[test]
fn a_server_down_too_long_is_an_unavailable_error() {
    let Some((server, url)) = own_server("down") else {
        return;
    };
    let with_password = url.replace("postgres@", "postgres:hunter2@");
    let opts = OpenOptions {
        reconnect_for: Duration::from_millis(800),
        max_backoff: Duration::from_millis(100),
        ..OpenOptions::default()
    };
    let storage = Storage::open_url(&with_password, &opts).unwrap();
    let study = storage
        .create_study("s", &[StudyDirection::Maximize])
        .unwrap();
    server.stop().unwrap();
    let err = storage.create_trial(study.study_id).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}");
    assert!(text.contains("unavailable for"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    server.start_again().unwrap();
    // Back up: the same storage works again.
    storage.create_trial(study.study_id).unwrap();
}

/// SQLite I/O errors (a network file system's blip) are retried: the
/// write lands once.
#[test]
fn sqlite_io_errors_are_retried() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::open_with(dir.path().join("s.db"), &quick_options()).unwrap();
    let study = storage
        .create_study("s", &[StudyDirection::Maximize])
        .unwrap();
    storage.inject_io_errors(3);
    let t = storage.create_trial(study.study_id).unwrap();
    assert!(storage.recovered_at().is_some());
    assert_eq!(t.number, 0);
    assert_eq!(
        storage
            .trials(study.study_id, &TrialFilter::default())
            .unwrap()
            .len(),
        1
    );
    // Errors that outlast reconnect_for end in Unavailable.
    let impatient = OpenOptions {
        reconnect_for: Duration::from_millis(300),
        max_backoff: Duration::from_millis(50),
        ..OpenOptions::default()
    };
    let storage = Storage::open_with(dir.path().join("s.db"), &impatient).unwrap();
    storage.inject_io_errors(u32::MAX);
    let err = storage.create_trial(study.study_id).unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err:?}");
}

/// Another process holds SQLite's write lock for longer than the busy
/// timeout: the write waits it out and lands.
#[test]
fn a_long_sqlite_lock_is_waited_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let opts = OpenOptions {
        busy_timeout: Duration::from_millis(100),
        ..OpenOptions::default()
    };
    let storage = Storage::open_with(&path, &opts).unwrap();
    let study = storage
        .create_study("s", &[StudyDirection::Maximize])
        .unwrap();
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let start = Instant::now();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        holder.execute_batch("COMMIT").unwrap();
    });
    storage.create_trial(study.study_id).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(1000));
    release.join().unwrap();
    drop(storage);

    // Opening waits too (its checks read the file), in rollback mode as
    // Optuna leaves a file.
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder
        .execute_batch("PRAGMA journal_mode=DELETE; BEGIN EXCLUSIVE")
        .unwrap();
    let start = Instant::now();
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        holder.execute_batch("COMMIT").unwrap();
    });
    let storage = Storage::open_with(&path, &opts).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(1000));
    assert_eq!(storage.study("s").unwrap().study_id, study.study_id);
    release.join().unwrap();
}

/// A server that takes the TCP connection and never answers (stopped with
/// SIGSTOP, hung, or not PostgreSQL): opening fails after the URL's
/// `connect_timeout` for the connect and once more for the startup,
/// naming the wait, instead of hanging.
#[test]
fn a_server_that_never_answers_is_an_error_not_a_hang() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts and holds each connection open, saying nothing.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    let url = format!(
        "postgresql://memtune:secret@127.0.0.1:{port}/studies?sslmode=disable&connect_timeout=1"
    );
    let start = Instant::now();
    let err = match Storage::open_url(&url, &quick_options()) {
        Ok(_) => panic!("a silent server opened"),
        Err(e) => e,
    };
    assert!(start.elapsed() < Duration::from_secs(10), "{err}");
    assert!(matches!(err, StoreError::Unanswered { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("did not finish within 2 s") && !text.contains("secret"),
        "{text}"
    );
}
