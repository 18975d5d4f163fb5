//! `cargo xtask bench sampler --suite coco` and `--multi`: our samplers and
//! Optuna 5.0's on standard suites, through the same ask/tell loop
//! (benches/sampler/coco_suite.py drives both; ours run in hpo-sampler's
//! `ask_tell_server` example), in the `gp` venv (Optuna with torch for
//! GPSampler, and COCO's `coco-experiment`).
//!
//! SMAC3 (`smac-bb`: its black-box facade, a GP; `smac-hpo`: its
//! hyperparameter facade, a random forest) and HEBO (`hebo`) run on the
//! single-objective suites where named in `--samplers`, in the peers venv
//! (`MEMTUNE_PEERS_PYTHON` names another python), and are compared with
//! `auto` and the GP where they ran.
//!
//! `--suite coco`: COCO `bbob` and `bbob-mixint`, best `f - f_opt` after
//! 10, 20 and 50 evaluations per dimension; a cell is (suite, function,
//! dimension, budget) and its score the median over instances x seeds.
//! Per comparison (ours `auto` against the better of Optuna's TPE and GP
//! in each cell; TPE, and TPE with `TpeConfig::many_candidates`, against
//! TPE; GP against GPSampler) it prints a
//! win/tie/loss table per function and the aggregate: the share of cells
//! where ours is at least as good (a tie is within 0.1% or 1e-8), and the
//! worst ratio of medians per function-dimension.
//!
//! `--multi`: ZDT1-3, DTLZ2, a mixed problem and COCO `bbob-biobj`,
//! hypervolume after 100 and 300 trials (median and IQR over seeds), ours
//! (`auto`, TPE, NSGA-II) against Optuna's (TPE, NSGA-II), and one ask +
//! tell at 1,000 trials of a 2-objective study.
//!
//! Options pass through to the script (`--functions 1-24 --dims 2,5,10
//! --instances 1-5 --seeds N --samplers ...`); `--suites bbob` runs one of
//! the two; `--results FILE,FILE` reads lines the script already printed
//! instead of running it.

use crate::{Result, env, python};
use std::collections::BTreeMap;
use std::process::Command;

/// Options passed on to the script as given (`--samplers` is split by
/// venv).
const PASSED: [&str; 10] = [
    "--functions",
    "--dims",
    "--instances",
    "--seeds",
    "--first-seed",
    "--budgets",
    "--gp-max-trials",
    "--problems",
    "--biobj-functions",
    "--checkpoints",
];

fn value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).map(String::as_str)
}

/// Runs coco_suite.py once per `suites` entry (or reads `--results`) and
/// returns every line it printed.
fn lines(args: &[String], suites: &[(&str, &str)], extra: &[&str]) -> Result<String> {
    if let Some(files) = value(args, "--results") {
        let mut text = String::new();
        for f in files.split(',') {
            text += &std::fs::read_to_string(f).map_err(|e| format!("cannot read {f}: {e}"))?;
        }
        return Ok(text);
    }
    let root = env::root();
    env::cargo(
        &[
            "build",
            "--release",
            "--quiet",
            "--package",
            "hpo-sampler",
            "--example",
            "ask_tell_server",
        ],
        &[],
    )?;
    let server = root
        .join("target")
        .join("release")
        .join("examples")
        .join("ask_tell_server");
    let script = root.join("benches").join("sampler").join("coco_suite.py");
    let mut text = String::new();
    let runs = suites.iter().flat_map(|&(suite, samplers)| {
        let (peers, own): (Vec<&str>, Vec<&str>) = samplers.split(',').partition(|l| is_peer(l));
        [(suite, own, false), (suite, peers, true)]
    });
    for (suite, samplers, peers) in runs {
        if samplers.is_empty() {
            continue;
        }
        let samplers = samplers.join(",");
        let py: std::path::PathBuf = match (peers, std::env::var_os(python_var(peers))) {
            (_, Some(p)) => p.into(),
            (false, None) => python::gp_venv()?,
            (true, None) => python::peers_venv()?,
        };
        let mut cmd = Command::new(&py);
        cmd.env("OMP_NUM_THREADS", "1")
            // SMAC3's proposals depend on Python's string hashing (set
            // order): a fixed hash seed makes its runs repeat.
            .env("PYTHONHASHSEED", "0")
            .arg(&script)
            .arg("--server")
            .arg(&server)
            .args(["--suite", suite, "--samplers", &samplers])
            .args(extra);
        for name in PASSED {
            if let Some(v) = value(args, name) {
                cmd.args([name, v]);
            }
        }
        eprintln!("$ {cmd:?}");
        let out = cmd
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!("{} failed ({})", script.display(), out.status));
        }
        text += &String::from_utf8_lossy(&out.stdout);
    }
    Ok(text)
}

