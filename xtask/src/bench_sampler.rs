//! `cargo xtask bench sampler`: our TPE against Optuna 5.0's TPESampler in
//! one run, on this machine.
//!
//! - Cost: one ask + tell on the 6-parameter `space6` at histories of
//!   100, 500 and 1,000 COMPLETE trials (ours: the `sampler_bench` example
//!   of hpo-sampler; Optuna: benches/sampler/optuna_bench.py, in-memory
//!   storage), with the ratio, in two regimes: a history of random trials
//!   (where Optuna's cost is usually quoted) and a study's steady state (`-steady`: the
//!   sampler's own trials, which cluster, so more kernels matter).
//! - Quality: best value after 100 trials on Hartmann6, Branin and 10-D
//!   Styblinski-Tang (5 integer dimensions) over many seeds, median and
//!   IQR, for our TPE (`TpeConfig::many_candidates()`: 96 EI candidates,
//!   4 finalists; and the default, Optuna's configuration: 24 candidates
//!   that all compete), Optuna's `TPESampler()` and random sampling.
//!
//! `--gp` runs the Gaussian-process comparison instead (see [`run_gp`]);
//! `--suite coco` and `--multi` the standard suites (`bench_coco.rs`).
//!
//! Options: `--seeds N` (default 50, every function and sampler),
//! `--optuna-seeds N` (default: same), `--reps N` (timing repetitions).
//! Python: `$MEMTUNE_PYTHON` if set, else the reference venv.

use crate::{Result, env, python};
use std::collections::BTreeMap;
use std::process::Command;

fn opt(args: &[String], name: &str, default: usize) -> Result<usize> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} needs a number")),
    }
}

fn output(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    eprintln!("$ {shown}");
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{shown} failed ({})", out.status));
    }
    String::from_utf8(out.stdout).map_err(|e| format!("{shown}: output is not UTF-8: {e}"))
}

#[derive(Default)]
struct Results {
    /// label -> history -> median microseconds
    timings: BTreeMap<String, BTreeMap<usize, f64>>,
    /// function -> label -> best values
    quality: BTreeMap<String, BTreeMap<String, Vec<f64>>>,
    optuna_version: String,
}

impl Results {
    fn parse(&mut self, text: &str) -> Result<()> {
        for line in text.lines() {
            let parts: Vec<&str> = line.split_whitespace().collect();
            match parts.as_slice() {
                ["timing", label, history, median, _mean] => {
                    let history = history.parse().map_err(|_| format!("bad line: {line}"))?;
                    let median = median.parse().map_err(|_| format!("bad line: {line}"))?;
                    self.timings
                        .entry(label.to_string())
                        .or_default()
                        .insert(history, median);
                }
                ["quality", function, label, values] => {
                    let values = values
                        .split(',')
                        .map(|v| v.parse::<f64>().map_err(|_| format!("bad line: {line}")))
                        .collect::<Result<Vec<_>>>()?;
                    self.quality
                        .entry(function.to_string())
                        .or_default()
                        .insert(label.to_string(), values);
                }
                ["version", "optuna", v] => self.optuna_version = v.to_string(),
                _ => {}
            }
        }
        Ok(())
    }
}

