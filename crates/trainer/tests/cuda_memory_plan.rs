//! The memory plan against the bytes one training step on the CUDA backend
//! asks `gpu-mem` for: ten configurations of the search space's models, the
//! plan's peak beside the allocator's peak of requested bytes (above what
//! the backend holds before the model exists) and its peak reserved, and
//! beside PyTorch's `max_memory_allocated` for the same step of the same
//! Hugging Face model (benches/reference/torch_memory_peak.py, run with
//! `MEMTUNE_TORCH_PYTHON`; its path in `MEMTUNE_TORCH_MEMORY_SCRIPT` where
//! the source tree is not).
//!
//! Three recipes: fp32 products with the reference kernels, and the fused
//! kernels with fp32 and with bf16 activations (PyTorch under autocast bf16
//! beside the latter). `MEMTUNE_MEMORY_PLAN_RECIPES` (names, comma
//! separated, e.g. `bf16 fused`) runs only those.
//!
//! Needs feature `cuda` and a GPU: `#[ignore]`d, so `cargo test` lists it
//! as ignored; `cargo xtask gpu-test` bundles it as the `memory-plan` step
//! and runs it with `--include-ignored`.

#![cfg(feature = "cuda")]

use trainer::backend::cuda::CudaBackend;
use trainer::backend::{Backend, Kernels, MatmulPrecision};
use trainer::memory::plan::run_planned_step;
use trainer::memory::{BufKind, MemoryPlan, PlanRequest};
use trainer::model::{HeadConfig, ModelConfig};

/// How far the plan may be from what the device run asks for.
const TOLERANCE: f64 = 0.03;

/// The fused bf16 step's peak over PyTorch's under autocast bf16, at most.
const FUSED_BF16_VS_TORCH: f64 = 0.85;

/// A training recipe: our step's products and kernels, and the PyTorch
/// peer's precision field.
struct Recipe {
    name: &'static str,
    precision: MatmulPrecision,
    kernels: Kernels,
    torch: &'static str,
}

const RECIPES: &[Recipe] = &[
    Recipe {
        name: "fp32 reference",
        precision: MatmulPrecision::Fp32,
        kernels: Kernels::Reference,
        torch: "fp32",
    },
    Recipe {
        name: "fp32 fused",
        precision: MatmulPrecision::Fp32,
        kernels: Kernels::Fused,
        torch: "fp32",
    },
    Recipe {
        name: "bf16 fused",
        precision: MatmulPrecision::Bf16,
        kernels: Kernels::Fused,
        torch: "bf16",
    },
];

/// Each configuration's name, the torch peer's
/// `MODEL:BATCH:SEQ:RECOMPUTE:PRECISION`, its request and its recipe.
fn configs() -> Vec<(String, String, PlanRequest, &'static Recipe)> {
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let chosen = std::env::var("MEMTUNE_MEMORY_PLAN_RECIPES").ok();
    let chosen: Option<Vec<&str>> = chosen
        .as_deref()
        .map(|names| names.split(',').map(str::trim).collect());
    if let Some(names) = &chosen {
        for name in names {
            assert!(
                RECIPES.iter().any(|r| r.name == *name),
                "MEMTUNE_MEMORY_PLAN_RECIPES: no recipe `{name}`"
            );
        }
    }
    let mut out = Vec::new();
    for recipe in RECIPES
        .iter()
        .filter(|r| chosen.as_ref().is_none_or(|names| names.contains(&r.name)))
    {
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
            }
            .with_step(recipe.precision, recipe.kernels);
            out.push((
                format!(
                    "{} {model} b{batch} s{seq} recompute={recompute}",
                    recipe.name
                ),
                format!("{model}:{batch}:{seq}:{recompute}:{}", recipe.torch),
                req,
                recipe,
            ));
        }
    }
    out
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_plan_matches_what_a_cuda_step_requests() {
    let configs = configs();
    let torch = torch_peaks(&configs);
    println!(
        "| recipe and configuration | plan (bytes) | requested peak | reserved peak | requested / plan | PyTorch peak | plan / PyTorch |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut worst: f64 = 0.0;
    let mut over_bar = Vec::new();
    for ((name, _, req, recipe), theirs) in configs.iter().zip(&torch) {
        let plan = MemoryPlan::new(req).unwrap();
        let be = CudaBackend::new(0, gpu_mem::Config::expandable())
            .unwrap()
            .with_matmul_precision(recipe.precision)
            .unwrap()
            .with_kernels(recipe.kernels);
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
                let vs = plan.peak_bytes as f64 / peer.peak_bytes as f64;
                // The reference step is what the fused one replaces: its
                // figures are reported, the bars are the fused step's.
                let bar = match (recipe.kernels, recipe.precision) {
                    (Kernels::Reference, _) => f64::INFINITY,
                    (_, MatmulPrecision::Fp32) => 1.0,
                    _ => FUSED_BF16_VS_TORCH,
                };
                if vs > bar {
                    over_bar.push(format!("{name}: {vs:.3} > {bar}"));
                }
                (peer.peak_bytes.to_string(), format!("{vs:.4}"))
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
        over_bar.is_empty(),
        "the fused step's plan is above its bar against PyTorch: {over_bar:?}"
    );
}

/// What the PyTorch peer reported for one configuration.
struct TorchPeak {
    params: u64,
    peak_bytes: u64,
}

/// PyTorch's peak for each configuration, in order; all `None` (with a
/// message) without `MEMTUNE_TORCH_PYTHON`.
fn torch_peaks(configs: &[(String, String, PlanRequest, &Recipe)]) -> Vec<Option<TorchPeak>> {
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
    // Recipes that share PyTorch's precision share its run.
    let mut specs: Vec<&str> = configs
        .iter()
        .map(|(_, spec, _, _)| spec.as_str())
        .collect();
    specs.sort_unstable();
    specs.dedup();
    let out = std::process::Command::new(&python)
        .arg(&script)
        .args(&specs)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.to_string_lossy()));
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut peaks = std::collections::HashMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let line: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{script} printed {l:?}: {e}"));
        let spec = line["config"].as_str().expect("config").to_string();
        let peak = TorchPeak {
            params: line["params"].as_u64().expect("params"),
            peak_bytes: line["peak_bytes"].as_u64().expect("peak_bytes on a GPU"),
        };
        peaks.insert(spec, peak);
    }
    configs
        .iter()
        .map(|(_, spec, _, _)| {
            let peak = peaks
                .get(spec)
                .unwrap_or_else(|| panic!("{script} printed nothing for {spec}"));
            Some(TorchPeak {
                params: peak.params,
                peak_bytes: peak.peak_bytes,
            })
        })
        .collect()
}
