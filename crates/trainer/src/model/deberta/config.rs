//! `DebertaConfig`: a `deberta-v2` `config.json`, read and validated.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::model::device_batch::Limits;
use crate::tokenize::MIN_MAX_LENGTH;
use crate::weights::WeightsError;

/// `pos_att_type`: a list (`["p2c", "c2p"]`) or HF's older `"p2c|c2p"`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
enum PosAttType {
    List(Vec<String>),
    Joined(String),
}

impl PosAttType {
    fn kinds(&self) -> Vec<String> {
        match self {
            PosAttType::List(v) => v.iter().map(|s| s.trim().to_lowercase()).collect(),
            PosAttType::Joined(s) => s
                .split('|')
                .map(|s| s.trim().to_lowercase())
                .filter(|s| !s.is_empty())
                .collect(),
        }
    }
}

/// The fields of a `deberta-v2` `config.json` this model reads (HF's
/// defaults where a field is absent).
#[derive(Clone, Debug, PartialEq, Deserialize)]
struct RawConfig {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    #[serde(default = "gelu")]
    hidden_act: String,
    #[serde(default = "p01")]
    hidden_dropout_prob: f64,
    #[serde(default = "p01")]
    attention_probs_dropout_prob: f64,
    #[serde(default = "max_pos")]
    max_position_embeddings: usize,
    #[serde(default)]
    type_vocab_size: usize,
    #[serde(default = "eps")]
    layer_norm_eps: f64,
    #[serde(default = "init_range")]
    initializer_range: f64,
    #[serde(default)]
    relative_attention: bool,
    #[serde(default = "minus_one")]
    max_relative_positions: i64,
    #[serde(default = "minus_one")]
    position_buckets: i64,
    #[serde(default)]
    share_att_key: bool,
    pos_att_type: Option<PosAttType>,
    #[serde(default = "none")]
    norm_rel_ebd: String,
    #[serde(default = "yes")]
    position_biased_input: bool,
    pooler_hidden_size: Option<usize>,
    #[serde(default)]
    pooler_dropout: f64,
    #[serde(default = "gelu")]
    pooler_hidden_act: String,
    cls_dropout: Option<f64>,
    #[serde(default)]
    pad_token_id: Option<u32>,
    embedding_size: Option<usize>,
    #[serde(default)]
    conv_kernel_size: usize,
    #[serde(default = "model_type")]
    model_type: String,
}

fn gelu() -> String {
    "gelu".into()
}
fn none() -> String {
    "none".into()
}
fn model_type() -> String {
    "deberta-v2".into()
}
fn p01() -> f64 {
    0.1
}
fn eps() -> f64 {
    1e-7
}
fn init_range() -> f64 {
    0.02
}
fn max_pos() -> usize {
    512
}
fn minus_one() -> i64 {
    -1
}
fn yes() -> bool {
    true
}

/// Why a DeBERTa model could not be built or loaded. Every variant names the
/// file or field at fault.
#[derive(Debug, thiserror::Error)]
pub enum DebertaError {
    /// `config.json` could not be read.
    #[error("cannot read model config {}: {source}", path.display())]
    Read {
        /// The config file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `config.json` is not JSON with the required fields of the expected
    /// types.
    #[error("model config {}: {source}", path.display())]
    Parse {
        /// The config file.
        path: PathBuf,
        /// serde_json's own message.
        source: serde_json::Error,
    },
    /// A field whose value is invalid or that this model does not support.
    #[error("model config {}: field `{field}`: {problem}", path.display())]
    Unsupported {
        /// The config file.
        path: PathBuf,
        /// The field at fault, as `config.json` spells it.
        field: &'static str,
        /// What is wrong with its value.
        problem: String,
    },
    /// `model.safetensors` could not be read.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// A size beyond the limits (`crate::config::SIZE_LIMITS`).
    #[error(transparent)]
    Size(#[from] crate::config::ConfigError),
    /// The checkpoint lacks tensors outside the head, or holds some in
    /// other shapes; no parameter was changed.
    #[error(
        "{}: checkpoint does not fit the model: missing {missing:?}; shape mismatches {mismatched:?}",
        path.display()
    )]
    Mismatch {
        /// The checkpoint file.
        path: PathBuf,
        /// Embedding and encoder parameters (HF names) the checkpoint
        /// lacks.
        missing: Vec<String>,
        /// `name: checkpoint [..] vs model [..]` for each tensor of another
        /// shape than the config implies (`classifier.*` excepted).
        mismatched: Vec<String>,
    },
    /// A head of fewer than 2 labels was asked for (the count given).
    #[error("classifier head: num_labels {0} must be at least 2")]
    Labels(usize),
}

