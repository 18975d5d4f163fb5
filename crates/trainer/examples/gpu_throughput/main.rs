//! Training throughput of BERT-base (batch 32, sequence 128), MiniLM-L6
//! (batch 32, sequence 64) and DeBERTa-v3-base (batch 32, sequence 128) on
//! this crate's backends with bf16 matrix products, beside Hugging Face's
//! `BertForSequenceClassification` (`DebertaV2ForSequenceClassification`)
//! in eager PyTorch and, for the models `--compile-models` names, through
//! `torch.compile` (autocast bf16, fused AdamW;
//! `benches/reference/torch_gpu_throughput.py`), with the model FLOPs
//! utilisation (MFU) of each.
//!
//! ```sh
//! cargo run --release -p trainer --features cuda --example gpu_throughput -- --python python3 \
//!   --repeats 3 --compile-models bert-base --require-speedup bert-base=compiled:1.5
//! cargo run --release -p trainer --example gpu_throughput -- --device cpu --models tiny --steps 2 --python PY
//! ```
//!
//! Every side trains the same architecture from random weights on the same
//! synthetic batch with the same step (zero grads, forward, cross-entropy,
//! backward, clipping at 1.0, AdamW with decay groups, dropout on). Each
//! model warms up once per implementation, then runs `--repeats` timed
//! runs of `--steps` steps; the median run's step time is the figure (the
//! JSON has the least and greatest too, so noise shows). MFU counts the
//! trainer's model FLOPs (`ModelConfig::flops_per_token`) against the
//! device's peak dense bf16 rate (`--peak-tflops`, else a table by device
//! name, else n/a). On CUDA, our side also reports the host's busy time
//! per step (the step less the time the host waited in stream
//! synchronisation: near the whole step when the device waits on our
//! launches) and our kernel launches and cuBLAS calls per step.
//! Prints a markdown table and, with `--json`, writes the figures; exits
//! 1 when a loss is not finite or a `--require-speedup` is missed.

mod args;
mod measure;
mod peak;
mod reference;
mod report;
mod workload;

use std::process::ExitCode;

use args::{Args, USAGE};
use report::{Report, Row};
use trainer::backend::Kernels;

/// Why a run produced no report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "--device cuda needs the CUDA backend: build with `--features cuda`, or pass --device cpu"
    )]
    NoCuda,
    #[error("CUDA backend: {0}")]
    Backend(String),
    #[error("model: {0}")]
    Model(String),
    #[error("Hugging Face reference: {0}")]
    Reference(#[from] reference::ReferenceError),
    #[error("cannot write {path}: {source}")]
    Write {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

fn run(args: &Args) -> Result<Report, Error> {
    let plan = measure::Plan {
        steps: args.steps,
        warmup: args.warmup,
        repeats: args.repeats,
    };
    // The reference runs first, so our allocator's cache does not hold
    // device memory while PyTorch's runs.
    let hf = match &args.python {
        Some(python) => Some(reference::run(
            python,
            &args.script,
            &reference::Request {
                device: args.device.name(),
                workloads: &args.workloads,
                compile: &args.compile,
                steps: args.steps,
                warmup: args.warmup,
                repeats: args.repeats,
            },
        )?),
        None => None,
    };
    let kernels = Kernels::from_env().map_err(|e| Error::Backend(e.to_string()))?;
    let (device, ours) = measure::run(args.device, kernels, &args.workloads, &plan)?;
    let peak_flops = args
        .peak_tflops
        .map(|t| t * 1e12)
        .or_else(|| peak::dense_bf16_flops(&device));
    let rows = args
        .workloads
        .iter()
        .zip(ours)
        .enumerate()
        .map(|(i, (w, ours))| {
            let sides = hf.as_ref().map(|hf| hf[i].clone());
            Row {
                workload: w.clone(),
                ours,
                hf: sides.as_ref().map(|s| s.eager.clone()),
                hf_compiled: sides.and_then(|s| s.compiled),
            }
        })
        .collect();
    Ok(Report {
        backend: args.device.name().to_string(),
        kernels,
        device,
        peak_flops,
        steps: args.steps,
        warmup: args.warmup,
        repeats: args.repeats,
        rows,
        requirements: args.requirements.clone(),
    })
}

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("gpu_throughput: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let report = match run(&args) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("gpu_throughput: {e}");
            return ExitCode::FAILURE;
        }
    };
    let peak = report.peak_flops.map_or("unknown (MFU n/a)".into(), |p| {
        format!("{:.1} TFLOP/s", p / 1e12)
    });
    println!(
        "device: {}; peak dense bf16: {peak}; {} timed run(s) of {} steps after {} warm-up \
         steps per model and implementation, the median run reported",
        report.device, report.repeats, report.steps, report.warmup
    );
    print!("{}", report.table());
    if let Some(path) = &args.json {
        let text = format!("{:#}\n", report.json());
        if let Err(source) = std::fs::write(path, text) {
            eprintln!(
                "gpu_throughput: {}",
                Error::Write {
                    path: path.clone(),
                    source
                }
            );
            return ExitCode::FAILURE;
        }
    }
    let problems = report.problems();
    for p in &problems {
        println!("FAILED: {p}");
    }
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
