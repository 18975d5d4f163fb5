//! A study left alone, compressed: three runners on PostgreSQL and three
//! on SQLite, an Optuna client with heartbeats and four `ask`/`tell`
//! shells beside them, while the runners are killed (`SIGKILL`), paused
//! past their `stale_after` (`SIGSTOP`/`SIGCONT`) and hung up on
//! (`SIGHUP`), and the PostgreSQL server has its connections terminated
//! and is restarted. A supervisor starts a new runner for each one that
//! is killed or hung up on, as systemd or a batch scheduler would.
//!
//! At the end every trial that started is COMPLETE, or FAIL because it
//! was interrupted and then retried until a retry finished; exactly
//! `n_trials` count; the Optuna client and every shell command succeeded;
//! no runner ended with an error except by our signals.
//!
//! `MEMTUNE_CHAOS_SECS` sets how long the chaos lasts (90 s unless set);
//! `cargo xtask chaos --hours 2` runs the long one. Studies run on the
//! simulated device, so a trial takes a fraction of a second. How many
//! trials fit in that time depends on the machine, its load and the
//! chaos, so the supervisor keeps each study's `n_trials` a little ahead
//! of its progress while the chaos lasts (raising a running study's
//! budget, as a user would, for the runners it starts from then on) and
//! freezes it when the chaos ends.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value as Json;
use store::pg_server::PgServer;
use store::{FrozenTrial, OpenOptions, Storage, TrialFilter, TrialState};

const STUDY: &str = "chaos";
const RUNNERS_PER_BACKEND: usize = 3;
const STALE_AFTER_SECS: f64 = 3.0;

fn study_file(n_trials: usize, epochs: usize) -> String {
    common::bert_base_sim_study(
        STUDY,
        n_trials,
        epochs,
        "kind = \"random\"\nseed = 5",
        &format!("max_workers = 2\nheartbeat = \"200ms\"\nstale_after = \"{STALE_AFTER_SECS}s\""),
    )
}

/// What the supervisor expects of a runner when it ends.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fate {
    /// Left alone: exit 0 once the study is done.
    Finish,
    Killed,
    /// Hung up on, or stopped (`SIGTERM`) to start again with a new
    /// budget: exit 130 after failing and requeueing its trials (or 0 if
    /// it was finishing anyway).
    HungUp,
}

struct Runner {
    child: Child,
    log: PathBuf,
    fate: Fate,
    /// `SIGCONT` is due at this time.
    stopped_until: Option<Instant>,
}

struct Backend {
    name: &'static str,
    url: String,
    /// The supervisor's own connection, kept (it reconnects after the
    /// server restarts or terminates it, as the runners' do).
    storage: Storage,
    study_id: i64,
    config: PathBuf,
    /// The study's budget in `config` now; runners started earlier may
    /// hold a smaller one (they end once it is spent).
    n_trials: usize,
    epochs: usize,
    dir: PathBuf,
    runners: Vec<Runner>,
    started: usize,
    /// Runners that ended against their fate, with their logs.
    errors: Vec<String>,
}

impl Backend {
    fn start_runner(&mut self) {
        let log = self.dir.join(format!("runner-{}.log", self.started));
        self.started += 1;
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_memtune"))
            .arg("--storage")
            .arg(&self.url)
            .args(["tune", "--no-progress", "--config"])
            .arg(&self.config)
            .current_dir(&self.dir)
            .env_remove("MEMTUNE_STORAGE")
            .env_remove("MEMTUNE_FAULT")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        self.runners.push(Runner {
            child,
            log,
            fate: Fate::Finish,
            stopped_until: None,
        });
    }

