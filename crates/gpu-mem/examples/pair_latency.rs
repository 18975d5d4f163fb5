//! Quick cached alloc+free pair latency on SimDevice: the best of 7 runs of
//! 2 million pairs (the minimum is robust on a shared, loaded machine; the
//! criterion bench `cargo bench -p gpu-mem` gives the medians).
//!
//! `cargo run -p gpu-mem --release --example pair_latency [-- PAIRS RUNS]`

use gpu_mem::{CachingAllocator, Config, SimDevice, StreamId};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u32>());
    let n = args.next().and_then(Result::ok).unwrap_or(2_000_000);
    let runs = args.next().and_then(Result::ok).unwrap_or(7);
    println!("| size | mode | best ns per alloc+free pair |");
    println!("| --- | --- | ---: |");
    for (label, size) in [("4 KiB", 4096usize), ("8 MiB", 8 << 20)] {
        for (mode, config) in [
            ("classic", Config::default()),
            ("expandable", Config::expandable()),
        ] {
            let a = CachingAllocator::new(SimDevice::h100(), config).expect("sim device");
            let x = a.allocate(size, StreamId(0)).expect("room");
            a.free(x).expect("live");
            let best = (0..runs)
                .map(|_| {
                    let start = Instant::now();
                    for _ in 0..n {
                        let x = a.allocate(black_box(size), StreamId(0)).expect("cached");
                        a.free(black_box(x)).expect("live");
                    }
                    start.elapsed().as_nanos() as f64 / n as f64
                })
                .fold(f64::INFINITY, f64::min);
            println!("| {label} | {mode} | {best:.1} |");
        }
    }
}
