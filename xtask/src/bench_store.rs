//! `cargo xtask bench store [--sqlite|--postgres] [WORKERS TRIALS STEPS]`:
//! many writer processes on one storage, our store beside Optuna's
//! RDBStorage, same work, same run: on one SQLite file, and on one
//! throwaway PostgreSQL server on this machine (both unless one is named).
//!
//! Each of WORKERS processes (default 8) runs TRIALS trials (250) with STEPS
//! intermediate values each (10). Ours: `store-writer load` (release build)
//! with `Durability::Full` and `Normal` (SQLite's synchronous=FULL/NORMAL;
//! PostgreSQL's synchronous_commit on/off); per trial it also writes one
//! param and three heartbeats. Optuna: `benches/store/optuna_concurrency.py`
//! with Optuna's defaults; per trial one `suggest_float`, the reports and
//! `tell`. Prints a table per backend: trials/s, intermediate writes/s, lock
//! errors that reached the caller, and whether all trials landed with dense
//! numbers.
//!
//! Python: `$MEMTUNE_PYTHON` if set, else the reference venv. PostgreSQL:
//! the server binaries of `crate::postgres` (installed when missing).

use crate::{Result, env, postgres, python};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

struct Row {
    name: String,
    seconds: f64,
    trials: usize,
    intermediates: usize,
    lock_errors: String,
    all_landed: bool,
}

pub fn run(args: &[String]) -> Result<()> {
    let (sqlite, pg) = match args.first().map(String::as_str) {
        Some("--sqlite") => (true, false),
        Some("--postgres") => (false, true),
        _ => (true, true),
    };
    let nums: Vec<usize> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .map(|a| a.parse().map_err(|e| format!("bad number '{a}': {e}")))
        .collect::<Result<_>>()?;
    let (workers, trials, steps) = match nums[..] {
        [] => (8, 250, 10),
        [w, t, s] => (w, t, s),
        _ => {
            return Err(
                "usage: cargo xtask bench store [--sqlite|--postgres] [WORKERS TRIALS STEPS]"
                    .into(),
            );
        }
    };
    env::cargo(
        &[
            "build",
            "--release",
            "--package",
            "store",
            "--bin",
            "store-writer",
            "--features",
            "testing",
        ],
        &[],
    )?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| env::root().join("target"));
    let writer = target.join("release").join("store-writer");
    let dir = target.join("bench-store");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let py = match std::env::var_os("MEMTUNE_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => python::venv()?,
    };
    let work = (workers, trials, steps);

    let mut failed = false;
    if sqlite {
        let mut rows = Vec::new();
        for durability in ["full", "normal"] {
            let db = dir.join(format!("memtune-{durability}.db"));
            remove_db(&db);
            let name = format!(
                "memtune store (WAL, synchronous={})",
                durability.to_uppercase()
            );
            rows.push(ours(
                &writer,
                &db.display().to_string(),
                name,
                durability,
                work,
            )?);
        }
        let db = dir.join("optuna.db");
        remove_db(&db);
        rows.push(optuna(
            &py,
            &db.display().to_string(),
            "SQLite defaults",
            work,
        )?);
        failed |= print_table("one SQLite file", &rows, work);
    }
    if pg {
        // One server for all three runs: a child that keeps it until we
        // close its stdin, and prints one URL per database it created.
        let mut server = Command::new(&writer)
            .args(["pg-server", "memtune_full", "memtune_normal", "optuna"])
            .env("MEMTUNE_PG_BIN", postgres::bin_dir()?)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", writer.display()))?;
        let mut lines = std::io::BufReader::new(server.stdout.take().ok_or("no stdout")?).lines();
        let mut url = || -> Result<String> {
            lines
                .next()
                .ok_or("store-writer pg-server printed no URL (no server?)")?
                .map_err(|e| e.to_string())
        };
        let (full, normal, theirs) = (url()?, url()?, url()?);
        let mut rows = Vec::new();
        for (durability, db, setting) in [
            ("full", &full, "synchronous_commit=on"),
            ("normal", &normal, "synchronous_commit=off"),
        ] {
            let name = format!("memtune store (PostgreSQL, {setting})");
            rows.push(ours(&writer, db, name, durability, work)?);
        }
        rows.push(optuna(&py, &theirs, "PostgreSQL, psycopg", work)?);
        drop(server.stdin.take());
        let _ = server.wait();
        failed |= print_table("one PostgreSQL server on this machine", &rows, work);
    }
    if failed {
        return Err("some run lost trials".into());
    }
    Ok(())
}

