//! The PyTorch peer of the GPU memory-plan check
//! (benches/reference/torch_memory_peak.py, run by `cuda_memory_plan`)
//! builds every preset that check compares on with exactly our parameter
//! count, so its peak is the same model's, and its step runs. Runs the
//! script with `MEMTUNE_TORCH_PYTHON` (skips without it, fails under CI):
//! shapes on PyTorch's `meta` device (no storage, so the large models cost
//! nothing), one small step on the CPU.

mod io_support;

use std::path::Path;
use std::process::Command;

use trainer::memory::{BufKind, MemoryPlan, PlanRequest};
use trainer::model::{HeadConfig, ModelConfig};

const PRESETS: [&str; 7] = [
    "bert-base",
    "bert-large",
    "roberta-base",
    "roberta-large",
    "xlm-roberta-base",
    "deberta-v3-base",
    "deberta-v3-large",
];

/// Parameters of `preset` with a 2-class head: its plan's fp32 weight bytes / 4.
fn our_params(preset: &str) -> u64 {
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let config = ModelConfig::preset(preset).unwrap();
    let plan = MemoryPlan::new(&PlanRequest::fp32_adamw(config, &head, 1, 8)).unwrap();
    (plan.total_of(BufKind::Weight) / 4) as u64
}

#[test]
fn the_torch_peer_builds_each_preset_with_our_parameter_count() {
    let Some(python) =
        io_support::torch_python("the_torch_peer_builds_each_preset_with_our_parameter_count")
    else {
        return;
    };
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/reference/torch_memory_peak.py");
    let run = |device: &str, specs: &[String]| -> Vec<serde_json::Value> {
        let out = Command::new(&python)
            .arg(&script)
            .args(["--device", device])
            .args(specs)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), specs.len());
        for (line, spec) in lines.iter().zip(specs) {
            assert_eq!(line["config"].as_str(), Some(spec.as_str()));
        }
        lines
    };
    let specs: Vec<String> = PRESETS.iter().map(|p| format!("{p}:1:8:false")).collect();
    for (line, preset) in run("meta", &specs).iter().zip(PRESETS) {
        let theirs = line["params"].as_u64().unwrap();
        println!("{preset}: {theirs} parameters");
        assert_eq!(theirs, our_params(preset), "{preset}");
    }
    // Two steps with recomputation, as the GPU check runs them.
    let step = run("cpu", &["bert-base:2:16:true".to_string()]);
    let loss = step[0]["loss"].as_f64().unwrap();
    println!("bert-base b2 s16 with recomputation: loss after two steps {loss:.4}");
    assert!(loss.is_finite());
    assert_eq!(step[0]["params"].as_u64(), Some(our_params("bert-base")));
}
