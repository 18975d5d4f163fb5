//! What a study left alone for a week meets: its database connection cut
//! (`pg_terminate_backend`) and its server restarted, an Optuna client with
//! heartbeats beside it, its runner killed again and again, a machine
//! loaded with busy loops and fsyncs, a password in its URL, clients'
//! trials never told, configurations that fit nowhere, and an Optuna file
//! in rollback-journal mode. Every study here runs on the simulated device
//! (a trial takes milliseconds).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use store::pg_server::PgServer;
use store::{Storage, TrialFilter, TrialState};

fn study(name: &str, n_trials: usize, runner_extra: &str) -> String {
    common::bert_base_sim_study(
        name,
        n_trials,
        2,
        "kind = \"random\"\nseed = 3",
        runner_extra,
    )
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn tune(url: &str, cfg: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtune"));
    cmd.arg("--storage")
        .arg(url)
        .args(["tune", "--no-progress", "--config"])
        .arg(cfg)
        .current_dir(dir)
        .env_remove("MEMTUNE_STORAGE")
        .env_remove("MEMTUNE_FAULT");
    cmd
}

fn stored(url: &str, name: &str) -> Vec<store::FrozenTrial> {
    let opts = store::OpenOptions {
        create: false,
        ..store::OpenOptions::default()
    };
    let s = Storage::open_url(url, &opts).unwrap();
    let study = s.study(name).unwrap();
    s.trials(study.study_id, &TrialFilter::default()).unwrap()
}

/// Whether study `name` has a trial yet; `false` where the study, or an
/// answer, is not there (a connection cut by the test itself).
fn has_trials(url: &str, name: &str) -> bool {
    let opts = store::OpenOptions {
        create: false,
        reconnect_for: Duration::ZERO,
        ..store::OpenOptions::default()
    };
    let Ok(s) = Storage::open_url(url, &opts) else {
        return false;
    };
    s.study(name)
        .and_then(|study| s.trials(study.study_id, &TrialFilter::default()))
        .is_ok_and(|ts| !ts.is_empty())
}

fn counted(url: &str, name: &str) -> usize {
    let s = Storage::open_url(url, &store::OpenOptions::default()).unwrap();
    s.counted_trials(s.study(name).unwrap().study_id).unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

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
            eprintln!("skipping: no PostgreSQL server: {e}");
            None
        }
    }
}

