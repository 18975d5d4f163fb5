//! Several `memtune tune` runners on one study at once, on the simulated
//! device (each trial takes milliseconds): they must cooperate by
//! construction, so the study ends with exactly `n_trials` trials, all
//! COMPLETE, however their claims interleave.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use store::{Storage, TrialFilter, TrialState};

fn study_toml(name: &str, n_trials: usize) -> String {
    // No runner dies here: a heartbeat starved on a loaded machine must not
    // make another runner take its trial over.
    study_toml_beating(name, n_trials, "200ms", "60s")
}

fn study_toml_beating(name: &str, n_trials: usize, heartbeat: &str, stale: &str) -> String {
    common::bert_base_sim_study(
        name,
        n_trials,
        2,
        "kind = \"tpe\"\nseed = 7",
        &format!(
            "sim_memory = \"24GiB\"\nheartbeat = \"{heartbeat}\"\nstale_after = \"{stale}\"\nmax_workers = 2"
        ),
    )
}

fn runner(db: &Path, config: &Path) -> Command {
    runner_on(&common::url(db), config)
}

fn runner_on(url: &str, config: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_memtune"));
    cmd.arg("--storage")
        .arg(url)
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
        let url = common::url(&dir.path().join("s.db"));
        three_runners_finish_exactly_n_trials(round, &url, dir.path());
    }
}

/// The same on one PostgreSQL database, as runners on several machines
/// share one (two rounds, a fresh database each).
#[test]
fn three_runners_on_one_postgres_database_finish_exactly_n_trials() {
    for round in 0..2 {
        let Some(url) = store::pg_server::test_database("shared") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        three_runners_finish_exactly_n_trials(round, &url, dir.path());
    }
}

fn three_runners_finish_exactly_n_trials(round: usize, url: &str, dir: &Path) {
    let cfg = dir.join("s.toml");
    std::fs::write(&cfg, study_toml("shared", 40)).unwrap();
    // A server study logs into the working directory: the test's own.
    let children: Vec<_> = (0..3)
        .map(|_| runner_on(url, &cfg).current_dir(dir).spawn().unwrap())
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "round {round}: a runner failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let s = open_existing(url);
    let study = s.study("shared").unwrap();
    let ts = s.trials(study.study_id, &TrialFilter::default()).unwrap();
    let states: Vec<_> = ts.iter().map(|t| (t.number, t.state)).collect();
    assert_eq!(ts.len(), 40, "round {round}: {states:?}");
    assert!(
        ts.iter().all(|t| t.state == TrialState::Complete),
        "round {round}: {states:?}"
    );
    if url.starts_with("postgresql://") {
        assert!(
            dir.join("shared.log").is_file(),
            "no log in the working directory"
        );
    }
}

/// The study's search space in Optuna's JSON, for `memtune ask` clients.
const SPACE: &str = r#"{"learning_rate": {"name": "FloatDistribution", "attributes": {"step": null, "low": 1e-05, "high": 0.0001, "log": true}},
 "batch_size": {"name": "CategoricalDistribution", "attributes": {"choices": [8, 16, 32]}}}"#;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn open_existing(url: &str) -> Storage {
    let existing = store::OpenOptions {
        create: false,
        ..store::OpenOptions::default()
    };
    Storage::open_url(url, &existing).unwrap()
}

fn stored(url: &str) -> Vec<store::FrozenTrial> {
    let s = open_existing(url);
    let study = s.study("chaos").unwrap();
    s.trials(study.study_id, &TrialFilter::default()).unwrap()
}

