//! Models of the standard architectures with random weights: a model
//! directory written by [`write_dir`] holds a preset's `config.json`
//! ([`ModelConfig::preset`]: BERT, RoBERTa, XLM-RoBERTa, DeBERTa-v3 and the
//! rest at their published sizes), a tokenizer trained on the caller's
//! texts, and [`RANDOM_WEIGHTS_FILE`] instead of `model.safetensors`. A run
//! on such a directory starts from the architecture's random
//! initialisation (seeded by the run's seed) rather than a checkpoint, so a
//! search space can be planned, packed and benchmarked on the real
//! architecture without downloading anything; its accuracy means little.
//!
//! The tokenizer is a lowercased WordPiece (BERT's normaliser and
//! pre-tokenizer) whose vocabulary is built from the caller's texts: their
//! characters, then their words by frequency, at most [`TOKENIZER_VOCAB`]
//! entries, below every preset's embedding table, which keeps the preset's
//! full size (the memory a real checkpoint would take). Its special tokens
//! and template are the family's ([`TokenizerKind`]: BERT's `[CLS] A [SEP]`
//! or RoBERTa's `<s> A </s>`, at the ids the preset's `pad_token_id`
//! expects). The same texts give the same file.

use std::path::Path;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::roberta::RobertaProcessing;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{
    AddedToken, NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString,
    PreTokenizer, Tokenizer,
};

use crate::model::ModelConfig;
use crate::model::deberta::DebertaConfig;

/// The file that marks a model directory as random-weight (a JSON object
/// naming the preset); a run reads it instead of `model.safetensors`.
pub const RANDOM_WEIGHTS_FILE: &str = "random_weights.json";

/// The largest vocabulary a preset's tokenizer is trained to.
pub const TOKENIZER_VOCAB: usize = 8192;

/// Why a preset directory could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PresetError {
    /// The name given is not one of [`ModelConfig::PRESETS`].
    #[error("unknown preset `{0}` (known: {known})", known = ModelConfig::PRESETS.join(", "))]
    Unknown(String),
    /// The tokenizer could not be built from the texts or serialised.
    #[error("training the `{preset}` tokenizer: {message}")]
    Tokenizer {
        /// The preset's name.
        preset: String,
        /// The `tokenizers` library's own message.
        message: String,
    },
    /// The directory could not be created or a file in it written.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The directory or file.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Whether `dir` is a random-weight directory ([`RANDOM_WEIGHTS_FILE`]).
pub fn has_random_weights(dir: &Path) -> bool {
    dir.join(RANDOM_WEIGHTS_FILE).is_file()
}

/// Writes preset `name`'s directory into `dir` (created if missing; its
/// files replaced): `config.json`, `tokenizer.json` trained on `texts`,
/// and [`RANDOM_WEIGHTS_FILE`]. Each file is written whole under a
/// temporary name and renamed, so a reader never sees half of one. Returns
/// the preset's architecture.
pub fn write_dir(dir: &Path, name: &str, texts: &[&str]) -> Result<ModelConfig, PresetError> {
    let config = ModelConfig::preset(name).ok_or_else(|| PresetError::Unknown(name.into()))?;
    let tokenizer = train_tokenizer(&config, texts).map_err(|message| PresetError::Tokenizer {
        preset: name.into(),
        message,
    })?;
    let tokenizer_json = tokenizer
        .to_string(true)
        .map_err(|e| PresetError::Tokenizer {
            preset: name.into(),
            message: e.to_string(),
        })?;
    let config_json = serde_json::to_string_pretty(&hf_config_json(&config)).expect("JSON");
    let marker = serde_json::json!({ "preset": name, "weights": "random" }).to_string();
    std::fs::create_dir_all(dir).map_err(|source| PresetError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    for (file, text) in [
        ("config.json", config_json),
        ("tokenizer.json", tokenizer_json),
        (RANDOM_WEIGHTS_FILE, marker),
    ] {
        write_whole(&dir.join(file), &text)?;
    }
    Ok(config)
}

fn write_whole(path: &Path, text: &str) -> Result<(), PresetError> {
    let error = |source| PresetError::Write {
        path: path.to_path_buf(),
        source,
    };
    crate::write_whole::write_file_whole(
        path,
        |temporary| std::fs::write(temporary, text).map_err(error),
        error,
    )
}

/// The special tokens and template of a family's tokenizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// BERT's: `[CLS] A [SEP] B [SEP]`, pad id 0 (BERT, DistilBERT,
    /// ELECTRA, DeBERTa).
    Bert,
    /// RoBERTa's: `<s> A </s></s> B </s>`, pad id 1 (RoBERTa, XLM-RoBERTa,
    /// CamemBERT).
    Roberta,
}

impl TokenizerKind {
    /// The kind of `config`'s family.
    pub fn of(config: &ModelConfig) -> Self {
        match config.model_type() {
            "roberta" | "xlm-roberta" | "camembert" => TokenizerKind::Roberta,
            _ => TokenizerKind::Bert,
        }
    }

