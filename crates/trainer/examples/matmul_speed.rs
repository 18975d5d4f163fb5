//! GFLOP/s of the CPU backend's matmul on MiniLM-L6's training shapes
//! (n = 32 x 128 tokens), wall and per CPU-second.
//!
//! `cargo run --release -p trainer --example matmul_speed -- [threads]`

use std::time::Instant;

use trainer::backend::cpu::CpuBackend;
use trainer::backend::{Backend, MatmulShape};
use trainer::memory::BufKind;

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let tick = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (tick(11) + tick(12)) / 100.0
}

fn main() {
    if let Some(t) = std::env::args()
        .nth(1)
        .and_then(|a| a.parse::<usize>().ok())
    {
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .unwrap();
    }
    let be = CpuBackend::<f32>::new();
    let n = 32 * 128;
    let shapes = [
        (
            "x W^T (ffn in)",
            MatmulShape {
                batch: 1,
                m: n,
                n: 1536,
                k: 384,
                trans_a: false,
                trans_b: true,
            },
        ),
        (
            "dy W (ffn out dx)",
            MatmulShape {
                batch: 1,
                m: n,
                n: 1536,
                k: 384,
                trans_a: false,
                trans_b: false,
            },
        ),
        (
            "dy^T x (dW)",
            MatmulShape {
                batch: 1,
                m: 1536,
                n: 384,
                k: n,
                trans_a: true,
                trans_b: false,
            },
        ),
        (
            "Q K^T (384 heads)",
            MatmulShape {
                batch: 384,
                m: 128,
                n: 128,
                k: 32,
                trans_a: false,
                trans_b: true,
            },
        ),
    ];
    println!("threads: {}", rayon::current_num_threads());
    println!("| product | GFLOP | wall GFLOP/s | GFLOP per CPU-second |");
    println!("|---|---:|---:|---:|");
    for (name, s) in shapes {
        let a = be.alloc("a", BufKind::Workspace, s.batch * s.m * s.k);
        let b = be.alloc("b", BufKind::Workspace, s.batch * s.k * s.n);
        let mut c = be.alloc("c", BufKind::Workspace, s.batch * s.m * s.n);
        be.matmul(&s, 1.0, &a, &b, 0.0, &mut c);
        let reps = 5;
        let (t0, c0) = (Instant::now(), cpu_seconds());
        for _ in 0..reps {
            be.matmul(&s, 1.0, &a, &b, 0.0, &mut c);
        }
        let (wall, cpu) = (t0.elapsed().as_secs_f64(), cpu_seconds() - c0);
        let gflop = 2.0 * (s.batch * s.m * s.n * s.k) as f64 / 1e9;
        println!(
            "| {name} | {gflop:.2} | {:.1} | {:.1} |",
            gflop * reps as f64 / wall,
            gflop * reps as f64 / cpu
        );
    }
}
