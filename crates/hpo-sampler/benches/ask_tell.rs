//! One TPE ask (the 6-parameter space) plus tell, at histories of 100, 500
//! and 1,000 COMPLETE trials. Tell appends the finished trial to the
//! history; it is removed again so every iteration sees the same size.

mod common;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use hpo_sampler::{StudyDirection, StudyView, TpeSampler, ask};
use std::hint::black_box;

fn ask_tell(c: &mut Criterion) {
    let space = common::space6();
    let mut group = c.benchmark_group("tpe_ask_tell_6params");
    for n in [100usize, 500, 1000] {
        let mut history = common::random_history(n, 7);
        let mut sampler = TpeSampler::with_seed(1);
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                let study = StudyView {
                    name: "bench",
                    direction: StudyDirection::Minimize,
                    trials: &history,
                };
                let params = ask(&mut sampler, study, n as u64, &space).unwrap();
                let value = common::objective6(&params);
                history.push(common::complete(n as u64, params, value));
                black_box(history.pop());
            })
        });
    }
    group.finish();
}

criterion_group!(benches, ask_tell);
criterion_main!(benches);
