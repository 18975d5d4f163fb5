//! The memory plan against the bytes one training step on the CUDA backend
//! asks `gpu-mem` for: ten configurations of the search space's models, the
//! plan's peak beside the allocator's peak of requested bytes (above what
//! the backend holds before the model exists) and its peak reserved, and
//! beside PyTorch's `max_memory_allocated` for the same step of the same
//! Hugging Face model (benches/reference/torch_memory_peak.py, run with
//! `MEMTUNE_TORCH_PYTHON`; its path in `MEMTUNE_TORCH_MEMORY_SCRIPT` where
//! the source tree is not).
//!
//! Needs feature `cuda` and a GPU: `#[ignore]`d, so `cargo test` lists it
//! as ignored; `cargo xtask gpu-test` bundles it as the `memory-plan` step
//! and runs it with `--include-ignored`.

#![cfg(feature = "cuda")]

use trainer::backend::Backend;
use trainer::backend::cuda::CudaBackend;
use trainer::memory::plan::run_planned_step;
use trainer::memory::{BufKind, MemoryPlan, PlanRequest};
use trainer::model::{HeadConfig, ModelConfig};

/// The goal for the plan: within 3% of what the device run asks for.
const TOLERANCE: f64 = 0.03;

/// Each configuration's name, the torch peer's `MODEL:BATCH:SEQ:RECOMPUTE`
/// and its request.
fn configs() -> Vec<(String, String, PlanRequest)> {
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
            format!("{model}:{batch}:{seq}:{recompute}"),
            req,
        ));
    }
    out
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_plan_matches_what_a_cuda_step_requests() {
    let configs = configs();
    let torch = torch_peaks(&configs);
    println!(
        "| configuration | plan (bytes) | requested peak | reserved peak | requested / plan | PyTorch peak | plan / PyTorch |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut worst: f64 = 0.0;
    let mut above_torch = Vec::new();
    for ((name, _, req), theirs) in configs.iter().zip(&torch) {
        let plan = MemoryPlan::new(req).unwrap();
        let be = CudaBackend::new(0, gpu_mem::Config::expandable()).unwrap();
        let alloc = be.allocator().clone();
        let before = alloc.stats().requested_bytes.all.current;
        alloc.reset_peak();
        let step = run_planned_step(&be, req).unwrap();
        be.take_failure()
            .unwrap_or_else(|e| panic!("{name}: the CUDA step failed: {e}"));
        drop(step);
        let stats = alloc.stats();
        let requested = stats.requested_bytes.all.peak - before;
        let ratio = requested as f64 / plan.peak_bytes as f64;
        let (torch_peak, vs_torch) = match theirs {
            Some(peer) => {
                let params = (plan.total_of(BufKind::Weight) / 4) as u64;
                assert_eq!(
                    peer.params, params,
                    "{name}: PyTorch's model has other shapes"
                );
                if plan.peak_bytes as u64 >= peer.peak_bytes {
                    above_torch.push(name.clone());
                }
                (
                    peer.peak_bytes.to_string(),
                    format!("{:.4}", plan.peak_bytes as f64 / peer.peak_bytes as f64),
                )
            }
            None => ("-".into(), "-".into()),
        };
        println!(
            "| {name} | {} | {requested} | {} | {ratio:.4} | {torch_peak} | {vs_torch} |",
            plan.peak_bytes, stats.reserved_bytes.all.peak
        );
        worst = worst.max((ratio - 1.0).abs());
    }
    assert!(
        worst <= TOLERANCE,
        "the plan is {:.1}% off a CUDA step's requested peak",
        worst * 100.0
    );
    assert!(
        above_torch.is_empty(),
        "the plan is not below PyTorch's peak for {above_torch:?}"
    );
}

/// What the PyTorch peer reported for one configuration.
struct TorchPeak {
    params: u64,
    peak_bytes: u64,
}

/// PyTorch's peak for each configuration, in order; all `None` (with a
/// message) without `MEMTUNE_TORCH_PYTHON`.
fn torch_peaks(configs: &[(String, String, PlanRequest)]) -> Vec<Option<TorchPeak>> {
    let Some(python) = std::env::var_os("MEMTUNE_TORCH_PYTHON") else {
        eprintln!(
            "no PyTorch column: set MEMTUNE_TORCH_PYTHON to a python with torch and transformers"
        );
        return configs.iter().map(|_| None).collect();
    };
    let script = std::env::var("MEMTUNE_TORCH_MEMORY_SCRIPT").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../benches/reference/torch_memory_peak.py"
        )
        .into()
    });
    let out = std::process::Command::new(&python)
        .arg(&script)
        .args(configs.iter().map(|(_, spec, _)| spec))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.to_string_lossy()));
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{script} printed {l:?}: {e}")))
        .collect();
    assert_eq!(
        lines.len(),
        configs.len(),
        "{script}: one line per configuration"
    );
    lines
        .iter()
        .zip(configs)
        .map(|(line, (_, spec, _))| {
            assert_eq!(line["config"].as_str(), Some(spec.as_str()));
            Some(TorchPeak {
                params: line["params"].as_u64().expect("params"),
                peak_bytes: line["peak_bytes"].as_u64().expect("peak_bytes on a GPU"),
            })
        })
        .collect()
}
