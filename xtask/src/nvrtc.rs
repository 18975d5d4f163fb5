//! libnvrtc for the NVRTC compile check, from the pip wheel
//! `nvidia-cuda-nvrtc-cu12` in a venv under the cache.
//!
//! CI has no GPU and no CUDA toolkit, but NVRTC is a plain shared library:
//! the wheel carries `libnvrtc.so.12` and its builtins, enough to compile
//! every kernel for any architecture. The trainer's `nvrtc_compile` test
//! reads `MEMTUNE_NVRTC_LIB` (this lib directory). cudarc's bindings are
//! CUDA 13.0's and load either major version (`gpu_mem::libs`); the device
//! image's NVRTC 13 is what `.device/run.sh` uses.

use crate::{Result, env};
use std::path::PathBuf;
use std::process::Command;

/// The pinned wheel.
const WHEEL: &str = "nvidia-cuda-nvrtc-cu12==12.8.93";

/// The variable the trainer's NVRTC test and CUDA backend read.
pub const VAR: &str = "MEMTUNE_NVRTC_LIB";

/// Installs the wheel once (again when the pin changes) and returns the
/// directory holding `libnvrtc.so.12`.
pub fn lib_dir() -> Result<PathBuf> {
    let dir = env::cache_dir().join("nvrtc-venv");
    let py = dir.join("bin").join("python");
    let stamp = dir.join("wheel.installed");
    if !(py.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(WHEEL)) {
        let base = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        eprintln!("xtask: installing {WHEEL} into {}", dir.display());
        env::run(
            Command::new(&base)
                .args(["-m", "venv", "--clear"])
                .arg(&dir),
        )?;
        env::run(Command::new(&py).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            WHEEL,
        ]))?;
        std::fs::write(&stamp, WHEEL)
            .map_err(|e| format!("cannot write {}: {e}", stamp.display()))?;
    }
    find_lib(&dir)
}

/// `lib/pythonX.Y/site-packages/nvidia/cuda_nvrtc/lib` inside the venv.
fn find_lib(venv: &std::path::Path) -> Result<PathBuf> {
    let lib = venv.join("lib");
    let entries =
        std::fs::read_dir(&lib).map_err(|e| format!("cannot read {}: {e}", lib.display()))?;
    for entry in entries.flatten() {
        let candidate = entry.path().join("site-packages/nvidia/cuda_nvrtc/lib");
        if candidate.join("libnvrtc.so.12").exists() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "{WHEEL} is installed in {} but libnvrtc.so.12 is not in it",
        venv.display()
    ))
}