/// A runner whose connections are terminated every 100-250 ms
/// (`pg_terminate_backend`) and whose server is restarted (down a second)
/// mid-study carries on: exit 0, exactly `n_trials` COMPLETE, none FAIL.
#[test]
fn a_runner_survives_terminated_connections_and_a_server_restart() {
    let Some((server, url)) = own_server("blips") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let n_trials = 40;
    let cfg = write(
        dir.path(),
        "s.toml",
        &study(
            "blips",
            n_trials,
            "heartbeat = \"200ms\"\nstale_after = \"3s\"\nmax_workers = 2",
        )
        .replace("epochs = 2", "epochs = 4"),
    );
    let mut runner = tune(&url, &cfg, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut cuts = 0;
    let mut restarted = false;
    let mut pause = 100;
    while runner.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(300) {
        std::thread::sleep(Duration::from_millis(pause));
        pause = 100 + (pause * 7 + 31) % 150;
        // A runner that never reached the server is told at once (a wrong
        // URL, by design): the restart comes once it has stored a trial.
        if !restarted && start.elapsed() > Duration::from_millis(1500) && has_trials(&url, "blips")
        {
            server.restart(Duration::from_secs(1)).unwrap();
            restarted = runner.try_wait().unwrap().is_none();
            continue;
        }
        cuts += server.terminate_connections("blips").unwrap_or(0);
    }
    let out = runner.wait_with_output().unwrap();
    let log = text(&out);
    eprintln!("{cuts} connections terminated, restarted mid-study: {restarted}");
    assert!(out.status.success(), "{log}");
    assert!(cuts >= 5, "the study ended before the blips ({cuts})");
    assert!(restarted, "the runner ended before the server restart");
    let ts = stored(&url, "blips");
    let states: Vec<_> = ts.iter().map(|t| (t.number, t.state)).collect();
    assert_eq!(counted(&url, "blips"), n_trials, "{states:?}");
    assert_eq!(
        ts.iter()
            .filter(|t| t.state == TrialState::Complete)
            .count(),
        n_trials,
        "{states:?}"
    );
}

/// An Optuna client with `RDBStorage(heartbeat_interval=10)` runs
/// `study.optimize` beside `tune` (whose own `stale_after` is 2 s): its
/// trials, 4 s each and beating only every 10 s, are its own to judge.
/// Both end cleanly; the client's trials are COMPLETE.
#[test]
fn an_optuna_client_with_heartbeats_keeps_its_trials() {
    let Some(py) = common::reference_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = common::url(&dir.path().join("s.db"));
    let cfg = write(
        dir.path(),
        "s.toml",
        &study(
            "hb",
            60,
            "heartbeat = \"200ms\"\nstale_after = \"2s\"\nmax_workers = 2",
        )
        .replace("epochs = 2", "epochs = 6"),
    );
    common::ok(common::memtune_on(
        &url,
        &[
            "create-study",
            "--study-name",
            "hb",
            "--direction",
            "maximize",
        ],
    ));
    let client = Command::new(py)
        .args([
            "-c",
            common::OPTUNA_HEARTBEAT_CLIENT,
            &url,
            "hb",
            "2",
            "4",
            "10",
            "30",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The runner starts once the client's first trial runs.
    let deadline = Instant::now() + Duration::from_secs(60);
    let beating = || {
        let s = Storage::open_url(&url, &store::OpenOptions::default()).unwrap();
        stored(&url, "hb").iter().any(|t| {
            t.state == TrialState::Running && s.last_heartbeat(t.trial_id).unwrap().is_some()
        })
    };
    while Instant::now() < deadline && !beating() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let runner = tune(&url, &cfg, dir.path()).output().unwrap();
    let client = client.wait_with_output().unwrap();
    assert!(client.status.success(), "Optuna client: {}", text(&client));
    assert!(runner.status.success(), "{}", text(&runner));
    let told: Vec<u64> = String::from_utf8(client.stdout)
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(told.len(), 2);
    let ts = stored(&url, "hb");
    for n in told {
        let t = ts.iter().find(|t| t.number == n).unwrap();
        assert_eq!(t.state, TrialState::Complete, "client trial {n}");
        assert!(!t.user_attrs.contains_key("error_kind"));
    }
    assert!(ts.iter().all(|t| t.state != TrialState::Fail));
}

/// One trial's runner killed (SIGKILL) three times over, each time right
/// after it started the trial's latest retry, then resumed: the trial is
/// retried every time until it completes, and `n_trials` trials count,
/// all COMPLETE (the interrupted ones stand for nothing).
#[test]
fn a_trial_interrupted_three_times_is_still_retried() {
    let dir = tempfile::tempdir().unwrap();
    let url = common::url(&dir.path().join("s.db"));
    let n_trials = 5;
    let cfg = write(
        dir.path(),
        "s.toml",
        &study(
            "again",
            n_trials,
            "heartbeat = \"100ms\"\nstale_after = \"1s\"\nmax_workers = 1",
        ),
    );
    // Trial 2 is started, then the runner killed; each resumed runner
    // retries it as the next number (3, then 4) and is killed there too.
    for victim in [2, 3, 4] {
        let out = tune(&url, &cfg, dir.path())
            .env("MEMTUNE_FAULT", format!("kill-runner@{victim}"))
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            None,
            "not killed at {victim}: {}",
            text(&out)
        );
        std::thread::sleep(Duration::from_millis(1500));
    }
    let out = tune(&url, &cfg, dir.path()).output().unwrap();
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("interrupted trials re-run in this run"),
        "{log}"
    );
    let ts = stored(&url, "again");
    let states: Vec<_> = ts.iter().map(|t| (t.number, t.state)).collect();
    // 2, 3, 4 interrupted; 5 is the retry that completed.
    for n in [2, 3, 4] {
        let t = ts.iter().find(|t| t.number == n).unwrap();
        assert_eq!(t.state, TrialState::Fail, "{states:?}");
        assert_eq!(t.user_attrs["error_kind"], "stale", "{states:?}");
    }
    let last = ts.iter().find(|t| t.number == 5).unwrap();
    assert_eq!(last.state, TrialState::Complete, "{states:?}");
    assert_eq!(
        last.system_attrs["retry_history"],
        serde_json::json!([2, 3, 4])
    );
    assert_eq!(counted(&url, "again"), n_trials);
    let complete = ts
        .iter()
        .filter(|t| t.state == TrialState::Complete)
        .count();
    assert_eq!(complete, n_trials, "{states:?}");
}

/// A lone runner on a machine kept busy (two spinning threads and a loop
/// of fsyncs beside its SQLite file), with a `stale_after` of 0.3 s: it
/// never judges its own live trials stale, however late their heartbeats.
#[test]
fn a_lone_runner_never_fails_its_own_trials_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let url = common::url(&dir.path().join("s.db"));
    let n_trials = 30;
    let cfg = write(
        dir.path(),
        "s.toml",
        &study(
            "load",
            n_trials,
            "heartbeat = \"100ms\"\nstale_after = \"300ms\"\nmax_workers = 2",
        )
        .replace("epochs = 2", "epochs = 4"),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut load = Vec::new();
    for _ in 0..2 {
        let stop = Arc::clone(&stop);
        load.push(std::thread::spawn(move || {
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            x
        }));
    }
    {
        let (stop, path) = (Arc::clone(&stop), dir.path().join("fsync.bin"));
        load.push(std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::File::create(path).unwrap();
            let block = vec![7u8; 1 << 16];
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                f.write_all(&block).unwrap();
                f.sync_all().unwrap();
                n += 1;
            }
            n
        }));
    }
    let out = tune(&url, &cfg, dir.path()).output().unwrap();
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(!log.contains("stopped beating"), "{log}");
    assert!(!log.contains("was taken over by another runner"), "{log}");
    let ts = stored(&url, "load");
    assert!(
        ts.iter().all(|t| t.state == TrialState::Complete),
        "{:?}",
        ts.iter().map(|t| (t.number, t.state)).collect::<Vec<_>>()
    );
    assert_eq!(ts.len(), n_trials);
}

