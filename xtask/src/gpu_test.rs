//! `cargo xtask gpu-test`: the GPU bundle.
//!
//! The device machine has a GPU but no Rust toolchain, so this builds here
//! (with each CUDA crate's `cuda` feature) and runs there: it copies the CUDA
//! test binaries, the latency and throughput examples with their PyTorch
//! scripts, `memtune` (built with fault injection, for the poisoned-context
//! step), the study files, the legacy baseline with the embedded data and
//! Optuna's wheels into `.device/`
//! (git-ignored) with `run.sh` (`gpu_bundle/run.sh`). Carry `.device` to the
//! device machine and run `bash .device/run.sh [STEP...]`; it writes
//! `gpu-report.json` and `gpu-report.md` into `$OUT`. `session.sh` runs
//! the steps that fit one call of a few minutes, in the order that keeps
//! the timed ones alone (`gpu_bundle/session.sh`). `run.sh --dry-run`
//! reports every step skipped (what `cargo xtask test` checks, see
//! [`check_dry_run`], also `cargo xtask gpu-test --dry-run`). On a machine that has both cargo and a GPU,
//! `cargo xtask gpu-test --run` builds and runs in one go.

use crate::{Result, env};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Crates with a `cuda` feature and GPU tests, and which test targets to
/// bundle (none named: all of them). The trainer bundles only its CUDA
/// tests: its CPU tests run in CI, and all of them would not fit the carry.
const CUDA_CRATES: &[(&str, &[&str])] = &[
    ("gpu-mem", &["--test", "gpu"]),
    (
        "trainer",
        &[
            "--test",
            "cuda_ops",
            "--test",
            "cuda_fused",
            "--test",
            "cuda_finetune",
            "--test",
            "cuda_memory_plan",
        ],
    ),
];

/// The examples `run.sh` runs, each built with its crate's `cuda` feature.
const EXAMPLES: &[(&str, &str)] = &[("gpu-mem", "gpu_latency"), ("trainer", "gpu_throughput")];

/// The PyTorch peers the steps compare with, copied beside `run.sh`
/// (`torch_gpu_throughput.py` and `torch_memory_peak.py` import the CPU
/// reference's optimiser, batch and step from `torch_throughput.py`).
const SCRIPTS: &[&str] = &[
    "crates/gpu-mem/scripts/torch_latency.py",
    "benches/reference/torch_gpu_throughput.py",
    "benches/reference/torch_memory_peak.py",
    "benches/reference/torch_throughput.py",
    "benches/reference/legacy_study.py",
];

/// The embedded data set, from which `legacy_study.py` makes the `legacy`
/// step's documents (into the bundle's `sentiment-labelled-sentences/`).
const DATA_DIR: &str = "crates/trainer/data/sentiment-labelled-sentences";
const DATA_FILES: &[&str] = &["amazon.json", "imdb.json", "yelp.json"];

/// The steps of `run.sh`, in order.
pub const STEPS: &[&str] = &[
    "ops",
    "determinism",
    "gpu-mem",
    "latency",
    "throughput",
    "profile",
    "memory-plan",
    "finetune",
    "study",
    "poison",
    "legacy",
];

/// The bundle must fit the device machine's carry limit with room to spare.
const MAX_BUNDLE_BYTES: u64 = 60 << 20;

