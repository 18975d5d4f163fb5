//! Model families as data: what BERT, RoBERTa (XLM-RoBERTa, CamemBERT),
//! DistilBERT and ELECTRA do differently around one shared post-LN encoder.
//!
//! The families differ in naming, in their embeddings (token types or not,
//! where positions start, ELECTRA's smaller embedding width projected up)
//! and in their classification heads; the encoder arithmetic is the same.
//! So a family is a row of [`FAMILIES`], chosen by `config.json`'s
//! `model_type`, and the model code (`params.rs`, `encoder.rs`, `head.rs`)
//! reads it instead of branching on names. DeBERTa-v2/v3 has its own
//! attention and its own module (`model::deberta`); it is not a row here,
//! but its [`ModelType`] is listed beside them ([`DEBERTA_V2`]).
//!
//! A row also says how transformers names what it holds, so a trained model
//! is saved as that family's `*ForSequenceClassification`
//! ([`Family::checkpoint_name`], [`ModelType::classifier_class`],
//! [`DropoutKeys`]).

/// A `config.json` `model_type` and transformers' sequence classifier
/// class for it (what `architectures` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelType {
    /// The `model_type` value (`bert`, `xlm-roberta`, ...).
    pub name: &'static str,
    /// The `*ForSequenceClassification` class, written to `architectures`
    /// when a model is exported.
    pub classifier_class: &'static str,
}

/// The `config.json` keys of a family's dropout probabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DropoutKeys {
    /// The hidden dropout's (`hidden_dropout_prob`, DistilBERT's
    /// `dropout`).
    pub hidden: &'static str,
    /// The attention probabilities' (`attention_probs_dropout_prob`,
    /// DistilBERT's `attention_dropout`).
    pub attention: &'static str,
    /// The classification head's (`None` in `config.json` means the
    /// family's default, see [`HeadSpec::default_dropout`]).
    pub head: &'static str,
}

const BERT_DROPOUT_KEYS: DropoutKeys = DropoutKeys {
    hidden: "hidden_dropout_prob",
    attention: "attention_probs_dropout_prob",
    head: "classifier_dropout",
};

/// Where position ids start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Positions {
    /// `0, 1, ..., s-1` (BERT, DistilBERT, ELECTRA).
    FromZero,
    /// HF's `create_position_ids_from_input_ids`: real tokens are numbered
    /// from `pad_token_id + 1`, padding gets `pad_token_id` (RoBERTa).
    AfterPadding,
}

/// How a family uses token type ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenTypes {
    /// The tokenizer's segment ids index `token_type_embeddings`.
    Segments,
    /// The table exists but the model is always given zeros (RoBERTa's
    /// tokenizers return no token types; its table has one row).
    Zeros,
    /// No token type embeddings at all (DistilBERT).
    Absent,
}

/// The classification head's activation after its dense layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadActivation {
    /// `tanh` (BERT's pooler, RoBERTa's head).
    Tanh,
    /// GELU (ELECTRA).
    Gelu,
    /// ReLU (DistilBERT).
    Relu,
}

/// The `*ForSequenceClassification` head on the first token:
/// `[dropout] -> dense -> activation -> dropout -> out`, with memtune's
/// optional hidden layers (`classifier.hidden.{j}`) before `out`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HeadSpec {
    /// The dense layer on the first token (`pooler.dense` for BERT, whose
    /// pooler belongs to the base model).
    pub dense: &'static str,
    /// Whether `dense` is part of the base model (BERT's pooler), so a
    /// `*ForSequenceClassification` checkpoint names it with the prefix.
    pub dense_in_base_model: bool,
    /// The activation after `dense`.
    pub activation: HeadActivation,
    /// Dropout on the first token before `dense` (RoBERTa, ELECTRA).
    pub dropout_before_dense: bool,
    /// The output layer producing logits.
    pub out: &'static str,
    /// Head dropout when `config.json` has no `classifier_dropout` /
    /// `seq_classif_dropout`: `None` means the hidden dropout.
    pub default_dropout: Option<f64>,
}

