//! A worker process for the store's crash and concurrency tests and for
//! `cargo xtask bench store`. Not part of the library's API.
//!
//! DB is a file path or a storage URL (`sqlite:///...`, `postgresql://...`).
//!
//! `store-writer crash DB STUDY DONE_FILE`: forever create a trial, set a
//! param, report intermediate values with heartbeats, finish it, and only
//! then append its number to DONE_FILE (fsynced). The test SIGKILLs it.
//!
//! `store-writer load DB STUDY TRIALS STEPS full|normal`: run TRIALS trials of
//! STEPS intermediate values each, then print one line
//! `trials=N intermediates=M seconds=S`. Any error exits non-zero.
//!
//! `store-writer check DB STUDY`: print `trials=N complete=C intermediates=M
//! dense=true|false integrity=ok|n/a` for the study (after a load run;
//! `n/a` on PostgreSQL, which has no integrity check to run).
//!
//! `store-writer die-mid-transaction FILE`: in an SQLite file in rollback
//! journal mode, mark every trial FAIL and change every value in a
//! transaction, and abort the process before it commits: the journal is
//! left hot.
//!
//! `store-writer flip FILE`: until stdin closes, again and again open the
//! SQLite file with SQLite alone (as an Optuna client would), set every
//! parameter and objective value to 0.25, or else 0.75, in one
//! transaction, and close it (which checkpoints the WAL into the file),
//! leaving it at rest for a moment between rounds.
//!
//! `store-writer read-uniform DB STUDY READS`: READS times, open DB
//! read-only (as memtune's read commands do) and read the study's trials;
//! exit non-zero on the first read whose values are not all one value
//! (a read mixing two of `flip`'s commits).
//!
//! `store-writer pg-server [DB...]`: start a throwaway PostgreSQL server,
//! create each DB, print each one's URL on its own line (the `postgres`
//! database's when none is named), and keep the server until stdin closes.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;
use store::{Distribution, Durability, OpenOptions, Storage, StudyDirection, TrialState};