    /// The special tokens, in id order from 0: the padding token sits
    /// where the family's configs put `pad_token_id`; the unknown token is
    /// the fourth of RoBERTa's and the second of BERT's.
    fn special_tokens(self) -> [&'static str; 5] {
        match self {
            TokenizerKind::Bert => ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
            TokenizerKind::Roberta => ["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        }
    }

    fn unknown(self) -> &'static str {
        self.special_tokens()[match self {
            TokenizerKind::Bert => 1,
            TokenizerKind::Roberta => 3,
        }]
    }
}

/// A WordPiece tokenizer of `config`'s family over `texts` (see
/// [`word_piece_vocab`]), with BERT's normaliser and pre-tokenizer.
fn train_tokenizer(config: &ModelConfig, texts: &[&str]) -> Result<Tokenizer, String> {
    let kind = TokenizerKind::of(config);
    let specials = kind.special_tokens();
    let vocab = word_piece_vocab(&specials, texts, TOKENIZER_VOCAB.min(config.vocab_size()))?;
    let id = |token: &str| vocab[token];
    let (cls, sep) = match kind {
        TokenizerKind::Bert => (specials[2], specials[3]),
        TokenizerKind::Roberta => (specials[0], specials[2]),
    };
    // Through its serialised form: the builder takes only `tokenizers`'
    // own hash map type.
    let model = serde_json::json!({
        "type": "WordPiece",
        "vocab": vocab,
        "unk_token": kind.unknown(),
        "continuing_subword_prefix": "##",
        "max_input_chars_per_word": 100,
    });
    let model: WordPiece = serde_json::from_str(&model.to_string()).map_err(|e| e.to_string())?;
    let mut tokenizer = Tokenizer::new(model);
    tokenizer
        .with_normalizer(Some(BertNormalizer::new(true, true, None, true)))
        .with_pre_tokenizer(Some(BertPreTokenizer))
        .with_decoder(Some(WordPieceDecoder::default()));
    match kind {
        TokenizerKind::Bert => {
            let template = TemplateProcessing::builder()
                .try_single(format!("{cls}:0 $A:0 {sep}:0"))
                .and_then(|b| b.try_pair(format!("{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1")))
                .map_err(|e| e.to_string())?
                .special_tokens(vec![(cls, id(cls)), (sep, id(sep))])
                .build()
                .map_err(|e| e.to_string())?;
            tokenizer.with_post_processor(Some(template));
        }
        TokenizerKind::Roberta => {
            let roberta = RobertaProcessing::new((sep.into(), id(sep)), (cls.into(), id(cls)))
                .trim_offsets(false)
                .add_prefix_space(false);
            tokenizer.with_post_processor(Some(roberta));
        }
    }
    let added: Vec<AddedToken> = specials
        .iter()
        .map(|t| AddedToken::from(t.to_string(), true))
        .collect();
    tokenizer.add_special_tokens(&added);
    Ok(tokenizer)
}

/// A WordPiece vocabulary of at most `size` entries: `specials` (ids 0..),
/// every character of the normalised `texts` and its `##` continuation (so
/// every word can be spelled), then whole words by frequency (ties in
/// alphabetical order). Built, not trained: the same texts give the same
/// vocabulary, which `tokenizers`' trainers (hash-ordered) do not.
fn word_piece_vocab(
    specials: &[&str],
    texts: &[&str],
    size: usize,
) -> Result<HashMap<String, u32>, String> {
    let mut words: BTreeMap<String, u64> = BTreeMap::new();
    let mut chars: BTreeSet<char> = BTreeSet::new();
    let normalizer = BertNormalizer::new(true, true, None, true);
    for text in texts {
        let mut normalized = NormalizedString::from(*text);
        normalizer
            .normalize(&mut normalized)
            .map_err(|e| e.to_string())?;
        let mut split = PreTokenizedString::from(normalized);
        BertPreTokenizer
            .pre_tokenize(&mut split)
            .map_err(|e| e.to_string())?;
        for (word, _, _) in split.get_splits(OffsetReferential::Original, OffsetType::Byte) {
            chars.extend(word.chars());
            *words.entry(word.to_string()).or_insert(0) += 1;
        }
    }
    let mut tokens: Vec<String> = specials.iter().map(|s| s.to_string()).collect();
    tokens.extend(chars.iter().map(char::to_string));
    tokens.extend(chars.iter().map(|c| format!("##{c}")));
    let mut by_count: Vec<(&String, &u64)> = words.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut vocab: HashMap<String, u32> = HashMap::new();
    for token in tokens
        .into_iter()
        .chain(by_count.into_iter().map(|(w, _)| w.clone()))
    {
        if vocab.len() == size {
            break;
        }
        let next = vocab.len() as u32;
        vocab.entry(token).or_insert(next);
    }
    Ok(vocab)
}

/// `config.json` of a preset, in the keys transformers' config classes
/// read (so a reference script builds the same model from it).
pub fn hf_config_json(config: &ModelConfig) -> serde_json::Value {
    match config {
        ModelConfig::Bert(c) => c.hf_config_json(),
        ModelConfig::Deberta(c) => deberta_config_json(c),
    }
}

fn deberta_config_json(c: &DebertaConfig) -> serde_json::Value {
    let kinds: Vec<&str> = [(c.p2c, "p2c"), (c.c2p, "c2p")]
        .into_iter()
        .filter_map(|(on, kind)| on.then_some(kind))
        .collect();
    serde_json::json!({
        "model_type": "deberta-v2",
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "intermediate_size": c.intermediate_size,
        "hidden_act": "gelu",
        "hidden_dropout_prob": c.hidden_dropout_prob,
        "attention_probs_dropout_prob": c.attention_probs_dropout_prob,
        "max_position_embeddings": c.max_position_embeddings,
        "type_vocab_size": c.type_vocab_size,
        "layer_norm_eps": c.layer_norm_eps,
        "initializer_range": c.initializer_range,
        "relative_attention": true,
        "max_relative_positions": c.max_relative_positions,
        "position_buckets": c.position_buckets,
        "share_att_key": true,
        "pos_att_type": kinds,
        "norm_rel_ebd": if c.norm_rel_ebd { "layer_norm" } else { "none" },
        "position_biased_input": c.position_biased_input,
        "pooler_hidden_size": c.hidden_size,
        "pooler_dropout": c.pooler_dropout,
        "pooler_hidden_act": "gelu",
        "cls_dropout": c.cls_dropout,
        "pad_token_id": c.pad_token_id,
    })
}
