//! DeBERTa's memory plan: the allocation-only backend's record of a training
//! step equals the CPU backend's, buffer by buffer, for every option of the
//! architecture, recomputed or not; and the DeBERTa-v3 presets have their
//! published sizes.

use std::path::Path;

use trainer::backend::Kernels;
use trainer::backend::cpu::CpuBackend;
use trainer::backend::plan::PlanBackend;
use trainer::float::Float;
use trainer::memory::plan::run_planned_step;
use trainer::memory::{MemTracker, MemoryPlan, PlanRequest, Precision, TrackedBuffer};
use trainer::model::HeadConfig;
use trainer::model::deberta::{DebertaClassifier, DebertaConfig};

fn tiny(variant: usize) -> DebertaConfig {
    let pos_att = ["[\"p2c\", \"c2p\"]", "[\"c2p\"]", "\"p2c\"", "[]"][variant % 4];
    let json = format!(
        r#"{{"model_type": "deberta-v2", "vocab_size": 40, "hidden_size": 24,
        "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 40,
        "max_position_embeddings": 32, "type_vocab_size": {types},
        "relative_attention": true, "position_buckets": {buckets},
        "max_relative_positions": {maxrel}, "share_att_key": true,
        "pos_att_type": {pos_att}, "norm_rel_ebd": "{norm}",
        "position_biased_input": {biased}}}"#,
        types = variant % 3,
        buckets = [4, -1, 8][variant % 3],
        maxrel = [16, 6, -1][variant % 3],
        norm = ["layer_norm", "none"][variant % 2],
        biased = variant % 2 == 1,
    );
    DebertaConfig::from_json(&json, Path::new("tiny.json")).unwrap()
}

/// One training step of `c` at `b` x `s` with three labels.
fn request(c: &DebertaConfig, b: usize, s: usize, dropout: bool, recompute: bool) -> PlanRequest {
    let head = HeadConfig {
        num_labels: 3,
        hidden: vec![],
    };
    PlanRequest {
        dropout,
        recompute,
        ..PlanRequest::fp32_adamw(c.clone(), &head, b, s)
    }
}

/// The CPU backend's record of `req`'s step, every buffer freed after.
fn cpu_record<T: Float>(req: &PlanRequest) -> Vec<TrackedBuffer> {
    let tracker = MemTracker::new(true);
    let be =
        CpuBackend::<T>::with_tracker(tracker.clone()).for_step(req.matmul_precision, req.kernels);
    drop(run_planned_step(&be, req).unwrap());
    assert_eq!(tracker.live_bytes(), 0, "every buffer is freed");
    tracker.buffers()
}

fn assert_plan_is(req: &PlanRequest, measured: &[TrackedBuffer], what: &str) {
    let plan = MemoryPlan::new(req).unwrap();
    assert_eq!(plan.buffers.len(), measured.len(), "{what}: buffer count");
    for (p, m) in plan.buffers.iter().zip(measured) {
        assert_eq!(p, m, "{what}");
    }
    let peak = measured.iter().map(|m| m.live_after_alloc).max().unwrap();
    assert_eq!(plan.peak_bytes, peak, "{what}");
}

#[test]
fn plan_equals_the_cpu_backend_buffer_by_buffer() {
    for variant in 0..8 {
        let c = tiny(variant);
        let (b, s) = [(1, 5), (3, 9), (2, 17), (4, 12)][variant % 4];
        let precision = [Precision::F32, Precision::F64][variant % 2];
        let req = PlanRequest {
            precision,
            ..request(&c, b, s, variant % 3 != 2, variant % 4 == 1)
        };
        let measured = match precision {
            Precision::F32 => cpu_record::<f32>(&req),
            Precision::F64 => cpu_record::<f64>(&req),
        };
        assert_plan_is(&req, &measured, &format!("variant {variant}"));
    }
}

fn parameters(c: &DebertaConfig) -> usize {
    let be = PlanBackend::counting(4);
    let model = DebertaClassifier::new_random(&be, c, 2, 0).unwrap();
    model.params.info.iter().map(|p| p.numel()).sum()
}

#[test]
fn v3_presets_have_their_published_sizes_and_plans() {
    // microsoft/deberta-v3-base: 86M backbone + 98M embedding parameters;
    // -large: 304M + 131M (the model cards). Plus pooler and classifier.
    let base = parameters(&DebertaConfig::deberta_v3_base());
    let large = parameters(&DebertaConfig::deberta_v3_large());
    assert!((184_000_000..185_000_000).contains(&base), "base {base}");
    assert!((434_000_000..436_000_000).contains(&large), "large {large}");
    let peak = |c: &DebertaConfig, b: usize| {
        let head = HeadConfig {
            num_labels: 2,
            hidden: vec![],
        };
        let req = PlanRequest::fp32_adamw(c.clone(), &head, b, 128);
        MemoryPlan::new(&req).unwrap().peak_bytes
    };
    let (base8, base16) = (
        peak(&DebertaConfig::deberta_v3_base(), 8),
        peak(&DebertaConfig::deberta_v3_base(), 16),
    );
    let large8 = peak(&DebertaConfig::deberta_v3_large(), 8);
    // Weights, gradients and AdamW's two moments: 16 bytes a parameter.
    assert!(base8 > 16 * base && base16 > base8 && large8 > 16 * large);
    eprintln!(
        "deberta-v3 plan peaks at seq 128, f32: base b8 {base8}, b16 {base16}, large b8 {large8}"
    );
}

