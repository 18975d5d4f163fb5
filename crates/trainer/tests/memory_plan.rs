//! The memory plan against the CPU backend's measured peak of tensor bytes:
//! equal for every configuration, buffer by buffer.

mod common;

use common::family_config;
use trainer::backend::Backend;
use trainer::backend::cpu::CpuBackend;
use trainer::backend::{Kernels, MatmulPrecision};
use trainer::config::BertConfig;
use trainer::float::Float;
use trainer::memory::plan::run_planned_step;
use trainer::memory::{BufKind, MemTracker, MemoryPlan, OptimizerKind, PlanRequest, Precision};
use trainer::model::HeadConfig;

fn measure<T: Float>(req: &PlanRequest) -> (usize, Vec<trainer::memory::TrackedBuffer>) {
    let tracker = MemTracker::new(true);
    let be =
        CpuBackend::<T>::with_tracker(tracker.clone()).for_step(req.matmul_precision, req.kernels);
    let kept = run_planned_step(&be, req).unwrap();
    drop(kept);
    assert_eq!(tracker.live_bytes(), 0, "every buffer is freed");
    let _ = be.float_bytes();
    (tracker.peak_bytes(), tracker.buffers())
}

fn configs() -> Vec<PlanRequest> {
    let mut out = Vec::new();
    let mut i = 0;
    for (hidden, layers, heads, inter) in [
        (32, 1, 4, 64),
        (32, 2, 2, 48),
        (48, 2, 3, 96),
        (64, 3, 4, 128),
    ] {
        for (batch, seq) in [(1, 5), (3, 9), (4, 16), (2, 33)] {
            i += 1;
            let config = BertConfig::tiny(hidden, layers, heads, inter, 50);
            out.push(PlanRequest {
                config: config.into(),
                head: HeadConfig {
                    num_labels: 2 + i % 3,
                    hidden: [vec![], vec![8], vec![12, 6], vec![5, 7, 9]][i % 4].clone(),
                },
                micro_batch: batch,
                seq_len: seq,
                precision: if i % 2 == 0 {
                    Precision::F32
                } else {
                    Precision::F64
                },
                recompute: i % 3 == 0,
                optimizer: if i % 4 == 3 {
                    OptimizerKind::Sgd
                } else {
                    OptimizerKind::AdamW
                },
                class_weights: i % 2 == 1,
                dropout: i % 5 != 4,
                backend: Default::default(),
                matmul_precision: MatmulPrecision::Fp32,
                kernels: Kernels::Reference,
            });
        }
    }
    // The flag combinations once more on one shape, to be explicit.
    for recompute in [false, true] {
        for dropout in [false, true] {
            for optimizer in [OptimizerKind::AdamW, OptimizerKind::Sgd] {
                out.push(PlanRequest {
                    config: BertConfig::tiny(16, 2, 2, 32, 30).into(),
                    head: HeadConfig {
                        num_labels: 2,
                        hidden: vec![4],
                    },
                    micro_batch: 2,
                    seq_len: 6,
                    precision: Precision::F32,
                    recompute,
                    optimizer,
                    class_weights: false,
                    dropout,
                    backend: Default::default(),
                    matmul_precision: MatmulPrecision::Fp32,
                    kernels: Kernels::Reference,
                });
            }
        }
    }
    out
}

/// Every family's shape (embedding projection, no token types, its head),
/// with and without dropout and recomputation.
fn family_configs() -> Vec<PlanRequest> {
    let mut out = Vec::new();
    for (k, model_type) in [
        "bert",
        "roberta",
        "xlm-roberta",
        "camembert",
        "distilbert",
        "electra",
    ]
    .into_iter()
    .enumerate()
    {
        let config = family_config(model_type, 32, 2, 64, 50);
        for (recompute, dropout) in [(false, true), (true, false)] {
            out.push(PlanRequest {
                config: config.clone().into(),
                head: HeadConfig {
                    num_labels: 2 + k % 2,
                    hidden: if dropout { vec![8] } else { vec![] },
                },
                micro_batch: 3,
                seq_len: 11,
                precision: Precision::F32,
                recompute,
                optimizer: OptimizerKind::AdamW,
                class_weights: k % 2 == 0,
                dropout,
                backend: Default::default(),
                matmul_precision: MatmulPrecision::Fp32,
                kernels: Kernels::Reference,
            });
        }
    }
    out
}

#[test]
fn measured_peak_equals_plan_for_every_family() {
    for req in &family_configs() {
        let plan = MemoryPlan::new(req).unwrap();
        let (peak, buffers) = measure::<f32>(req);
        assert_eq!(peak, plan.peak_bytes, "{req:?}");
        assert_eq!(
            buffers, plan.buffers,
            "same buffers, sizes and lifetimes: {req:?}"
        );
    }
}

/// Every configuration of [`configs`] once more with the fused step, its
/// products (and so its activations) in fp32, bf16 and fp16 in turn.
fn fused_configs() -> Vec<PlanRequest> {
    let precisions = [
        MatmulPrecision::Fp32,
        MatmulPrecision::Bf16,
        MatmulPrecision::Fp16,
    ];
    configs()
        .into_iter()
        .chain(family_configs())
        .enumerate()
        .map(|(i, req)| req.with_step(precisions[i % 3], Kernels::Fused))
        .collect()
}

