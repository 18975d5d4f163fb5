//! A whole fine-tuning run on the CUDA backend (`finetune_cuda`) beside the
//! same run on the CPU: the data, split, tokenizer, model loading and
//! training loop are shared, so the two must learn alike, request the same
//! tensor bytes, and a lease below the run's peak must be met by halving
//! the micro-batch on the GPU as on the CPU.
//!
//! Needs feature `cuda` and a GPU: the GPU tests are `#[ignore]`d (`cargo
//! xtask gpu-test` bundles them and runs them with `--include-ignored`);
//! `without_a_driver_the_run_is_a_clean_error` runs wherever libcuda is
//! absent.

#![cfg(feature = "cuda")]

use trainer::backend::MatmulPrecision;
use trainer::backend::cuda::CudaError;
use trainer::finetune::{FinetuneError, FinetuneSpec, finetune_cpu, finetune_cuda};
use trainer::testing::{sentiment_words, tiny_config, write_tiny_model};
use trainer::train::Control;

mod common;

fn spec(dir: &std::path::Path) -> FinetuneSpec {
    common::tiny_finetune_spec(dir, common::embedded())
}

fn tiny_model() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let words = sentiment_words(600);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    write_tiny_model(dir.path(), &tiny_config(), &words, 5).unwrap();
    dir
}