/// numpy's default (linear) percentile.
fn percentile(sorted: &[f64], q: f64) -> f64 {
    let pos = q / 100.0 * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

pub fn run(args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "--gp") {
        return run_gp(args);
    }
    if args.windows(2).any(|w| w[0] == "--suite" && w[1] == "coco") {
        return crate::bench_coco::run_suite(args);
    }
    if args.iter().any(|a| a == "--multi") {
        return crate::bench_coco::run_multi(args);
    }
    let seeds = opt(args, "--seeds", 50)?;
    let optuna_seeds = opt(args, "--optuna-seeds", seeds)?;
    let reps = opt(args, "--reps", 200)?;
    let root = env::root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut results = Results::default();

    let ours = |extra: &[&str]| -> Result<String> {
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(&root).args([
            "run",
            "--release",
            "--quiet",
            "--package",
            "hpo-sampler",
            "--example",
            "sampler_bench",
            "--",
            "--seeds",
            &seeds.to_string(),
            "--reps",
            &reps.to_string(),
        ]);
        cmd.args(extra);
        output(&mut cmd)
    };
    results.parse(&ours(&[])?)?;
    results.parse(&ours(&[
        "--candidates",
        "24",
        "--finalists",
        "0",
        "--skip-random",
    ])?)?;

    let py = match std::env::var_os("MEMTUNE_PYTHON") {
        Some(p) => p.into(),
        None => python::venv()?,
    };
    let script = root.join("benches").join("sampler").join("optuna_bench.py");
    let n = optuna_seeds.to_string();
    results.parse(&output(Command::new(py).arg(script).args([
        "--seeds",
        &n,
        "--seeds-other",
        &n,
    ]))?)?;

    print_tables(&results, seeds, optuna_seeds);
    Ok(())
}

fn print_tables(r: &Results, seeds: usize, optuna_seeds: usize) {
    // Each of our timings is compared with Optuna's in the same regime: a
    // random history, or a study's own (`-steady`).
    let regime = |label: &str| {
        if label.contains("-steady") {
            "optuna-steady"
        } else {
            "optuna"
        }
    };
    let ours: Vec<(&String, &BTreeMap<usize, f64>)> = r
        .timings
        .iter()
        .filter(|(k, _)| !k.starts_with("optuna"))
        .collect();
    let theirs: Vec<(&String, &BTreeMap<usize, f64>)> = r
        .timings
        .iter()
        .filter(|(k, _)| k.starts_with("optuna"))
        .collect();
    println!("\nOne TPE ask + tell, 6 parameters (median microseconds)\n");
    let mut header = String::from("| history |");
    let mut rule = String::from("|---:|");
    for (label, _) in &ours {
        header += &format!(" ours {label} | {} / ours |", regime(label));
        rule += "---:|---:|";
    }
    for (label, _) in &theirs {
        header += &format!(" {label} {} |", r.optuna_version);
        rule += "---:|";
    }
    println!("{header}\n{rule}");
    for history in [100usize, 500, 1000] {
        let mut row = format!("| {history} |");
        for (label, t) in &ours {
            let mine = t.get(&history).copied().unwrap_or(f64::NAN);
            let other = r.timings.get(regime(label)).and_then(|t| t.get(&history));
            let ratio = other.map_or(f64::NAN, |o| o / mine);
            row += &format!(" {mine:.1} | {ratio:.0}x |");
        }
        for (_, t) in &theirs {
            row += &format!(" {:.1} |", t.get(&history).copied().unwrap_or(f64::NAN));
        }
        println!("{row}");
    }

    println!(
        "\nBest value after 100 trials (minimise): median and IQR over seeds \
         (ours and random: {seeds} seeds; Optuna: {optuna_seeds} seeds)\n"
    );
    println!("| function | sampler | seeds | median | IQR (25%..75%) |\n|---|---|---:|---:|---|");
    for (function, by_label) in &r.quality {
        for (label, values) in by_label {
            let mut v = values.clone();
            v.sort_by(f64::total_cmp);
            let name = match label.as_str() {
                "optuna" => "Optuna TPESampler()".to_string(),
                "random" => "random".to_string(),
                l => format!("ours {l}"),
            };
            println!(
                "| {function} | {name} | {} | {:.4} | {:.4}..{:.4} |",
                v.len(),
                percentile(&v, 50.0),
                percentile(&v, 25.0),
                percentile(&v, 75.0)
            );
        }
    }
}