#[test]
fn measured_peak_equals_plan_for_the_fused_step() {
    for req in &fused_configs() {
        let plan = MemoryPlan::new(req).unwrap();
        let (peak, buffers) = match req.precision {
            Precision::F32 => measure::<f32>(req),
            Precision::F64 => measure::<f64>(req),
        };
        assert_eq!(peak, plan.peak_bytes, "{req:?}");
        assert_eq!(buffers.len(), plan.buffers.len(), "{req:?}");
        for (m, p) in buffers.iter().zip(&plan.buffers) {
            assert_eq!(m, p, "same buffers, sizes and lifetimes: {req:?}");
        }
    }
}

/// BERT-base at batch 8 x 512, the long-sequence configuration where the
/// stored `s x s` probabilities dominate: the fused step's plan is below
/// the reference's in fp32, and further below with 16-bit activations.
#[test]
fn fused_plan_is_smaller_at_long_sequences() {
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let base = PlanRequest::fp32_adamw(BertConfig::bert_base(), &head, 8, 512);
    let peak = |precision, kernels| {
        let req = base.clone().with_step(precision, kernels);
        let plan = MemoryPlan::new(&req).unwrap();
        let mib = plan.peak_bytes as f64 / (1 << 20) as f64;
        println!("bert-base b8 s512 {kernels} {precision:?}: peak {mib:.1} MiB");
        plan.peak_bytes
    };
    let reference = peak(MatmulPrecision::Fp32, Kernels::Reference);
    assert_eq!(reference, peak(MatmulPrecision::Bf16, Kernels::Reference));
    let fused32 = peak(MatmulPrecision::Fp32, Kernels::Fused);
    let fused16 = peak(MatmulPrecision::Bf16, Kernels::Fused);
    assert!(fused32 < reference, "{fused32} vs {reference}");
    assert!(fused16 < fused32, "{fused16} vs {fused32}");
    // The weights, gradients and AdamW state (16 bytes a parameter) are
    // the same in every step.
    assert!(fused16 > 16 * 109_000_000);
}

#[test]
fn family_weights_match_a_count_by_hand() {
    let (h, i, v, p, l) = (32, 64, 50, 64, 2);
    let per_layer = 4 * (h * h + h) + 2 * 2 * h + (h * i + i) + (i * h + h);
    let head = (h * h + h) + (h * 2 + 2);
    for (model_type, embeddings) in [
        // word, position, token types (2 rows; RoBERTa's 1), LayerNorm.
        ("bert", v * h + p * h + 2 * h + 2 * h),
        ("roberta", v * h + p * h + h + 2 * h),
        ("distilbert", v * h + p * h + 2 * h),
        // 16-wide tables and LayerNorm, then the 16 -> 32 projection.
        ("electra", v * 16 + p * 16 + 2 * 16 + 2 * 16 + (16 * h + h)),
    ] {
        let config = family_config(model_type, h, l, i, v);
        let plan = MemoryPlan::new(&PlanRequest {
            config: config.into(),
            head: HeadConfig {
                num_labels: 2,
                hidden: vec![],
            },
            micro_batch: 2,
            seq_len: 8,
            precision: Precision::F32,
            recompute: false,
            optimizer: OptimizerKind::AdamW,
            class_weights: false,
            dropout: true,
            backend: Default::default(),
            matmul_precision: MatmulPrecision::Fp32,
            kernels: Kernels::Reference,
        })
        .unwrap();
        let params = embeddings + l * per_layer + head;
        assert_eq!(plan.total_of(BufKind::Weight), 4 * params, "{model_type}");
    }
}

#[test]
fn measured_peak_equals_plan_for_many_configurations() {
    let configs = configs();
    assert!(configs.len() >= 20);
    let mut peaks = Vec::new();
    let mut counts = Vec::new();
    for req in &configs {
        let plan = MemoryPlan::new(req).unwrap();
        let (peak, buffers) = match req.precision {
            Precision::F32 => measure::<f32>(req),
            Precision::F64 => measure::<f64>(req),
        };
        assert_eq!(peak, plan.peak_bytes, "{req:?}");
        assert_eq!(buffers.len(), plan.buffers.len(), "{req:?}");
        for (m, p) in buffers.iter().zip(&plan.buffers) {
            assert_eq!(m, p, "same buffers, sizes and lifetimes: {req:?}");
        }
        peaks.push(plan.peak_bytes);
        counts.push(plan.buffers.len());
    }
    // Recomputation lowers the peak; dropout adds only short-lived buffers
    // (masks are regenerated from the counter-based RNG, never stored).
    let n = configs.len();
    let flags = &peaks[n - 8..];
    assert!(
        flags[4] < flags[0] && flags[6] < flags[2],
        "recompute lowers the peak: {flags:?}"
    );
    assert!(
        counts[n - 6] > counts[n - 8],
        "dropout allocates temporaries: {counts:?}"
    );
}

