//! Prints the memory plan of one training step (default: BERT-base, batch 32,
//! sequence 128, fp32, AdamW, no recomputation) beside a count by hand.
//!
//! `cargo run --release -p trainer --example memory_plan -- [batch] [seq] [recompute]`

use trainer::backend::{Kernels, MatmulPrecision};
use trainer::config::BertConfig;
use trainer::memory::{BufKind, MemoryPlan, OptimizerKind, PlanRequest, Precision};
use trainer::model::HeadConfig;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let batch: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(32);
    let seq: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(128);
    let recompute = args.get(3).is_some_and(|a| a == "recompute");
    let config = BertConfig::bert_base();
    let req = PlanRequest {
        config: config.clone().into(),
        head: HeadConfig {
            num_labels: 2,
            hidden: vec![],
        },
        micro_batch: batch,
        seq_len: seq,
        precision: Precision::F32,
        recompute,
        optimizer: OptimizerKind::AdamW,
        class_weights: false,
        dropout: true,
        backend: Default::default(),
        matmul_precision: MatmulPrecision::Fp32,
        kernels: Kernels::Reference,
    };
    let plan = match MemoryPlan::new(&req) {
        Ok(plan) => plan,
        Err(e) => {
            eprintln!("memory_plan: {e}");
            std::process::exit(2);
        }
    };
    println!("BERT-base, batch {batch}, seq {seq}, fp32, AdamW, recompute {recompute}");
    print!("{}", plan.summary());

    // By hand (fp32, 4 bytes per value).
    let (h, i, l, v, p, t, b, s, nh) = (768usize, 3072, 12, 30522, 512, 2, batch, seq, 12);
    let per_layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h;
    let params = (v + p + t) * h + 2 * h + l * per_layer + (h * h + h) + (2 * h + 2);
    let n = b * s;
    // Saved per layer: q,k,v heads, ctx, sum1, ln1 out, sum2, out (8 of n*h),
    // ffn in and gelu (2 of n*i), probs (b*nh*s*s), 4 LayerNorm stats of n.
    let saved_layer = 8 * n * h + 2 * n * i + b * nh * s * s + 4 * n;
    // Embeddings: sum, dropout output, 2 stats.
    let saved_emb = 2 * n * h + 2 * n;
    let inputs = 4 * n + b; // u32 ids
    println!("\nby hand:");
    println!("  parameters             {params}");
    println!("  weights+grads+adam m,v {} bytes", 16 * params);
    println!("  saved per layer        {} bytes", 4 * saved_layer);
    println!(
        "  saved (emb + 12 layers){} bytes",
        4 * (saved_emb + l * saved_layer)
    );
    println!("  inputs                 {} bytes", 4 * inputs);
    if !recompute {
        // The peak is in layer 11's backward, at the GELU backward: every
        // saved activation except layer 11's output (dropped once the head's
        // backward is done), plus three gradients of the FFN: d(sum2) [n, h],
        // d(gelu) and d(ffn in) [n, i].
        let activations = 4 * (saved_emb + l * saved_layer - n * h);
        let workspace = 4 * (n * h + 2 * n * i);
        let peak = 16 * params + activations + workspace + 4 * inputs;
        println!("  activations at peak    {activations} bytes");
        println!("  workspace at peak      {workspace} bytes");
        println!(
            "  peak                   {peak} bytes ({:.1} MiB); plan {}",
            peak as f64 / 1048576.0,
            if peak == plan.peak_bytes {
                "agrees"
            } else {
                "DIFFERS"
            }
        );
    }
    let kinds = [
        BufKind::Weight,
        BufKind::Grad,
        BufKind::OptimizerState,
        BufKind::Input,
        BufKind::Activation,
        BufKind::Workspace,
    ];
    println!("\nplan totals over the step (allocated at any time):");
    for k in kinds {
        println!("  {:<16} {:>14} bytes", format!("{k:?}"), plan.total_of(k));
    }
    println!("\nlargest workspace buffers live at peak:");
    let mut live: Vec<_> = plan
        .live_at_peak()
        .filter(|x| matches!(x.kind, BufKind::Workspace))
        .collect();
    live.sort_by_key(|x| std::cmp::Reverse(x.bytes));
    for x in live.iter().take(12) {
        println!("  {:<28} {:>12} bytes", x.name, x.bytes);
    }
    if let Some(at) = plan.peak_buffer() {
        println!("peak reached at allocation of `{}`", at.name);
    }
}
