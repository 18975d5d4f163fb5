//! The memory plan against the bytes one training step on the CUDA backend
//! asks `gpu-mem` for: ten configurations of the search space's models, the
//! plan's peak beside the allocator's peak of requested bytes (above what
//! the backend holds before the model exists) and its peak reserved.
//!
//! Needs feature `cuda`, a GPU and `MEMTUNE_GPU_TESTS=1` (`cargo xtask
//! gpu-test` bundles it as the `memory-plan` step); otherwise it prints a
//! skip message.

#![cfg(feature = "cuda")]

use trainer::backend::Backend;
use trainer::backend::cuda::CudaBackend;
use trainer::memory::plan::run_planned_step;
use trainer::memory::{MemoryPlan, PlanRequest};
use trainer::model::{HeadConfig, ModelConfig};

/// The goal for the plan: within 3% of what the device run asks for.
const TOLERANCE: f64 = 0.03;

fn configs() -> Vec<(String, PlanRequest)> {
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let mut out = Vec::new();
    for (model, batch, seq, recompute) in [
        ("bert-base", 32, 128, false),
        ("bert-base", 32, 128, true),
        ("bert-base", 8, 512, false),
        ("roberta-base", 16, 256, false),
        ("xlm-roberta-base", 16, 128, false),
        ("bert-large", 8, 256, false),
        ("roberta-large", 4, 512, true),
        ("deberta-v3-base", 8, 256, false),
        ("deberta-v3-base", 16, 128, true),
        ("deberta-v3-large", 4, 256, false),
    ] {
        let config = ModelConfig::preset(model).expect("a preset of the search space");
        let req = PlanRequest {
            recompute,
            ..PlanRequest::fp32_adamw(config, &head, batch, seq)
        };
        out.push((
            format!("{model} b{batch} s{seq} recompute={recompute}"),
            req,
        ));
    }
    out
}

#[test]
fn the_plan_matches_what_a_cuda_step_requests() {
    if std::env::var("MEMTUNE_GPU_TESTS").as_deref() != Ok("1") {
        eprintln!("skipping: needs a GPU and MEMTUNE_GPU_TESTS=1 (run `cargo xtask gpu-test`)");
        return;
    }
    println!(
        "| configuration | plan (bytes) | requested peak | reserved peak | requested / plan |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    let mut worst: f64 = 0.0;
    for (name, req) in configs() {
        let plan = MemoryPlan::new(&req).unwrap();
        let be = CudaBackend::new(0, gpu_mem::Config::expandable()).unwrap();
        let alloc = be.allocator().clone();
        let before = alloc.stats().requested_bytes.all.current;
        alloc.reset_peak();
        let step = run_planned_step(&be, &req).unwrap();
        be.take_failure().unwrap();
        drop(step);
        let stats = alloc.stats();
        let requested = stats.requested_bytes.all.peak - before;
        let ratio = requested as f64 / plan.peak_bytes as f64;
        println!(
            "| {name} | {} | {requested} | {} | {ratio:.4} |",
            plan.peak_bytes, stats.reserved_bytes.all.peak
        );
        worst = worst.max((ratio - 1.0).abs());
    }
    assert!(
        worst <= TOLERANCE,
        "the plan is {:.1}% off a CUDA step's requested peak",
        worst * 100.0
    );
}
