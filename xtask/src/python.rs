//! Python venvs for reference checks, under the cache.
//!
//! - `venv` (`benches/requirements.txt`: Optuna, numpy, tokenizers,
//!   optuna-dashboard): what the test suite and the store/sampler benches
//!   use.
//! - `torch-venv` (`benches/reference/requirements-torch.txt`: torch,
//!   transformers and Optuna, 4.6 GB, about 2 minutes to install from
//!   PyPI; torch's Triton is removed, see [`torch_venv`]): the PyTorch
//!   comparisons under `benches/reference/` (the legacy
//!   baseline `legacy_study.py` among them), and the test suite's round
//!   trips through transformers (`cargo xtask test` passes it as
//!   `MEMTUNE_TORCH_PYTHON`).
//! - `gp-venv` (`benches/sampler/requirements-gp.txt`: Optuna with torch
//!   and scipy, and COCO's `coco-experiment`): only for the sampler
//!   benchmarks (`cargo xtask bench sampler --gp`, `--suite coco`,
//!   `--multi`), never for CI.
//! - `peers-venv` (`benches/sampler/requirements-peers.txt`: SMAC3, HEBO
//!   and COCO, every package pinned and installed without resolving
//!   dependencies, since HEBO's declared pins no longer install): the
//!   `smac-*` and `hebo` samplers of `--suite coco`, never for CI.
//!
//! A venv is rebuilt when its pinned requirements change, so every run
//! compares against the same peers.

use crate::{Result, env};
use std::path::PathBuf;
use std::process::Command;

/// The reference venv of the test suite; see the module doc.
pub fn venv() -> Result<PathBuf> {
    named(
        "venv",
        "benches/requirements.txt",
        Resolve::Dependencies,
        &[],
    )
}

/// The torch + transformers venv; see the module doc.
///
/// Triton (1 GB) compiles GPU kernels only: on this venv's CPU torch and
/// `torch.compile`'s C++ backend run without it, and the GPU comparisons run
/// on the device machine's own torch. CI's disk is shared, so the test
/// suite's footprint is kept to what it uses.
pub fn torch_venv() -> Result<PathBuf> {
    named(
        "torch-venv",
        "benches/reference/requirements-torch.txt",
        Resolve::Dependencies,
        &["triton"],
    )
}

/// `cargo xtask python [torch|gp|peers]`: make the named venv and print its
/// python.
pub fn cmd(args: &[String]) -> Result<PathBuf> {
    match args.first().map(String::as_str) {
        None => venv(),
        Some("torch") => torch_venv(),
        Some("gp") => gp_venv(),
        Some("peers") => peers_venv(),
        Some(other) => Err(format!("unknown venv '{other}' (known: torch, gp, peers)")),
    }
}

/// The venv with Optuna's GPSampler (torch, scipy); see the module doc.
pub fn gp_venv() -> Result<PathBuf> {
    named(
        "gp-venv",
        "benches/sampler/requirements-gp.txt",
        Resolve::Dependencies,
        &[],
    )
}

/// The venv with SMAC3 and HEBO; see the module doc.
pub fn peers_venv() -> Result<PathBuf> {
    named(
        "peers-venv",
        "benches/sampler/requirements-peers.txt",
        Resolve::AllPinned,
        &[],
    )
}

/// Whether pip resolves a requirements file's dependencies, or installs
/// exactly the packages it lists (a lock file naming every one).
#[derive(Clone, Copy, PartialEq)]
enum Resolve {
    Dependencies,
    AllPinned,
}

/// Create (once) the venv `name` from the requirements file at `reqs`
/// (relative to the workspace root), less the packages in `unused` (pulled
/// in by a dependency, never imported), and return its python executable.
fn named(name: &str, reqs: &str, resolve: Resolve, unused: &[&str]) -> Result<PathBuf> {
    let reqs = env::root().join(reqs);
    let mut wanted = std::fs::read_to_string(&reqs)
        .map_err(|e| format!("cannot read {}: {e}", reqs.display()))?;
    // The stamp records the removals too, so a venv made before one is
    // remade without it.
    for package in unused {
        wanted.push_str(&format!("# removed after install: {package}\n"));
    }
    let dir = env::cache_dir().join(name);
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
    let mut pip = Command::new(&py);
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        // The venv is the cache: a second copy of torch's wheels in pip's
        // cache would double the 5.6 GB on disk.
        "--no-cache-dir",
    ]);
    if resolve == Resolve::AllPinned {
        pip.arg("--no-deps");
    }
    // pip unpacks every wheel into TMPDIR before it installs any: torch's
    // are several GB, more than a small /tmp (a tmpfs) holds. Beside the
    // venv they are on the disk that holds the venv itself.
    let unpack = env::cache_dir().join("pip-tmp");
    std::fs::create_dir_all(&unpack)
        .map_err(|e| format!("cannot create {}: {e}", unpack.display()))?;
    pip.env("TMPDIR", &unpack);
    let installed = env::run(pip.arg("-r").arg(&reqs));
    let _ = std::fs::remove_dir_all(&unpack);
    installed?;
    if !unused.is_empty() {
        env::run(
            Command::new(&py)
                .args(["-m", "pip", "uninstall", "--quiet", "--yes"])
                .args(unused),
        )?;
    }
    std::fs::write(&stamp, wanted).map_err(|e| format!("cannot write {}: {e}", stamp.display()))?;
    Ok(py)
}
