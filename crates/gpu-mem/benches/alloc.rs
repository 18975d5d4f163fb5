//! `cargo bench -p gpu-mem`: the allocator on SimDevice (no GPU needed).
//!
//! - `cached_alloc_free`: one allocate + free pair served from the cache,
//!   small (4 KiB) and large (8 MiB), on 1 thread and on 2 threads sharing
//!   one allocator (time per pair on each thread).
//! - `rmm_random_allocations`: RMM's `random_allocations` workload (10,000
//!   allocations, sizes uniform up to 64 MiB / 256 MiB, 73% allocate, at most
//!   16,000 MiB live), classic vs expandable.
//! - `trace_replay`: the generated multi-trial BERT trace through no caching,
//!   classic caching and expandable segments; the peak reserved / peak
//!   requested table is printed before timing.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use gpu_mem::error::human_bytes;
use gpu_mem::trace::{self, bert::BertTraceSpec};
use gpu_mem::{Allocation, CachingAllocator, Config, SimDevice, StreamId};
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

fn warmed(config: Config, size: usize) -> CachingAllocator<SimDevice> {
    let a = CachingAllocator::new(SimDevice::h100(), config).unwrap();
    let x = a.allocate(size, StreamId(0)).unwrap();
    a.free(x).unwrap();
    a
}

fn cached_alloc_free(c: &mut Criterion) {
    let mut g = c.benchmark_group("cached_alloc_free");
    for (label, size) in [("small_4KiB", 4096), ("large_8MiB", 8 * MIB)] {
        for (mode, config) in [
            ("classic", Config::default()),
            ("expandable", Config::expandable()),
        ] {
            let a = warmed(config.clone(), size);
            g.bench_function(
                BenchmarkId::new(format!("{label}/{mode}"), "1_thread"),
                |b| {
                    b.iter(|| {
                        let x = a.allocate(black_box(size), StreamId(0)).unwrap();
                        a.free(black_box(x)).unwrap();
                    })
                },
            );
            let a = Arc::new(warmed(config, size));
            g.bench_function(
                BenchmarkId::new(format!("{label}/{mode}"), "2_threads"),
                |b| b.iter_custom(|iters| two_threads(&a, size, iters)),
            );
        }
    }
    g.finish();
}

/// Both threads run `iters` pairs at once; returns the slower thread's time.
fn two_threads(a: &Arc<CachingAllocator<SimDevice>>, size: usize, iters: u64) -> Duration {
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|t| {
            let (a, barrier) = (Arc::clone(a), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let start = Instant::now();
                for _ in 0..iters {
                    let x = a.allocate(black_box(size), StreamId(t)).unwrap();
                    a.free(black_box(x)).unwrap();
                }
                start.elapsed()
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .max()
        .unwrap()
}

/// splitmix64: a small deterministic generator, so runs are comparable.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// RMM's `random_allocation_free` loop (benchmarks/random_allocations).
fn rmm_random_allocations(a: &CachingAllocator<SimDevice>, max_size: usize, seed: u64) {
    const ALLOCATIONS: usize = 10_000;
    const ALLOCATE_PERCENT: u64 = 73;
    const MAX_USAGE: usize = 16_000 * MIB;
    let mut rng = Rng(seed);
    let mut live: Vec<Allocation> = Vec::new();
    let (mut count, mut usage) = (0usize, 0usize);
    for _ in 0..ALLOCATIONS * 2 {
        let size = 1 + rng.below(max_size as u64) as usize;
        let mut do_alloc = true;
        if !live.is_empty() {
            do_alloc = rng.below(100) < ALLOCATE_PERCENT
                && count < ALLOCATIONS
                && usage + size < MAX_USAGE;
        }
        let allocated = if do_alloc {
            a.allocate(size, StreamId(0)).ok()
        } else {
            None
        };
        match allocated {
            Some(x) => {
                usage += x.len();
                count += 1;
                live.push(x);
            }
            None if !live.is_empty() => {
                let x = live.swap_remove(rng.below(live.len() as u64) as usize);
                usage -= x.len();
                a.free(x).unwrap();
            }
            None => {}
        }
    }
    for x in live {
        a.free(x).unwrap();
    }
}

fn random_allocations(c: &mut Criterion) {
    let mut g = c.benchmark_group("rmm_random_allocations");
    g.sample_size(10);
    for max_mib in [64usize, 256] {
        for (mode, config) in [
            ("classic", Config::default()),
            ("expandable", Config::expandable()),
        ] {
            let a = CachingAllocator::new(SimDevice::h100(), config).unwrap();
            g.bench_function(BenchmarkId::new(mode, format!("max_{max_mib}MiB")), |b| {
                let mut seed = 0;
                b.iter(|| {
                    seed += 1;
                    rmm_random_allocations(&a, max_mib * MIB, seed)
                })
            });
        }
    }
    g.finish();
}

fn trace_replay(c: &mut Criterion) {
    let records = BertTraceSpec::default().generate();
    let configs = [
        ("no_caching", Config::no_caching()),
        ("classic", Config::default()),
        ("expandable", Config::expandable()),
    ];
    println!(
        "\nmulti-trial BERT trace: {} records (6 trials x 3 steps, BERT-base fp32)",
        records.len()
    );
    println!(
        "| configuration | peak requested | peak reserved | peak reserved / peak requested | device allocs |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (name, config) in &configs {
        let r = trace::replay(&records, config.clone(), SimDevice::h100()).unwrap();
        println!(
            "| {name} | {} | {} | {:.3} | {} |",
            human_bytes(r.peak_requested),
            human_bytes(r.peak_reserved),
            r.reserved_over_requested,
            r.num_device_alloc
        );
    }
    let mut g = c.benchmark_group("trace_replay");
    g.sample_size(10);
    for (name, config) in configs {
        g.bench_function(name, |b| {
            b.iter(|| trace::replay(&records, config.clone(), SimDevice::h100()).unwrap())
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = cached_alloc_free, random_allocations, trace_replay
}
criterion_main!(benches);
