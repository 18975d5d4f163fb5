//! The simulated-device trial: the real training loop's allocations through
//! `gpu-mem`'s allocator reach the memory plan's peak (up to rounding), a
//! lease that a micro-batch overflows is met by halving it, and a lease
//! below the weights fails at construction.

use trainer::backend::faulty::Faults;
use trainer::backend::{Kernels, MatmulPrecision};
use trainer::config::BertConfig;
use trainer::finetune::{
    FinetuneError, SimOutcome, SimSpec, finetune_sim, finetune_sim_with_faults,
};
use trainer::memory::{MemoryPlan, OptimizerKind, PlanRequest, Precision};
use trainer::model::HeadConfig;
use trainer::train::Control;

fn spec(hidden: usize, micro_batch: usize, seq_len: usize) -> SimSpec {
    SimSpec {
        config: BertConfig {
            max_position_embeddings: 128,
            ..BertConfig::tiny(hidden, 2, 4, 4 * hidden, 1000)
        }
        .into(),
        head: HeadConfig {
            num_labels: 3,
            hidden: vec![32],
        },
        micro_batch,
        seq_len,
        train_examples: 4 * micro_batch,
        validation_examples: micro_batch,
        epochs: 2,
        device_capacity: 1 << 30,
        ..SimSpec::default()
    }
}

fn run(spec: &SimSpec) -> Result<SimOutcome, FinetuneError> {
    finetune_sim(spec, &mut |_| Control::Continue)
}

#[test]
fn sim_peak_is_the_memory_plan_peak_up_to_rounding() {
    let mut peaks = Vec::new();
    for (expandable_segments, recompute) in [(false, false), (true, false), (true, true)] {
        let s = SimSpec {
            expandable_segments,
            recompute,
            ..spec(64, 4, 32)
        };
        let out = run(&s).unwrap();
        let plan = MemoryPlan::new(&PlanRequest {
            config: s.config.clone(),
            head: s.head.clone(),
            micro_batch: s.micro_batch,
            seq_len: s.seq_len,
            precision: Precision::F32,
            recompute,
            optimizer: OptimizerKind::AdamW,
            class_weights: false,
            dropout: true,
            backend: Default::default(),
            matmul_precision: MatmulPrecision::Fp32,
            kernels: Kernels::Reference,
        })
        .unwrap();
        let peak = plan.peak_bytes as u64;
        assert_eq!(out.peak_requested, peak);
        let rounding = 512 * plan.buffers.len() as u64;
        assert!(
            out.peak_allocated >= peak && out.peak_allocated <= peak + rounding,
            "{} vs plan {peak}",
            out.peak_allocated
        );
        assert!(out.peak_reserved >= out.peak_allocated);
        assert_eq!(out.report.steps, 8);
        assert!(out.oom_retries.is_empty());
        assert_eq!(out.stats.num_ooms, 0);
        peaks.push(peak);
    }
    // Recomputing the layers keeps one layer's activations, not two.
    assert!(peaks[2] < peaks[1], "{peaks:?}");
}

#[test]
fn a_lease_too_small_for_the_micro_batch_is_met_by_halving() {
    let big = spec(128, 16, 128);
    let full = run(&big).unwrap();
    let small = run(&SimSpec {
        micro_batch: 2,
        ..big.clone()
    })
    .unwrap();
    assert!(small.peak_reserved < full.peak_reserved);
    let lease = small.peak_reserved + (full.peak_reserved - small.peak_reserved) / 4;
    let out = run(&SimSpec {
        memory_limit: Some(lease as usize),
        ..big.clone()
    })
    .unwrap();
    assert!(!out.oom_retries.is_empty());
    // Refused by the allocator, whose report comes along.
    assert!(out.oom_retries.iter().all(|r| r.error.allocator.is_some()));
    assert_eq!(out.oom_retries[0].from_micro_batch, 16);
    assert!(out.report.micro_batch < 16 && out.report.micro_batch >= 2);
    assert!(
        out.peak_reserved <= lease,
        "{} > {lease}",
        out.peak_reserved
    );
    assert_eq!(out.report.steps, full.report.steps);
}