/// SMAC3's and HEBO's samplers (`smac-bb`, `smac-hpo`, `hebo`), which run
/// in the peers venv; ours and Optuna's run in the gp venv.
fn is_peer(label: &str) -> bool {
    label.starts_with("smac-") || label == "hebo"
}

/// The variable naming the python to use instead of a venv of ours.
fn python_var(peers: bool) -> &'static str {
    if peers {
        "MEMTUNE_PEERS_PYTHON"
    } else {
        "MEMTUNE_PYTHON"
    }
}

fn median(v: &mut [f64]) -> f64 {
    percentile(v, 50.0)
}

/// numpy's default (linear) percentile.
fn percentile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let pos = q / 100.0 * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// (suite, function, dim, budget) -> label -> precisions.
type Cells = BTreeMap<(String, u32, u32, u32), BTreeMap<String, Vec<f64>>>;

pub fn run_suite(args: &[String]) -> Result<()> {
    let default = "ours-auto,ours-tpe,ours-gp,optuna-tpe,optuna-gp";
    let samplers = value(args, "--samplers").unwrap_or(default);
    let suites: Vec<(&str, &str)> = value(args, "--suites")
        .unwrap_or("bbob,bbob-mixint")
        .split(',')
        .map(|suite| (suite, samplers))
        .collect();
    let text = lines(args, &suites, &[])?;
    let mut cells: Cells = BTreeMap::new();
    for line in text.lines() {
        let p: Vec<&str> = line.split_whitespace().collect();
        if let [
            "single",
            suite,
            f,
            d,
            _inst,
            _seed,
            label,
            budget,
            precision,
        ] = p.as_slice()
        {
            let bad = || format!("bad line: {line}");
            cells
                .entry((
                    suite.to_string(),
                    f.parse().map_err(|_| bad())?,
                    d.parse().map_err(|_| bad())?,
                    budget.parse().map_err(|_| bad())?,
                ))
                .or_default()
                .entry(label.to_string())
                .or_default()
                .push(precision.parse().map_err(|_| bad())?);
        }
    }
    let medians: BTreeMap<_, BTreeMap<String, f64>> = cells
        .iter()
        .map(|(k, by)| {
            let m = by
                .iter()
                .map(|(l, v)| (l.clone(), median(&mut v.clone())))
                .collect();
            (k.clone(), m)
        })
        .collect();
    for (ours, theirs) in [
        ("ours-auto", &["optuna-tpe", "optuna-gp"][..]),
        ("ours-tpe", &["optuna-tpe"][..]),
        ("ours-tpe-many", &["optuna-tpe"][..]),
        ("ours-gp", &["optuna-gp"][..]),
        // Where SMAC3 and HEBO ran (cells without them are left out).
        ("ours-auto", &["smac-bb", "smac-hpo", "hebo"][..]),
        ("ours-gp", &["smac-bb", "hebo"][..]),
    ] {
        compare(&medians, ours, theirs);
    }
    Ok(())
}

/// Wins, ties, losses and the worst ratio of medians of one
/// function-dimension, over budgets.
type Tally = (u32, u32, u32, f64);

/// Win/tie/loss of `ours` against the best of `theirs` per cell.
fn compare(
    medians: &BTreeMap<(String, u32, u32, u32), BTreeMap<String, f64>>,
    ours: &str,
    theirs: &[&str],
) {
    let mut table: BTreeMap<(String, u32), BTreeMap<u32, Tally>> = BTreeMap::new();
    let (mut cells, mut good) = (0, 0);
    for ((suite, f, d, _budget), by) in medians {
        let Some(&mine) = by.get(ours) else { continue };
        let Some(best) = theirs
            .iter()
            .filter_map(|l| by.get(*l).copied())
            .min_by(f64::total_cmp)
        else {
            continue;
        };
        let tol = 1e-8 + 1e-3 * best.abs();
        let entry = table
            .entry((suite.clone(), *f))
            .or_default()
            .entry(*d)
            .or_insert((0, 0, 0, 0.0));
        if mine < best - tol {
            entry.0 += 1;
        } else if mine <= best + tol {
            entry.1 += 1;
        } else {
            entry.2 += 1;
        }
        let ratio = if best > 1e-8 {
            mine / best
        } else if mine > tol {
            f64::INFINITY
        } else {
            1.0
        };
        entry.3 = entry.3.max(ratio);
        cells += 1;
        good += usize::from(mine <= best + tol);
    }
    if cells == 0 {
        return;
    }
    let dims: Vec<u32> = {
        let mut d: Vec<u32> = table.values().flat_map(|m| m.keys().copied()).collect();
        d.sort_unstable();
        d.dedup();
        d
    };
    println!(
        "\n{ours} against {}: win/tie/loss over budgets, worst ratio of medians (f - f_opt)\n",
        theirs.join(" or ")
    );
    let mut header = String::from("| suite | function |");
    let mut rule = String::from("|---|---:|");
    for d in &dims {
        header += &format!(" d={d} |");
        rule += "---|";
    }
    println!("{header}\n{rule}");
    let mut over = 0;
    let mut fd = 0;
    for ((suite, f), by_dim) in &table {
        let mut row = format!("| {suite} | f{f} |");
        for d in &dims {
            match by_dim.get(d) {
                Some((w, t, l, r)) => {
                    row += &format!(" {w}/{t}/{l} ({r:.2}) |");
                    fd += 1;
                    over += usize::from(*r > 1.1);
                }
                None => row += " |",
            }
        }
        println!("{row}");
    }
    println!(
        "\n**{ours}: at least as good in {good} of {cells} cells ({:.0}%); more than 10% worse \
         in {over} of {fd} function-dimensions.**",
        100.0 * good as f64 / cells as f64
    );
}