#[test]
fn persistent_buffers_match_a_count_by_hand() {
    let config = BertConfig::tiny(32, 2, 4, 64, 50);
    let req = PlanRequest {
        config: config.clone().into(),
        head: HeadConfig {
            num_labels: 2,
            hidden: vec![],
        },
        micro_batch: 2,
        seq_len: 8,
        precision: Precision::F32,
        recompute: false,
        optimizer: OptimizerKind::AdamW,
        class_weights: false,
        dropout: true,
        backend: Default::default(),
        matmul_precision: MatmulPrecision::Fp32,
        kernels: Kernels::Reference,
    };
    let plan = MemoryPlan::new(&req).unwrap();
    let (h, i, v, p, t) = (32, 64, 50, 64, 2);
    let per_layer = 4 * (h * h + h) + 2 * 2 * h + (h * i + i) + (i * h + h);
    let params = v * h + p * h + t * h + 2 * h + 2 * per_layer + (h * h + h) + (2 * h + 2);
    assert_eq!(plan.total_of(BufKind::Weight), 4 * params);
    assert_eq!(plan.total_of(BufKind::Grad), 4 * params);
    assert_eq!(plan.total_of(BufKind::OptimizerState), 8 * params);
    // Inputs: 5 id buffers of batch*seq or batch u32 values.
    assert_eq!(plan.total_of(BufKind::Input), 4 * (4 * 2 * 8 + 2));
    assert!(plan.peak_bytes > 16 * params);
}

/// A step that cannot run is an error naming what is wrong, from the plan,
/// the planned step and the per-micro-batch peaks alike: never a panic.
#[test]
fn requests_that_cannot_run_are_errors() {
    use trainer::memory::step_peaks;
    use trainer::model::deberta::DebertaConfig;

    let bert = BertConfig::tiny(32, 1, 4, 64, 50);
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let ok = PlanRequest::fp32_adamw(bert.clone(), &head, 2, 8);
    let deberta = PlanRequest::fp32_adamw(DebertaConfig::deberta_v3_base(), &head, 2, 8);
    let too_long = bert.max_sequence() + 1;
    let cases = [
        (
            PlanRequest {
                micro_batch: 0,
                ..ok.clone()
            },
            "micro_batch",
        ),
        (
            PlanRequest {
                seq_len: 0,
                ..ok.clone()
            },
            "seq_len",
        ),
        (
            PlanRequest {
                seq_len: too_long,
                ..ok.clone()
            },
            "seq_len",
        ),
        (
            PlanRequest {
                micro_batch: usize::MAX,
                seq_len: 2,
                ..ok.clone()
            },
            "overflow",
        ),
        (
            PlanRequest {
                config: ok.config.resized(1, 0),
                ..ok.clone()
            },
            "vocab_size",
        ),
        (
            PlanRequest {
                head: HeadConfig {
                    num_labels: 1,
                    hidden: vec![],
                },
                ..ok.clone()
            },
            "num_labels",
        ),
        (
            PlanRequest {
                head: HeadConfig {
                    num_labels: 2,
                    hidden: vec![4, 4, 4, 4],
                },
                ..ok.clone()
            },
            "hidden widths",
        ),
        (
            PlanRequest {
                head: HeadConfig {
                    num_labels: 2,
                    hidden: vec![8],
                },
                ..deberta.clone()
            },
            "deberta-v2 has no hidden head layers",
        ),
        (
            PlanRequest {
                seq_len: 513,
                ..deberta.clone()
            },
            "seq_len",
        ),
    ];
    for (req, expected) in cases {
        let message = MemoryPlan::new(&req).unwrap_err().to_string();
        assert!(message.contains(expected), "{message}");
        let be = CpuBackend::<f32>::new();
        let planned = run_planned_step(&be, &req).err().unwrap().to_string();
        assert_eq!(planned, message);
        assert_eq!(be.tracker().peak_bytes(), 0, "nothing allocated: {message}");
        assert!(step_peaks(&req, &[1]).is_err(), "{message}");
    }
    // One bad micro-batch among good ones.
    let e = step_peaks(&ok, &[1, 0, 2]).unwrap_err().to_string();
    assert!(e.contains("micro_batch"), "{e}");
    assert!(MemoryPlan::new(&ok).is_ok());
}

/// A config built by hand with sizes no encoder has (no heads, heads that
/// do not divide the width) is a named error from the plan and from the
/// model's constructor, not a division by zero.
#[test]
fn a_hand_built_config_without_a_shape_is_refused() {
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    for (config, field) in [
        (BertConfig::tiny(32, 2, 0, 64, 100), "num_attention_heads"),
        (BertConfig::tiny(30, 2, 4, 64, 100), "num_attention_heads"),
        (BertConfig::tiny(32, 0, 4, 64, 100), "num_hidden_layers"),
    ] {
        let e = trainer::memory::plan_peak(config.clone(), &head, 8, 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains(field), "{e}");
        let be = CpuBackend::<f32>::new();
        let e = trainer::model::BertClassifier::new_random(&be, &config, &head, 0)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(field), "{e}");
    }
}
