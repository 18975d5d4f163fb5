//! `BertConfig`: the architecture of an encoder of the shared BERT shape,
//! read from a Hugging Face `config.json` of any family of
//! [`crate::model::family::FAMILIES`] (`bert`, `roberta`, `xlm-roberta`,
//! `camembert`, `distilbert`, `electra`). DistilBERT's own field names
//! (`dim`, `n_layers`, `n_heads`, `hidden_dim`, `dropout`, ...) are read as
//! aliases of BERT's. DeBERTa-v2/v3 has its own config (`model::deberta`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::model::family::{Family, OWN_MODULE_MODEL_TYPES, Positions};

/// A model's `config.json` that cannot be read or describes a model this
/// trainer cannot build.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read model config {path}: {source}")]
    Read {
        /// The config file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not JSON of the expected shape (a required field missing
    /// or of the wrong type).
    #[error("model config {path}: {source}")]
    Parse {
        /// The config file.
        path: PathBuf,
        /// serde_json's own message, with line and column.
        source: serde_json::Error,
    },
    /// A field holds a value the trainer does not support or that is
    /// inconsistent (an unknown `model_type`, heads that do not divide the
    /// hidden size, a dropout outside `[0, 1)`, ...).
    #[error("model config {path}: field `{field}`: {problem}")]
    Invalid {
        /// The config file.
        path: PathBuf,
        /// The field's name as `config.json` spells it.
        field: &'static str,
        /// What is wrong with its value.
        problem: String,
    },
    /// A size beyond any real model's, or one the checkpoint's tensors
    /// contradict: refused before anything of that size is allocated.
    #[error("model config {path}: field `{field}` = {value}: {problem}")]
    Size {
        /// The config file.
        path: PathBuf,
        /// The field's name as `config.json` spells it.
        field: &'static str,
        /// The size the config gives.
        value: u64,
        /// Why it is refused: over its limit in [`SIZE_LIMITS`], or the
        /// checkpoint tensor's shape that contradicts it.
        problem: String,
    },
}

impl ConfigError {
    /// Whether this is a size the config may not have ([`ConfigError::Size`]).
    pub fn is_size(&self) -> bool {
        matches!(self, ConfigError::Size { .. })
    }
}

/// The largest value each size field of a model's `config.json` may hold:
/// several times the largest published encoder of these families (hidden
/// 1536, 48 layers, vocabulary 250k, 4096 positions), far below what would
/// exhaust a machine's memory by one field alone.
pub const SIZE_LIMITS: &[(&str, u64)] = &[
    ("hidden_size", 16_384),
    ("embedding_size", 16_384),
    ("num_hidden_layers", 256),
    ("num_attention_heads", 1_024),
    ("intermediate_size", 131_072),
    ("vocab_size", 2_000_000),
    ("max_position_embeddings", 131_072),
    ("position_buckets", 131_072),
    ("max_relative_positions", 131_072),
    ("type_vocab_size", 1_024),
    ("num_labels", 100_000),
];

/// The largest value `field` may hold ([`SIZE_LIMITS`]); `None`: no limit.
pub fn size_limit(field: &str) -> Option<u64> {
    SIZE_LIMITS
        .iter()
        .find(|(f, _)| *f == field)
        .map(|&(_, limit)| limit)
}

/// `value` of `field` within [`SIZE_LIMITS`] (a field not listed has no
/// limit), else a [`ConfigError::Size`] naming `path` and the field.
pub fn check_size(path: &Path, field: &'static str, value: u64) -> Result<(), ConfigError> {
    match size_limit(field) {
        Some(limit) if value > limit => Err(ConfigError::Size {
            path: path.to_path_buf(),
            field,
            value,
            problem: format!("more than the limit of {limit}"),
        }),
        _ => Ok(()),
    }
}

