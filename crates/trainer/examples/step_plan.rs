//! Prints the memory plan of one training step of any preset of the search
//! space (AdamW, dropout on, two classes): its peak, what is live there by
//! kind, and the step's own buffers (activations and workspace) live at it.
//!
//! `cargo run --release -p trainer --example step_plan -- MODEL BATCH SEQ
//! [recompute] [fp32|bf16] [reference|fused]` (defaults: no recomputation,
//! bf16 products, the fused kernels: the CUDA backend's default step, less
//! the buffers that backend holds for itself, such as cuBLAS's workspace,
//! as the `memory-plan` step compares them).

use trainer::backend::{Kernels, MatmulPrecision};
use trainer::memory::{BufKind, MemoryPlan, PlanRequest};
use trainer::model::{HeadConfig, ModelConfig};

const USAGE: &str = "usage: step_plan MODEL BATCH SEQ [recompute] [fp32|bf16] [reference|fused]";

fn main() {
    if let Err(message) = run() {
        eprintln!("step_plan: {message}\n{USAGE}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [model, batch, seq, options @ ..] = args.as_slice() else {
        return Err("MODEL, BATCH and SEQ are required".into());
    };
    let config = ModelConfig::preset(model).ok_or_else(|| {
        format!(
            "no preset `{model}` (one of {})",
            ModelConfig::PRESETS.join(", ")
        )
    })?;
    let number = |what: &str, text: &str| -> Result<usize, String> {
        text.parse()
            .map_err(|_| format!("{what} `{text}` is not a whole number"))
    };
    let (batch, seq) = (number("BATCH", batch)?, number("SEQ", seq)?);
    let (mut recompute, mut precision, mut kernels) =
        (false, MatmulPrecision::Bf16, Kernels::Fused);
    for option in options {
        match option.as_str() {
            "recompute" => recompute = true,
            "fp32" => precision = MatmulPrecision::Fp32,
            "bf16" => precision = MatmulPrecision::Bf16,
            "reference" => kernels = Kernels::Reference,
            "fused" => kernels = Kernels::Fused,
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let request = PlanRequest {
        recompute,
        ..PlanRequest::fp32_adamw(config, &head, batch, seq)
    }
    .with_step(precision, kernels);
    let plan = MemoryPlan::new(&request).map_err(|e| e.to_string())?;
    println!("{model} b{batch} s{seq} recompute={recompute} {precision:?} {kernels:?}");
    print!("{}", plan.summary());
    let at_peak = plan.peak_buffer().ok_or("the step allocates nothing")?;
    println!("peak reached at the allocation of `{}`", at_peak.name);
    println!("activations and workspace of at least 1 MiB live at the peak:");
    for b in plan.live_at_peak().filter(|b| {
        matches!(b.kind, BufKind::Activation | BufKind::Workspace) && b.bytes >= 1 << 20
    }) {
        println!(
            "  {:<32} {:<10} {:>12} bytes",
            b.name,
            format!("{:?}", b.kind),
            b.bytes
        );
    }
    Ok(())
}