/// Parameter names of one encoder layer, relative to `{layers}.{i}.`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerNames {
    /// The encoder's layer list, before the layer index (`encoder.layer`,
    /// DistilBERT's `transformer.layer`).
    pub layers: &'static str,
    /// The query projection (BERT's `attention.self.query`).
    pub query: &'static str,
    /// The key projection (BERT's `attention.self.key`).
    pub key: &'static str,
    /// The value projection (BERT's `attention.self.value`).
    pub value: &'static str,
    /// The attention output projection (BERT's `attention.output.dense`).
    pub attn_out: &'static str,
    /// The LayerNorm after attention (BERT's
    /// `attention.output.LayerNorm`).
    pub attn_norm: &'static str,
    /// The feed-forward layer into `intermediate_size` (BERT's
    /// `intermediate.dense`).
    pub ffn_in: &'static str,
    /// The feed-forward layer back to `hidden_size` (BERT's
    /// `output.dense`).
    pub ffn_out: &'static str,
    /// The LayerNorm after the feed-forward layers (BERT's
    /// `output.LayerNorm`).
    pub ffn_norm: &'static str,
}

/// One model family (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Family {
    /// `config.json` `model_type` values this row serves.
    pub model_types: &'static [ModelType],
    /// The base model's prefix in `*For...` checkpoints (`bert.`), removed
    /// when loading (see `weights::canonical_name`).
    pub prefix: &'static str,
    /// How position ids are numbered (from 0, or after the padding id).
    pub positions: Positions,
    /// Whether token type ids are read, given as zeros, or absent.
    pub token_types: TokenTypes,
    /// ELECTRA's embedding width when `config.json` omits
    /// `embedding_size`; `None`: embeddings are `hidden_size` wide.
    pub default_embedding_size: Option<usize>,
    /// Parameter names inside an encoder layer.
    pub layer: LayerNames,
    /// Dropout on the attention output projection before the residual
    /// (DistilBERT has none).
    pub attention_output_dropout: bool,
    /// The classification head's layout and names.
    pub head: HeadSpec,
    /// The `config.json` keys its dropout probabilities are exported
    /// under.
    pub dropout_keys: DropoutKeys,
}

const BERT_LAYER: LayerNames = LayerNames {
    layers: "encoder.layer",
    query: "attention.self.query",
    key: "attention.self.key",
    value: "attention.self.value",
    attn_out: "attention.output.dense",
    attn_norm: "attention.output.LayerNorm",
    ffn_in: "intermediate.dense",
    ffn_out: "output.dense",
    ffn_norm: "output.LayerNorm",
};

/// `RobertaClassificationHead` and `ElectraClassificationHead` (GELU).
const fn first_token_head(activation: HeadActivation) -> HeadSpec {
    HeadSpec {
        dense: "classifier.dense",
        dense_in_base_model: false,
        activation,
        dropout_before_dense: true,
        out: "classifier.out_proj",
        default_dropout: None,
    }
}

/// BERT: segment token types, and a `tanh` pooler that belongs to the
/// base model; also the fallback for a hand-built config's unknown
/// `model_type`.
pub const BERT: Family = Family {
    model_types: &[ModelType {
        name: "bert",
        classifier_class: "BertForSequenceClassification",
    }],
    prefix: "bert.",
    positions: Positions::FromZero,
    token_types: TokenTypes::Segments,
    default_embedding_size: None,
    layer: BERT_LAYER,
    attention_output_dropout: true,
    head: HeadSpec {
        dense: "pooler.dense",
        dense_in_base_model: true,
        activation: HeadActivation::Tanh,
        dropout_before_dense: false,
        out: "classifier",
        default_dropout: None,
    },
    dropout_keys: BERT_DROPOUT_KEYS,
};

