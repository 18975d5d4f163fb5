//! TPE's two configurations in the study runner's regime (run by `cargo
//! xtask bench tpe`).
//!
//! `tpe_default [--seeds N] [--trials N] [--study FILE] [--candidates N]
//! [--finalists N]`
//!
//! The regime: the legacy setup's search space (`examples/study-seeds.toml`:
//! conditional learning rates and head widths, categorical batch and
//! sequence length, multivariate grouped TPE with 20 startup trials), the
//! simulated device's objective, and 1, 2 or 4 trials in flight as the
//! runner keeps them: a new trial is asked whenever one finishes, with the
//! others RUNNING (the constant liar sees them). A trial lasts its epochs
//! times its sequence length times 3 for a large model, so trials finish
//! out of order as they do on a device. Pruning is left out: both
//! configurations would see the same pruner.
//!
//! Prints, per parallelism, the mean best value after all trials over the
//! seeds (with its standard error), the mean of the per-seed difference,
//! and how often each configuration found the better optimum. The first
//! is Optuna 5.0's `TPESampler()` (`TpeConfig::optuna()`); the second the
//! default (`TpeConfig::default()`, which differs on continuous and
//! integer spaces), or with `--candidates`/`--finalists` (finalists 0: all
//! compete) Optuna's with those candidates and finalists on every space.

use std::path::PathBuf;

use cli::tune::config::StudyConfig;
use cli::tune::synthetic::objective_at;
use hpo_sampler::{FrozenTrial, Sampler, StudyView, TpeConfig, TpeSampler, TrialState};

fn main() {
    if let Err(e) = run() {
        eprintln!("tpe_default: {e}");
        std::process::exit(2);
    }
}

struct Args {
    seeds: u64,
    trials: usize,
    study: PathBuf,
    /// The second configuration's candidates and finalists (0: all).
    candidates: usize,
    finalists: usize,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        seeds: 200,
        trials: 60,
        study: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/study-seeds.toml"),
        candidates: 0,
        finalists: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--seeds" => args.seeds = number(&flag, &value()?)?,
            "--trials" => args.trials = number(&flag, &value()?)? as usize,
            "--study" => args.study = PathBuf::from(value()?),
            "--candidates" => args.candidates = number(&flag, &value()?)? as usize,
            "--finalists" => args.finalists = number(&flag, &value()?)? as usize,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(args)
}

fn number(flag: &str, text: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|_| format!("{flag} takes a whole number, got `{text}`"))
}

fn run() -> Result<(), String> {
    let args = parse()?;
    let cfg = StudyConfig::from_path(&args.study).map_err(|e| e.to_string())?;
    let finalists = match args.finalists {
        0 => "all compete".to_string(),
        f => format!("{f} finalists"),
    };
    // Without --candidates: Optuna's configuration against the default
    // (which differs on continuous and integer spaces only); with it,
    // against Optuna's with those candidates and finalists everywhere.
    let second = match args.candidates {
        0 => (
            "the default (continuous spaces: 96 candidates, 8 finalists, gamma 15%; \
             integer spaces: 8 finalists of 24 for 20 trials per parameter)"
                .to_string(),
            TpeConfig::default(),
        ),
        c => (
            format!("{c} candidates, {finalists}"),
            TpeConfig {
                n_ei_candidates: c,
                ei_finalists: Some(args.finalists).filter(|&f| f > 0),
                ..TpeConfig::optuna()
            },
        ),
    };
    let configs = [
        (
            "Optuna 5.0's (24 candidates, all compete)".to_string(),
            TpeConfig::optuna(),
        ),
        second,
    ];
    println!(
        "TPE in the runner's regime: {} ({} trials, {} seeds)",
        args.study.display(),
        args.trials,
        args.seeds
    );
    println!();
    println!(
        "| in flight | {} | {} | mean difference (b - a) | b better / a better / tie |",
        configs[0].0, configs[1].0
    );
    println!("|---:|---:|---:|---:|---:|");
    for in_flight in [1, 2, 4] {
        let mut bests = [Vec::new(), Vec::new()];
        for seed in 0..args.seeds {
            for (k, (_, tpe)) in configs.iter().enumerate() {
                let tpe = TpeConfig {
                    seed: Some(seed),
                    ..file_options(&cfg, tpe)
                };
                bests[k].push(study(&cfg, tpe, in_flight, args.trials)?);
            }
        }
        let diff: Vec<f64> = bests[1].iter().zip(&bests[0]).map(|(b, a)| b - a).collect();
        let wins = |f: fn(f64) -> bool| diff.iter().filter(|d| f(**d)).count();
        println!(
            "| {in_flight} | {} | {} | {} | {} / {} / {} |",
            mean_se(&bests[0]),
            mean_se(&bests[1]),
            mean_se(&diff),
            wins(|d| d > 0.0),
            wins(|d| d < 0.0),
            wins(|d| d == 0.0),
        );
    }
    Ok(())
}