/// The fields of HF `BertConfig` / `RobertaConfig` / `XLMRobertaConfig` /
/// `CamembertConfig` / `DistilBertConfig` / `ElectraConfig` this trainer
/// uses.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct BertConfig {
    /// Width of the encoder's hidden states (DistilBERT's `dim`).
    #[serde(alias = "dim")]
    pub hidden_size: usize,
    /// Number of encoder layers (DistilBERT's `n_layers`).
    #[serde(alias = "n_layers")]
    pub num_hidden_layers: usize,
    /// Attention heads per layer; must divide `hidden_size` (DistilBERT's
    /// `n_heads`).
    #[serde(alias = "n_heads")]
    pub num_attention_heads: usize,
    /// Inner width of each layer's feed-forward block (DistilBERT's
    /// `hidden_dim`).
    #[serde(alias = "hidden_dim")]
    pub intermediate_size: usize,
    /// Tokens in the vocabulary: rows of the word-embedding table.
    pub vocab_size: usize,
    /// Rows of the position-embedding table (see [`Self::max_sequence`]).
    pub max_position_embeddings: usize,
    /// Rows of the token-type embedding table; default 2.
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// Added to the variance in every LayerNorm; default `1e-12`.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Standard deviation of HF's normal initialisation of weight matrices
    /// and embeddings (what random weights and a head missing from a
    /// checkpoint get); default 0.02.
    #[serde(default = "default_initializer_range")]
    pub initializer_range: f64,
    /// Dropout probability on embeddings and hidden states, in `[0, 1)`;
    /// default 0.1 (DistilBERT's `dropout`).
    #[serde(default = "default_dropout", alias = "dropout")]
    pub hidden_dropout_prob: f64,
    /// Dropout probability on attention probabilities, in `[0, 1)`; default
    /// 0.1 (DistilBERT's `attention_dropout`).
    #[serde(default = "default_dropout", alias = "attention_dropout")]
    pub attention_probs_dropout_prob: f64,
    /// Id of the padding token; absent or `null` reads as 0. RoBERTa-style
    /// positions start after it (see [`Self::is_roberta`]).
    #[serde(default, deserialize_with = "null_as_zero")]
    pub pad_token_id: u32,
    /// HF's `model_type` (`bert` when absent), which picks the family.
    #[serde(default = "default_model_type")]
    pub model_type: String,
    /// The feed-forward activation; only `gelu` (the default) is accepted
    /// (DistilBERT's `activation`).
    #[serde(default = "default_act", alias = "activation")]
    pub hidden_act: String,
    /// ELECTRA's embedding width (projected to `hidden_size` by
    /// `embeddings_project` when they differ); see [`Self::embedding_size`].
    #[serde(default)]
    pub embedding_size: Option<usize>,
    /// The classification head's dropout (`seq_classif_dropout` for
    /// DistilBERT); see [`Self::head_dropout`].
    #[serde(default, alias = "seq_classif_dropout")]
    pub classifier_dropout: Option<f64>,
    /// DistilBERT's fixed sinusoidal positions: not supported (no released
    /// checkpoint uses them), rejected by validation.
    #[serde(default)]
    pub sinusoidal_pos_embds: bool,
    /// BERT's `position_embedding_type`: only `absolute` (the default) is
    /// supported; the relative variants are rejected by validation.
    #[serde(default)]
    pub position_embedding_type: Option<String>,
}

fn null_as_zero<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Ok(Option::<u32>::deserialize(d)?.unwrap_or(0))
}

fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_initializer_range() -> f64 {
    0.02
}
fn default_dropout() -> f64 {
    0.1
}
fn default_model_type() -> String {
    "bert".into()
}
fn default_act() -> String {
    "gelu".into()
}

