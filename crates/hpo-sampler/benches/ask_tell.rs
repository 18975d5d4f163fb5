//! One TPE ask (the 6-parameter space) plus tell, at histories of 100, 500
//! and 1,000 COMPLETE trials, with our default TPE (96 EI candidates, the 4
//! of highest `l` competing) and with Optuna's configuration (24, all
//! competing). Tell appends the finished trial to the history and
//! the oldest trial leaves it (`common::SlidingHistory`), so every ask sees
//! the same size but a changed history, as in a running study: what the
//! sampler reuses across asks is measured as it would pay off there.
//! Also one GP ask + tell at 100 trials, and one ask + tell of the
//! multi-objective samplers on a 2-objective study at 1,000 trials.

mod common;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hpo_sampler::{
    Distribution, FrozenTrial, GpConfig, GpSampler, NsgaIIConfig, NsgaIISampler, Param,
    RandomSampler, Sampler, SearchSpace, StudyDirection, StudyView, TpeConfig, TpeSampler,
    TrialState, ask,
};
use std::collections::BTreeMap;
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

/// ZDT1 on 10 parameters in [0, 1]: two objectives, both minimised.
fn zdt1(params: &BTreeMap<String, Param>) -> Vec<f64> {
    let x: Vec<f64> = params.values().map(|p| p.internal).collect();
    let g = 1.0 + 9.0 * x[1..].iter().sum::<f64>() / (x.len() - 1) as f64;
    vec![x[0], g * (1.0 - (x[0] / g).sqrt())]
}

/// One ask + tell of a 2-objective study (ZDT1, 10 float parameters) at a
/// sliding history of 1,000 COMPLETE trials (random at first, then the
/// sampler's own), for the multi-objective samplers.
fn multi_objective_ask_tell(c: &mut Criterion) {
    let space: SearchSpace = (0..10)
        .map(|i| {
            let d = Distribution::float(0.0, 1.0, false, None).unwrap();
            (format!("x{i}"), d)
        })
        .collect();
    let directions = [StudyDirection::Minimize; 2];
    let n = 1000;
    let mut group = c.benchmark_group("multi_objective_ask_tell_zdt1_10params");
    let samplers: [(&str, Box<dyn Sampler>); 3] = [
        (
            "tpe",
            Box::new(TpeSampler::new(TpeConfig {
                seed: Some(1),
                ..TpeConfig::default()
            })),
        ),
        (
            "tpe_multivariate",
            Box::new(TpeSampler::new(TpeConfig {
                seed: Some(1),
                multivariate_multi_objective: true,
                ..TpeConfig::default()
            })),
        ),
        (
            "nsga2",
            Box::new(NsgaIISampler::new(NsgaIIConfig {
                seed: Some(1),
                ..NsgaIIConfig::default()
            })),
        ),
    ];
    for (name, mut sampler) in samplers {
        let mut random = RandomSampler::new(Some(3));
        let mut trials: Vec<FrozenTrial> = Vec::new();
        let step = |sampler: &mut dyn Sampler, trials: &mut Vec<FrozenTrial>| {
            let number = trials.last().map_or(0, |t| t.number + 1);
            let start = trials.len().saturating_sub(n);
            let study = StudyView {
                name: "bench",
                direction: StudyDirection::Minimize,
                directions: &directions,
                trials: &trials[start..],
            };
            let params = ask(sampler, study, number, &space).expect("valid space");
            let mut t = FrozenTrial::new(number);
            t.values = Some(zdt1(&params));
            t.params = params;
            t.state = TrialState::Complete;
            trials.push(t);
        };
        for _ in 0..n {
            step(&mut random, &mut trials);
        }
        group.bench_function(BenchmarkId::new(name, n), |b| {
            b.iter(|| step(sampler.as_mut(), &mut trials))
        });
    }
    group.finish();
}

criterion_group!(benches, ask_tell, gp_ask_tell, multi_objective_ask_tell);
criterion_main!(benches);
