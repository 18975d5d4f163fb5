//! Running the `memtune` binary in integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Optuna's URL form of a SQLite file.
pub fn url(db: &Path) -> String {
    format!("sqlite:///{}", db.display())
}

/// Runs `memtune --storage sqlite:///DB ARGS...`, ignoring any MEMTUNE_STORAGE.
pub fn memtune(db: &Path, args: &[&str]) -> Output {
    memtune_on(&url(db), args)
}

/// Runs `memtune --storage URL ARGS...`, ignoring any MEMTUNE_STORAGE.
pub fn memtune_on(url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memtune"))
        .arg("--storage")
        .arg(url)
        .args(args)
        .env_remove("MEMTUNE_STORAGE")
        .output()
        .unwrap()
}

/// The stdout of a command that must succeed.
pub fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "memtune failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The stderr of a command that must be refused cleanly: non-zero exit, no
/// panic, nothing on stdout.
pub fn fails(out: Output) -> String {
    assert!(!out.status.success(), "expected failure");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.stdout.is_empty(), "a refused command printed output");
    err
}

/// Trials of the file's only study that the runner leased memory for.
pub fn started_trials(db: &Path) -> usize {
    let storage = store::Storage::open_existing(db).unwrap();
    let studies = storage.studies().unwrap();
    assert_eq!(studies.len(), 1);
    storage
        .trials(studies[0].study.study_id, &store::TrialFilter::default())
        .unwrap()
        .iter()
        .filter(|t| t.user_attrs.contains_key("lease_bytes"))
        .count()
}

/// A test resource is missing: under `CI` that fails the test (CI must run
/// it); elsewhere the test says so and skips.
pub fn skip_or_fail(what: &str) {
    if std::env::var_os("CI").is_some() {
        panic!("{what} is missing; CI must run this test");
    }
    eprintln!("skipping: {what} is missing");
}

/// `MEMTUNE_PYTHON`, the reference venv's Python (Optuna 5.0 and the peers
/// of `benches/requirements.txt`), or `None` after [`skip_or_fail`].
pub fn reference_python() -> Option<PathBuf> {
    let py = std::env::var_os("MEMTUNE_PYTHON").map(PathBuf::from);
    if py.is_none() {
        skip_or_fail("MEMTUNE_PYTHON (a Python with optuna==5.0.0)");
    }
    py
}
