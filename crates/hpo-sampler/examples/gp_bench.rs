//! The numbers behind the GP rows of `cargo xtask bench sampler` (our
//! side): the best value after N trials on the GP quality functions
//! (Hartmann6 at 20 and 50 trials of one run, Branin at 30, `mixed6` at
//! 50) for the GP sampler and our TPE, one study per seed; the cost of one
//! GP ask at 100 finished trials of the 6-parameter space; and, with
//! `--parallel P`, trials asked in rounds of P (the others of a round
//! RUNNING), with and without the kriging believer, and how far apart
//! each round's trials land (median over rounds of the smallest distance
//! between two of its trials, in the GP's normalised space).
//!
//! Prints `best FUNCTION@TRIALS LABEL SEED VALUE`, `timing LABEL 100
//! MEDIAN_US MEAN_US` and `spread FUNCTION LABEL MEDIAN_MIN_DISTANCE`.
//!
//! cargo run --release -p hpo-sampler --example gp_bench -- [--seeds 50]
//!     [--checkpoints 100,200,300]
//!     [--first-seed 0] [--samplers gp,tpe] [--functions hartmann6,branin,mixed6]
//!     [--reps 30] [--skip-timing] [--timing-at 100] [--parallel P]
//!
//! Samplers: `gp` (`GpConfig::default()`), `gp-nobeliever` (running
//! trials ignored), `gp-nowarp` (the objective not warped), `tpe`
//! (`TpeConfig::many_candidates()`).

#[path = "../benches/common/mod.rs"]
mod common;
#[path = "../benches/common/functions.rs"]
mod functions;

use hpo_sampler::{
    FrozenTrial, GpConfig, GpSampler, Result, Sampler, StudyDirection, StudyView, TpeConfig,
    TpeSampler, Trial, TrialState,
};
use std::time::Instant;

fn evaluate<S: Sampler + ?Sized>(name: &str, t: &mut Trial<'_, S>) -> Result<f64> {
    match name {
        "hartmann6" => functions::hartmann6(t),
        "branin" => functions::branin(t),
        "mixed6" => functions::mixed6(t),
        other => panic!("unknown function {other}"),
    }
}

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn num(name: &str, default: usize) -> usize {
    arg(name).map_or(default, |v| v.parse().expect("a number"))
}

fn make(label: &str, seed: u64) -> Box<dyn Sampler> {
    match label {
        "gp" => Box::new(GpSampler::new(GpConfig {
            seed: Some(seed),
            ..GpConfig::default()
        })),
        "gp-nobeliever" => Box::new(GpSampler::new(GpConfig {
            seed: Some(seed),
            kriging_believer: false,
            ..GpConfig::default()
        })),
        "gp-nowarp" => Box::new(GpSampler::new(GpConfig {
            seed: Some(seed),
            warp_objective: false,
            ..GpConfig::default()
        })),
        "tpe" => Box::new(TpeSampler::new(TpeConfig {
            seed: Some(seed),
            ..TpeConfig::many_candidates()
        })),
        other => panic!("unknown sampler {other}"),
    }
}

/// Normalised distance between two trials (each numeric parameter scaled
/// by its range, categoricals 0/1).
fn distance(a: &FrozenTrial, b: &FrozenTrial) -> f64 {
    use hpo_sampler::Distribution;
    a.params
        .iter()
        .map(|(k, p)| {
            let q = b.params[k].internal;
            match &p.distribution {
                Distribution::Categorical { .. } => f64::from(p.internal != q),
                Distribution::Float { low, high, log, .. } => {
                    let f = |v: f64| if *log { v.ln() } else { v };
                    ((f(p.internal) - f(q)) / (f(*high) - f(*low))).powi(2)
                }
                Distribution::Int { low, high, log, .. } => {
                    let f = |v: f64| if *log { v.ln() } else { v };
                    ((f(p.internal) - f(q)) / (f(*high as f64) - f(*low as f64)).max(1.0)).powi(2)
                }
            }
        })
        .sum::<f64>()
        .sqrt()
}