/// RoBERTa, XLM-RoBERTa and CamemBERT: positions after the padding id,
/// token types given as zeros, a `classifier.dense` + `classifier.out_proj`
/// head.
pub const ROBERTA: Family = Family {
    model_types: &[
        ModelType {
            name: "roberta",
            classifier_class: "RobertaForSequenceClassification",
        },
        ModelType {
            name: "xlm-roberta",
            classifier_class: "XLMRobertaForSequenceClassification",
        },
        ModelType {
            name: "camembert",
            classifier_class: "CamembertForSequenceClassification",
        },
    ],
    prefix: "roberta.",
    positions: Positions::AfterPadding,
    token_types: TokenTypes::Zeros,
    default_embedding_size: None,
    layer: BERT_LAYER,
    attention_output_dropout: true,
    head: first_token_head(HeadActivation::Tanh),
    dropout_keys: BERT_DROPOUT_KEYS,
};

/// DistilBERT: no token types, its own layer and dropout names, no
/// dropout on the attention output, a ReLU `pre_classifier` head with
/// dropout 0.2 by default.
pub const DISTILBERT: Family = Family {
    model_types: &[ModelType {
        name: "distilbert",
        classifier_class: "DistilBertForSequenceClassification",
    }],
    prefix: "distilbert.",
    positions: Positions::FromZero,
    token_types: TokenTypes::Absent,
    default_embedding_size: None,
    layer: LayerNames {
        layers: "transformer.layer",
        query: "attention.q_lin",
        key: "attention.k_lin",
        value: "attention.v_lin",
        attn_out: "attention.out_lin",
        attn_norm: "sa_layer_norm",
        ffn_in: "ffn.lin1",
        ffn_out: "ffn.lin2",
        ffn_norm: "output_layer_norm",
    },
    attention_output_dropout: false,
    head: HeadSpec {
        dense: "pre_classifier",
        dense_in_base_model: false,
        activation: HeadActivation::Relu,
        dropout_before_dense: false,
        out: "classifier",
        default_dropout: Some(0.2),
    },
    dropout_keys: DropoutKeys {
        hidden: "dropout",
        attention: "attention_dropout",
        head: "seq_classif_dropout",
    },
};

/// ELECTRA: embeddings 128 wide unless `embedding_size` says otherwise,
/// projected to `hidden_size` when it differs; a GELU head like RoBERTa's.
pub const ELECTRA: Family = Family {
    model_types: &[ModelType {
        name: "electra",
        classifier_class: "ElectraForSequenceClassification",
    }],
    prefix: "electra.",
    positions: Positions::FromZero,
    token_types: TokenTypes::Segments,
    default_embedding_size: Some(128),
    layer: BERT_LAYER,
    attention_output_dropout: true,
    head: first_token_head(HeadActivation::Gelu),
    dropout_keys: BERT_DROPOUT_KEYS,
};

/// Every family on the shared encoder.
pub const FAMILIES: [Family; 4] = [BERT, ROBERTA, DISTILBERT, ELECTRA];

/// DeBERTa-v2/v3, whose model is its own module (`model::deberta`, with
/// HF's full parameter names) rather than a row of [`FAMILIES`].
pub const DEBERTA_V2: ModelType = ModelType {
    name: "deberta-v2",
    classifier_class: "DebertaV2ForSequenceClassification",
};

/// `model_type`s with their own model module rather than a row of
/// [`FAMILIES`].
pub const OWN_MODULE_MODEL_TYPES: [ModelType; 1] = [DEBERTA_V2];

impl ModelType {
    /// The entry of any `model_type` memtune trains: a row of [`FAMILIES`]
    /// or one of [`OWN_MODULE_MODEL_TYPES`].
    pub fn of(model_type: &str) -> Option<&'static ModelType> {
        FAMILIES
            .iter()
            .flat_map(|f| f.model_types.iter())
            .chain(OWN_MODULE_MODEL_TYPES.iter())
            .find(|t| t.name == model_type)
    }
}

