//! Training throughput (sequences/s) of a MiniLM-L6-sized classifier on the
//! CPU backend: full steps (forward, backward, clipping, AdamW) with dropout.
//!
//! `cargo run --release -p trainer --example throughput -- [steps] [threads]`

use std::time::Instant;
use trainer::backend::{Kernels, MatmulPrecision};

use trainer::backend::cpu::CpuBackend;
use trainer::config::BertConfig;
use trainer::memory::plan::synthetic_batch;
use trainer::memory::{OptimizerKind, PlanRequest, Precision};
use trainer::model::{BertClassifier, HeadConfig};
use trainer::train::{OptimizerConfig, StepContext, train_step};

/// User + system CPU seconds of this process (Linux; 100 ticks/s), so the
/// figure can be read on a machine shared with other jobs.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15; after the name, field 3 is first.
    let tick = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (tick(11) + tick(12)) / 100.0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let steps: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    if let Some(t) = args.get(2).and_then(|a| a.parse::<usize>().ok()) {
        rayon::ThreadPoolBuilder::new()
            .num_threads(t)
            .build_global()
            .unwrap();
    }
    let config = BertConfig::minilm_l6();
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    println!(
        "MiniLM-L6 (6 layers, hidden 384, 12 heads, ffn 1536, vocab 30522), fp32, AdamW, dropout 0.1"
    );
    println!("threads: {}", rayon::current_num_threads());
    println!(
        "| batch | seq | wall ms/step (mean of {steps}) | sequences/s (wall) | CPU s/step | sequences per CPU-second x threads |"
    );
    println!("|---|---|---|---|---|---|");
    for seq in [64, 128] {
        let be = CpuBackend::<f32>::new();
        let mut model = BertClassifier::new_random(&be, &config, &head, 0).unwrap();
        let mut ctx = StepContext::new(
            &be,
            &mut model,
            OptimizerConfig::default(),
            None,
            Some(1.0),
            false,
            0,
        );
        let req = PlanRequest {
            config: config.clone().into(),
            head: head.clone(),
            micro_batch: 32,
            seq_len: seq,
            precision: Precision::F32,
            recompute: false,
            optimizer: OptimizerKind::AdamW,
            class_weights: false,
            dropout: true,
            backend: Default::default(),
            matmul_precision: MatmulPrecision::Fp32,
            kernels: Kernels::Reference,
        };
        let batch = synthetic_batch(&req);
        train_step(&be, &mut model, &mut ctx, &[&batch], 1e-5).unwrap(); // warm-up
        let start = Instant::now();
        let cpu0 = cpu_seconds();
        for _ in 0..steps {
            train_step(&be, &mut model, &mut ctx, &[&batch], 1e-5).unwrap();
        }
        let secs = start.elapsed().as_secs_f64() / steps as f64;
        let cpu = (cpu_seconds() - cpu0) / steps as f64;
        let threads = rayon::current_num_threads() as f64;
        println!(
            "| 32 | {seq} | {:.0} | {:.2} | {:.2} | {:.2} |",
            secs * 1e3,
            32.0 / secs,
            cpu,
            32.0 / cpu * threads
        );
    }
}
