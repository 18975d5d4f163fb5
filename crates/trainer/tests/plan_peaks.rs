//! A step's peak at every micro-batch from a few plans: the five-plan
//! decomposition of the BERT-shaped families and DeBERTa's envelope equal
//! the full memory plan byte for byte; a step that cannot run is a
//! `PlanError` naming the field, never a panic.

use trainer::backend::{Kernels, MatmulPrecision};
use trainer::config::BertConfig;
use trainer::memory::{
    AffinePeak, MemoryPlan, OptimizerKind, PlanError, PlanPeaks, PlanRequest, Precision,
    StepBackend, plan_peak, step_curve, step_peaks,
};
use trainer::model::deberta::DebertaConfig;
use trainer::model::{HeadConfig, ModelConfig};

fn two_labels() -> HeadConfig {
    HeadConfig {
        num_labels: 2,
        hidden: vec![],
    }
}

/// Small models (fast to plan) shaped like the presets: a BERT, a RoBERTa
/// (positions from pad id + 1, one token type), a DistilBERT and an
/// ELECTRA (embedding projection).
fn small_models() -> Vec<BertConfig> {
    let bert = BertConfig {
        max_position_embeddings: 96,
        ..BertConfig::tiny(64, 5, 4, 256, 700)
    };
    let roberta = BertConfig {
        vocab_size: 900,
        max_position_embeddings: 98,
        type_vocab_size: 1,
        pad_token_id: 1,
        model_type: "roberta".into(),
        ..bert.clone()
    };
    let distilbert = BertConfig {
        model_type: "distilbert".into(),
        ..bert.clone()
    };
    let electra = BertConfig {
        model_type: "electra".into(),
        embedding_size: Some(32),
        ..bert.clone()
    };
    vec![bert, roberta, distilbert, electra]
}

/// Small DeBERTa shapes (fast to plan): relative attention with and
/// without buckets, token types or not.
fn small_debertas() -> Vec<DebertaConfig> {
    let v3 = DebertaConfig {
        vocab_size: 300,
        hidden_size: 48,
        num_hidden_layers: 3,
        num_attention_heads: 4,
        intermediate_size: 96,
        max_position_embeddings: 96,
        position_buckets: 16,
        max_relative_positions: 96,
        ..DebertaConfig::deberta_v3_base()
    };
    let unbucketed = DebertaConfig {
        position_buckets: -1,
        max_relative_positions: 24,
        type_vocab_size: 2,
        p2c: false,
        ..v3.clone()
    };
    vec![v3, unbucketed]
}

#[test]
fn plan_decomposition_matches_full_plans() {
    let head = two_labels();
    for config in small_models() {
        for seq in [16, 40, 96] {
            let fast = AffinePeak::from_reduced_plans(&config, &head, seq).unwrap();
            for micro in [1, 3, 8, 17] {
                assert_eq!(
                    fast.at(micro),
                    plan_peak(&config, &head, seq, micro).unwrap(),
                    "{} seq {seq} micro {micro}",
                    config.model_type
                );
            }
        }
    }
}

/// DeBERTa's peak is priced from the envelope of full plans, exact at every
/// micro-batch, where the reduced-plan decomposition is not.
#[test]
fn deberta_peak_curve_matches_full_plans() {
    for head in [
        two_labels(),
        HeadConfig {
            num_labels: 5,
            hidden: vec![],
        },
    ] {
        for config in small_debertas() {
            for seq in [9, 40, 96] {
                let request = PlanRequest::fp32_adamw(&config, &head, 1, seq);
                let curve = step_curve(&request).unwrap();
                let peaks = PlanPeaks::new(&config, &head, seq).unwrap();
                assert!(peaks.unpriced().is_none());
                for micro in [1, 2, 3, 4, 7, 16, 33] {
                    let full = plan_peak(&config, &head, seq, micro).unwrap();
                    assert_eq!(curve.at(micro), full, "seq {seq} micro {micro} {config:?}");
                    assert_eq!(peaks.peak(micro).unwrap(), full, "seq {seq} micro {micro}");
                }
            }
        }
    }
}

