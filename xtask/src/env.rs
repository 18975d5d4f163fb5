//! Running cargo, and the environment the reference tests read.
//!
//! Tests that compare against Optuna or a real model read two variables:
//! `MEMTUNE_PYTHON` (a Python with the pinned reference packages) and
//! `MEMTUNE_MINILM_DIR` (the unpacked all-MiniLM-L6-v2 files). `cargo xtask
//! test` sets both; a plain `cargo test` without them skips those tests with
//! a message, except under `CI=true`, where a missing resource is a failure.

use crate::{Result, model, python};
use std::path::PathBuf;
use std::process::Command;

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().expect("xtask has a parent").to_path_buf()
}

/// Free space in bytes on the file system that holds `path`, as `df`
/// reports it; None where `df` cannot say.
pub fn free_bytes(path: &std::path::Path) -> Option<u64> {
    let out = Command::new("df").arg("-Pk").arg(path).output().ok()?;
    if !out.status.success() {
        return None;
    }
    // POSIX format: a header line, then `fs blocks used available ...`.
    let text = String::from_utf8(out.stdout).ok()?;
    let available_kb: u64 = text
        .lines()
        .nth(1)?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()?;
    Some(available_kb * 1024)
}

/// Where downloads are cached: `$MEMTUNE_CACHE`, else `target/memtune-cache`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("MEMTUNE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target").join("memtune-cache"))
}

pub fn cargo(args: &[&str], vars: &[(&str, String)]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("$ cargo {}", args.join(" "));
    let status = Command::new(&cargo)
        .args(args)
        .current_dir(root())
        .envs(ci_vars())
        .envs(vars.iter().map(|(k, v)| (*k, v)))
        .status()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo {} failed ({status})", args.join(" ")))
    }
}

/// On CI (`CI=true`), a build that fits a small disk: no incremental cache
/// (about 3 GB in a fresh clone, and useless for a one-off build) and line
/// tables instead of full debug info (backtraces keep file:line). Every
/// cargo call gets the same settings, so none rebuilds another's output.
fn ci_vars() -> Vec<(&'static str, &'static str)> {
    let on_ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    if !on_ci {
        return Vec::new();
    }
    [
        ("CARGO_INCREMENTAL", "0"),
        ("CARGO_PROFILE_DEV_DEBUG", "line-tables-only"),
    ]
    .into_iter()
    .filter(|(k, _)| std::env::var_os(k).is_none())
    .collect()
}

/// The variables for reference tests: the venv's Python and the model dir.
pub fn reference_vars() -> Result<Vec<(&'static str, String)>> {
    let py = python::venv()?;
    let model = model::fetch("minilm")?;
    Ok(vec![
        ("MEMTUNE_PYTHON", py.display().to_string()),
        ("MEMTUNE_MINILM_DIR", model.display().to_string()),
    ])
}

pub fn run(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}
