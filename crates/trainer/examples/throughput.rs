//! Training throughput (sequences/s) of a MiniLM-L6-sized classifier on the
//! CPU backend: full steps (forward, backward, clipping, AdamW) with dropout.
//!
//! `cargo run --release -p trainer --example throughput -- [steps] [threads]`

use std::time::Instant;

use trainer::backend::cpu::CpuBackend;
use trainer::config::BertConfig;
use trainer::memory::plan::synthetic_batch;
use trainer::memory::{OptimizerKind, PlanRequest, Precision};
use trainer::model::{BertClassifier, HeadConfig};
use trainer::train::{OptimizerConfig, StepContext, train_step};

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
    println!("| batch | seq | step ms (mean of {steps}) | sequences/s |");
    println!("|---|---|---|---|");
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
            config: config.clone(),
            head: head.clone(),
            micro_batch: 32,
            seq_len: seq,
            precision: Precision::F32,
            recompute: false,
            optimizer: OptimizerKind::AdamW,
            class_weights: false,
            dropout: true,
        };
        let batch = synthetic_batch(&req);
        train_step(&be, &mut model, &mut ctx, &[&batch], 1e-5).unwrap(); // warm-up
        let start = Instant::now();
        for _ in 0..steps {
            train_step(&be, &mut model, &mut ctx, &[&batch], 1e-5).unwrap();
        }
        let secs = start.elapsed().as_secs_f64() / steps as f64;
        println!("| 32 | {seq} | {:.0} | {:.1} |", secs * 1e3, 32.0 / secs);
    }
}