#[test]
fn plan_peaks_cache_matches_plan_peak() {
    let config = small_models().remove(0);
    let head = two_labels();
    let peaks = PlanPeaks::new(config.clone(), &head, 32).unwrap();
    let planned = plan_peak(&config, &head, 32, 4).unwrap();
    assert_eq!(peaks.peak(4).unwrap(), planned);
    assert_eq!(peaks.peak(4).unwrap(), planned);
    assert!(peaks.peak(8).unwrap() > planned);
}

#[test]
fn plan_decomposition_is_exact_on_a_grid_of_small_shapes() {
    for (hidden, heads, vocab, layers) in [
        (32, 2, 20, 1),
        (32, 4, 300, 3),
        (48, 3, 64, 6),
        (64, 4, 130, 2),
    ] {
        for roberta in [false, true] {
            let mut config = BertConfig {
                max_position_embeddings: 70,
                ..BertConfig::tiny(hidden, layers, heads, 4 * hidden, vocab)
            };
            if roberta {
                config.model_type = "roberta".into();
                config.pad_token_id = 1;
                config.type_vocab_size = 1;
                config.max_position_embeddings = 72;
            }
            for head in [
                two_labels(),
                HeadConfig {
                    num_labels: 5,
                    hidden: vec![16, 8],
                },
            ] {
                for seq in [8, 33, 64] {
                    let fast = AffinePeak::from_reduced_plans(&config, &head, seq).unwrap();
                    for micro in [1, 2, 5, 16] {
                        assert_eq!(
                            fast.at(micro),
                            plan_peak(&config, &head, seq, micro).unwrap(),
                            "h={hidden} L={layers} V={vocab} roberta={roberta} head={head:?} seq={seq} micro={micro}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn plan_decomposition_holds_for_other_steps() {
    let config = small_models().remove(1);
    let head = HeadConfig {
        num_labels: 3,
        hidden: vec![24],
    };
    for (precision, recompute, optimizer, class_weights) in [
        (Precision::F64, false, OptimizerKind::AdamW, false),
        (Precision::F32, true, OptimizerKind::AdamW, false),
        (Precision::F64, true, OptimizerKind::Sgd, true),
    ] {
        let request = |micro| PlanRequest {
            precision,
            recompute,
            optimizer,
            class_weights,
            ..PlanRequest::fp32_adamw(&config, &head, micro, 40)
        };
        let peaks = PlanPeaks::from_request(request(1)).unwrap();
        for micro in [1, 4, 11] {
            assert_eq!(
                peaks.peak(micro).unwrap(),
                MemoryPlan::new(&request(micro)).unwrap().peak_bytes as u64,
                "{precision:?} recompute={recompute} {optimizer:?} micro {micro}"
            );
        }
    }
}

/// The fused step (its word-embedding gradient row-sparse: a row per
/// token, so more rows than the vocabulary at the largest micro-batches
/// here) is priced exactly too, BERT-shaped and DeBERTa, fp32 and bf16
/// products, on the CUDA backend's buffers.
#[test]
fn plan_peaks_price_the_fused_step_exactly() {
    let head = two_labels();
    let configs: Vec<ModelConfig> = vec![
        small_models().remove(0).into(),
        small_models().remove(3).into(),
        small_debertas().remove(0).into(),
    ];
    for config in configs {
        for matmul_precision in [MatmulPrecision::Fp32, MatmulPrecision::Bf16] {
            for recompute in [false, true] {
                let request = |micro| PlanRequest {
                    kernels: Kernels::Fused,
                    matmul_precision,
                    recompute,
                    backend: StepBackend::Cuda,
                    ..PlanRequest::fp32_adamw(config.clone(), &head, micro, 40)
                };
                let peaks = PlanPeaks::from_request(request(1)).unwrap();
                assert!(peaks.unpriced().is_none());
                // Largest first: one model planned for all of them.
                let micros = [33, 1, 16, 3];
                let one_model = step_peaks(&request(1), &micros).unwrap();
                for (micro, one_model) in micros.into_iter().zip(one_model) {
                    let full = MemoryPlan::new(&request(micro)).unwrap().peak_bytes;
                    let what = format!(
                        "{matmul_precision:?} recompute={recompute} micro {micro} {config:?}"
                    );
                    assert_eq!(peaks.peak(micro).unwrap(), full as u64, "{what}");
                    assert_eq!(one_model, full, "step_peaks: {what}");
                }
            }
        }
    }
}

/// The field a plan error names.
fn field(e: PlanError) -> &'static str {
    match e {
        PlanError::Request { field, .. } => field,
        other => panic!("expected a request error naming a field, got: {other}"),
    }
}

#[test]
fn a_step_that_cannot_run_is_an_error_naming_the_field() {
    let bert = small_models().remove(0);
    let head = two_labels();
    let no_vocab = BertConfig {
        vocab_size: 0,
        ..bert.clone()
    };
    let one_label = HeadConfig {
        num_labels: 1,
        hidden: vec![],
    };
    assert_eq!(
        field(plan_peak(&bert, &head, 16, 0).unwrap_err()),
        "micro_batch"
    );
    assert_eq!(field(plan_peak(&bert, &head, 0, 4).unwrap_err()), "seq_len");
    assert_eq!(
        field(plan_peak(&bert, &head, 97, 4).unwrap_err()),
        "seq_len"
    );
    assert_eq!(
        field(plan_peak(&bert, &head, 16, usize::MAX).unwrap_err()),
        "micro_batch"
    );
    assert_eq!(
        field(plan_peak(&no_vocab, &head, 16, 4).unwrap_err()),
        "config.vocab_size"
    );
    assert_eq!(
        field(plan_peak(&bert, &one_label, 16, 4).unwrap_err()),
        "head.num_labels"
    );
    // The reduced plans replace the vocabulary, so the decomposition checks
    // the request itself.
    assert_eq!(
        field(AffinePeak::from_reduced_plans(&no_vocab, &head, 16).unwrap_err()),
        "config.vocab_size"
    );
    assert_eq!(
        field(PlanPeaks::new(&no_vocab, &head, 16).unwrap_err()),
        "config.vocab_size"
    );
    let deberta = small_debertas().remove(0);
    assert_eq!(
        field(PlanPeaks::new(&deberta, &head, 97).unwrap_err()),
        "seq_len"
    );
    let peaks = PlanPeaks::new(&bert, &head, 16).unwrap();
    assert_eq!(field(peaks.peak(0).unwrap_err()), "micro_batch");
    assert_eq!(field(peaks.peak(usize::MAX).unwrap_err()), "micro_batch");
}

#[test]
fn a_deberta_step_without_a_vocabulary_is_an_error_naming_the_field() {
    let config = DebertaConfig {
        vocab_size: 0,
        ..small_debertas().remove(0)
    };
    let req = PlanRequest::fp32_adamw(config, &two_labels(), 3, 16);
    let be = trainer::backend::plan::PlanBackend::counting(4);
    let e = trainer::memory::plan::run_planned_step(&be, &req)
        .err()
        .unwrap();
    assert!(e.to_string().contains("config.vocab_size"), "{e}");
    assert_eq!(field(e), "config.vocab_size");
    assert_eq!(be.tracker().peak_bytes(), 0, "nothing allocated");
    assert_eq!(
        field(MemoryPlan::new(&req).unwrap_err()),
        "config.vocab_size"
    );
}

#[test]
fn affine_peaks_clamp_instead_of_wrapping() {
    let falling = AffinePeak {
        fixed: 10,
        per_row: -4,
    };
    assert_eq!((falling.at(2), falling.at(3)), (2, 0));
    let huge = AffinePeak {
        fixed: i128::MAX,
        per_row: i128::MAX,
    };
    assert_eq!(huge.at(usize::MAX), u64::MAX);
}