/// A password in the storage URL, in the study file or on the command
/// line, over TLS: no output, log, error or report holds it.
#[test]
fn no_output_log_or_report_shows_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let pair = store::pg_server::self_signed_cert(dir.path(), "server", &["127.0.0.1"]);
    let started = pair.and_then(|p| PgServer::start_tls(&p).map(|s| (p, s)));
    let (pair, server) = match started {
        Ok(s) => s,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => panic!("{e}"),
        Err(e) => {
            eprintln!("skipping: no TLS PostgreSQL server: {e}");
            return;
        }
    };
    const SECRET: &str = "Wh1sper-42";
    let base = server.create_database("secret").unwrap();
    // The server trusts 127.0.0.1, so any password is accepted.
    let url = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        base.replace("postgres@", &format!("postgres:{SECRET}@")),
        pair.cert.display()
    );
    let cfg = write(
        dir.path(),
        "s.toml",
        &study(
            "secret",
            3,
            "heartbeat = \"200ms\"\nstale_after = \"2s\"\nlog_file = \"tune.log\"",
        )
        .replace("[study]\n", &format!("[study]\nstorage = \"{url}\"\n")),
    );
    let mut outputs = Vec::new();
    // The URL only in the study file, with -v logging on stderr.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtune"));
    let out = cmd
        .args(["-v", "tune", "--no-progress", "--config"])
        .arg(&cfg)
        .current_dir(dir.path())
        .env_remove("MEMTUNE_STORAGE")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("postgresql://postgres:***@"),
        "{}",
        text(&out)
    );
    outputs.push(text(&out));
    // On the command line, for every command that reads the study.
    for args in [
        vec!["studies"],
        vec!["trials", "--study", "secret"],
        vec!["best", "--study", "secret"],
        vec!["export", "--study", "secret", "--format", "csv"],
        vec!["report", "--study", "secret", "-o", "page.html"],
        vec!["trials", "--study", "nonexistent"],
        vec!["-vv", "tune", "--no-progress", "--config", "s.toml"],
    ] {
        outputs.push(text(&common::memtune_in(dir.path(), &url, &args)));
    }
    // Errors about the URL itself.
    for bad in [
        format!("postgresql://u:{SECRET}@127.0.0.1:1"),
        format!("postgresql://u:{SECRET}@127.0.0.1:{}/nodb", server.port()),
        format!("postgresql://u:{SECRET}@127.0.0.1/x?sslmode=verify-full&sslrootcert=/none"),
    ] {
        let out = common::memtune_in(dir.path(), &bad, &["studies"]);
        assert!(!out.status.success());
        outputs.push(text(&out));
    }
    for file in ["tune.log", "page.html", "secret-report.html"] {
        let path = dir.path().join(file);
        assert!(path.is_file(), "{file} was not written");
        outputs.push(String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned());
    }
    for (i, o) in outputs.iter().enumerate() {
        assert!(!o.contains(SECRET), "output {i} shows the password:\n{o}");
    }
}

