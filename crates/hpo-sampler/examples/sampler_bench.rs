//! The numbers behind `cargo xtask bench sampler` (our side): per-ask
//! timings of TPE on the 6-parameter space at several history sizes, and
//! the best value after N trials on the quality functions for TPE and
//! random, over many seeds. Prints one JSON document on stdout.
//!
//! cargo run --release -p hpo-sampler --example sampler_bench -- [--seeds 50] [--trials 100] [--reps 200]

#[path = "../benches/common/mod.rs"]
mod common;
#[path = "../benches/common/functions.rs"]
mod functions;

use hpo_sampler::{
    FrozenTrial, RandomSampler, Result, Sampler, StudyDirection, StudyView, TpeSampler, Trial,
    TrialState, ask,
};
use std::time::Instant;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

/// Median microseconds of one ask + tell at history size `n`.
fn time_ask_tell(n: usize, reps: usize) -> (f64, f64) {
    let space = common::space6();
    let mut history = common::random_history(n, 7);
    let mut sampler = TpeSampler::with_seed(1);
    let mut samples = Vec::with_capacity(reps);
    for rep in 0..reps + 10 {
        let start = Instant::now();
        let study = StudyView {
            name: "bench",
            direction: StudyDirection::Minimize,
            trials: &history,
        };
        let params = ask(&mut sampler, study, n as u64, &space).expect("valid space");
        let value = common::objective6(&params);
        history.push(common::complete(n as u64, params, value));
        let elapsed = start.elapsed().as_secs_f64() * 1e6;
        history.pop();
        if rep >= 10 {
            samples.push(elapsed);
        }
    }
    samples.sort_by(f64::total_cmp);
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    (samples[samples.len() / 2], mean)
}

type Objective = fn(&mut Trial<'_, dyn Sampler>) -> Result<f64>;

fn optimise(sampler: &mut (dyn Sampler + 'static), objective: Objective, n_trials: usize) -> f64 {
    let mut trials: Vec<FrozenTrial> = Vec::with_capacity(n_trials);
    let mut best = f64::INFINITY;
    for number in 0..n_trials as u64 {
        let study = StudyView {
            name: "quality",
            direction: StudyDirection::Minimize,
            trials: &trials,
        };
        let mut trial = Trial::new(&mut *sampler, study, number);
        let value = objective(&mut trial).expect("valid objective");
        let mut t = FrozenTrial::new(number);
        t.params = trial.into_params();
        t.state = TrialState::Complete;
        t.values = Some(vec![value]);
        trials.push(t);
        best = best.min(value);
    }
    best
}

fn main() {
    let seeds = arg("--seeds", 50) as u64;
    let n_trials = arg("--trials", 100);
    let reps = arg("--reps", 200);

    let timings: Vec<String> = [100usize, 500, 1000]
        .iter()
        .map(|&n| {
            let (median, mean) = time_ask_tell(n, reps);
            format!("{{\"history\": {n}, \"median_us\": {median:.3}, \"mean_us\": {mean:.3}}}")
        })
        .collect();

    let functions: [(&str, Objective); 3] = [
        ("hartmann6", functions::hartmann6),
        ("branin", functions::branin),
        ("styblinski_tang10", functions::styblinski_tang10),
    ];
    let mut quality = Vec::new();
    for (name, f) in functions {
        for kind in ["tpe", "random"] {
            let start = Instant::now();
            let bests: Vec<String> = (0..seeds)
                .map(|seed| {
                    let mut sampler: Box<dyn Sampler> = match kind {
                        "tpe" => Box::new(TpeSampler::with_seed(seed)),
                        _ => Box::new(RandomSampler::new(Some(seed))),
                    };
                    format!("{:.6}", optimise(sampler.as_mut(), f, n_trials))
                })
                .collect();
            quality.push(format!(
                "{{\"function\": \"{name}\", \"sampler\": \"{kind}\", \"seconds\": {:.3}, \"best\": [{}]}}",
                start.elapsed().as_secs_f64(),
                bests.join(", ")
            ));
        }
    }
    println!(
        "{{\"timings\": [{}], \"quality\": [{}]}}",
        timings.join(", "),
        quality.join(", ")
    );
}