pub fn run_multi(args: &[String]) -> Result<()> {
    let default = "ours-auto,ours-tpe,ours-nsga2,optuna-tpe,optuna-nsga2";
    let samplers = value(args, "--samplers").unwrap_or(default);
    let timing = value(args, "--timing").unwrap_or("1000");
    let text = lines(
        args,
        &[("multi", samplers)],
        &["--timing", timing, "--reps", "20"],
    )?;
    // (problem, trials) -> label -> hypervolumes; label -> median us.
    let mut hv: BTreeMap<(String, u32), BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    let mut timings: Vec<(String, String, f64)> = Vec::new();
    for line in text.lines() {
        let p: Vec<&str> = line.split_whitespace().collect();
        let bad = || format!("bad line: {line}");
        match p.as_slice() {
            ["multi", problem, _seed, label, trials, value] => hv
                .entry((problem.to_string(), trials.parse().map_err(|_| bad())?))
                .or_default()
                .entry(label.to_string())
                .or_default()
                .push(value.parse().map_err(|_| bad())?),
            ["timing", label, trials, us] => timings.push((
                label.to_string(),
                trials.to_string(),
                us.parse().map_err(|_| bad())?,
            )),
            _ => {}
        }
    }
    println!("\nHypervolume after N trials (larger is better): median and IQR over seeds\n");
    println!(
        "| problem | trials | sampler | seeds | median | IQR (25%..75%) |\n|---|---:|---|---:|---:|---|"
    );
    for ((problem, trials), by) in &hv {
        for (label, values) in by {
            let mut v = values.clone();
            println!(
                "| {problem} | {trials} | {label} | {} | {:.4} | {:.4}..{:.4} |",
                v.len(),
                median(&mut v),
                percentile(&mut v, 25.0),
                percentile(&mut v, 75.0)
            );
        }
    }
    // Each of our samplers against the best of Optuna's in each cell.
    let ours: Vec<String> = {
        let mut l: Vec<String> = hv
            .values()
            .flat_map(|by| by.keys().filter(|l| l.starts_with("ours-")).cloned())
            .collect();
        l.sort();
        l.dedup();
        l
    };
    for label in &ours {
        println!("\n{label} against Optuna's best, by median hypervolume\n");
        println!(
            "| problem | trials | {label} | Optuna best | at least as good |\n|---|---:|---:|---|---|"
        );
        let mut tally: BTreeMap<(bool, u32), (u32, u32)> = BTreeMap::new();
        for ((problem, trials), by) in &hv {
            let Some(mine) = by.get(label).map(|v| median(&mut v.clone())) else {
                continue;
            };
            let Some(theirs) = by
                .iter()
                .filter(|(l, _)| l.starts_with("optuna-"))
                .map(|(l, v)| (l.clone(), median(&mut v.clone())))
                .max_by(|a, b| a.1.total_cmp(&b.1))
            else {
                continue;
            };
            let ok = mine >= theirs.1 - 1e-9 * theirs.1.abs();
            let e = tally
                .entry((problem.starts_with("bbob-biobj"), *trials))
                .or_default();
            e.0 += u32::from(ok);
            e.1 += 1;
            println!(
                "| {problem} | {trials} | {mine:.4} | {} {:.4} | {} |",
                theirs.0,
                theirs.1,
                if ok { "yes" } else { "no" }
            );
        }
        for ((biobj, trials), (ok, n)) in &tally {
            let which = if *biobj {
                "bbob-biobj cells"
            } else {
                "named problems"
            };
            println!(
                "\n**{label}, {trials} trials: at least Optuna's best on {ok} of {n} {which}.**"
            );
        }
    }
    if !timings.is_empty() {
        println!("\nOne ask + tell on ZDT1 (2 objectives, 10 parameters), median microseconds\n");
        println!("| sampler | trials | median us |\n|---|---:|---:|");
        for (label, trials, us) in &timings {
            println!("| {label} | {trials} | {us:.1} |");
        }
    }
    Ok(())
}