/// One ask/tell client: `asks` trials, each told after a random pause.
/// Returns the numbers it asked; panics if a `tell` is refused.
fn client(url: &str, asks: usize, seed: u64) -> Vec<u64> {
    let mut rng = Rng(seed | 1);
    (0..asks)
        .map(|_| {
            let asked: Json = serde_json::from_str(&common::ok(common::memtune_on(
                url,
                &["ask", "--study-name", "chaos", "--search-space", SPACE],
            )))
            .unwrap();
            std::thread::sleep(Duration::from_millis(rng.below(300)));
            let n = asked["number"].to_string();
            let value = format!("0.{}", 1 + rng.below(8));
            let out = common::memtune_on(
                url,
                &[
                    "tell",
                    "--study-name",
                    "chaos",
                    "--trial-number",
                    &n,
                    "--values",
                    &value,
                ],
            );
            assert!(
                out.status.success(),
                "tell of trial {n} refused: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            asked["number"].as_u64().unwrap()
        })
        .collect()
}

/// Rounds of 2-4 runners plus two ask/tell clients on one study, runners
/// killed with SIGKILL at random moments and restarted. After everything
/// exits: no trial RUNNING or WAITING; the runners' own trials (a retry
/// chain once) are at most `n_trials` and, with the clients' (not bounded
/// by the budget), at least `n_trials` count; no COMPLETE trial lost or
/// changed; no client's `tell` refused; every runner that was not killed
/// exited 0.
/// `MEMTUNE_CHAOS_ROUNDS` sets the number of rounds (default 50), and
/// `MEMTUNE_CHAOS_SEED` replays one run.
#[test]
fn runners_killed_at_random_beside_ask_tell_clients_lose_nothing_on_sqlite() {
    chaos(Backend::Sqlite);
}

/// The same on PostgreSQL, a fresh database each round.
#[test]
fn runners_killed_at_random_beside_ask_tell_clients_lose_nothing_on_postgres() {
    chaos(Backend::Postgres);
}

#[derive(Clone, Copy, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

fn chaos(backend: Backend) {
    let rounds: u64 = std::env::var("MEMTUNE_CHAOS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(50);
    let seed = std::env::var("MEMTUNE_CHAOS_SEED")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("chaos seed {seed} on {backend:?} (MEMTUNE_CHAOS_SEED={seed} replays it)");
    let mut rng = Rng(seed | 1);
    let started = Instant::now();
    for round in 0..rounds {
        let dir = tempfile::tempdir().unwrap();
        let url = match backend {
            Backend::Sqlite => common::url(&dir.path().join("s.db")),
            Backend::Postgres => match store::pg_server::test_database("chaos") {
                Some(url) => url,
                None => return,
            },
        };
        chaos_round(round, &mut rng, &url, dir.path());
    }
    eprintln!(
        "{rounds} chaos rounds on {backend:?} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

fn chaos_round(round: u64, rng: &mut Rng, url: &str, dir: &Path) {
    let n_trials = 10;
    let cfg = dir.join("s.toml");
    std::fs::write(&cfg, study_toml_beating("chaos", n_trials, "100ms", "1s")).unwrap();
    // A server study logs into the working directory: the round's own.
    let runner = || runner_on(url, &cfg).current_dir(dir).spawn().unwrap();
    common::ok(common::memtune_on(
        url,
        &[
            "create-study",
            "--study-name",
            "chaos",
            "--direction",
            "maximize",
        ],
    ));
    let n_runners = 2 + rng.below(3) as usize;
    let mut runners: Vec<Child> = (0..n_runners).map(|_| runner()).collect();
    let clients: Vec<_> = (0..2)
        .map(|i| {
            let (url, seed) = (url.to_string(), rng.below(u64::MAX) ^ i);
            std::thread::spawn(move || client(&url, 2, seed))
        })
        .collect();
    let mut complete: BTreeMap<u64, Option<f64>> = BTreeMap::new();
    let check_complete = |complete: &mut BTreeMap<u64, Option<f64>>| {
        let ts = stored(url);
        for (n, v) in complete.iter() {
            let t = ts.iter().find(|t| t.number == *n).unwrap();
            assert_eq!(
                (t.state, t.value()),
                (TrialState::Complete, *v),
                "round {round}: COMPLETE trial {n} changed"
            );
        }
        for t in ts.iter().filter(|t| t.state == TrialState::Complete) {
            complete.insert(t.number, t.value());
        }
    };
    let kills = 1 + rng.below(3);
    for _ in 0..kills {
        std::thread::sleep(Duration::from_millis(rng.below(700)));
        let victim = rng.below(n_runners as u64) as usize;
        runners[victim].kill().unwrap(); // SIGKILL, also after it exited
        runners[victim].wait().unwrap();
        check_complete(&mut complete);
        runners[victim] = runner();
    }
    let asked: BTreeSet<u64> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    for r in runners {
        let out = r.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "round {round}: a runner that was not killed failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    check_complete(&mut complete);

    let ts = stored(url);
    let states: Vec<_> = ts.iter().map(|t| (t.number, t.state)).collect();
    assert!(
        ts.iter().all(|t| t.state.is_finished()),
        "round {round}: unfinished trials left: {states:?}"
    );
    // Runners make new trials while fewer than n_trials count (finished,
    // or on their way: WAITING, or RUNNING under a runner); a client's
    // trial counts once told. So the runners' own trials (each retry
    // chain once) never exceed n_trials, and with the clients' they reach
    // it: n_trials <= counted = runners' + clients' <= n_trials + clients'.
    // A retry chain (a trial and its retries, which carry `failed_trial`)
    // counts once; a client may have asked for a runner's retry.
    let roots: Vec<u64> = ts
        .iter()
        .filter(|t| !t.system_attrs.contains_key("failed_trial"))
        .map(|t| t.number)
        .collect();
    let runners_own = roots.iter().filter(|n| !asked.contains(n)).count();
    // Every trial except retried FAILs (their retry stands for them).
    let counted = {
        let s = open_existing(url);
        s.counted_trials(s.study("chaos").unwrap().study_id)
            .unwrap()
    };
    let retries = ts
        .iter()
        .filter(|t| t.system_attrs.contains_key("failed_trial"))
        .count();
    eprintln!(
        "round {round}: {n_runners} runners, {kills} kills, {} trials, {retries} retries of stale trials, {} client trials, {runners_own} runners' own",
        ts.len(),
        asked.len()
    );
    assert!(
        runners_own <= n_trials,
        "round {round}: runners made {runners_own} trials: {states:?}"
    );
    assert_eq!(counted, roots.len(), "round {round}: {states:?}");
    assert!(counted >= n_trials, "round {round}: {states:?}");
}

/// A runner takes a trial enqueued the way Optuna's `enqueue_trial` does
/// (only a `fixed_params` system attribute) with those values, and leaves
/// alone a RUNNING trial that never beat (an ask/tell client's), however
/// old: the client's `tell` still lands afterwards.
#[test]
fn a_runner_uses_fixed_params_and_never_fails_a_client_trial() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("s.db");
    let cfg = dir.path().join("s.toml");
    std::fs::write(&cfg, study_toml_beating("mixed", 4, "100ms", "1s")).unwrap();
    let s = Storage::open(&db).unwrap();
    let study = s
        .create_study("mixed", &[store::StudyDirection::Maximize])
        .unwrap();
    let client = s.create_trial(study.study_id).unwrap();
    let fixed = serde_json::json!({"learning_rate": 5e-5, "batch_size": 16});
    let enqueued = s
        .enqueue_trial(
            study.study_id,
            &store::NewTrial {
                system_attrs: vec![("fixed_params".into(), fixed)],
                ..Default::default()
            },
        )
        .unwrap();
    // Older than stale_after before the runner starts.
    std::thread::sleep(Duration::from_millis(1200));
    let out = runner(&db, &cfg).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = s.trial(enqueued.trial_id).unwrap();
    assert_eq!(t.state, TrialState::Complete);
    let value = |name: &str| {
        let p = &t.params[name];
        store::value_to_json(&p.value())
    };
    assert_eq!(value("learning_rate"), serde_json::json!(5e-5));
    assert_eq!(value("batch_size"), serde_json::json!(16));
    assert_eq!(s.trial(client.trial_id).unwrap().state, TrialState::Running);
    s.finish(client.trial_id, TrialState::Complete, &[0.5])
        .unwrap();
    let ts = s.trials(study.study_id, &TrialFilter::default()).unwrap();
    // A client's trial counts once told: the runner did not wait on it.
    assert_eq!(ts.len(), 5);
    assert!(ts.iter().all(|t| t.state == TrialState::Complete));
    assert_eq!(s.counted_trials(study.study_id).unwrap(), 5);
}