/// A DeBERTa-v2/v3 architecture, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct DebertaConfig {
    /// Rows of the word-embedding table.
    pub vocab_size: usize,
    /// Width of the hidden states, embeddings and pooler.
    pub hidden_size: usize,
    /// Number of encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer; divides `hidden_size`.
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer between its two dense layers.
    pub intermediate_size: usize,
    /// The longest sequence, in tokens (default 512), and the rows of the
    /// absolute position table where `position_biased_input`.
    pub max_position_embeddings: usize,
    /// 0: no token-type embeddings (DeBERTa-v3).
    pub type_vocab_size: usize,
    /// Epsilon of every LayerNorm (default `1e-7`), positive and finite.
    pub layer_norm_eps: f64,
    /// Standard deviation of HF's normal initialisation of weight matrices
    /// and embeddings (what a head missing from a checkpoint gets).
    pub initializer_range: f64,
    /// Dropout on the embeddings, the relative embeddings and each layer's
    /// attention and feed-forward outputs (default 0.1), in `[0, 1)`.
    pub hidden_dropout_prob: f64,
    /// Dropout on the attention probabilities (default 0.1), in `[0, 1)`.
    pub attention_probs_dropout_prob: f64,
    /// Dropout on the first token before the pooler's dense layer
    /// (default 0), in `[0, 1)`.
    pub pooler_dropout: f64,
    /// Dropout before the classifier (`cls_dropout`, else the hidden one).
    pub cls_dropout: f64,
    /// `position_buckets` (`<= 0`: distances are not bucketed).
    pub position_buckets: i64,
    /// `max_relative_positions`, with HF's `< 1` meaning
    /// `max_position_embeddings` resolved.
    pub max_relative_positions: i64,
    /// Scores add the content-to-position term (`pos_att_type` lists
    /// `c2p`).
    pub c2p: bool,
    /// Scores add the position-to-content term (`pos_att_type` lists
    /// `p2c`).
    pub p2c: bool,
    /// `norm_rel_ebd` contains `layer_norm`: `encoder.LayerNorm` normalises
    /// the relative embeddings.
    pub norm_rel_ebd: bool,
    /// Absolute position embeddings are added to the input embeddings
    /// (default true; false for DeBERTa-v3).
    pub position_biased_input: bool,
    /// The word-embedding row the random initialisation zeroes (default
    /// 0).
    pub pad_token_id: u32,
}