const RUN_SH: &str = include_str!("gpu_bundle/run.sh");
/// The bundle's steps in one call of a few minutes (`session.sh`'s header).
const SESSION_SH: &str = include_str!("gpu_bundle/session.sh");
/// The study step's study file (its model is the bundle's `minilm/`).
const STUDY_TOML: &str = include_str!("gpu_bundle/study.toml");
/// Makes the bundle's `minilm/`: fp16, the vocabulary cut to the data's.
const MINILM_FP16_PY: &str = include_str!("gpu_bundle/minilm_fp16.py");
/// The `legacy` step's study file (memtune's side) and its verdict.
const LEGACY_TOML: &str = include_str!("gpu_bundle/legacy.toml");
const LEGACY_FIGURES_PY: &str = include_str!("gpu_bundle/legacy_figures.py");
/// The baseline's Optuna, as wheels for the device machine (no index there).
const LEGACY_WHEELS: &str = include_str!("gpu_bundle/requirements-legacy.txt");

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
    for (krate, example) in EXAMPLES {
        let feature = format!("{krate}/cuda");
        let built = build(
            &[
                "build",
                "--package",
                krate,
                "--features",
                &feature,
                "--example",
                example,
            ],
            false,
        )?;
        for exe in &built {
            copy_into(exe, &bin)?;
        }
    }
    for script in SCRIPTS {
        copy_into(&env::root().join(script), &bundle)?;
    }
    for (name, text) in [
        ("session.sh", SESSION_SH),
        ("study.toml", STUDY_TOML),
        ("legacy.toml", LEGACY_TOML),
        ("legacy_figures.py", LEGACY_FIGURES_PY),
    ] {
        std::fs::write(bundle.join(name), text)
            .map_err(|e| format!("cannot write {name} into {}: {e}", bundle.display()))?;
    }
    let data = bundle.join("sentiment-labelled-sentences");
    std::fs::create_dir_all(&data).map_err(|e| format!("cannot create {}: {e}", data.display()))?;
    for file in DATA_FILES {
        copy_into(&env::root().join(DATA_DIR).join(file), &data)?;
    }
    legacy_wheels(&bundle.join("wheels"))?;
    minilm_fp16(&bundle.join("minilm"))?;

    // With fault injection: the poison step stages a real device-side
    // assert through `MEMTUNE_FAULT` (without the variable it changes
    // nothing).
    let memtune = build(
        &[
            "build",
            "--package",
            "cli",
            "--bin",
            "memtune",
            "--features",
            "fault-injection",
        ],
        false,
    )?;
    for exe in &memtune {
        copy_into(exe, &bin)?;
    }
    compress_binaries(&bin)?;
    let run_sh = bundle.join("run.sh");
    std::fs::write(&run_sh, RUN_SH)
        .map_err(|e| format!("cannot write {}: {e}", run_sh.display()))?;
    let size = dir_bytes(&bundle);
    if size > MAX_BUNDLE_BYTES {
        return Err(format!(
            "the GPU bundle {} is {size} bytes, over {MAX_BUNDLE_BYTES}",
            bundle.display()
        ));
    }
    eprintln!(
        "xtask: GPU bundle in {} ({} test binaries, {:.1} MiB); run `bash .device/run.sh` on the GPU machine",
        bundle.display(),
        tests.len(),
        size as f64 / (1u64 << 20) as f64
    );
    if args.iter().any(|a| a == "--dry-run") {
        check_dry_run(&env::root().join("target").join("gpu-dry-run"))?;
    }
    if run_here {
        env::run(Command::new("bash").arg(&run_sh))?;
    }
    Ok(())
}

