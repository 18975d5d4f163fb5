//! The Python venv for reference checks (Optuna and numpy), under the cache.
//!
//! Pinned versions live in `benches/requirements.txt`; the venv is rebuilt
//! when that file changes, so every run compares against the same peers.

use crate::{Result, env};
use std::path::PathBuf;
use std::process::Command;

/// Create (once) and return the venv's python executable.
pub fn venv() -> Result<PathBuf> {
    let reqs = env::root().join("benches").join("requirements.txt");
    let wanted = std::fs::read_to_string(&reqs)
        .map_err(|e| format!("cannot read {}: {e}", reqs.display()))?;
    let dir = env::cache_dir().join("venv");
    let py = dir.join("bin").join("python");
    let stamp = dir.join("requirements.installed");
    if py.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&wanted) {
        return Ok(py);
    }
    let base = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    eprintln!("xtask: creating the reference venv in {}", dir.display());
    env::run(
        Command::new(&base)
            .args(["-m", "venv", "--clear"])
            .arg(&dir),
    )?;
    env::run(
        Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&reqs),
    )?;
    std::fs::write(&stamp, wanted).map_err(|e| format!("cannot write {}: {e}", stamp.display()))?;
    Ok(py)
}