    /// Reaps the runners that ended, checks each against its fate, and
    /// resumes the paused ones that are due.
    fn reap(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.runners.len() {
            let r = &mut self.runners[i];
            if r.stopped_until.is_some_and(|t| t <= now) {
                signal(&r.child, libc::SIGCONT);
                r.stopped_until = None;
            }
            let Some(status) = r.child.try_wait().unwrap() else {
                i += 1;
                continue;
            };
            let r = self.runners.swap_remove(i);
            let log = std::fs::read_to_string(&r.log).unwrap_or_default();
            let fine = match r.fate {
                // A runner started while the server restarts cannot
                // connect and exits 1 at once, as libpq does; a supervisor
                // starts it again. Once at work, it rides out outages.
                Fate::Finish => {
                    status.success()
                        || (status.code() == Some(1)
                            && !log.lines().any(|l| l.starts_with("trial "))
                            && log.contains("Connection refused"))
                }
                Fate::Killed => status.code().is_none() || status.success(),
                // A runner still reading its data and models has no
                // handler yet and dies of the signal: it wrote nothing.
                // From its banner on, it must end as interrupted.
                Fate::HungUp => {
                    matches!(status.code(), Some(0 | 130))
                        || (status.code().is_none() && !log.contains("memtune: study"))
                }
            };
            if !fine {
                self.errors.push(format!(
                    "{} runner {} ({:?}) ended {status}:\n{log}",
                    self.name,
                    r.log.display(),
                    r.fate
                ));
            }
        }
    }

    /// Trials that count toward the budget now.
    fn counted(&self) -> usize {
        self.storage.counted_trials(self.study_id).unwrap()
    }

    /// The budget of the runners started from now on.
    fn set_budget(&mut self, n_trials: usize) {
        self.n_trials = n_trials;
        std::fs::write(&self.config, study_file(n_trials, self.epochs)).unwrap();
    }

    /// Stops the runners left alone, as a user does to raise the budget
    /// (a runner whose budget is spent waits for the others' trials, in
    /// case one must be retried, and would not take new ones).
    fn stop_for_new_budget(&mut self) {
        for r in &mut self.runners {
            if r.fate == Fate::Finish {
                signal(&r.child, libc::SIGTERM);
                r.fate = Fate::HungUp;
            }
        }
    }

    /// Runners the supervisor counts as alive: left alone, not ended.
    fn alive(&self) -> usize {
        self.runners
            .iter()
            .filter(|r| r.fate == Fate::Finish)
            .count()
    }

    fn random_live_runner(&mut self, rng: &mut StdRng) -> Option<&mut Runner> {
        let live: Vec<usize> = (0..self.runners.len())
            .filter(|&i| self.runners[i].fate == Fate::Finish)
            .filter(|&i| self.runners[i].stopped_until.is_none())
            .collect();
        if live.is_empty() {
            return None;
        }
        let pick = live[rng.random_range(0..live.len())];
        Some(&mut self.runners[pick])
    }
}