/// microsoft/deberta-v3-base's and -large's `config.json` as published
/// (fields the tokenizer alone reads left out).
fn published_v3_config(hidden: usize, layers: usize, heads: usize, intermediate: usize) -> String {
    format!(
        r#"{{"model_type": "deberta-v2", "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": {hidden},
        "initializer_range": 0.02, "intermediate_size": {intermediate},
        "max_position_embeddings": 512, "relative_attention": true,
        "position_buckets": 256, "norm_rel_ebd": "layer_norm", "share_att_key": true,
        "pos_att_type": "p2c|c2p", "layer_norm_eps": 1e-7,
        "max_relative_positions": -1, "position_biased_input": false,
        "num_attention_heads": {heads}, "num_hidden_layers": {layers},
        "type_vocab_size": 0, "vocab_size": 128100}}"#
    )
}

#[test]
fn v3_presets_equal_their_published_configs() {
    let read = |json: String| DebertaConfig::from_json(&json, Path::new("config.json")).unwrap();
    let base = read(published_v3_config(768, 12, 12, 3072));
    let large = read(published_v3_config(1024, 24, 16, 4096));
    assert_eq!(base, DebertaConfig::deberta_v3_base());
    assert_eq!(large, DebertaConfig::deberta_v3_large());
    // The list form of `pos_att_type` reads the same.
    let listed =
        published_v3_config(768, 12, 12, 3072).replace(r#""p2c|c2p""#, r#"["p2c", "c2p"]"#);
    assert_eq!(read(listed), base);
    // `max_relative_positions = -1` means `max_position_embeddings`; the
    // 256 buckets are the span.
    assert_eq!((base.max_relative_positions, base.span()), (512, 256));
    assert!(base.c2p && base.p2c && base.norm_rel_ebd && !base.position_biased_input);
    assert_eq!((base.type_vocab_size, base.pad_token_id), (0, 0));
}

#[test]
fn bad_configs_name_the_field() {
    let bad = |json: &str, field: &str| {
        let err = DebertaConfig::from_json(json, Path::new("m/config.json")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(field) && text.contains("m/config.json"),
            "{text}"
        );
    };
    let base = r#""vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 8, "relative_attention": true,
        "share_att_key": true"#;
    bad(
        &format!("{{{base}, \"model_type\": \"bert\"}}"),
        "model_type",
    );
    bad(
        &format!("{{{base}, \"model_type\": \"deberta-v2\", \"pos_att_type\": [\"p2p\"]}}"),
        "pos_att_type",
    );
    bad(
        &format!("{{{base}, \"model_type\": \"deberta-v2\", \"hidden_act\": \"relu\"}}"),
        "hidden_act",
    );
    bad(
        &format!("{{{base}, \"model_type\": \"deberta-v2\", \"conv_kernel_size\": 3}}"),
        "conv_kernel_size",
    );
    bad("{\"model_type\": \"deberta-v2\"}", "config.json");
    // Values a model cannot train with, refused before anything is built.
    for (field, value) in [
        ("hidden_dropout_prob", "1.0"),
        ("attention_probs_dropout_prob", "-0.1"),
        ("pooler_dropout", "2.5"),
        ("cls_dropout", "-3"),
        ("layer_norm_eps", "-1.0"),
        ("layer_norm_eps", "0"),
        ("position_buckets", "1000000000000000"),
        ("max_relative_positions", "1000000000000000"),
        ("max_position_embeddings", "3"),
    ] {
        bad(
            &format!("{{{base}, \"model_type\": \"deberta-v2\", \"{field}\": {value}}}"),
            &format!("`{field}`"),
        );
    }
}

/// The same with the fused step (16-bit activations with 16-bit products):
/// DeBERTa's attention stays unfused, its layer body and optimiser fused.
#[test]
fn fused_plan_equals_the_cpu_backend_buffer_by_buffer() {
    use trainer::backend::MatmulPrecision;
    let precisions = [
        MatmulPrecision::Bf16,
        MatmulPrecision::Fp32,
        MatmulPrecision::Fp16,
    ];
    for variant in 0..4 {
        let c = tiny(variant);
        let (b, s) = [(1, 5), (3, 9), (2, 17), (4, 12)][variant];
        let req = request(&c, b, s, variant != 2, variant == 3)
            .with_step(precisions[variant % 3], Kernels::Fused);
        let measured = cpu_record::<f32>(&req);
        assert_plan_is(&req, &measured, &format!("fused variant {variant}"));
    }
}

/// A size of 0 in a DeBERTa config.json is refused as it is read (a
/// forward pass would divide by it), naming the field.
#[test]
fn a_zero_size_in_a_deberta_config_is_refused() {
    for field in ["hidden_size", "intermediate_size", "num_hidden_layers"] {
        let json = r#"{"model_type": "deberta-v2", "vocab_size": 40, "hidden_size": 24,
            "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 40,
            "max_position_embeddings": 32, "type_vocab_size": 0,
            "relative_attention": true, "share_att_key": true}"#
            .replace(
                &format!("\"{field}\": "),
                &format!("\"{field}\": 0, \"x_{field}\": "),
            );
        let e = DebertaConfig::from_json(&json, Path::new("zero.json"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(field) && e.contains("must be positive"), "{e}");
    }
}
