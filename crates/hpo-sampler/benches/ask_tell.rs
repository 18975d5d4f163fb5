//! One TPE ask (the 6-parameter space) plus tell, at histories of 100, 500
//! and 1,000 COMPLETE trials, with our default TPE (96 EI candidates, the 4
//! of highest `l` competing) and with Optuna's configuration (24, all
//! competing). Tell appends the finished trial to the history and
//! the oldest trial leaves it (`common::SlidingHistory`), so every ask sees
//! the same size but a changed history, as in a running study: what the
//! sampler reuses across asks is measured as it would pay off there.

mod common;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hpo_sampler::{GpConfig, GpSampler, Sampler, TpeConfig, TpeSampler};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Time one ask + tell of `sampler` on a sliding history of `n` trials.
fn bench_sliding<S: Sampler>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    n: usize,
    sampler: &mut S,
) {
    let space = common::space6();
    let mut history = common::SlidingHistory::new(n, 7);
    group.bench_function(BenchmarkId::from_parameter(n), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                history.ask_and_tell(sampler, &space);
                total += start.elapsed();
                history.compact();
            }
            black_box(total)
        })
    });
}

fn ask_tell(c: &mut Criterion) {
    for (name, config) in [
        ("tpe_ask_tell_6params", TpeConfig::default()),
        (
            "tpe_ask_tell_6params_96_candidates_4_finalists",
            TpeConfig::many_candidates(),
        ),
    ] {
        let mut group = c.benchmark_group(name);
        for n in [100usize, 500, 1000] {
            let mut sampler = TpeSampler::new(TpeConfig {
                seed: Some(1),
                ..config.clone()
            });
            bench_sliding(&mut group, n, &mut sampler);
        }
        group.finish();
    }
}

/// One GP ask + tell at 100 COMPLETE trials (the sliding history keeps
/// 100), the sampler warm-starting its fit from the previous ask's.
fn gp_ask_tell(c: &mut Criterion) {
    let mut group = c.benchmark_group("gp_ask_tell_6params");
    group.sample_size(20);
    let mut sampler = GpSampler::new(GpConfig {
        seed: Some(1),
        ..GpConfig::default()
    });
    bench_sliding(&mut group, 100, &mut sampler);
    group.finish();
}

criterion_group!(benches, ask_tell, gp_ask_tell);
criterion_main!(benches);