/// A trial from `memtune ask` that is never told holds no place in the
/// budget: the runner still runs `n_trials` trials of its own.
#[test]
fn an_ask_never_told_holds_no_budget_slot() {
    let dir = tempfile::tempdir().unwrap();
    let url = common::url(&dir.path().join("s.db"));
    let cfg = write(
        dir.path(),
        "s.toml",
        &study("ask", 3, "heartbeat = \"100ms\"\nstale_after = \"1s\""),
    );
    common::ok(common::memtune_on(
        &url,
        &[
            "create-study",
            "--study-name",
            "ask",
            "--direction",
            "maximize",
        ],
    ));
    common::ok(common::memtune_on(
        &url,
        &[
            "ask",
            "--study-name",
            "ask",
            "--search-space",
            r#"{"x": {"name": "FloatDistribution", "attributes": {"low": 0, "high": 1}}}"#,
        ],
    ));
    let out = tune(&url, &cfg, dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let ts = stored(&url, "ask");
    assert_eq!(ts[0].state, TrialState::Running, "the asked trial");
    assert_eq!(
        ts.iter()
            .filter(|t| t.state == TrialState::Complete)
            .count(),
        3
    );
}

/// A study in which nothing fits the device ends with exit 1 saying so,
/// not 0.
#[test]
fn a_study_where_nothing_fits_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let url = common::url(&dir.path().join("s.db"));
    let cfg = write(
        dir.path(),
        "s.toml",
        &study(
            "tiny",
            3,
            "sim_memory = \"800MiB\"\nprocess_overhead = \"100MiB\"",
        ),
    );
    let out = tune(&url, &cfg, dir.path()).output().unwrap();
    let log = text(&out);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(log.contains("no trial fitted the device"), "{log}");
    let ts = stored(&url, "tiny");
    assert!(ts.iter().all(|t| t.state == TrialState::Pruned), "{log}");
}

/// An SQLite file in rollback-journal mode (Optuna's default) is left in
/// that mode after `tune`, so a reader without write access can still
/// read it.
#[test]
fn a_rollback_mode_file_stays_in_rollback_mode_after_tune() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    drop(Storage::open(&db).unwrap());
    let mode: String = conn
        .query_row("PRAGMA journal_mode=DELETE", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
    drop(conn);
    let cfg = write(
        dir.path(),
        "s.toml",
        &study("rb", 3, "heartbeat = \"100ms\"\nstale_after = \"1s\""),
    );
    let out = tune(&common::url(&db), &cfg, dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let header = std::fs::read(&db).unwrap();
    assert_eq!(header[18], 1, "left in WAL mode");
    assert!(!dir.path().join("s.db-wal").exists());
}