/// The values a writer stores for trial `number`, so a checker can recompute them.
fn expected_param(number: i64) -> f64 {
    (number % 97) as f64 / 97.0
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("crash") if args.len() == 4 => crash(&args[1], &args[2], &args[3]),
        Some("load") if args.len() == 6 => load(&args[1..]),
        Some("check") if args.len() == 3 => check(&args[1], &args[2]),
        Some("pg-server") => pg_server(&args[1..]),
        Some("flip") if args.len() == 2 => flip(&args[1]),
        Some("read-uniform") if args.len() == 4 => read_uniform(&args[1], &args[2], &args[3]),
        Some("die-mid-transaction") if args.len() == 2 => die_mid_transaction(&args[1]),
        _ => Err(
            "usage: store-writer crash DB STUDY DONE_FILE | load DB STUDY TRIALS STEPS full|normal \
             | check DB STUDY | die-mid-transaction FILE | flip FILE \
             | read-uniform DB STUDY READS | pg-server [DB...]"
                .into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("store-writer: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Leaves a hot journal: a writer killed between its first change and
/// its commit.
fn die_mid_transaction(file: &str) -> Result<(), String> {
    let conn = rusqlite::Connection::open(file).map_err(|e| e.to_string())?;
    // A cache of one page spills the changes into the file before the
    // commit, so the journal holds what a reader must restore.
    conn.execute_batch(
        "PRAGMA journal_mode = DELETE; PRAGMA cache_size = 1; BEGIN IMMEDIATE; \
         UPDATE trials SET state = 'FAIL'; UPDATE trial_values SET value = -1; \
         UPDATE trial_intermediate_values SET intermediate_value = -1;",
    )
    .map_err(|e| e.to_string())?;
    std::process::abort()
}

/// Open DB, a path or a storage URL.
fn open(db: &str, opts: &OpenOptions) -> Result<Storage, String> {
    if db.contains("://") {
        Storage::open_url(db, opts)
    } else {
        Storage::open_with(db, opts)
    }
    .map_err(|e| e.to_string())
}

/// Rewrites every value of the file, one commit per connection, until
/// stdin closes.
fn flip(file: &str) -> Result<(), String> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopper = std::sync::Arc::clone(&stop);
    std::thread::spawn(move || {
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
        stopper.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let mut round = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let value = if round.is_multiple_of(2) { 0.25 } else { 0.75 };
        let conn = rusqlite::Connection::open(file).map_err(|e| e.to_string())?;
        conn.busy_timeout(std::time::Duration::from_secs(60))
            .map_err(|e| e.to_string())?;
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE; UPDATE trial_params SET param_value = {value}; \
             UPDATE trial_values SET value = {value}; COMMIT;"
        ))
        .map_err(|e| e.to_string())?;
        conn.close().map_err(|(_, e)| e.to_string())?;
        round += 1;
        // At rest a while, with no -wal or -shm, so that readers open it
        // so and the next round's checkpoint meets them mid-read.
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    println!("rounds={round}");
    Ok(())
}

/// Reads the study `reads` times, each on a new read-only storage, and
/// fails on a read whose parameter and objective values are not all equal.
fn read_uniform(db: &str, study: &str, reads: &str) -> Result<(), String> {
    let reads: usize = reads.parse().map_err(|e| format!("READS: {e}"))?;
    let opts = OpenOptions {
        read_only: true,
        create: false,
        ..OpenOptions::default()
    };
    for read in 0..reads {
        let storage = open(db, &opts)?;
        let study = storage
            .study(study)
            .map_err(|e| format!("read {read}: {e}"))?;
        let trials = storage
            .trials(study.study_id, &store::TrialFilter::default())
            .map_err(|e| format!("read {read}: {e}"))?;
        let mut seen = std::collections::BTreeSet::new();
        for t in &trials {
            seen.extend(t.params.values().map(|p| p.internal.to_bits()));
            seen.extend(t.values.iter().flatten().map(|v| v.to_bits()));
        }
        if seen.len() != 1 {
            let seen: Vec<f64> = seen.into_iter().map(f64::from_bits).collect();
            return Err(format!(
                "read {read} of {} trials mixes commits: values {seen:?}",
                trials.len()
            ));
        }
    }
    println!("reads={reads}");
    Ok(())
}

fn pg_server(dbs: &[String]) -> Result<(), String> {
    let server = store::pg_server::PgServer::start()?;
    if dbs.is_empty() {
        println!("{}", server.url("postgres"));
    }
    for db in dbs {
        println!("{}", server.create_database(db)?);
    }
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    // Until whoever started us closes our stdin (or exits).
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    drop(server);
    Ok(())
}

fn distribution() -> Distribution {
    Distribution::Float {
        low: 0.0,
        high: 1.0,
        log: false,
        step: None,
    }
}

/// One trial: param, heartbeat, `steps` intermediate values, COMPLETE.
fn run_trial(storage: &Storage, study_id: i64, steps: i64) -> Result<i64, String> {
    let t = storage
        .create_or_claim_trial(study_id)
        .map_err(|e| e.to_string())?
        .trial();
    let dist = distribution();
    storage
        .heartbeat(t.trial_id)
        .and_then(|()| storage.set_param(t.trial_id, "x", expected_param(t.number), &dist))
        .map_err(|e| e.to_string())?;
    for step in 0..steps {
        storage
            .report_intermediate(t.trial_id, step, (t.number * 1000 + step) as f64)
            .map_err(|e| e.to_string())?;
        if step % 4 == 3 {
            storage.heartbeat(t.trial_id).map_err(|e| e.to_string())?;
        }
    }
    storage
        .finish(t.trial_id, TrialState::Complete, &[t.number as f64 + 0.25])
        .map_err(|e| e.to_string())?;
    Ok(t.number)
}

fn crash(db: &str, study: &str, done: &str) -> Result<(), String> {
    let storage = open(db, &OpenOptions::default())?;
    let study = storage
        .create_or_load_study(study, &[StudyDirection::Minimize])
        .map_err(|e| e.to_string())?;
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(done)
        .map_err(|e| format!("{done}: {e}"))?;
    loop {
        let number = run_trial(&storage, study.study_id, 5)?;
        // Logged only after the commit returned: every logged number must be
        // intact. One write call per line: `writeln!` writes the number and
        // the newline separately, and a kill between them glued the next
        // run's number onto this one ("994" + "995\n").
        log.write_all(format!("{number}\n").as_bytes())
            .map_err(|e| format!("{done}: {e}"))?;
        log.sync_data().map_err(|e| format!("{done}: {e}"))?;
    }
}

fn load(args: &[String]) -> Result<(), String> {
    let [db, study, trials, steps, durability] = args else {
        return Err("load needs DB STUDY TRIALS STEPS full|normal".into());
    };
    let trials: usize = trials.parse().map_err(|e| format!("TRIALS: {e}"))?;
    let steps: i64 = steps.parse().map_err(|e| format!("STEPS: {e}"))?;
    let durability = match durability.as_str() {
        "full" => Durability::Full,
        "normal" => Durability::Normal,
        other => return Err(format!("durability `{other}`: expected full or normal")),
    };
    let opts = OpenOptions {
        durability,
        ..OpenOptions::default()
    };
    let start = Instant::now();
    let storage = open(db, &opts)?;
    let study = storage
        .create_or_load_study(study, &[StudyDirection::Minimize])
        .map_err(|e| e.to_string())?;
    for _ in 0..trials {
        run_trial(&storage, study.study_id, steps)?;
    }
    println!(
        "trials={trials} intermediates={} seconds={:.3}",
        trials as i64 * steps,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn check(db: &str, study: &str) -> Result<(), String> {
    let existing = OpenOptions {
        create: false,
        ..OpenOptions::default()
    };
    let storage = open(db, &existing)?;
    let study = storage.study(study).map_err(|e| e.to_string())?;
    let trials = storage
        .trials(study.study_id, &store::TrialFilter::default())
        .map_err(|e| e.to_string())?;
    let dense = trials.iter().enumerate().all(|(i, t)| t.number == i as u64);
    let complete = trials
        .iter()
        .filter(|t| t.state == TrialState::Complete)
        .count();
    let intermediates: usize = trials.iter().map(|t| t.intermediate_values.len()).sum();
    let integrity: String = match storage.connection() {
        Some(conn) => conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(|e| e.to_string())?,
        None => "n/a".to_string(),
    };
    println!(
        "trials={} complete={complete} intermediates={intermediates} dense={dense} integrity={integrity}",
        trials.len()
    );
    Ok(())
}