impl DebertaConfig {
    /// Reads and validates a `config.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, DebertaError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| DebertaError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_json(&text, path)
    }

    /// `path` names the file in errors.
    pub fn from_json(text: &str, path: &Path) -> Result<Self, DebertaError> {
        let raw: RawConfig = serde_json::from_str(text).map_err(|source| DebertaError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |field: &'static str, problem: String| DebertaError::Unsupported {
            path: path.to_path_buf(),
            field,
            problem,
        };
        for (field, v) in [
            ("hidden_size", raw.hidden_size),
            ("num_hidden_layers", raw.num_hidden_layers),
            ("num_attention_heads", raw.num_attention_heads),
            ("intermediate_size", raw.intermediate_size),
            ("vocab_size", raw.vocab_size),
            ("max_position_embeddings", raw.max_position_embeddings),
            ("type_vocab_size", raw.type_vocab_size),
        ] {
            crate::config::check_size(path, field, v as u64)?;
            // DeBERTa-v3 has no token types; every other size divides or
            // is divided by something.
            if v == 0 && field != "type_vocab_size" {
                return Err(bad(field, "must be positive".into()));
            }
        }
        if raw.model_type != "deberta-v2" {
            return Err(bad(
                "model_type",
                format!("{:?} is not \"deberta-v2\"", raw.model_type),
            ));
        }
        if !raw.relative_attention {
            return Err(bad("relative_attention", "must be true".into()));
        }
        if !raw.share_att_key {
            return Err(bad("share_att_key", "only true is supported".into()));
        }
        for (field, act) in [
            ("hidden_act", &raw.hidden_act),
            ("pooler_hidden_act", &raw.pooler_hidden_act),
        ] {
            if act != "gelu" {
                return Err(bad(field, format!("{act:?}: only \"gelu\" is supported")));
            }
        }
        if raw.embedding_size.is_some_and(|e| e != raw.hidden_size) {
            return Err(bad("embedding_size", "must equal hidden_size".into()));
        }
        if raw.conv_kernel_size != 0 {
            return Err(bad(
                "conv_kernel_size",
                "convolution layers are not supported".into(),
            ));
        }
        if raw.pooler_hidden_size.is_some_and(|p| p != raw.hidden_size) {
            return Err(bad("pooler_hidden_size", "must equal hidden_size".into()));
        }
        if raw.num_attention_heads == 0 || !raw.hidden_size.is_multiple_of(raw.num_attention_heads)
        {
            return Err(bad(
                "num_attention_heads",
                format!(
                    "{} does not divide hidden_size {}",
                    raw.num_attention_heads, raw.hidden_size
                ),
            ));
        }
        let kinds = raw
            .pos_att_type
            .as_ref()
            .map(PosAttType::kinds)
            .unwrap_or_default();
        if let Some(k) = kinds.iter().find(|k| *k != "c2p" && *k != "p2c") {
            return Err(bad(
                "pos_att_type",
                format!("{k:?}: only \"c2p\" and \"p2c\""),
            ));
        }
        // Distances of at most these many positions have embeddings of
        // their own (`<= 0` / `< 1`: the other field, or the positions).
        for (field, v) in [
            ("position_buckets", raw.position_buckets),
            ("max_relative_positions", raw.max_relative_positions),
        ] {
            crate::config::check_size(path, field, v.max(0) as u64)?;
        }
        if raw.max_position_embeddings < MIN_MAX_LENGTH {
            return Err(bad(
                "max_position_embeddings",
                format!(
                    "{} positions are fewer than the {MIN_MAX_LENGTH} tokens of the shortest \
                     sequence the trainer takes",
                    raw.max_position_embeddings
                ),
            ));
        }
        let cls_dropout = raw.cls_dropout.unwrap_or(raw.hidden_dropout_prob);
        for (field, p) in [
            ("hidden_dropout_prob", raw.hidden_dropout_prob),
            (
                "attention_probs_dropout_prob",
                raw.attention_probs_dropout_prob,
            ),
            ("pooler_dropout", raw.pooler_dropout),
            ("cls_dropout", cls_dropout),
        ] {
            if !(0.0..1.0).contains(&p) {
                return Err(bad(field, format!("{p} is not in [0, 1)")));
            }
        }
        if !(raw.layer_norm_eps > 0.0 && raw.layer_norm_eps.is_finite()) {
            return Err(bad(
                "layer_norm_eps",
                format!("{} must be positive and finite", raw.layer_norm_eps),
            ));
        }
        let max_relative_positions = if raw.max_relative_positions < 1 {
            raw.max_position_embeddings as i64
        } else {
            raw.max_relative_positions
        };
        let norms: Vec<String> = raw
            .norm_rel_ebd
            .to_lowercase()
            .split('|')
            .map(|s| s.trim().to_string())
            .collect();
        Ok(Self {
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: raw.num_attention_heads,
            intermediate_size: raw.intermediate_size,
            max_position_embeddings: raw.max_position_embeddings,
            type_vocab_size: raw.type_vocab_size,
            layer_norm_eps: raw.layer_norm_eps,
            initializer_range: raw.initializer_range,
            hidden_dropout_prob: raw.hidden_dropout_prob,
            attention_probs_dropout_prob: raw.attention_probs_dropout_prob,
            pooler_dropout: raw.pooler_dropout,
            cls_dropout,
            position_buckets: raw.position_buckets,
            max_relative_positions,
            c2p: kinds.iter().any(|k| k == "c2p"),
            p2c: kinds.iter().any(|k| k == "p2c"),
            norm_rel_ebd: norms.iter().any(|n| n == "layer_norm"),
            position_biased_input: raw.position_biased_input,
            pad_token_id: raw.pad_token_id.unwrap_or(0),
        })
    }

    /// DeBERTa-v3-base (microsoft/deberta-v3-base's `config.json`).
    pub fn deberta_v3_base() -> Self {
        Self::v3(768, 12, 12, 3072)
    }

    /// DeBERTa-v3-large.
    pub fn deberta_v3_large() -> Self {
        Self::v3(1024, 24, 16, 4096)
    }

    fn v3(hidden: usize, layers: usize, heads: usize, inter: usize) -> Self {
        Self {
            vocab_size: 128_100,
            hidden_size: hidden,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            intermediate_size: inter,
            max_position_embeddings: 512,
            type_vocab_size: 0,
            layer_norm_eps: 1e-7,
            initializer_range: 0.02,
            hidden_dropout_prob: 0.1,
            attention_probs_dropout_prob: 0.1,
            pooler_dropout: 0.0,
            cls_dropout: 0.1,
            position_buckets: 256,
            max_relative_positions: 512,
            c2p: true,
            p2c: true,
            norm_rel_ebd: true,
            position_biased_input: false,
            pad_token_id: 0,
        }
    }

    /// The longest sequence trained on: `max_position_embeddings`, what a
    /// DeBERTa tokenizer's `model_max_length` is. Relative attention alone
    /// has no limit, but buckets beyond it were never trained.
    pub fn max_sequence(&self) -> usize {
        self.max_position_embeddings
    }

    /// What a batch must satisfy for a head of `classes` labels.
    pub fn batch_limits(&self, classes: usize) -> Limits {
        Limits {
            vocab: self.vocab_size,
            token_types: (self.type_vocab_size > 0).then_some(self.type_vocab_size),
            max_seq: self.max_sequence(),
            classes,
        }
    }

    /// Width of one attention head: `hidden_size / num_attention_heads`.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Relative-position embeddings used on each side (`2 * span` rows).
    pub fn span(&self) -> usize {
        if self.position_buckets > 0 {
            self.position_buckets as usize
        } else {
            self.max_relative_positions as usize
        }
    }

    /// `1 / sqrt(head_dim * (1 + attention types))`, applied to all three
    /// score terms.
    pub fn score_scale(&self) -> f64 {
        let factor = 1 + self.c2p as usize + self.p2c as usize;
        1.0 / ((self.head_dim() * factor) as f64).sqrt()
    }
}