impl Family {
    /// The family of a `config.json` `model_type`, if it is one of
    /// [`FAMILIES`].
    pub fn of(model_type: &str) -> Option<&'static Family> {
        FAMILIES
            .iter()
            .find(|f| f.model_types.iter().any(|t| t.name == model_type))
    }

    /// Every `model_type` the shared encoder serves, for error messages.
    pub fn supported_model_types() -> Vec<&'static str> {
        FAMILIES
            .iter()
            .flat_map(|f| f.model_types.iter().map(|t| t.name))
            .collect()
    }

    /// The name transformers' `*ForSequenceClassification` gives parameter
    /// `name` (memtune's name, the base model's prefix removed): the head
    /// modules outside the base model keep their name, everything else
    /// (embeddings, encoder, BERT's pooler) gets the prefix (`roberta.`).
    pub fn checkpoint_name(&self, name: &str) -> String {
        let in_dense = under(name, self.head.dense);
        let outside_base = under(name, self.head.out)
            || under(name, "classifier")
            || (in_dense && !self.head.dense_in_base_model);
        if outside_base {
            name.to_string()
        } else {
            format!("{}{name}", self.prefix)
        }
    }

    /// Whether parameter `name` belongs to the classification head (which
    /// a pretrained encoder checkpoint lacks, so it keeps HF's random init).
    pub fn is_head_param(&self, name: &str) -> bool {
        under(name, self.head.dense) || under(name, self.head.out) || under(name, "classifier")
    }

    /// Whether parameter `name`'s shape depends on the number of labels or
    /// memtune's hidden head layers (the output layer and those layers), so
    /// a classifier checkpoint of another task may differ there.
    pub fn is_task_param(&self, name: &str) -> bool {
        under(name, self.head.out) || under(name, "classifier.hidden")
    }
}

/// Whether parameter `name` lies in module `module` (`classifier.dense.weight`
/// in `classifier`, not `classifier_x.weight`).
fn under(name: &str, module: &str) -> bool {
    name.strip_prefix(module)
        .is_some_and(|rest| rest.starts_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_model_type_has_one_family() {
        let types = Family::supported_model_types();
        for t in &types {
            assert_eq!(
                FAMILIES
                    .iter()
                    .filter(|f| f.model_types.iter().any(|m| m.name == *t))
                    .count(),
                1,
                "{t}"
            );
        }
        assert_eq!(Family::of("xlm-roberta"), Some(&ROBERTA));
        assert_eq!(Family::of("deberta-v2"), None);
        assert_eq!(
            ModelType::of("camembert").map(|t| t.classifier_class),
            Some("CamembertForSequenceClassification")
        );
        assert_eq!(ModelType::of("deberta-v2"), Some(&DEBERTA_V2));
        assert_eq!(ModelType::of("gpt2"), None);
    }

    #[test]
    fn checkpoint_names_by_family() {
        let cases = [
            (&BERT, "pooler.dense.weight", "bert.pooler.dense.weight"),
            (&BERT, "classifier.bias", "classifier.bias"),
            (
                &ROBERTA,
                "classifier.out_proj.weight",
                "classifier.out_proj.weight",
            ),
            (&ROBERTA, "classifier.dense.bias", "classifier.dense.bias"),
            (
                &ROBERTA,
                "encoder.layer.0.output.dense.bias",
                "roberta.encoder.layer.0.output.dense.bias",
            ),
            (
                &DISTILBERT,
                "pre_classifier.weight",
                "pre_classifier.weight",
            ),
            (
                &DISTILBERT,
                "transformer.layer.1.ffn.lin1.weight",
                "distilbert.transformer.layer.1.ffn.lin1.weight",
            ),
            (
                &ELECTRA,
                "embeddings_project.weight",
                "electra.embeddings_project.weight",
            ),
            (
                &ELECTRA,
                "classifier.dense.weight",
                "classifier.dense.weight",
            ),
        ];
        for (family, ours, theirs) in cases {
            assert_eq!(family.checkpoint_name(ours), theirs);
        }
    }

    #[test]
    fn head_params_by_family() {
        assert!(BERT.is_head_param("pooler.dense.weight"));
        assert!(BERT.is_head_param("classifier.bias"));
        assert!(!BERT.is_head_param("encoder.layer.0.output.dense.bias"));
        assert!(ROBERTA.is_head_param("classifier.out_proj.weight"));
        assert!(DISTILBERT.is_head_param("pre_classifier.weight"));
        assert!(!DISTILBERT.is_head_param("pre_classifier_x.weight"));
    }
}