/// One study: `trials` trials asked in rounds of `parallel`; the values in
/// trial order and, per round, the smallest distance between its trials.
fn run(sampler: &mut dyn Sampler, f: &str, trials: usize, parallel: usize) -> (Vec<f64>, Vec<f64>) {
    let mut history: Vec<FrozenTrial> = Vec::new();
    let mut values = Vec::new();
    let mut spreads = Vec::new();
    while history.len() < trials {
        let round = parallel.min(trials - history.len());
        let first = history.len();
        let mut round_values = Vec::new();
        for _ in 0..round {
            let number = history.len() as u64;
            let study = StudyView {
                name: "bench",
                direction: StudyDirection::Minimize,
                directions: &[],
                trials: &history,
            };
            let mut trial = Trial::new(sampler, study, number);
            let v = evaluate(f, &mut trial).expect("valid space");
            let mut t = FrozenTrial::new(number);
            t.params = trial.into_params();
            history.push(t);
            round_values.push(v);
        }
        for (t, v) in history[first..].iter_mut().zip(&round_values) {
            t.state = TrialState::Complete;
            t.values = Some(vec![*v]);
        }
        values.extend(round_values);
        if round > 1 {
            let r = &history[first..];
            let mut m = f64::INFINITY;
            for i in 0..r.len() {
                for j in 0..i {
                    m = m.min(distance(&r[i], &r[j]));
                }
            }
            spreads.push(m);
        }
    }
    (values, spreads)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        f64::NAN
    } else {
        v[v.len() / 2]
    }
}

fn main() {
    let seeds = num("--seeds", 50) as u64;
    let first = num("--first-seed", 0) as u64;
    let reps = num("--reps", 30);
    let parallel = num("--parallel", 1);
    let samplers = arg("--samplers").unwrap_or_else(|| "gp,tpe".into());
    let functions = arg("--functions").unwrap_or_else(|| "hartmann6,branin,mixed6".into());
    let skip_timing = std::env::args().any(|a| a == "--skip-timing");
    // `--checkpoints 100,200,300`: the same trial counts for every function
    // (how `AutoSampler`'s switch from the GP to TPE is measured).
    let checkpoints_arg: Option<Vec<usize>> = arg("--checkpoints").map(|c| {
        c.split(',')
            .map(|n| n.trim().parse().expect("--checkpoints takes trial counts"))
            .collect()
    });

    if !skip_timing {
        // One GP ask + tell at N COMPLETE random trials of the 6-parameter
        // space (`--timing-at 100,200,400`; 100 by default), a fresh
        // history each time (the sampler keeps its warm start, as in a
        // running study).
        let space = common::space6();
        let sizes: Vec<usize> = arg("--timing-at").map_or(vec![100], |c| {
            c.split(',')
                .map(|n| n.trim().parse().expect("--timing-at takes history sizes"))
                .collect()
        });
        for size in sizes {
            let mut sampler = GpSampler::new(GpConfig {
                seed: Some(1),
                ..GpConfig::default()
            });
            let mut samples = Vec::new();
            for rep in 0..reps + 2 {
                let mut history = common::SlidingHistory::new(size, 7 + rep as u64);
                let start = Instant::now();
                history.ask_and_tell(&mut sampler, &space);
                let us = start.elapsed().as_secs_f64() * 1e6;
                if rep >= 2 {
                    samples.push(us);
                }
            }
            let mean = samples.iter().sum::<f64>() / samples.len() as f64;
            println!("timing gp {size} {:.3} {mean:.3}", median(samples));
        }
    }

    for label in samplers.split(',') {
        for name in functions.split(',') {
            let defaults: &[usize] = match name {
                "hartmann6" => &[20, 50],
                "branin" => &[30],
                _ => &[50],
            };
            let checkpoints: &[usize] = checkpoints_arg.as_deref().unwrap_or(defaults);
            let tag = if parallel > 1 {
                format!("{label}-p{parallel}")
            } else {
                format!("ours-{label}")
            };
            let mut spreads = Vec::new();
            for seed in first..first + seeds {
                let mut sampler = make(label, seed);
                let n = *checkpoints.iter().max().unwrap();
                let (values, s) = run(sampler.as_mut(), name, n, parallel);
                spreads.extend(s);
                for c in checkpoints {
                    let best = values[..*c].iter().copied().fold(f64::INFINITY, f64::min);
                    println!("best {name}@{c} {tag} {seed} {best:.6}");
                }
            }
            if parallel > 1 {
                println!("spread {name} {tag} {:.4}", median(spreads));
            }
        }
    }
}
