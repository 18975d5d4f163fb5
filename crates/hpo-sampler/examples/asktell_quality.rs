//! How `memtune ask`/`tell` fares on Hartmann6, without the processes: the
//! CLI builds a fresh `TpeSampler` per ask, seeded from (study seed, trial
//! number), over the 6-float search space; this loop does the same in
//! process (`--fresh`, default) or keeps one sampler for the run
//! (`--persistent`), and prints how many seeds end within 0.15 of the
//! optimum after N trials, with the median best.
//!
//! cargo run --release -p hpo-sampler --example asktell_quality -- [--seeds 100]
//!     [--seed-offset 1] [--trials 100] [--persistent] [--each] [--optuna]
//!     [--candidates N] [--finalists K (0: all)] [--prior-weight W] [--startup N] [--endpoints]
//!     [--univariate] [--gamma optuna|0.15|0.2|sqrt|sqrt1]
//!
//! `--each` prints every seed's best (compare with
//! benches/sampler/ask_tell_hartmann6.sh: the same seeds give the same
//! values); the other options vary the TPE to study what helps.

#[path = "../benches/common/functions.rs"]
mod functions;

use hpo_sampler::{
    Distribution, FrozenTrial, SearchSpace, StudyDirection, StudyView, TpeConfig, TpeSampler,
    TrialState, ask,
};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).cloned()
}

/// The CLI's per-trial seed (crates/cli/src/commands/ask.rs).
fn per_trial_seed(seed: u64, number: u64) -> u64 {
    let mut z = seed ^ number.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn hartmann6(x: &[f64; 6]) -> f64 {
    const ALPHA: [f64; 4] = [1.0, 1.2, 3.0, 3.2];
    const A: [[f64; 6]; 4] = [
        [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
        [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
        [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
        [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
    ];
    const P: [[f64; 6]; 4] = [
        [0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
        [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
        [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
        [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381],
    ];
    -(0..4)
        .map(|i| {
            let inner: f64 = (0..6).map(|j| A[i][j] * (x[j] - P[i][j]).powi(2)).sum();
            ALPHA[i] * (-inner).exp()
        })
        .sum::<f64>()
}

fn main() {
    let num =
        |name: &str, default: u64| arg(name).map_or(default, |v| v.parse().expect("a number"));
    let seeds = num("--seeds", 100);
    let offset = num("--seed-offset", 1);
    let n_trials = num("--trials", 100);
    let persistent = std::env::args().any(|a| a == "--persistent");
    let base = if std::env::args().any(|a| a == "--optuna") {
        TpeConfig::optuna()
    } else {
        TpeConfig::many_candidates()
    };
    let candidates = num("--candidates", base.n_ei_candidates as u64) as usize;
    let float =
        |name: &str, default: f64| arg(name).map_or(default, |v| v.parse().expect("a number"));
    let config = TpeConfig {
        n_ei_candidates: candidates,
        ei_finalists: match arg("--finalists") {
            None => base.ei_finalists,
            Some(f) => Some(f.parse().expect("a number")).filter(|&f: &usize| f > 0),
        },
        prior_weight: float("--prior-weight", base.prior_weight),
        n_startup_trials: num("--startup", base.n_startup_trials as u64) as usize,
        consider_endpoints: std::env::args().any(|a| a == "--endpoints"),
        multivariate: !std::env::args().any(|a| a == "--univariate"),
        gamma: match arg("--gamma").as_deref() {
            None | Some("optuna") => base.gamma,
            Some("0.15") => |n: usize| (n * 15).div_ceil(100).min(25),
            Some("0.2") => |n: usize| n.div_ceil(5).min(25),
            Some("sqrt") => |n: usize| ((n as f64).sqrt() * 0.25).ceil() as usize,
            Some("sqrt1") => |n: usize| (n as f64).sqrt().ceil() as usize,
            Some(other) => panic!("unknown --gamma {other}"),
        },
        ..base
    };
    let space: SearchSpace = (0..6)
        .map(|i| {
            (
                format!("x{i}"),
                Distribution::float(0.0, 1.0, false, None).unwrap(),
            )
        })
        .collect();
    let mut bests = Vec::new();
    for seed in offset..offset + seeds {
        let mut trials: Vec<FrozenTrial> = Vec::new();
        let mut kept = TpeSampler::new(TpeConfig {
            seed: Some(seed),
            ..config.clone()
        });
        let mut best = f64::INFINITY;
        for number in 0..n_trials {
            let study = StudyView {
                name: "h6",
                direction: StudyDirection::Minimize,
                directions: &[],
                trials: &trials,
            };
            let mut fresh;
            let sampler = if persistent {
                &mut kept
            } else {
                fresh = TpeSampler::new(TpeConfig {
                    seed: Some(per_trial_seed(seed, number)),
                    ..config.clone()
                });
                &mut fresh
            };
            let params = ask(sampler, study, number, &space).expect("valid space");
            let mut x = [0.0; 6];
            for (i, xi) in x.iter_mut().enumerate() {
                *xi = params[&format!("x{i}")].internal;
            }
            let value = hartmann6(&x);
            best = best.min(value);
            let mut t = FrozenTrial::new(number);
            t.params = params;
            t.state = TrialState::Complete;
            t.values = Some(vec![value]);
            trials.push(t);
        }
        if std::env::args().any(|a| a == "--each") {
            println!("{seed} {best:.8}");
        }
        bests.push(best);
    }
    let within = bests
        .iter()
        .filter(|b| **b <= functions::HARTMANN6_MIN + 0.15)
        .count();
    let mut sorted = bests.clone();
    sorted.sort_by(f64::total_cmp);
    let q = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
    println!(
        "{} candidates={candidates}: {within} / {seeds} within 0.15, median {:.4}, quartiles {:.4} / {:.4}",
        if persistent { "persistent" } else { "fresh" },
        q(0.5),
        q(0.25),
        q(0.75)
    );
}