/// A failed test leaves no runner behind.
impl Drop for Backend {
    fn drop(&mut self) {
        for r in &mut self.runners {
            let _ = r.child.kill();
            let _ = r.child.wait();
        }
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on a child we have not reaped: the pid is ours.
    unsafe {
        libc::kill(child.id() as libc::pid_t, sig);
    }
}

fn storage(url: &str) -> Storage {
    Storage::open_url(url, &OpenOptions::default()).unwrap()
}

fn trials(url: &str) -> Vec<FrozenTrial> {
    let s = storage(url);
    let study = s.study(STUDY).unwrap();
    s.trials(study.study_id, &TrialFilter::default()).unwrap()
}

fn chaos_secs() -> u64 {
    std::env::var("MEMTUNE_CHAOS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(90)
}

/// Seconds one lone runner takes per trial of this study on this machine,
/// with the same epochs: the chaos study's size is set from it.
fn seconds_per_trial(dir: &Path, epochs: usize) -> f64 {
    let url = common::url(&dir.join("calibrate.db"));
    let config = dir.join("calibrate.toml");
    let n = 6;
    std::fs::write(&config, study_file(n, epochs)).unwrap();
    let start = Instant::now();
    common::ok(common::memtune_in(
        dir,
        &url,
        &[
            "tune",
            "--no-progress",
            "--config",
            config.to_str().unwrap(),
        ],
    ));
    start.elapsed().as_secs_f64() / n as f64
}

const SPACE: &str = r#"{"learning_rate": {"name": "FloatDistribution", "attributes": {"low": 1e-05, "high": 0.0001, "log": true}}, "batch_size": {"name": "CategoricalDistribution", "attributes": {"choices": [8, 16, 32]}}}"#;

/// `memtune ARGS` on `url`, run again while the server is down (nothing
/// listens during a restart, and memtune then fails at once, as libpq
/// does), as a user's script would.
fn memtune_while_down(url: &str, args: &[&str]) -> std::process::Output {
    let start = Instant::now();
    loop {
        let out = common::memtune_on(url, args);
        let refused = String::from_utf8_lossy(&out.stderr).contains("Connection refused");
        if out.status.success() || !refused || start.elapsed() > Duration::from_secs(120) {
            return out;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A shell that asks, waits a little and tells, until `stop`; the
/// numbers it told, or the first command that failed.
fn ask_tell_shell(url: String, seed: u64, stop: Arc<AtomicBool>) -> Result<Vec<u64>, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut told = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let out = memtune_while_down(
            &url,
            &["ask", "--study-name", STUDY, "--search-space", SPACE],
        );
        if !out.status.success() {
            return Err(format!("ask: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let asked: Json = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("ask printed no JSON ({e}): {out:?}"))?;
        let number = asked["number"].as_u64().ok_or("ask: no number")?;
        std::thread::sleep(Duration::from_millis(rng.random_range(100..1500)));
        let n = number.to_string();
        let value = format!("{:.3}", rng.random_range(0.0..1.0));
        let out = memtune_while_down(
            &url,
            &[
                "tell",
                "--study-name",
                STUDY,
                "--trial-number",
                &n,
                "--values",
                &value,
            ],
        );
        if !out.status.success() {
            return Err(format!(
                "tell {n}: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        told.push(number);
    }
    Ok(told)
}

/// Every trial COMPLETE, or FAIL as interrupted with a retry that
/// finished; `n_trials` counted; nothing RUNNING or WAITING.
fn check_trials(name: &str, url: &str, n_trials: usize, clients: &[u64]) {
    let ts = trials(url);
    let by_number: BTreeMap<u64, &FrozenTrial> = ts.iter().map(|t| (t.number, t)).collect();
    let states: Vec<_> = ts.iter().map(|t| (t.number, t.state)).collect();
    let mut retried_by: BTreeMap<u64, u64> = BTreeMap::new();
    for t in &ts {
        if let Some(history) = t.system_attrs.get("retry_history").and_then(Json::as_array) {
            for n in history.iter().filter_map(Json::as_u64) {
                retried_by.insert(n, t.number);
            }
        }
    }
    for t in &ts {
        match t.state {
            TrialState::Complete => {}
            TrialState::Fail => {
                let kind = t.user_attrs.get("error_kind").and_then(Json::as_str);
                assert!(
                    matches!(kind, Some("stale" | "interrupted" | "not_started")),
                    "{name}: trial {} failed for its own reason {kind:?}: {:?}",
                    t.number,
                    t.user_attrs
                );
                // Follow the retries to the one that finished.
                let mut n = t.number;
                while by_number[&n].state == TrialState::Fail {
                    n = *retried_by.get(&n).unwrap_or_else(|| {
                        panic!("{name}: interrupted trial {n} was dropped: {states:?}")
                    });
                }
                assert_eq!(by_number[&n].state, TrialState::Complete, "{name}");
            }
            other => panic!("{name}: trial {} left {other:?}: {states:?}", t.number),
        }
    }
    for n in clients {
        assert_eq!(
            by_number[n].state,
            TrialState::Complete,
            "{name}: client trial {n}"
        );
    }
    let s = storage(url);
    let counted = s.counted_trials(s.study(STUDY).unwrap().study_id).unwrap();
    assert_eq!(counted, n_trials, "{name}: counted trials, {states:?}");
    let complete = ts
        .iter()
        .filter(|t| t.state == TrialState::Complete)
        .count();
    assert_eq!(complete, n_trials, "{name}: {states:?}");
}

#[test]
fn a_study_left_alone_through_kills_pauses_hangups_and_database_blips() {
    let server = match PgServer::start() {
        Ok(s) => s,
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
            panic!("CI must run the chaos test on PostgreSQL too: {e}")
        }
        Err(e) => {
            eprintln!("skipping: no PostgreSQL server: {e}");
            return;
        }
    };
    let Some(py) = common::reference_python() else {
        return;
    };
    let secs = chaos_secs();
    // MEMTUNE_CHAOS_KEEP=1 keeps the databases and runner logs to look at.
    let keep = std::env::var_os("MEMTUNE_CHAOS_KEEP").is_some();
    let tmp = tempfile::Builder::new()
        .prefix("chaos-")
        .disable_cleanup(keep)
        .tempdir()
        .unwrap();
    if keep {
        eprintln!("keeping {}", tmp.path().display());
    }
    let epochs = 4;
    let per_trial = seconds_per_trial(tmp.path(), epochs);
    // The first budget: what a lone runner would do in a few minutes (at
    // most `secs`); the supervisor raises it while the chaos lasts.
    let n_trials = ((secs.min(300) as f64 / per_trial) * 0.6).max(20.0) as usize;
    let client_trials = (secs / 20).clamp(2, 200) as usize;
    eprintln!("chaos for ~{secs} s: {per_trial:.2} s a trial alone, first n_trials = {n_trials}");

    let mut backends = Vec::new();
    for (name, url) in [
        ("postgresql", server.create_database(STUDY).unwrap()),
        ("sqlite", common::url(&tmp.path().join("chaos.db"))),
    ] {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let config = dir.join("study.toml");
        common::ok(common::memtune_on(
            &url,
            &[
                "create-study",
                "--study-name",
                STUDY,
                "--direction",
                "maximize",
            ],
        ));
        let storage = storage(&url);
        let study_id = storage.study(STUDY).unwrap().study_id;
        let mut b = Backend {
            name,
            url,
            storage,
            study_id,
            config,
            n_trials,
            epochs,
            dir,
            runners: Vec::new(),
            started: 0,
            errors: Vec::new(),
        };
        b.set_budget(n_trials);
        backends.push(b);
    }
    // The Optuna client works beside the runners and shells before the
    // chaos starts: Optuna on SQLite pops a WAITING trial (such as a
    // retry of an interrupted one) with a `SELECT ... FOR UPDATE` that
    // locks nothing there, so it can take a trial a runner claims at the
    // same moment, whatever the runner does.
    let mut client = Command::new(&py)
        .args([
            "-c",
            common::OPTUNA_HEARTBEAT_CLIENT,
            &backends[1].url,
            STUDY,
            &client_trials.to_string(),
            "1.5",
            "1",
            "4",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Per backend: its shells stop asking once most of its budget is
    // spent, so that every told trial is told before its runners end.
    let stop_shells = [
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    ];
    let shells: Vec<_> = (0..4)
        .map(|i| {
            let url = backends[i % 2].url.clone();
            let stop = Arc::clone(&stop_shells[i % 2]);
            (
                i % 2,
                std::thread::spawn(move || ask_tell_shell(url, i as u64, stop)),
            )
        })
        .collect();
    for b in &mut backends {
        for _ in 0..RUNNERS_PER_BACKEND {
            b.start_runner();
        }
    }

    let mut rng = StdRng::seed_from_u64(secs);
    let start = Instant::now();
    let hard_deadline = Duration::from_secs(secs * 4 + 300);
    let event_gap = (secs as f64 / 45.0).clamp(0.7, 30.0);
    let restart_gap = Duration::from_secs((secs / 3).clamp(20, 300));
    let mut last_restart = start;
    let mut events: BTreeMap<&str, usize> = BTreeMap::new();
    let mut next_event = start + Duration::from_secs_f64(event_gap);
    // While the chaos lasts, each budget stays this long ahead of its
    // study's progress: after the chaos, the runners finish within about
    // twice that.
    let ahead = Duration::from_secs((secs / 10).clamp(5, 180));
    let mut done = [false, false];
    loop {
        std::thread::sleep(Duration::from_millis(100));
        // The chaos lasts `secs`, and on a slow machine (where the client's
        // calm takes long) until it has restarted the server and killed twice.
        let chaos = start.elapsed() < Duration::from_secs(secs)
            || !events.contains_key("server restart")
            || events.get("kill -9").is_none_or(|&n| n < 2);
        for ((b, stop), done) in backends.iter_mut().zip(&stop_shells).zip(&mut done) {
            b.reap();
            let counted = b.counted();
            *done = counted >= b.n_trials && b.runners.is_empty();
            let rate = counted as f64 / start.elapsed().as_secs_f64().max(1.0);
            let margin = (rate * ahead.as_secs_f64()).max(20.0) as usize;
            if chaos && counted + margin > b.n_trials {
                b.set_budget(counted + 2 * margin);
                b.stop_for_new_budget();
                *events.entry("budget raised").or_default() += 1;
            }
            // The supervisor keeps three runners at work until the study
            // is done, as `Restart=always` would.
            while counted < b.n_trials && b.alive() < RUNNERS_PER_BACKEND {
                b.start_runner();
            }
            // The shells stop before the budget is frozen, so that every
            // told trial is told before its runners end.
            if start.elapsed().as_secs_f64() >= secs as f64 * 0.9 {
                stop.store(true, Ordering::Relaxed);
            }
        }
        if done.iter().all(|&d| d) {
            break;
        }
        assert!(
            start.elapsed() < hard_deadline,
            "the studies did not finish in {hard_deadline:?}: {events:?}"
        );
        let calm = client.try_wait().unwrap().is_none();
        if calm || !chaos || Instant::now() < next_event {
            continue;
        }
        next_event =
            Instant::now() + Duration::from_secs_f64(event_gap * rng.random_range(0.5..1.5));
        if last_restart.elapsed() >= restart_gap {
            last_restart = Instant::now();
            server
                .restart(Duration::from_secs(rng.random_range(1..5)))
                .unwrap();
            *events.entry("server restart").or_default() += 1;
            continue;
        }
        let b = &mut backends[rng.random_range(0..2)];
        let what = match rng.random_range(0..10) {
            0..=2 => "kill -9",
            3..=4 => "stop/cont",
            5 => "hangup",
            _ if b.name == "postgresql" => "pg_terminate_backend",
            _ => "kill -9",
        };
        match what {
            "pg_terminate_backend" => {
                server.terminate_connections(STUDY).unwrap_or(0);
            }
            _ => {
                let pause = Duration::from_secs_f64(STALE_AFTER_SECS * rng.random_range(0.5..3.0));
                let Some(r) = b.random_live_runner(&mut rng) else {
                    continue;
                };
                match what {
                    "kill -9" => {
                        signal(&r.child, libc::SIGKILL);
                        r.fate = Fate::Killed;
                    }
                    "hangup" => {
                        signal(&r.child, libc::SIGHUP);
                        r.fate = Fate::HungUp;
                    }
                    _ => {
                        signal(&r.child, libc::SIGSTOP);
                        r.stopped_until = Some(Instant::now() + pause);
                    }
                }
            }
        }
        *events.entry(what).or_default() += 1;
    }
    eprintln!(
        "chaos events in {:.0} s: {events:?}",
        start.elapsed().as_secs_f64()
    );

    let client = client.wait_with_output().unwrap();
    assert!(
        client.status.success(),
        "the Optuna client crashed: {}",
        String::from_utf8_lossy(&client.stderr)
    );
    let client_numbers: Vec<u64> = String::from_utf8(client.stdout)
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(client_numbers.len(), client_trials);
    let mut told: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    for (backend, shell) in shells {
        match shell.join().unwrap() {
            Ok(numbers) => told[backend].extend(numbers),
            Err(e) => panic!("an ask/tell shell failed: {e}"),
        }
    }
    for b in &backends {
        assert!(b.errors.is_empty(), "{}", b.errors.join("\n\n"));
    }
    assert!(
        events.get("server restart").is_some_and(|&n| n >= 1),
        "{events:?}"
    );
    assert!(events.get("kill -9").is_some_and(|&n| n >= 2), "{events:?}");
    eprintln!(
        "n_trials at the end: postgresql {}, sqlite {}",
        backends[0].n_trials, backends[1].n_trials
    );
    check_trials(
        "postgresql",
        &backends[0].url,
        backends[0].n_trials,
        &told[0],
    );
    let mut sqlite_clients = told[1].clone();
    sqlite_clients.extend(&client_numbers);
    check_trials(
        "sqlite",
        &backends[1].url,
        backends[1].n_trials,
        &sqlite_clients,
    );
}