/// Replaces every file in `bin` by its xz compression (`NAME.xz`), which
/// `run.sh` unpacks on the device machine: stripped, the binaries are two
/// thirds of the bundle and compress about fourfold, which keeps the bundle
/// under the carry limit with the model and wheels beside them.
fn compress_binaries(bin: &Path) -> Result<()> {
    const XZ_PY: &str = r#"import lzma, os, sys
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        data = f.read()
    with lzma.open(path + ".xz", "wb", preset=6) as f:
        f.write(data)
    os.remove(path)
"#;
    let files: Vec<PathBuf> = std::fs::read_dir(bin)
        .map_err(|e| format!("cannot read {}: {e}", bin.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_none_or(|x| x != "xz"))
        .collect();
    env::run(
        Command::new(crate::python::venv()?)
            .args(["-c", XZ_PY])
            .args(&files),
    )
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

/// all-MiniLM-L6-v2 for the finetune and study steps, into `out`: fp16
/// weights and the vocabulary cut to the embedded data's word pieces
/// (`gpu_bundle/minilm_fp16.py`), 25 MiB instead of 87.
fn minilm_fp16(out: &Path) -> Result<()> {
    let model = crate::model::fetch("minilm")?;
    let python = crate::python::venv()?;
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(|e| format!("cannot clear {}: {e}", out.display()))?;
    }
    env::run(
        Command::new(python)
            .args(["-c", MINILM_FP16_PY])
            .arg(model)
            .arg(env::root().join("crates/trainer/data/sentiment-labelled-sentences"))
            .arg(out),
    )
}

/// The wheels of `gpu_bundle/requirements-legacy.txt` into `out`, from a
/// cache under `$MEMTUNE_CACHE` refreshed when the pins change.
fn legacy_wheels(out: &Path) -> Result<()> {
    let cache = env::cache_dir().join("legacy-wheels");
    let stamp = cache.join("requirements.downloaded");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(LEGACY_WHEELS) {
        if cache.exists() {
            std::fs::remove_dir_all(&cache)
                .map_err(|e| format!("cannot clear {}: {e}", cache.display()))?;
        }
        std::fs::create_dir_all(&cache)
            .map_err(|e| format!("cannot create {}: {e}", cache.display()))?;
        let reqs = cache.join("requirements.txt");
        std::fs::write(&reqs, LEGACY_WHEELS)
            .map_err(|e| format!("cannot write {}: {e}", reqs.display()))?;
        env::run(
            Command::new(crate::python::venv()?)
                .args([
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--disable-pip-version-check",
                    "--no-deps",
                    "--only-binary=:all:",
                    "--platform",
                    "any",
                    "--implementation",
                    "py",
                    "-d",
                ])
                .arg(&cache)
                .arg("-r")
                .arg(&reqs),
        )?;
        std::fs::write(&stamp, LEGACY_WHEELS)
            .map_err(|e| format!("cannot write {}: {e}", stamp.display()))?;
    }
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(|e| format!("cannot clear {}: {e}", out.display()))?;
    }
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let wheels = std::fs::read_dir(&cache)
        .map_err(|e| format!("cannot read {}: {e}", cache.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"));
    let mut copied = 0;
    for wheel in wheels {
        copy_into(&wheel, out)?;
        copied += 1;
    }
    let wanted = LEGACY_WHEELS
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count();
    if copied != wanted {
        return Err(format!(
            "{}: {copied} wheels for the {wanted} pins of gpu_bundle/requirements-legacy.txt",
            cache.display()
        ));
    }
    Ok(())
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

/// Bytes of every file under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                dir_bytes(&p)
            } else {
                e.metadata().map_or(0, |m| m.len())
            }
        })
        .sum()
}

