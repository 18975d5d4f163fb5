//! The numbers behind `cargo xtask bench sampler` (our side): per-ask
//! timings of TPE on the 6-parameter space at several history sizes, and
//! the best value after N trials on the quality functions for TPE and
//! random, over many seeds. Prints lines `timing LABEL HISTORY MEDIAN_US
//! MEAN_US` and `quality FUNCTION LABEL BEST,BEST,...` (LABEL is
//! `tpe-<candidates>` or `random`).
//!
//! cargo run --release -p hpo-sampler --example sampler_bench -- [--seeds 50]
//!     [--seed-offset 0] [--trials 100] [--reps 200] [--candidates N]
//!     [--finalists K] (0: all candidates compete, as Optuna's) [--skip-random]
//!     [--fresh]  (a new sampler per ask, as `memtune ask` runs)
//!     [--parallel P]  (quality: trials asked in rounds of P, as P workers)
//!
//! Timings come in two regimes: `tpe-N` on a history of random trials (the
//! regime in which Optuna's TPE cost is usually quoted) and `tpe-N-steady` on the
//! sampler's own last trials (see `time_ask_tell`).

#[path = "../benches/common/mod.rs"]
mod common;
#[path = "../benches/common/functions.rs"]
mod functions;

use hpo_sampler::{
    FrozenTrial, RandomSampler, Result, Sampler, StudyDirection, StudyView, TpeConfig, TpeSampler,
    Trial, TrialState,
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

/// Median and mean microseconds of one ask + tell at history size `n`, on
/// a sliding history (`common::SlidingHistory`: each tell joins, the
/// oldest trial leaves). `steady`: the history is the sampler's own
/// trials (it first runs a study from nothing up to `n` trials, unmeasured),
/// a running study's steady state, where its trials cluster; otherwise
/// `n` random trials (after 10 unmeasured asks), the regime in which
/// Optuna's TPE cost is usually quoted. `fresh`: a new sampler for every ask, as `memtune ask`
/// runs (nothing is reused across asks).
fn time_ask_tell(
    n: usize,
    reps: usize,
    candidates: usize,
    finalists: Option<usize>,
    fresh: bool,
    steady: bool,
) -> (f64, f64) {
    let space = common::space6();
    let (mut history, warmup) = if steady {
        (common::SlidingHistory::empty(n), n)
    } else {
        (common::SlidingHistory::new(n, 7), 10)
    };
    let config = TpeConfig {
        seed: Some(1),
        n_ei_candidates: candidates,
        ei_finalists: finalists,
        ..TpeConfig::optuna()
    };
    let mut sampler = TpeSampler::new(config.clone());
    let mut samples = Vec::with_capacity(reps);
    for rep in 0..reps + warmup {
        let start = Instant::now();
        if fresh {
            sampler = TpeSampler::new(config.clone());
        }
        history.ask_and_tell(&mut sampler, &space);
        let elapsed = start.elapsed().as_secs_f64() * 1e6;
        history.compact();
        if rep >= warmup {
            samples.push(elapsed);
        }
    }
    samples.sort_by(f64::total_cmp);
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    (samples[samples.len() / 2], mean)
}

type Objective = fn(&mut Trial<'_, dyn Sampler>) -> Result<f64>;

/// The best value after `n_trials`, asked in rounds of `parallel` (as
/// that many workers would): each ask of a round sees the round's earlier
/// trials as RUNNING, and the round is told when all of it has run.
fn optimise(
    sampler: &mut (dyn Sampler + 'static),
    objective: Objective,
    n_trials: usize,
    parallel: usize,
) -> f64 {
    let mut trials: Vec<FrozenTrial> = Vec::with_capacity(n_trials);
    let mut best = f64::INFINITY;
    let mut pending = Vec::new();
    for number in 0..n_trials as u64 {
        let study = StudyView {
            name: "quality",
            direction: StudyDirection::Minimize,
            directions: &[],
            trials: &trials,
        };
        let mut trial = Trial::new(&mut *sampler, study, number);
        let value = objective(&mut trial).expect("valid objective");
        let mut t = FrozenTrial::new(number);
        t.params = trial.into_params();
        t.state = TrialState::Running;
        pending.push((trials.len(), value));
        trials.push(t);
        if pending.len() == parallel.max(1) || number + 1 == n_trials as u64 {
            for (at, value) in pending.drain(..) {
                trials[at].state = TrialState::Complete;
                trials[at].values = Some(vec![value]);
                best = best.min(value);
            }
        }
    }
    best
}

fn main() {
    let seeds = arg("--seeds", 50) as u64;
    let seed_offset = arg("--seed-offset", 0) as u64;
    let skip_random = std::env::args().any(|a| a == "--skip-random");
    let n_trials = arg("--trials", 100);
    let reps = arg("--reps", 200);
    let candidates = arg("--candidates", TpeConfig::many_candidates().n_ei_candidates);
    let finalists = Some(arg(
        "--finalists",
        TpeConfig::many_candidates().ei_finalists.unwrap_or(0),
    ))
    .filter(|&f| f > 0 && f < candidates);

    let fresh = std::env::args().any(|a| a == "--fresh");
    let parallel = arg("--parallel", 1);
    let label = match finalists {
        Some(f) => format!("tpe-{candidates}-f{f}"),
        None => format!("tpe-{candidates}"),
    };
    for steady in [false, true] {
        let timing_label = format!(
            "{label}{}{}",
            if steady { "-steady" } else { "" },
            if fresh { "-fresh" } else { "" }
        );
        for n in [100usize, 500, 1000] {
            let (median, mean) = time_ask_tell(n, reps, candidates, finalists, fresh, steady);
            println!("timing {timing_label} {n} {median:.3} {mean:.3}");
        }
    }
    let functions: [(&str, Objective); 3] = [
        ("hartmann6", functions::hartmann6),
        ("branin", functions::branin),
        ("styblinski_tang10", functions::styblinski_tang10),
    ];
    for (name, f) in functions {
        for kind in ["tpe", "random"] {
            if kind == "random" && skip_random {
                continue;
            }
            let bests: Vec<String> = (seed_offset..seed_offset + seeds)
                .map(|seed| {
                    let mut sampler: Box<dyn Sampler> = match kind {
                        "tpe" => Box::new(TpeSampler::new(TpeConfig {
                            seed: Some(seed),
                            n_ei_candidates: candidates,
                            ei_finalists: finalists,
                            ..TpeConfig::optuna()
                        })),
                        _ => Box::new(RandomSampler::new(Some(seed))),
                    };
                    format!("{:.6}", optimise(sampler.as_mut(), f, n_trials, parallel))
                })
                .collect();
            let who = if kind == "tpe" {
                label.as_str()
            } else {
                "random"
            };
            println!("quality {name} {who} {}", bests.join(","));
        }
    }
}