/// `cargo xtask bench sampler --gp`: our GpSampler against Optuna 5.0's
/// GPSampler, with both TPEs, in one run. Quality: best value after N
/// trials, median and IQR over seeds, on Hartmann6 (20 and 50 trials of one
/// run), Branin (30) and the 6-D mixed function `mixed6` (50). Cost: one
/// GP ask + tell at 100 COMPLETE trials of the 6-parameter space (median
/// microseconds). Ours: the `gp_bench` example; Optuna's:
/// benches/sampler/optuna_gp_bench.py in the `gp` venv
/// (benches/sampler/requirements-gp.txt: torch and scipy), about 0.5 s per
/// GP trial on a 2-core machine, so 50 seeds take the better part of an
/// hour. `--optuna-results FILE,FILE` reads lines that script already
/// printed instead of running it (a long run kept in files).
fn run_gp(args: &[String]) -> Result<()> {
    let seeds = opt(args, "--seeds", 50)?;
    let root = env::root();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut text = output(Command::new(&cargo).current_dir(&root).args([
        "run",
        "--release",
        "--quiet",
        "--package",
        "hpo-sampler",
        "--example",
        "gp_bench",
        "--",
        "--seeds",
        &seeds.to_string(),
    ]))?;
    match args.iter().position(|a| a == "--optuna-results") {
        Some(i) => {
            let files = args.get(i + 1).ok_or("--optuna-results needs files")?;
            for f in files.split(',') {
                text += &std::fs::read_to_string(f).map_err(|e| format!("cannot read {f}: {e}"))?;
            }
        }
        None => {
            let py = match std::env::var_os("MEMTUNE_PYTHON") {
                Some(p) => p.into(),
                None => python::gp_venv()?,
            };
            let script = root
                .join("benches")
                .join("sampler")
                .join("optuna_gp_bench.py");
            text += &output(
                Command::new(py)
                    .env("OMP_NUM_THREADS", "1")
                    .arg(script)
                    .args(["--seeds", &seeds.to_string()]),
            )?;
        }
    }
    // (function@trials, label) -> best values; label -> median us.
    let mut best: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut timing: BTreeMap<String, f64> = BTreeMap::new();
    let mut version = String::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let bad = || format!("bad line: {line}");
        match parts.as_slice() {
            ["best", function, label, _seed, value] => best
                .entry((function.to_string(), label.to_string()))
                .or_default()
                .push(value.parse().map_err(|_| bad())?),
            ["timing", label, "100", median, _mean] => {
                timing.insert(label.to_string(), median.parse().map_err(|_| bad())?);
            }
            ["version", "optuna", v] => version = v.to_string(),
            _ => {}
        }
    }
    println!("\nOne GP ask + tell at 100 COMPLETE trials, 6 parameters (median ms)\n");
    println!("| sampler | median ms |\n|---|---:|");
    for (label, us) in &timing {
        let name = match label.as_str() {
            "gp" => "ours GpSampler".to_string(),
            _ => format!("Optuna {version} GPSampler"),
        };
        println!("| {name} | {:.1} |", us / 1000.0);
    }
    println!("\nBest value after N trials (minimise): median and IQR over seeds\n");
    println!(
        "| function | trials | sampler | seeds | median | IQR (25%..75%) |\n|---|---:|---|---:|---:|---|"
    );
    for ((at, label), values) in &best {
        let mut v = values.clone();
        v.sort_by(f64::total_cmp);
        let (function, trials) = at.split_once('@').unwrap_or((at, ""));
        let name = match label.as_str() {
            "ours-gp" => "ours GpSampler".to_string(),
            "ours-tpe" => "ours TpeSampler".to_string(),
            "optuna-gp" => format!("Optuna {version} GPSampler"),
            "optuna-tpe" => format!("Optuna {version} TPESampler"),
            other => other.to_string(),
        };
        println!(
            "| {function} | {trials} | {name} | {} | {:.4} | {:.4}..{:.4} |",
            v.len(),
            percentile(&v, 50.0),
            percentile(&v, 25.0),
            percentile(&v, 75.0)
        );
    }
    Ok(())
}