impl BertConfig {
    /// Reads and validates `config.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        Self::from_json(&text, path)
    }

    /// Parses and validates config JSON; `path` only labels errors.
    pub fn from_json(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: Self = serde_json::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.into(),
            source,
        })?;
        config.validate(path)?;
        Ok(config)
    }

    /// A small BERT for tests.
    pub fn tiny(
        hidden: usize,
        layers: usize,
        heads: usize,
        intermediate: usize,
        vocab: usize,
    ) -> Self {
        Self {
            hidden_size: hidden,
            num_hidden_layers: layers,
            num_attention_heads: heads,
            intermediate_size: intermediate,
            vocab_size: vocab,
            max_position_embeddings: 64,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            initializer_range: 0.02,
            hidden_dropout_prob: 0.1,
            attention_probs_dropout_prob: 0.1,
            pad_token_id: 0,
            model_type: "bert".into(),
            hidden_act: "gelu".into(),
            embedding_size: None,
            classifier_dropout: None,
            sinusoidal_pos_embds: false,
            position_embedding_type: None,
        }
    }

    /// BERT-base uncased (110M parameters).
    pub fn bert_base() -> Self {
        Self {
            max_position_embeddings: 512,
            ..Self::tiny(768, 12, 12, 3072, 30522)
        }
    }

    /// all-MiniLM-L6-v2's architecture.
    pub fn minilm_l6() -> Self {
        Self {
            max_position_embeddings: 512,
            ..Self::tiny(384, 6, 12, 1536, 30522)
        }
    }

    /// BERT-large uncased (335M parameters).
    pub fn bert_large() -> Self {
        Self {
            max_position_embeddings: 512,
            ..Self::tiny(1024, 24, 16, 4096, 30522)
        }
    }

    /// RoBERTa-base (125M parameters): a 50,265-token vocabulary, one token
    /// type, positions offset past the padding id 1.
    pub fn roberta_base() -> Self {
        Self::roberta(Self::tiny(768, 12, 12, 3072, 50265))
    }

    /// RoBERTa-large (355M parameters).
    pub fn roberta_large() -> Self {
        Self::roberta(Self::tiny(1024, 24, 16, 4096, 50265))
    }

    fn roberta(base: Self) -> Self {
        Self {
            max_position_embeddings: 514,
            type_vocab_size: 1,
            layer_norm_eps: 1e-5,
            pad_token_id: 1,
            model_type: "roberta".into(),
            ..base
        }
    }

    /// XLM-RoBERTa-base (278M parameters, 192M of them the 250,002-token
    /// embedding table).
    pub fn xlm_roberta_base() -> Self {
        Self {
            model_type: "xlm-roberta".into(),
            ..Self::roberta(Self::tiny(768, 12, 12, 3072, 250_002))
        }
    }

    /// DistilBERT-base uncased (66M parameters).
    pub fn distilbert_base() -> Self {
        Self {
            max_position_embeddings: 512,
            model_type: "distilbert".into(),
            ..Self::tiny(768, 6, 12, 3072, 30522)
        }
    }

    /// ELECTRA-base discriminator (110M parameters; embeddings as wide as
    /// the encoder, so no projection).
    pub fn electra_base() -> Self {
        Self {
            max_position_embeddings: 512,
            model_type: "electra".into(),
            embedding_size: Some(768),
            ..Self::tiny(768, 12, 12, 3072, 30522)
        }
    }

    /// Names accepted by [`Self::preset`].
    pub const PRESETS: [&'static str; 8] = [
        "minilm-l6",
        "bert-base",
        "roberta-base",
        "bert-large",
        "roberta-large",
        "xlm-roberta-base",
        "distilbert-base",
        "electra-base",
    ];

    /// The architecture called `name` (one of [`Self::PRESETS`]), for
    /// simulated trials and memory plans without a model directory.
    pub fn preset(name: &str) -> Option<Self> {
        Some(match name {
            "minilm-l6" => Self::minilm_l6(),
            "bert-base" => Self::bert_base(),
            "roberta-base" => Self::roberta_base(),
            "bert-large" => Self::bert_large(),
            "roberta-large" => Self::roberta_large(),
            "xlm-roberta-base" => Self::xlm_roberta_base(),
            "distilbert-base" => Self::distilbert_base(),
            "electra-base" => Self::electra_base(),
            _ => return None,
        })
    }

    /// The `config.json` of this architecture: the fields this crate reads,
    /// under their BERT names, which transformers' config classes take as
    /// keyword arguments (so a reference script builds the same model).
    /// [`Self::from_json`] reads it back to an equal config.
    pub fn hf_config_json(&self) -> serde_json::Value {
        let mut json = serde_json::json!({
            "model_type": self.model_type,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "layer_norm_eps": self.layer_norm_eps,
            "initializer_range": self.initializer_range,
            "hidden_dropout_prob": self.hidden_dropout_prob,
            "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
            "pad_token_id": self.pad_token_id,
            "hidden_act": self.hidden_act,
        });
        let optional = [
            ("embedding_size", self.embedding_size.map(Into::into)),
            (
                "classifier_dropout",
                self.classifier_dropout.map(Into::into),
            ),
            (
                "position_embedding_type",
                self.position_embedding_type.clone().map(Into::into),
            ),
            (
                "sinusoidal_pos_embds",
                self.sinusoidal_pos_embds.then_some(true.into()),
            ),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                json[key] = value;
            }
        }
        json
    }

    /// Width of one attention head: `hidden_size / num_attention_heads`.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// The family of `model_type` (validation guarantees there is one).
    pub fn family(&self) -> &'static Family {
        Family::of(&self.model_type).unwrap_or(&crate::model::family::BERT)
    }

    /// How many token types the model reads from a batch
    /// (`type_vocab_size`), or `None` where it reads none (RoBERTa-style
    /// models are given zeros, DistilBERT has no token-type embeddings).
    pub fn token_types_read(&self) -> Option<usize> {
        (self.family().token_types == crate::model::family::TokenTypes::Segments)
            .then_some(self.type_vocab_size)
    }

    /// Width of the embedding tables: ELECTRA's `embedding_size`, otherwise
    /// `hidden_size`.
    pub fn embedding_size(&self) -> usize {
        match self.family().default_embedding_size {
            Some(default) => self.embedding_size.unwrap_or(default),
            None => self.hidden_size,
        }
    }

    /// Dropout of the classification head: `classifier_dropout` /
    /// `seq_classif_dropout`, else the family's default.
    pub fn head_dropout(&self) -> f64 {
        self.classifier_dropout
            .or(self.family().head.default_dropout)
            .unwrap_or(self.hidden_dropout_prob)
    }

    /// RoBERTa-style models number positions from `pad_token_id + 1`
    /// (padding tokens get position `pad_token_id`); BERT from 0.
    pub fn is_roberta(&self) -> bool {
        self.family().positions == Positions::AfterPadding
    }

    /// Position ids for one padded sequence (HF semantics).
    pub fn position_ids(&self, mask: &[u8]) -> Vec<u32> {
        if self.is_roberta() {
            let pad = self.pad_token_id;
            let mut count = 0;
            mask.iter()
                .map(|&m| {
                    if m != 0 {
                        count += 1;
                        pad + count
                    } else {
                        pad
                    }
                })
                .collect()
        } else {
            (0..mask.len() as u32).collect()
        }
    }

    /// Longest sequence the position table allows.
    pub fn max_sequence(&self) -> usize {
        if self.is_roberta() {
            self.max_position_embeddings
                .saturating_sub(self.pad_token_id as usize + 1)
        } else {
            self.max_position_embeddings
        }
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let bad = |field: &'static str, problem: String| ConfigError::Invalid {
            path: path.into(),
            field,
            problem,
        };
        if Family::of(&self.model_type).is_none() {
            let problem = if OWN_MODULE_MODEL_TYPES
                .iter()
                .any(|t| t.name == self.model_type)
            {
                format!("`{}` is not a BERT-shaped encoder", self.model_type)
            } else {
                format!(
                    "`{}` is not supported (supported: {})",
                    self.model_type,
                    Family::supported_model_types().join(", ")
                )
            };
            return Err(bad("model_type", problem));
        }
        let projects = self.family().default_embedding_size.is_some();
        if let Some(size) = self
            .embedding_size
            .filter(|&e| !projects && e != self.hidden_size)
        {
            return Err(bad(
                "embedding_size",
                format!(
                    "{size} differs from hidden_size {}; only `electra` projects its embeddings",
                    self.hidden_size
                ),
            ));
        }
        if let Some(kind) = self
            .position_embedding_type
            .as_deref()
            .filter(|&k| k != "absolute")
        {
            return Err(bad(
                "position_embedding_type",
                format!("`{kind}` is not supported (only `absolute`)"),
            ));
        }
        if self.sinusoidal_pos_embds {
            return Err(bad(
                "sinusoidal_pos_embds",
                "fixed sinusoidal positions are not supported".into(),
            ));
        }
        let embedding_size = self.embedding_size.unwrap_or(1);
        for (field, v) in [
            ("hidden_size", self.hidden_size),
            ("embedding_size", embedding_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("vocab_size", self.vocab_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ] {
            check_size(path, field, v as u64)?;
        }
        for (field, v) in [
            ("hidden_size", self.hidden_size),
            ("embedding_size", embedding_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("vocab_size", self.vocab_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ] {
            if v == 0 {
                return Err(bad(field, "must be positive".into()));
            }
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(bad(
                "num_attention_heads",
                format!(
                    "{} does not divide hidden_size {}",
                    self.num_attention_heads, self.hidden_size
                ),
            ));
        }
        for (field, p) in [
            ("hidden_dropout_prob", self.hidden_dropout_prob),
            (
                "attention_probs_dropout_prob",
                self.attention_probs_dropout_prob,
            ),
        ] {
            if !(0.0..1.0).contains(&p) {
                return Err(bad(field, format!("{p} is not in [0, 1)")));
            }
        }
        if let Some(p) = self.classifier_dropout.filter(|p| !(0.0..1.0).contains(p)) {
            return Err(bad("classifier_dropout", format!("{p} is not in [0, 1)")));
        }
        if self.layer_norm_eps.is_nan() || self.layer_norm_eps <= 0.0 {
            return Err(bad(
                "layer_norm_eps",
                format!("{} must be positive", self.layer_norm_eps),
            ));
        }
        if !self.initializer_range.is_finite() || self.initializer_range < 0.0 {
            return Err(bad(
                "initializer_range",
                format!("{} must be a finite number >= 0", self.initializer_range),
            ));
        }
        if !matches!(self.hidden_act.as_str(), "gelu") {
            return Err(bad(
                "hidden_act",
                format!("`{}` is not supported (only exact `gelu`)", self.hidden_act),
            ));
        }
        if self.max_sequence() < crate::tokenize::MIN_MAX_LENGTH {
            let offset = if self.is_roberta() {
                format!(" after the RoBERTa offset of {}", self.pad_token_id + 1)
            } else {
                String::new()
            };
            return Err(bad(
                "max_position_embeddings",
                format!(
                    "{} positions leave {} for tokens{offset}, fewer than the {} of the \
                     shortest sequence the trainer takes",
                    self.max_position_embeddings,
                    self.max_sequence(),
                    crate::tokenize::MIN_MAX_LENGTH
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_minilm_style_config() {
        let json = r#"{"hidden_size":384,"num_hidden_layers":6,"num_attention_heads":12,
            "intermediate_size":1536,"vocab_size":30522,"max_position_embeddings":512,
            "type_vocab_size":2,"layer_norm_eps":1e-12,"hidden_dropout_prob":0.1,
            "attention_probs_dropout_prob":0.1,"pad_token_id":0,"model_type":"bert","hidden_act":"gelu"}"#;
        let c = BertConfig::from_json(json, Path::new("config.json")).unwrap();
        assert_eq!(c, BertConfig::minilm_l6());
        assert_eq!(c.position_ids(&[1, 1, 0]), vec![0, 1, 2]);
    }

    #[test]
    fn roberta_positions_start_after_padding() {
        let c = BertConfig {
            model_type: "roberta".into(),
            pad_token_id: 1,
            ..BertConfig::tiny(8, 1, 2, 16, 10)
        };
        assert_eq!(c.position_ids(&[1, 1, 1, 0]), vec![2, 3, 4, 1]);
        assert_eq!(c.max_sequence(), 62);
    }

    #[test]
    fn presets_are_valid_and_have_the_published_sizes() {
        for name in BertConfig::PRESETS {
            let c = BertConfig::preset(name).unwrap();
            let json = serde_json::json!({
                "hidden_size": c.hidden_size, "num_hidden_layers": c.num_hidden_layers,
                "num_attention_heads": c.num_attention_heads,
                "intermediate_size": c.intermediate_size, "vocab_size": c.vocab_size,
                "max_position_embeddings": c.max_position_embeddings,
                "type_vocab_size": c.type_vocab_size, "layer_norm_eps": c.layer_norm_eps,
                "pad_token_id": c.pad_token_id, "model_type": c.model_type,
                "embedding_size": c.embedding_size,
            });
            let read = BertConfig::from_json(&json.to_string(), Path::new(name)).unwrap();
            assert_eq!(read, c, "{name}");
        }
        assert!(BertConfig::preset("gpt-2").is_none());
        let r = BertConfig::roberta_base();
        assert_eq!((r.max_sequence(), r.vocab_size), (512, 50265));
        assert_eq!(BertConfig::bert_large().num_hidden_layers, 24);
    }

    #[test]
    fn hf_config_json_reads_back_to_the_same_config() {
        let with_options = BertConfig {
            classifier_dropout: Some(0.2),
            initializer_range: 0.05,
            position_embedding_type: Some("absolute".into()),
            ..BertConfig::bert_base()
        };
        let configs = BertConfig::PRESETS
            .iter()
            .map(|name| BertConfig::preset(name).unwrap())
            .chain([with_options]);
        for c in configs {
            let text = c.hf_config_json().to_string();
            let read = BertConfig::from_json(&text, Path::new("config.json")).unwrap();
            assert_eq!(read, c, "{text}");
        }
    }

    /// The simulated study's BERT-shaped presets equal the `config.json`
    /// each model's Hugging Face repository publishes.
    #[test]
    fn presets_equal_the_published_configs() {
        let bert = |h: usize, l: usize, a: usize, i: usize| {
            format!(
                r#"{{"architectures":["BertForMaskedLM"],"attention_probs_dropout_prob":0.1,
                "gradient_checkpointing":false,"hidden_act":"gelu","hidden_dropout_prob":0.1,
                "hidden_size":{h},"initializer_range":0.02,"intermediate_size":{i},
                "layer_norm_eps":1e-12,"max_position_embeddings":512,"model_type":"bert",
                "num_attention_heads":{a},"num_hidden_layers":{l},"pad_token_id":0,
                "position_embedding_type":"absolute","type_vocab_size":2,"use_cache":true,
                "vocab_size":30522}}"#
            )
        };
        let roberta = |model_type: &str, h: usize, l: usize, a: usize, i: usize, v: usize| {
            format!(
                r#"{{"architectures":["RobertaForMaskedLM"],"attention_probs_dropout_prob":0.1,
                "bos_token_id":0,"eos_token_id":2,"hidden_act":"gelu","hidden_dropout_prob":0.1,
                "hidden_size":{h},"initializer_range":0.02,"intermediate_size":{i},
                "layer_norm_eps":1e-05,"max_position_embeddings":514,"model_type":"{model_type}",
                "num_attention_heads":{a},"num_hidden_layers":{l},"pad_token_id":1,
                "type_vocab_size":1,"vocab_size":{v}}}"#
            )
        };
        for (name, json) in [
            ("bert-base", bert(768, 12, 12, 3072)),
            ("bert-large", bert(1024, 24, 16, 4096)),
            ("roberta-base", roberta("roberta", 768, 12, 12, 3072, 50265)),
            (
                "roberta-large",
                roberta("roberta", 1024, 24, 16, 4096, 50265),
            ),
            (
                "xlm-roberta-base",
                roberta("xlm-roberta", 768, 12, 12, 3072, 250_002),
            ),
        ] {
            let mut read = BertConfig::from_json(&json, Path::new(name)).unwrap();
            // "absolute" is what an absent `position_embedding_type` means.
            read.position_embedding_type = None;
            assert_eq!(read, BertConfig::preset(name).unwrap(), "{name}");
        }
        let xlmr = BertConfig::xlm_roberta_base();
        assert_eq!(
            (xlmr.vocab_size, xlmr.max_sequence(), xlmr.pad_token_id),
            (250_002, 512, 1)
        );
    }

    #[test]
    fn reads_each_familys_fields_and_rejects_what_it_cannot_run() {
        let distilbert = r#"{"model_type":"distilbert","dim":48,"n_layers":2,"n_heads":4,
            "hidden_dim":96,"vocab_size":50,"max_position_embeddings":64,"dropout":0.2,
            "attention_dropout":0.3,"activation":"gelu","seq_classif_dropout":0.25,
            "sinusoidal_pos_embds":false,"pad_token_id":0}"#;
        let c = BertConfig::from_json(distilbert, Path::new("d.json")).unwrap();
        assert_eq!(
            (c.hidden_size, c.num_hidden_layers, c.intermediate_size),
            (48, 2, 96)
        );
        assert_eq!((c.hidden_dropout_prob, c.head_dropout()), (0.2, 0.25));
        assert_eq!(c.family().prefix, "distilbert.");
        let electra = r#"{"model_type":"electra","hidden_size":32,"num_hidden_layers":1,
            "num_attention_heads":2,"intermediate_size":64,"vocab_size":50,
            "max_position_embeddings":64}"#;
        let c = BertConfig::from_json(electra, Path::new("e.json")).unwrap();
        assert_eq!(c.embedding_size(), 128, "HF's default embedding_size");
        for (json, field) in [
            (electra.replace("electra", "gpt2"), "model_type"),
            (electra.replace("electra", "deberta-v2"), "model_type"),
            (
                electra.replace(
                    r#""hidden_size""#,
                    r#""position_embedding_type":"relative_key","hidden_size""#,
                ),
                "position_embedding_type",
            ),
            (distilbert.replace("false", "true"), "sinusoidal_pos_embds"),
            (
                electra
                    .replace("electra", "bert")
                    .replace(r#""hidden_size""#, r#""embedding_size":16,"hidden_size""#),
                "embedding_size",
            ),
        ] {
            let e = BertConfig::from_json(&json, Path::new("c.json"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(field) && e.contains("c.json"), "{e}");
        }
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let json = r#"{"hidden_size":30,"num_hidden_layers":1,"num_attention_heads":4,
            "intermediate_size":8,"vocab_size":5,"max_position_embeddings":8}"#;
        let e = BertConfig::from_json(json, Path::new("m/config.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("m/config.json") && e.contains("num_attention_heads"),
            "{e}"
        );
        let e = BertConfig::from_json(r#"{"hidden_size":30}"#, Path::new("x.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("x.json") && e.contains("num_hidden_layers"),
            "{e}"
        );
    }
}