/// Runs `bash .device/run.sh --dry-run` into `out` and checks the bundle's
/// files and the report: every step, in order, skipped with a reason.
pub fn check_dry_run(out: &Path) -> Result<()> {
    let bundle = env::root().join(".device");
    let bin = bundle.join("bin");
    let names: Vec<String> = std::fs::read_dir(&bin)
        .map_err(|e| format!("cannot read {}: {e}", bin.display()))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let examples = EXAMPLES.iter().map(|(_, example)| *example);
    for prefix in [
        "cuda_ops-",
        "cuda_fused-",
        "cuda_finetune-",
        "cuda_memory_plan-",
        "gpu-",
        "memtune",
    ]
    .into_iter()
    .chain(examples)
    {
        if !names.iter().any(|n| n.starts_with(prefix)) {
            return Err(format!(
                "the GPU bundle has no {prefix}* in {}",
                bin.display()
            ));
        }
    }
    let scripts = SCRIPTS.iter().map(|s| file_name(Path::new(s)));
    let others = [
        "session.sh",
        "study.toml",
        "legacy.toml",
        "legacy_figures.py",
        "minilm/config.json",
        "minilm/model.safetensors",
        "minilm/tokenizer.json",
    ];
    let data = DATA_FILES
        .iter()
        .map(|f| format!("sentiment-labelled-sentences/{f}"));
    let wheels = LEGACY_WHEELS
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim().split_once("=="))
        .map(|(name, version)| format!("wheels/{name}-{version}-py3-none-any.whl"));
    for file in scripts
        .chain(others.map(String::from))
        .chain(data)
        .chain(wheels)
    {
        if !bundle.join(&file).is_file() {
            return Err(format!("the GPU bundle has no {file}"));
        }
    }
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(|e| format!("cannot clear {}: {e}", out.display()))?;
    }
    env::run(
        Command::new("bash")
            .arg(bundle.join("run.sh"))
            .arg("--dry-run")
            .env("OUT", out),
    )?;
    let report_path = out.join("gpu-report.json");
    let text = std::fs::read_to_string(&report_path)
        .map_err(|e| format!("cannot read {}: {e}", report_path.display()))?;
    let report: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not JSON: {e}", report_path.display()))?;
    let steps = report
        .get("steps")
        .and_then(|s| s.as_array())
        .ok_or_else(|| format!("{}: no \"steps\" array", report_path.display()))?;
    let names: Vec<&str> = steps
        .iter()
        .filter_map(|s| s.get("name").and_then(|n| n.as_str()))
        .collect();
    if names != STEPS {
        return Err(format!(
            "{}: steps {names:?}, expected {STEPS:?}",
            report_path.display()
        ));
    }
    for step in steps {
        let ok = step.get("status").and_then(|v| v.as_str()) == Some("skipped")
            && step
                .get("seconds")
                .is_some_and(|v| v.is_f64() || v.is_u64())
            && step
                .get("detail")
                .and_then(|v| v.as_str())
                .is_some_and(|d| !d.is_empty());
        if !ok {
            return Err(format!(
                "{}: a dry-run step is not skipped with a reason: {step}",
                report_path.display()
            ));
        }
    }
    let md = out.join("gpu-report.md");
    let md_text =
        std::fs::read_to_string(&md).map_err(|e| format!("cannot read {}: {e}", md.display()))?;
    if STEPS
        .iter()
        .any(|s| !md_text.contains(&format!("| {s} | skipped |")))
    {
        return Err(format!(
            "{} does not list every step as skipped",
            md.display()
        ));
    }
    eprintln!(
        "xtask: GPU bundle dry run: {} steps skipped, report checked",
        STEPS.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A bundle whose `memtune devices` finds a GPU and whose throughput
    /// example prints a table and writes `figures` (verbatim) as its figures.
    fn fake_bundle(dir: &Path, figures: &str) {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(dir.join("run.sh"), RUN_SH).unwrap();
        let exe = |name: &str, body: &str| {
            let path = bin.join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        exe("memtune", "echo 'cuda: 1 device'");
        exe(
            "gpu_throughput",
            &format!(
                "echo 'device: fake'\necho '| model | ours/HF |'\necho '| bert-base | 1.50x |'\n\
                 cat >\"$OUT/throughput.figures.json\" <<'JSON'\n{figures}\nJSON"
            ),
        );
    }

    fn run_throughput(figures: &str) -> serde_json::Value {
        let dir = std::env::temp_dir().join(format!(
            "memtune-run-sh-{}-{}",
            std::process::id(),
            figures.len()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        fake_bundle(&dir, figures);
        let out = Command::new("bash")
            .arg(dir.join("run.sh"))
            .arg("throughput")
            .env("PYTHON", "python3")
            .env_remove("OUT")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = std::fs::read_to_string(dir.join("out/gpu-report.json")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let report: serde_json::Value = serde_json::from_str(&text).unwrap();
        report["steps"][0].clone()
    }

    #[test]
    fn a_steps_figures_go_into_its_report_entry() {
        let step = run_throughput(
            "{\"models\": [{\"model\": \"bert-base\", \"speedup\": 1.5}],\n \"passed\": true}",
        );
        assert_eq!(step["name"], "throughput");
        assert_eq!(step["status"], "passed");
        // One table per run of the example (fused beside HF eager and
        // compiled, reference kernels alone, fused with synchronous uploads).
        let table = "| model | ours/HF |\n| bert-base | 1.50x |";
        assert_eq!(step["detail"], [table, table, table].join("\n"));
        assert_eq!(step["figures"]["models"][0]["speedup"], 1.5);
        assert_eq!(step["figures"]["passed"], true);
    }

    #[test]
    fn figures_that_are_not_one_object_are_left_out_and_said_so() {
        let step = run_throughput("[1, 2]");
        assert_eq!(step["status"], "passed");
        assert!(step.get("figures").is_none(), "{step}");
        let detail = step["detail"].as_str().unwrap();
        assert!(
            detail.contains("not one JSON object: not a JSON object"),
            "{detail}"
        );
    }
}