/// `base`'s candidate options with the study file's other TPE options.
fn file_options(cfg: &StudyConfig, base: &TpeConfig) -> TpeConfig {
    TpeConfig {
        n_ei_candidates: base.n_ei_candidates,
        ei_finalists: base.ei_finalists,
        continuous: base.continuous,
        continuous_wide: base.continuous_wide,
        integer: base.integer,
        ..cfg.sampler.tpe.clone()
    }
}

/// One study; returns its best value.
fn study(cfg: &StudyConfig, tpe: TpeConfig, in_flight: usize, n: usize) -> Result<f64, String> {
    let mut sampler = TpeSampler::new(tpe);
    let mut trials: Vec<FrozenTrial> = Vec::new();
    // (finish time, number, value) of the trials in flight.
    let mut running: Vec<(f64, u64, f64)> = Vec::new();
    let mut now = 0.0;
    while trials.len() < n || !running.is_empty() {
        while running.len() < in_flight && trials.len() < n {
            let number = trials.len() as u64;
            let (trial, finish, value) = ask(cfg, &mut sampler, &trials, number, now)?;
            trials.push(trial);
            running.push((finish, number, value));
        }
        let next = (0..running.len())
            .min_by(|&a, &b| running[a].0.total_cmp(&running[b].0))
            .expect("a trial is in flight");
        let (finish, number, value) = running.swap_remove(next);
        now = finish;
        let trial = &mut trials[number as usize];
        trial.state = TrialState::Complete;
        trial.values = Some(vec![value]);
    }
    Ok(trials
        .iter()
        .filter_map(FrozenTrial::value)
        .fold(f64::NEG_INFINITY, f64::max))
}

/// Asks trial `number` through the study file's define-by-run space, as the
/// runner does; returns it RUNNING with its finish time and final value.
fn ask(
    cfg: &StudyConfig,
    sampler: &mut dyn Sampler,
    trials: &[FrozenTrial],
    number: u64,
    now: f64,
) -> Result<(FrozenTrial, f64, f64), String> {
    let view = StudyView {
        name: &cfg.study.name,
        direction: hpo_sampler::StudyDirection::Maximize,
        directions: &[],
        trials,
    };
    let mut t = hpo_sampler::Trial::new(sampler, view, number);
    cfg.sample(&mut t).map_err(|e| e.to_string())?;
    let params = t.into_params();
    let settings = cfg.settings_of_params(&params).map_err(|e| e.to_string())?;
    let value = objective_at(&settings, settings.batch_size, settings.epochs - 1);
    let large = if settings.model.contains("large") {
        3.0
    } else {
        1.0
    };
    let duration = settings.epochs as f64 * settings.max_length as f64 / 128.0 * large;
    let mut trial = FrozenTrial::new(number);
    trial.params = params;
    Ok((trial, now + duration, value))
}

fn mean_se(xs: &[f64]) -> String {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    format!("{mean:.4} ± {:.4}", (var / n).sqrt())
}