#[test]
fn a_lease_below_the_weights_and_injected_faults() {
    let s = spec(64, 4, 32);
    let e = run(&SimSpec {
        memory_limit: Some(1 << 20),
        ..s.clone()
    })
    .unwrap_err();
    match &e {
        FinetuneError::OutOfMemory {
            micro_batch: 0,
            error,
        } => assert_eq!(error.limit, 1 << 20),
        other => panic!("{other}"),
    }

    let clean = run(&s).unwrap();
    let faults = Faults {
        fail_nth_allocation: Some(clean.allocation_requests * 3 / 4),
        ..Faults::default()
    };
    let out = finetune_sim_with_faults(&s, &faults, &mut |_| Control::Continue).unwrap();
    assert_eq!(out.oom_retries.len(), 1);
    // Refused at the bytes then live, by the tracker, not the allocator.
    let injected = &out.oom_retries[0].error;
    assert!(injected.allocator.is_none() && injected.limit == injected.live);
    assert_eq!(out.report.micro_batch, 2);

    // A device smaller than the weights is the same error.
    let e = run(&SimSpec {
        device_capacity: 1 << 20,
        ..s
    })
    .unwrap_err();
    assert!(e.out_of_memory().is_some(), "{e}");
    // The allocator's own report (fragmentation, advice) is kept as the
    // error's source, not dropped in the conversion.
    let mut source = std::error::Error::source(&e);
    let mut report = None;
    while let Some(cause) = source {
        if let Some(r) = cause.downcast_ref::<gpu_mem::OutOfMemory>() {
            report = Some(r);
        }
        source = cause.source();
    }
    let report = report.expect("the allocator's report is in the source chain");
    assert_eq!(report.device_total, 1 << 20);
    assert!(report.to_string().contains("largest"), "{report}");
}

#[test]
fn step_peaks_equal_one_plan_per_micro_batch() {
    use trainer::memory::step_peaks;
    for (recompute, dropout, optimizer) in [
        (false, true, OptimizerKind::AdamW),
        (true, false, OptimizerKind::Sgd),
    ] {
        let req = PlanRequest {
            config: BertConfig::tiny(48, 2, 4, 96, 300).into(),
            head: HeadConfig {
                num_labels: 2,
                hidden: vec![16, 8],
            },
            micro_batch: 1,
            seq_len: 24,
            precision: Precision::F32,
            recompute,
            optimizer,
            class_weights: false,
            dropout,
            backend: Default::default(),
            matmul_precision: MatmulPrecision::Fp32,
            kernels: Kernels::Reference,
        };
        let micros = [8, 1, 3, 16, 2];
        let peaks = step_peaks(&req, &micros).unwrap();
        for (&micro_batch, &peak) in micros.iter().zip(&peaks) {
            let plan = MemoryPlan::new(&PlanRequest {
                micro_batch,
                ..req.clone()
            })
            .unwrap();
            assert_eq!(peak, plan.peak_bytes, "micro-batch {micro_batch}");
        }
    }
}

/// A device failure reported after a step (what the CUDA backend's `check`
/// returns after a failed launch) ends training with that failure instead of
/// going on with losses computed from skipped work.
#[test]
fn a_device_failure_after_a_step_stops_training() {
    use trainer::backend::DeviceFailure;
    use trainer::backend::faulty::FaultyBackend;
    use trainer::backend::sim::SimBackend;
    use trainer::batch::Batch;
    use trainer::train::{TrainConfig, TrainError, train};

    let s = spec(32, 2, 8);
    let be = FaultyBackend::new(SimBackend::with_limit(1 << 30, None, true, 4).unwrap());
    let mut model = s.config.build_random(&be, &s.head, 1).unwrap();
    let batch = |start: usize| Batch {
        batch: 2,
        seq: 8,
        input_ids: (0..16).map(|i| (start + i) as u32 % 1000).collect(),
        token_type_ids: vec![0; 16],
        attention_mask: vec![1; 16],
        labels: vec![start % 3, (start + 1) % 3],
    };
    let train_batches: Vec<Batch> = (0..4).map(batch).collect();
    let valid = vec![batch(9)];
    let failure = DeviceFailure {
        message: "cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED".into(),
        sticky: true,
    };
    // The third check: after the optimiser state, the first step and the
    // second step.
    be.fail_nth_check(3, failure.clone());
    let cfg = TrainConfig {
        epochs: 1,
        ..TrainConfig::default()
    };
    let result = train(&be, &mut *model, &train_batches, &valid, &cfg, &mut |_| {
        Control::Continue
    });
    match result {
        Err(TrainError::Device(f)) => assert_eq!(f, failure),
        other => panic!("expected the device failure, got {other:?}"),
    }
}
