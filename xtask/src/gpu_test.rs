//! `cargo xtask gpu-test`: the CUDA tests and the GPU latency table.
//!
//! The device machine has a GPU but no Rust toolchain, so this builds here
//! (with each CUDA crate's `cuda` feature) and runs there: it copies the test
//! binaries and the latency example into `.device/` (git-ignored) with a
//! `run.sh`. Carry `.device` to the device machine and run
//! `bash .device/run.sh`. On a machine that has both cargo and a GPU,
//! `cargo xtask gpu-test --run` builds and runs in one go.

use crate::{Result, env};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Crates with a `cuda` feature and GPU tests, and which test targets to
/// bundle (none named: all of them). The trainer bundles only its CUDA
/// tests: its CPU tests run in CI, and all of them would not fit the carry.
const CUDA_CRATES: &[(&str, &[&str])] = &[("gpu-mem", &[]), ("trainer", &["--test", "cuda_ops"])];

/// The trainer's CUDA backend loads libnvrtc and libcublas by name. The
/// device machine has no CUDA toolkit, but its PyTorch ships both as pip
/// wheels (`nvidia-cuda-nvrtc-cu12`, `nvidia-cublas-cu12`): find them there
/// unless the caller already set the paths.
const FIND_CUDA_LIBS: &str = r#"NVIDIA_DIR=$("${PYTHON:-python3}" -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null || true)
if [ -n "$NVIDIA_DIR" ]; then
  export MEMTUNE_NVRTC_LIB="${MEMTUNE_NVRTC_LIB:-$NVIDIA_DIR/cuda_nvrtc/lib}"
  export LD_LIBRARY_PATH="$NVIDIA_DIR/cublas/lib:$NVIDIA_DIR/cuda_nvrtc/lib:${LD_LIBRARY_PATH:-}"
fi
"#;

pub fn run(args: &[String]) -> Result<()> {
    let run_here = args.iter().any(|a| a == "--run");
    let bundle = env::root().join(".device");
    let bin = bundle.join("bin");
    if bin.exists() {
        std::fs::remove_dir_all(&bin)
            .map_err(|e| format!("cannot clear {}: {e}", bin.display()))?;
    }
    std::fs::create_dir_all(&bin).map_err(|e| format!("cannot create {}: {e}", bin.display()))?;

    let mut tests = Vec::new();
    for (krate, targets) in CUDA_CRATES {
        let feature = format!("{krate}/cuda");
        let mut cargo_args = vec![
            "test",
            "--no-run",
            "--package",
            krate,
            "--features",
            &feature,
        ];
        cargo_args.extend_from_slice(targets);
        let built = build(&cargo_args, true)?;
        tests.extend(
            built
                .into_iter()
                .map(|exe| copy_into(&exe, &bin))
                .collect::<Result<Vec<_>>>()?,
        );
    }
    let latency = build(
        &[
            "build",
            "--package",
            "gpu-mem",
            "--features",
            "gpu-mem/cuda",
            "--example",
            "gpu_latency",
        ],
        false,
    )?;
    for exe in &latency {
        copy_into(exe, &bin)?;
    }
    let script_src = env::root().join("crates/gpu-mem/scripts/torch_latency.py");
    std::fs::copy(&script_src, bundle.join("torch_latency.py"))
        .map_err(|e| format!("cannot copy {}: {e}", script_src.display()))?;

    let mut script = String::from(
        "#!/usr/bin/env bash\n# Made by `cargo xtask gpu-test`: runs the CUDA tests, then the latency table.\n\
         set -euo pipefail\ncd \"$(dirname \"$0\")\"\nexport MEMTUNE_GPU_TESTS=1\n",
    );
    script += FIND_CUDA_LIBS;
    for test in &tests {
        script += &format!(
            "echo \"== {name}\"\n./bin/{name} --test-threads=1\n",
            name = file_name(test)
        );
    }
    script += "MEMTUNE_TORCH_LATENCY_SCRIPT=torch_latency.py ./bin/gpu_latency --python \"${PYTHON:-python3}\"\n";
    let run_sh = bundle.join("run.sh");
    std::fs::write(&run_sh, script)
        .map_err(|e| format!("cannot write {}: {e}", run_sh.display()))?;
    eprintln!(
        "xtask: GPU bundle in {} ({} test binaries); run `bash .device/run.sh` on the GPU machine",
        bundle.display(),
        tests.len()
    );
    if run_here {
        env::run(Command::new("bash").arg(&run_sh))?;
    }
    Ok(())
}

/// Runs a release cargo build and returns the executables it produced:
/// the test harnesses when `tests`, else the other binaries (`cargo test
/// --no-run` reports the examples it builds too). Built without debug info
/// and stripped, so the bundle fits the device machine's 64 MiB carry limit.
fn build(args: &[&str], tests: bool) -> Result<Vec<PathBuf>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("$ cargo {} --release", args.join(" "));
    let out = Command::new(&cargo)
        .args(args)
        .args(["--release", "--message-format=json-render-diagnostics"])
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "true")
        .current_dir(env::root())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo {} failed ({})", args.join(" "), out.status));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut exes = Vec::new();
    for line in stdout.lines() {
        let msg: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| format!("cargo printed a line that is not JSON ({e}): {line}"))?;
        let is_test = msg.pointer("/profile/test").and_then(|v| v.as_bool()) == Some(true);
        if let Some(exe) = msg.get("executable").and_then(|v| v.as_str())
            && is_test == tests
        {
            exes.push(PathBuf::from(exe));
        }
    }
    Ok(exes)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn copy_into(exe: &Path, dir: &Path) -> Result<PathBuf> {
    let dest = dir.join(file_name(exe));
    std::fs::copy(exe, &dest).map_err(|e| format!("cannot copy {}: {e}", exe.display()))?;
    Ok(dest)
}