/// Print one backend's table; whether any run lost trials.
fn print_table(what: &str, rows: &[Row], (workers, trials, steps): (usize, usize, usize)) -> bool {
    println!();
    println!("{workers} processes x {trials} trials x {steps} intermediate values, {what}");
    println!(
        "| storage | wall s | trials/s | intermediate writes/s | lock errors surfaced | all {} trials landed, dense numbers |",
        workers * trials
    );
    println!("| --- | ---: | ---: | ---: | ---: | --- |");
    for r in rows {
        println!(
            "| {} | {:.2} | {:.1} | {:.1} | {} | {} |",
            r.name,
            r.seconds,
            r.trials as f64 / r.seconds,
            r.intermediates as f64 / r.seconds,
            r.lock_errors,
            if r.all_landed { "yes" } else { "NO" }
        );
    }
    rows.iter().any(|r| !r.all_landed)
}

fn remove_db(db: &Path) {
    for ext in ["", "-wal", "-shm", "-journal"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
}

fn ours(
    writer: &Path,
    db: &str,
    name: String,
    durability: &str,
    (workers, trials, steps): (usize, usize, usize),
) -> Result<Row> {
    eprintln!("xtask: {name} ...");
    let start = Instant::now();
    let children = (0..workers)
        .map(|_| {
            Command::new(writer)
                .arg("load")
                .arg(db)
                .args(["bench", &trials.to_string(), &steps.to_string(), durability])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot run {}: {e}", writer.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut errors = 0;
    for child in children {
        let out = child
            .wait_with_output()
            .map_err(|e| format!("store-writer: {e}"))?;
        if !out.status.success() {
            errors += 1;
            eprintln!(
                "store-writer failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let out = Command::new(writer)
        .arg("check")
        .arg(db)
        .arg("bench")
        .output()
        .map_err(|e| format!("store-writer check: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |k: &str| -> String {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")).map(String::from))
            .unwrap_or_default()
    };
    let total = workers * trials;
    let complete: usize = field("complete").parse().unwrap_or(0);
    let intermediates: usize = field("intermediates").parse().unwrap_or(0);
    Ok(Row {
        name,
        seconds,
        trials: complete,
        intermediates,
        lock_errors: errors.to_string(),
        all_landed: errors == 0
            && complete == total
            && intermediates == total * steps
            && field("dense") == "true"
            // PostgreSQL has no integrity check to run: `n/a`.
            && matches!(field("integrity").as_str(), "ok" | "n/a"),
    })
}

fn optuna(
    py: &Path,
    db: &str,
    setting: &str,
    (workers, trials, steps): (usize, usize, usize),
) -> Result<Row> {
    eprintln!("xtask: optuna RDBStorage ({setting}) ...");
    let script = env::root()
        .join("benches")
        .join("store")
        .join("optuna_concurrency.py");
    let out = Command::new(py)
        .arg(&script)
        .arg(db)
        .args([workers.to_string(), trials.to_string(), steps.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", py.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed ({})", script.display(), out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    // One flat JSON object of numbers and booleans; no JSON crate needed.
    let field = |k: &str| -> String {
        line.split(&format!("\"{k}\": "))
            .nth(1)
            .map(|rest| {
                rest.split([',', '}'])
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .trim_matches('"')
                    .to_string()
            })
            .unwrap_or_default()
    };
    let total = workers * trials;
    let complete: usize = field("complete").parse().unwrap_or(0);
    let intermediates: usize = field("intermediates").parse().unwrap_or(0);
    Ok(Row {
        name: format!("Optuna {} RDBStorage ({setting})", field("optuna")),
        seconds: field("seconds").parse().unwrap_or(f64::NAN),
        trials: complete,
        intermediates,
        lock_errors: field("lock_errors"),
        all_landed: field("workers_failed") == "0"
            && complete == total
            && intermediates == total * steps
            && field("dense") == "true",
    })
}
