//! The floating-point work of a classifier, per token: one count shared by
//! the tuning simulator (how long a trial takes) and the throughput
//! benchmark (model FLOPs utilisation, MFU), so the two never disagree.
//!
//! Only matrix products are counted, at 2 FLOPs per multiply-add: they are
//! nearly all of a step's arithmetic, and they are what a device's peak
//! FLOP/s figure measures. Elementwise work (LayerNorm, softmax, GELU,
//! dropout, AdamW) is left out, as in the usual MFU definition (PaLM's
//! `6N + 12 L s h`). The pooler and classifier are counted for every token
//! although they read only the first one; for BERT-base that overstates the
//! work by under 1%.

use super::ModelConfig;

/// FLOPs per token of a classifier at one sequence length.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenFlops {
    /// One training step: forward and backward.
    pub train: f64,
    /// Evaluation: forward only.
    pub eval: f64,
}

impl ModelConfig {
    /// Hidden width, intermediate width and layers of either family.
    fn widths(&self) -> (f64, f64, f64) {
        let (h, i, l) = match self {
            ModelConfig::Bert(c) => (c.hidden_size, c.intermediate_size, c.num_hidden_layers),
            ModelConfig::Deberta(c) => (c.hidden_size, c.intermediate_size, c.num_hidden_layers),
        };
        (h as f64, i as f64, l as f64)
    }

    /// Parameters of the encoder layers, pooler and a 2-class classifier:
    /// the ones that take part in matrix products, and the layers' LayerNorm
    /// parameters beside them (embedding rows are looked up, not
    /// multiplied). DeBERTa's relative positions go through the layers' own
    /// key and query projections (`share_att_key`), so the count has the
    /// same shape.
    pub fn matmul_params(&self) -> f64 {
        let (h, i, layers) = self.widths();
        let layer = 4.0 * (h * h + h) + (h * i + i) + (i * h + h) + 4.0 * h;
        layers * layer + (h * h + h) + (2.0 * h + 2.0)
    }

    /// FLOPs per token of training and of evaluation at `seq_len` tokens
    /// per sequence. Training is 6 per parameter (2 forward, 4 backward)
    /// plus the attention products, whose backward costs twice their
    /// forward. Forward attention per layer is QK^T and PV, `2 s h` each;
    /// DeBERTa adds each query against the `2 span` projected relative
    /// positions and each key against them (c2p, p2c), `4 span h` each.
    /// Projecting the relative positions themselves (`8 span h^2` per layer
    /// and micro-step, whatever its rows) is a per-step cost, not a
    /// per-token one, and is left out.
    pub fn flops_per_token(&self, seq_len: usize) -> TokenFlops {
        let (h, _, layers) = self.widths();
        let n = self.matmul_params();
        let relative = match self {
            ModelConfig::Bert(_) => 0.0,
            ModelConfig::Deberta(d) => {
                let kinds = d.c2p as usize + d.p2c as usize;
                4.0 * kinds as f64 * d.span() as f64 * h
            }
        };
        let attention = layers * (4.0 * seq_len as f64 * h + relative);
        TokenFlops {
            train: 6.0 * n + 3.0 * attention,
            eval: 2.0 * n + attention,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BertConfig;
    use crate::model::deberta::DebertaConfig;

    /// One layer, hidden 4, intermediate 8, counted by hand.
    #[test]
    fn a_tiny_bert_matches_a_hand_count() {
        let c = ModelConfig::Bert(BertConfig::tiny(4, 1, 2, 8, 10));
        // Layer: Q, K, V, attention output 4 x (16 + 4) = 80; intermediate
        // 32 + 8 = 40; output 32 + 4 = 36; two LayerNorms 2 x 8 = 16.
        // Pooler 16 + 4 = 20; classifier 8 + 2 = 10.
        assert_eq!(c.matmul_params(), 80.0 + 40.0 + 36.0 + 16.0 + 20.0 + 10.0);
        // Attention at 8 tokens: QK^T and PV, 2 x 8 x 4 = 64 each.
        let f = c.flops_per_token(8);
        assert_eq!(f.eval, 2.0 * 202.0 + 128.0);
        assert_eq!(f.train, 6.0 * 202.0 + 3.0 * 128.0);
    }

    /// The same tiny shape as DeBERTa with c2p and p2c over 3 buckets: each
    /// adds a query (or key) against 2 x 3 positions, 2 x 6 x 4 = 48 FLOPs.
    #[test]
    fn a_tiny_deberta_adds_its_relative_attention() {
        let c = ModelConfig::Deberta(DebertaConfig {
            hidden_size: 4,
            intermediate_size: 8,
            num_hidden_layers: 1,
            num_attention_heads: 2,
            position_buckets: 3,
            c2p: true,
            p2c: true,
            ..DebertaConfig::deberta_v3_base()
        });
        assert_eq!(c.matmul_params(), 202.0);
        let f = c.flops_per_token(8);
        assert_eq!(f.eval, 2.0 * 202.0 + 128.0 + 96.0);
        assert_eq!(f.train, 6.0 * 202.0 + 3.0 * (128.0 + 96.0));
    }

    /// BERT-base's matmul parameters and its embeddings (word, position,
    /// token type, LayerNorm) add up to HF's published 109,482,240 of
    /// `BertModel`, plus the 2-class classifier's 1,538.
    #[test]
    fn bert_base_counts_every_parameter_outside_the_embeddings() {
        let c = ModelConfig::preset("bert-base").unwrap();
        let h = 768.0;
        let embeddings = (30522.0 + 512.0 + 2.0) * h + 2.0 * h;
        assert_eq!(c.matmul_params() + embeddings, 109_482_240.0 + 1_538.0);
    }

    #[test]
    fn longer_sequences_cost_more_attention_per_token() {
        let c = ModelConfig::preset("bert-base").unwrap();
        let (short, long) = (c.flops_per_token(64), c.flops_per_token(128));
        // 12 layers x 4 x 64 more tokens x 768, three times over in training.
        assert_eq!(long.eval - short.eval, 12.0 * 4.0 * 64.0 * 768.0);
        assert_eq!(long.train - short.train, 3.0 * (long.eval - short.eval));
    }
}
