//! The plan of prediction (`memory::inference_peak`) against what the CPU
//! backend holds predicting the same batch with the same model: equal for
//! every family, batch and length, head and DeBERTa option; and refused
//! requests are errors naming the field.

mod common;

use std::path::Path;

use common::family_config;
use trainer::backend::cpu::CpuBackend;
use trainer::batch::Batch;
use trainer::memory::{MemTracker, PlanError, inference_peak};
use trainer::model::deberta::DebertaConfig;
use trainer::model::{HeadConfig, ModelConfig};

fn bert_family(model_type: &str) -> ModelConfig {
    family_config(model_type, 32, 2, 64, 50).into()
}

fn deberta(pos_att: &str) -> ModelConfig {
    let json = format!(
        r#"{{"model_type": "deberta-v2", "vocab_size": 40, "hidden_size": 24,
        "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 40,
        "max_position_embeddings": 32, "type_vocab_size": 0,
        "relative_attention": true, "position_buckets": 8,
        "max_relative_positions": -1, "share_att_key": true,
        "pos_att_type": {pos_att}, "norm_rel_ebd": "layer_norm",
        "position_biased_input": false}}"#
    );
    DebertaConfig::from_json(&json, Path::new("tiny.json"))
        .unwrap()
        .into()
}

/// Peak bytes the CPU backend holds building `config` and predicting one
/// batch of `b` x `s` (every token real).
fn measured(config: &ModelConfig, head: &HeadConfig, b: usize, s: usize) -> usize {
    let tracker = MemTracker::new(false);
    let be = CpuBackend::<f32>::with_tracker(tracker.clone());
    let model = config.build_random(&be, head, 3).unwrap();
    let batch = Batch {
        batch: b,
        seq: s,
        input_ids: (0..b * s)
            .map(|i| (i * 7 % config.vocab_size()) as u32)
            .collect(),
        token_type_ids: vec![0; b * s],
        attention_mask: vec![1; b * s],
        labels: vec![0; b],
    };
    let logits = model.logits(&be, &batch).unwrap();
    assert_eq!(logits.len(), b * head.num_labels);
    drop(model);
    assert_eq!(tracker.live_bytes(), 0, "every buffer is freed");
    tracker.peak_bytes()
}

#[test]
fn the_plan_of_prediction_is_what_the_cpu_backend_holds() {
    let mut configs: Vec<ModelConfig> = ["bert", "roberta", "xlm-roberta", "distilbert", "electra"]
        .into_iter()
        .map(bert_family)
        .collect();
    configs.extend(["[\"p2c\", \"c2p\"]", "[\"c2p\"]"].map(deberta));
    for (i, config) in configs.iter().enumerate() {
        // DeBERTa's head has no hidden layers.
        let hidden = match config {
            ModelConfig::Bert(_) => [vec![], vec![8], vec![12, 6]][i % 3].clone(),
            ModelConfig::Deberta(_) => vec![],
        };
        let head = HeadConfig {
            num_labels: 2 + i % 2,
            hidden,
        };
        for (b, s) in [(1, 5), (3, 17), (4, 32)] {
            let plan = inference_peak(config, &head, b, s).unwrap();
            assert_eq!(
                plan,
                measured(config, &head, b, s),
                "{} b{b} s{s}",
                config.model_type()
            );
        }
        // Longer sequences and larger batches hold more, the weights alike.
        let one = inference_peak(config, &head, 1, 8).unwrap();
        assert!(inference_peak(config, &head, 2, 8).unwrap() > one);
        assert!(inference_peak(config, &head, 1, 16).unwrap() > one);
    }
}

#[test]
fn a_request_that_cannot_run_names_its_field() {
    let config = bert_family("bert");
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let field = |r: Result<usize, PlanError>| match r {
        Err(PlanError::Request { field, .. }) => field,
        other => panic!("expected a refused request, got {other:?}"),
    };
    assert_eq!(field(inference_peak(&config, &head, 0, 8)), "micro_batch");
    let too_long = config.max_sequence() + 1;
    assert_eq!(
        field(inference_peak(&config, &head, 1, too_long)),
        "seq_len"
    );
    let one_label = HeadConfig {
        num_labels: 1,
        hidden: vec![],
    };
    assert_eq!(
        field(inference_peak(&config, &one_label, 1, 8)),
        "head.num_labels"
    );
}