#[test]
fn without_a_driver_the_run_is_a_clean_error() {
    // SAFETY: only tries to load the library.
    if unsafe { gpu_mem::cuda::cudarc::driver::sys::is_culib_present() } {
        eprintln!("skipping without_a_driver_the_run_is_a_clean_error: libcuda is present");
        return;
    }
    let dir = tiny_model();
    let run = finetune_cuda(
        &spec(dir.path()),
        0,
        gpu_mem::Config::expandable(),
        &mut |_| Control::Continue,
    );
    match run {
        Err(FinetuneError::Cuda(CudaError::MissingLibrary(msg))) => {
            assert!(msg.contains("lib"), "{msg}")
        }
        other => panic!("expected a missing-library error, got {:?}", other.err()),
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn the_gpu_learns_as_the_cpu_does_and_requests_the_same_bytes() {
    for precision in MatmulPrecision::ALL {
        learns_as_the_cpu_does(precision);
    }
}

/// A run on the GPU beside the CPU's at `precision` (16-bit products
/// emulated on the CPU).
fn learns_as_the_cpu_does(precision: MatmulPrecision) {
    let dir = tiny_model();
    let spec = FinetuneSpec {
        matmul_precision: precision,
        ..spec(dir.path())
    };
    let cpu = finetune_cpu(&spec, &mut |_| Control::Continue).unwrap();
    let gpu = finetune_cuda(&spec, 0, gpu_mem::Config::expandable(), &mut |_| {
        Control::Continue
    })
    .unwrap();
    for (c, g) in cpu.report.epochs.iter().zip(&gpu.outcome.report.epochs) {
        eprintln!(
            "{precision} epoch {}: train loss cpu {:.6} gpu {:.6}, accuracy cpu {:.4} gpu {:.4}",
            c.epoch, c.train_loss, g.train_loss, c.valid.accuracy, g.valid.accuracy
        );
        // The same arithmetic in other summation orders: three epochs of
        // updates drift a little, never far.
        let rel = (c.train_loss - g.train_loss).abs() / c.train_loss.abs().max(1e-12);
        let tol = if precision == MatmulPrecision::Fp32 {
            0.02
        } else {
            0.05
        };
        assert!(
            rel < tol,
            "{precision} epoch {}: train loss differs by {rel:.3e}",
            c.epoch
        );
        assert!((c.valid.accuracy - g.valid.accuracy).abs() <= 0.03);
    }
    let (cpu_peak, gpu_peak) = (cpu.peak_bytes as u64, gpu.peak_requested);
    eprintln!(
        "{precision} peak requested: cpu {cpu_peak}, gpu {gpu_peak} (reserved {}), skipped steps cpu {} gpu {}",
        gpu.peak_reserved, cpu.report.skipped_steps, gpu.outcome.report.skipped_steps
    );
    // The CUDA backend's own buffers (norm partials, cuBLAS workspace, at
    // most what it reserved for them) come on top of the model's; nothing
    // else may differ.
    assert!(
        gpu_peak >= cpu_peak && gpu_peak - cpu_peak <= gpu.backend_reserved,
        "cpu {cpu_peak} vs gpu {gpu_peak} (backend's own {})",
        gpu.backend_reserved
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_lease_below_the_peak_halves_the_micro_batch_on_the_gpu() {
    let dir = tiny_model();
    let full = finetune_cuda(
        &spec(dir.path()),
        0,
        gpu_mem::Config::expandable(),
        &mut |_| Control::Continue,
    )
    .unwrap();
    // The lease covers everything the allocator reserves, the backend's
    // own buffers (cuBLAS workspace, norm partials) included: 80% of the
    // tensors' share on top of those.
    let tensors = full.peak_reserved - full.backend_reserved;
    let limit = full.backend_reserved + (tensors as f64 * 0.8) as u64;
    let lease = FinetuneSpec {
        memory_limit: Some(limit as usize),
        ..spec(dir.path())
    };
    let tight = finetune_cuda(&lease, 0, gpu_mem::Config::expandable(), &mut |_| {
        Control::Continue
    })
    .unwrap();
    eprintln!(
        "full run reserved {} (backend {}), leased run reserved {} under {limit} with retries {:?}",
        full.peak_reserved,
        full.backend_reserved,
        tight.peak_reserved,
        tight.outcome.report.oom_retries
    );
    assert!(!tight.outcome.report.oom_retries.is_empty());
    assert!(tight.peak_reserved <= limit);
}

/// all-MiniLM-L6-v2 fine-tuned on the embedded data as the CPU benchmark
/// does it (3 epochs, lr 5e-5, batch 32, length 64), on the GPU at fp32 and
/// at bf16 where the device has it: final validation accuracy within one
/// point of the CPU's. `MEMTUNE_MINILM_DIR` names the model (the bundle's
/// fp16 copy with the vocabulary cut to the data's word pieces).
#[test]
#[ignore = "needs a CUDA device"]
fn minilm_on_the_gpu_is_within_a_point_of_the_cpu() {
    let dir = std::env::var_os("MEMTUNE_MINILM_DIR")
        .map(std::path::PathBuf::from)
        .expect(
            "MEMTUNE_MINILM_DIR must name the all-MiniLM-L6-v2 directory (the bundle's minilm/)",
        );
    let base = common::tiny_finetune_spec(&dir, common::embedded());
    let spec = FinetuneSpec {
        max_length: 64,
        train: trainer::train::TrainConfig {
            epochs: 3,
            lr: 5e-5,
            ..base.train.clone()
        },
        ..base
    };
    let accuracy = |report: &trainer::train::TrainReport| {
        report.epochs.last().expect("three epochs").valid.accuracy
    };
    let started = std::time::Instant::now();
    let cpu = finetune_cpu(&spec, &mut |_| Control::Continue).unwrap();
    println!(
        "cpu fp32: accuracy {:.4} in {:.1} s",
        accuracy(&cpu.report),
        started.elapsed().as_secs_f64()
    );
    for precision in [MatmulPrecision::Fp32, MatmulPrecision::Bf16] {
        let started = std::time::Instant::now();
        let run = finetune_cuda(
            &FinetuneSpec {
                matmul_precision: precision,
                ..spec.clone()
            },
            0,
            gpu_mem::Config::expandable(),
            &mut |_| Control::Continue,
        );
        let gpu = match run {
            Err(FinetuneError::Cuda(CudaError::Invalid {
                op: "precision",
                message,
            })) => {
                println!("gpu {precision}: not on this device ({message})");
                continue;
            }
            other => other.unwrap(),
        };
        let (c, g) = (accuracy(&cpu.report), accuracy(&gpu.outcome.report));
        println!(
            "gpu {precision}: accuracy {g:.4} ({:+.2} points) in {:.1} s, peak requested {} bytes",
            (g - c) * 100.0,
            started.elapsed().as_secs_f64(),
            gpu.peak_requested
        );
        assert!(
            (g - c).abs() <= 0.01 + 1e-9,
            "{precision}: GPU accuracy {g:.4} vs CPU {c:.4}"
        );
    }
}
