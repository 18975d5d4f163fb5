//! Per-ask latency of the TPE sampler at 1,000 trials, as a distribution:
//! `ask_latency CANDIDATES ASKS [steady|random] [FINALISTS]` prints the
//! mean, then the minimum, 10th percentile and median in microseconds per
//! ask + tell. FINALISTS defaults to `TpeConfig::many_candidates()`'s; 0
//! means all candidates compete (Optuna, the default).
//!
//! The loop is the criterion bench's (`benches/ask_tell.rs`): tell appends
//! the finished trial and the oldest leaves the history. `steady` first
//! grows the study to 1,000 trials with the sampler itself (a history the
//! sampler made, as in a long study); `random` starts from 1,000 random
//! trials. On a shared machine the low percentiles say more than the mean,
//! which bursts inflate: compare binaries by alternating them.

#[path = "../benches/common/mod.rs"]
mod common;

use hpo_sampler::{TpeConfig, TpeSampler};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: usize| match args.get(i) {
        Some(s) => s.parse().unwrap_or_else(|_| {
            eprintln!("argument {i} ({s:?}) is not a count");
            std::process::exit(2)
        }),
        None => default,
    };
    let (candidates, asks) = (arg(1, 96), arg(2, 2000).max(1));
    let steady = match args.get(3).map(String::as_str) {
        None | Some("steady") => true,
        Some("random") => false,
        Some(other) => {
            eprintln!("argument 3 ({other:?}) must be steady or random");
            std::process::exit(2)
        }
    };
    let default = TpeConfig::many_candidates().ei_finalists.unwrap_or(0);
    let finalists = Some(arg(4, default)).filter(|&f| f > 0);
    let n = 1000;
    let space = common::space6();
    let (mut history, warm) = if steady {
        (common::SlidingHistory::empty(n), n)
    } else {
        (common::SlidingHistory::new(n, 7), 10)
    };
    let mut sampler = TpeSampler::new(TpeConfig {
        seed: Some(1),
        n_ei_candidates: candidates,
        ei_finalists: finalists,
        ..TpeConfig::default()
    });
    let mut times = Vec::with_capacity(asks);
    for i in 0..warm + asks {
        let start = Instant::now();
        history.ask_and_tell(&mut sampler, &space);
        if i >= warm {
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
        history.compact();
    }
    let mean = times.iter().sum::<f64>() / times.len() as f64;
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    println!("ask+tell mean {mean:.1}");
    println!(
        "min {:.1} p10 {:.1} median {:.1}",
        times[0],
        at(0.1),
        at(0.5)
    );
}
