//! The models the comparison trains, each with its batch shape: the same
//! architecture, batch and step on both sides.

use trainer::config::BertConfig;
use trainer::memory::PlanRequest;
use trainer::model::deberta::DebertaConfig;
use trainer::model::{HeadConfig, ModelConfig};

/// Names `--models` accepts.
pub const NAMES: [&str; 6] = [
    "bert-base",
    "bert-base-s512",
    "minilm-l6",
    "deberta-v3-base",
    "tiny",
    "tiny-deberta",
];

/// One model and the batch it trains on.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub name: &'static str,
    pub config: ModelConfig,
    pub batch: usize,
    pub seq: usize,
}

impl Workload {
    /// BERT-base at sequence 128 and MiniLM-L6 at 64 (batch 32, the usual
    /// fine-tuning shapes), DeBERTa-v3-base at 128 (its disentangled
    /// attention runs unfused under the fused kernels, so its step shows
    /// that path's cost), and `tiny` / `tiny-deberta`, models small enough
    /// for a smoke run on a CPU.
    pub fn named(name: &str) -> Option<Workload> {
        let (name, config, batch, seq): (_, ModelConfig, _, _) = match name {
            "bert-base" => ("bert-base", BertConfig::bert_base().into(), 32, 128),
            "bert-base-s512" => ("bert-base-s512", BertConfig::bert_base().into(), 8, 512),
            "minilm-l6" => ("minilm-l6", BertConfig::minilm_l6().into(), 32, 64),
            "deberta-v3-base" => (
                "deberta-v3-base",
                ModelConfig::preset("deberta-v3-base")?,
                32,
                128,
            ),
            "tiny" => ("tiny", BertConfig::tiny(32, 2, 4, 64, 512).into(), 8, 32),
            "tiny-deberta" => ("tiny-deberta", tiny_deberta().into(), 8, 32),
            _ => return None,
        };
        Some(Workload {
            name,
            config,
            batch,
            seq,
        })
    }

    pub fn tokens_per_step(&self) -> usize {
        self.batch * self.seq
    }

    /// Training FLOPs of one step (the trainer's FLOPs model).
    pub fn train_flops_per_step(&self) -> f64 {
        self.config.flops_per_token(self.seq).train * self.tokens_per_step() as f64
    }

    /// The step: fp32 weights, AdamW, dropout on, a 2-class head.
    pub fn request(&self) -> PlanRequest {
        let head = HeadConfig {
            num_labels: 2,
            hidden: vec![],
        };
        PlanRequest::fp32_adamw(&self.config, &head, self.batch, self.seq)
    }

    /// What the reference script takes for this model.
    pub fn reference_spec(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "batch": self.batch,
            "seq": self.seq,
            "config": trainer::preset::hf_config_json(&self.config),
        })
    }
}

/// DeBERTa-v3's architecture (both relative-position terms, log buckets)
/// at a width a CPU trains in milliseconds.
fn tiny_deberta() -> DebertaConfig {
    DebertaConfig {
        vocab_size: 512,
        hidden_size: 32,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        intermediate_size: 64,
        max_position_embeddings: 64,
        position_buckets: 16,
        max_relative_positions: 64,
        ..DebertaConfig::deberta_v3_base()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_resolves_and_fits_its_position_table() {
        for name in NAMES {
            let w = Workload::named(name).unwrap();
            assert_eq!(w.name, name);
            assert!(w.seq <= w.config.max_sequence(), "{name}");
            w.request().check().unwrap();
        }
        assert!(Workload::named("gpt-2").is_none());
    }

    #[test]
    fn bert_base_trains_on_32_sequences_of_128() {
        let w = Workload::named("bert-base").unwrap();
        assert_eq!(w.tokens_per_step(), 4096);
        let per_token = ModelConfig::preset("bert-base")
            .unwrap()
            .flops_per_token(128)
            .train;
        assert_eq!(w.train_flops_per_step(), per_token * 4096.0);
    }

    #[test]
    fn the_reference_spec_carries_the_architecture() {
        let w = Workload::named("minilm-l6").unwrap();
        let spec = w.reference_spec();
        assert_eq!(spec["batch"], 32);
        assert_eq!(spec["seq"], 64);
        assert_eq!(spec["config"]["hidden_size"], 384);
        assert_eq!(spec["config"]["num_hidden_layers"], 6);
        let deberta = Workload::named("deberta-v3-base").unwrap().reference_spec();
        assert_eq!(deberta["config"]["model_type"], "deberta-v2");
        assert_eq!(
            deberta["config"]["pos_att_type"],
            serde_json::json!(["p2c", "c2p"])
        );
    }
}
