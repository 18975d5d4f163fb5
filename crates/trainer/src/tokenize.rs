//! Text to token ids, with the `tokenizers` library.
//!
//! A [`TextTokenizer`] comes from a Hugging Face `tokenizer.json` or is built
//! from a BERT `vocab.txt` (BertNormalizer, BertPreTokenizer, WordPiece and
//! the `[CLS] A [SEP] B [SEP]` template, as HF's `BertTokenizerFast` does).
//! It truncates each example to `max_length` tokens (special tokens
//! included, longest-first for pairs) and never pads: padding is per batch,
//! to the longest sequence in it (see `data::batcher`), so any padding or
//! truncation stored in a `tokenizer.json` (all-MiniLM-L6-v2 pads every
//! sequence to 128) is replaced.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{
    AddedToken, PostProcessor, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy,
};

/// The smallest `max_length` that leaves room for a pair's three special
/// tokens and one real token.
pub const MIN_MAX_LENGTH: usize = 4;

/// Why a tokenizer could not be loaded, checked or used.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The tokenizer could not be read, built or configured (also: a model
    /// directory with neither `tokenizer.json` nor `vocab.txt`, or a
    /// tokenizer that cannot be written back as JSON).
    #[error("cannot load tokenizer from {}: {message}", path.display())]
    Load {
        /// The tokenizer file (or the model directory searched).
        path: PathBuf,
        /// What went wrong, often the `tokenizers` library's own message.
        message: String,
    },
    /// The vocabulary lacks a special token a classifier input needs.
    #[error("tokenizer from {} has no `{token}` token (looked for {candidates:?})", path.display())]
    MissingSpecialToken {
        /// The tokenizer file.
        path: PathBuf,
        /// The token's role, e.g. `"separator (SEP)"`.
        token: &'static str,
        /// The spellings looked for, e.g. `["[SEP]", "</s>"]`.
        candidates: &'static [&'static str],
    },
    /// The tokenizer gives ids the model's word embeddings have no row for.
    #[error(
        "tokenizer from {} has token ids up to {max_id} (vocabulary of {tokenizer_vocab}) \
         but the model's embedding table has only {model_vocab} rows: tokenizer and model do not match",
        path.display()
    )]
    VocabTooLarge {
        /// The tokenizer file.
        path: PathBuf,
        /// The largest token id of the tokenizer, added tokens included.
        max_id: u32,
        /// Tokens in the tokenizer's vocabulary, added tokens included.
        tokenizer_vocab: usize,
        /// Rows of the model's word embedding table (its `vocab_size`).
        model_vocab: usize,
    },
    /// Sequences of `max_length` tokens would need more position
    /// embeddings than the model has.
    #[error("max_length {max_length} exceeds the model's {max_positions} position embeddings")]
    MaxLengthExceedsPositions {
        /// The tokenizer's truncation length, in tokens.
        max_length: usize,
        /// The longest sequence the model's position table allows, in tokens.
        max_positions: usize,
    },
    /// The `max_length` asked for is below [`MIN_MAX_LENGTH`].
    #[error("max_length {max_length} is too small: it must be at least {MIN_MAX_LENGTH}")]
    MaxLengthTooSmall {
        /// The length asked for, in tokens.
        max_length: usize,
    },
    /// The special tokens the tokenizer adds to a text (or a pair) leave
    /// no room in `max_length` for a token of it.
    #[error(
        "tokenizer from {} adds {special} special tokens to {what}, which leaves no room for \
         its text in max_length {max_length}: use a max_length of at least {}",
        path.display(),
        special + 1
    )]
    NoRoomForText {
        /// The tokenizer file.
        path: PathBuf,
        /// `"a text"` or `"a pair"`.
        what: &'static str,
        /// Special tokens added to it.
        special: usize,
        /// The tokenizer's truncation length, in tokens.
        max_length: usize,
    },
    /// The `tokenizers` library failed on one text.
    #[error("cannot tokenize {text:?}: {message}")]
    Encode {
        /// The start of the text (at most 80 characters, then `...`).
        text: String,
        /// The library's own message.
        message: String,
    },
    /// An example gets a token type the model cannot read (typically the
    /// second text of a pair, for a model whose `type_vocab_size` is 1).
    #[error(
        "tokenizer from {} gives token type {type_id} to the pair {text:?}, but the model reads \
         only {type_vocab_size} token type(s) ({}: `type_vocab_size`): train it on single \
         texts (no `text_pair`), or choose a model that reads pairs",
        path.display(),
        config.display()
    )]
    TokenTypes {
        /// The tokenizer file.
        path: PathBuf,
        /// The model's `config.json`.
        config: PathBuf,
        /// The first token type at or above `type_vocab_size`.
        type_id: u32,
        /// Token types the model reads.
        type_vocab_size: usize,
        /// The start of the example, `text | pair` (at most 80 characters,
        /// then `...`).
        text: String,
    },
}

/// Ids of the special tokens a classifier input uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecialTokens {
    /// `[CLS]` (BERT) or `<s>` (RoBERTa): first token, pooled by the classifier.
    pub cls: u32,
    /// `[SEP]` or `</s>`: ends each segment.
    pub sep: u32,
    /// `[PAD]` or `<pad>`: fills batches to their longest sequence.
    pub pad: u32,
}

/// One example's tokens, unpadded: special tokens included, truncated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// Token ids, at most the tokenizer's `max_length`.
    pub ids: Vec<u32>,
    /// 0 for the first segment, 1 for the second of a pair.
    pub type_ids: Vec<u32>,
}

/// A tokenizer configured for classifier inputs (see the module doc).
#[derive(Clone)]
pub struct TextTokenizer {
    inner: Tokenizer,
    source: PathBuf,
    max_length: usize,
    special: SpecialTokens,
    /// Special tokens the post-processor adds to a pair.
    pair_special: usize,
}

/// The special tokens of transformers' `BertTokenizer`.
const BERT_SPECIAL_TOKENS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
const CLS_CANDIDATES: &[&str] = &["[CLS]", "<s>"];
const SEP_CANDIDATES: &[&str] = &["[SEP]", "</s>"];
const PAD_CANDIDATES: &[&str] = &["[PAD]", "<pad>"];

impl TextTokenizer {
    /// Loads a Hugging Face `tokenizer.json`; its own padding and truncation
    /// settings are replaced by `max_length` truncation and no padding.
    pub fn from_tokenizer_json(
        path: impl AsRef<Path>,
        max_length: usize,
    ) -> Result<Self, TokenizerError> {
        let path = path.as_ref();
        let inner = Tokenizer::from_file(path).map_err(|e| TokenizerError::Load {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Self::configure(inner, path, max_length)
    }

    /// Builds BERT's WordPiece tokenizer from a `vocab.txt` (one token a
    /// line, the id is the line number). `lowercase` must match the model
    /// (true for uncased models such as all-MiniLM-L6-v2).
    pub fn from_vocab_txt(
        path: impl AsRef<Path>,
        lowercase: bool,
        max_length: usize,
    ) -> Result<Self, TokenizerError> {
        let path = path.as_ref();
        let load_error = |message: String| TokenizerError::Load {
            path: path.to_path_buf(),
            message,
        };
        let path_str = path
            .to_str()
            .ok_or_else(|| load_error("the path is not valid UTF-8".into()))?;
        let wordpiece = WordPiece::from_file(path_str)
            .unk_token("[UNK]".into())
            .build()
            .map_err(|e| load_error(e.to_string()))?;
        let mut inner = Tokenizer::new(wordpiece);
        // BERT's special tokens, written in a text, are those tokens, not
        // words to split into pieces: transformers' BertTokenizer adds them
        // as special tokens, matched before normalisation.
        let specials: Vec<AddedToken> = BERT_SPECIAL_TOKENS
            .iter()
            .filter(|t| inner.token_to_id(t).is_some())
            .map(|t| AddedToken::from(*t, true))
            .collect();
        inner.add_special_tokens(&specials);
        let special = find_special_tokens(&inner, path)?;
        if inner.token_to_id("[UNK]").is_none() {
            return Err(TokenizerError::MissingSpecialToken {
                path: path.to_path_buf(),
                token: "unknown",
                candidates: &["[UNK]"],
            });
        }
        let template = TemplateProcessing::builder()
            .try_single("[CLS]:0 $A:0 [SEP]:0")
            .and_then(|b| b.try_pair("[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1"))
            .map_err(|e| load_error(e.to_string()))?
            .special_tokens(vec![("[CLS]", special.cls), ("[SEP]", special.sep)])
            .build()
            .map_err(|e| load_error(e.to_string()))?;
        inner
            .with_normalizer(Some(BertNormalizer::new(true, true, None, lowercase)))
            .with_pre_tokenizer(Some(BertPreTokenizer))
            .with_post_processor(Some(template))
            .with_decoder(Some(WordPieceDecoder::default()));
        Self::configure(inner, path, max_length)
    }

    /// `tokenizer.json` in `dir` when present, otherwise `vocab.txt`,
    /// lowercased as `tokenizer_config.json`'s `do_lower_case` says (true
    /// when absent, as for transformers' `BertTokenizer`).
    pub fn from_model_dir(
        dir: impl AsRef<Path>,
        max_length: usize,
    ) -> Result<Self, TokenizerError> {
        let dir = dir.as_ref();
        let (json, vocab) = (dir.join("tokenizer.json"), dir.join("vocab.txt"));
        if json.exists() {
            Self::from_tokenizer_json(json, max_length)
        } else if vocab.exists() {
            let lowercase = do_lower_case(&dir.join("tokenizer_config.json"))?;
            Self::from_vocab_txt(vocab, lowercase, max_length)
        } else {
            Err(TokenizerError::Load {
                path: dir.to_path_buf(),
                message: "no tokenizer: neither tokenizer.json nor vocab.txt is there".into(),
            })
        }
    }

    fn configure(
        mut inner: Tokenizer,
        path: &Path,
        max_length: usize,
    ) -> Result<Self, TokenizerError> {
        if max_length < MIN_MAX_LENGTH {
            return Err(TokenizerError::MaxLengthTooSmall { max_length });
        }
        let special = find_special_tokens(&inner, path)?;
        // The classifier pools the first token: something must put [CLS]
        // (or <s>) there.
        let Some(post) = inner.get_post_processor() else {
            return Err(TokenizerError::Load {
                path: path.to_path_buf(),
                message: "it has no post_processor, so nothing adds the [CLS] (or <s>) token \
                          the classifier reads, nor the [SEP] (or </s>) that ends a text"
                    .into(),
            });
        };
        let (single_special, pair_special) = (post.added_tokens(false), post.added_tokens(true));
        // Truncation keeps `max_length` less the special tokens of each text:
        // at least one must be left (the tokenizers crate overflows where
        // the special tokens alone are more).
        if single_special + 1 > max_length {
            return Err(TokenizerError::NoRoomForText {
                path: path.to_path_buf(),
                what: "a text",
                special: single_special,
                max_length,
            });
        }
        inner.with_padding(None);
        inner
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| TokenizerError::Load {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        Ok(Self {
            inner,
            source: path.to_path_buf(),
            max_length,
            special,
            pair_special,
        })
    }

    /// Checks that this tokenizer fits a model: every token id has a row in
    /// the model's embedding table (`model_vocab_size`), and `max_length`
    /// tokens have position embeddings (`max_positions`: for RoBERTa-style
    /// models, the table size less the padding offset).
    pub fn check_model(
        &self,
        model_vocab_size: usize,
        max_positions: usize,
    ) -> Result<(), TokenizerError> {
        let vocab = self.inner.get_vocab(true);
        let max_id = vocab.values().copied().max().unwrap_or(0);
        if max_id as usize >= model_vocab_size {
            return Err(TokenizerError::VocabTooLarge {
                path: self.source.clone(),
                max_id,
                tokenizer_vocab: vocab.len(),
                model_vocab: model_vocab_size,
            });
        }
        if self.max_length > max_positions {
            return Err(TokenizerError::MaxLengthExceedsPositions {
                max_length: self.max_length,
                max_positions,
            });
        }
        Ok(())
    }

    /// Tokenizes every example (a text, or a pair) as training will, and
    /// checks each with [`Self::encode_within`]. The error names one
    /// example at fault.
    pub fn check_examples(
        &self,
        examples: &[(&str, Option<&str>)],
        type_vocab_size: Option<usize>,
        config: &Path,
    ) -> Result<(), TokenizerError> {
        examples.par_iter().try_for_each(|&(text, pair)| {
            self.encode_within(text, pair, type_vocab_size, config)
                .map(drop)
        })
    }

    /// [`Self::encode`], refusing token types of `type_vocab_size` or more,
    /// which the model cannot read (`None`: it reads none; `config` names
    /// its `config.json` in the error).
    pub fn encode_within(
        &self,
        text: &str,
        pair: Option<&str>,
        type_vocab_size: Option<usize>,
        config: &Path,
    ) -> Result<Encoded, TokenizerError> {
        let encoded = self.encode(text, pair)?;
        let limit = type_vocab_size.unwrap_or(usize::MAX);
        match encoded.type_ids.iter().find(|&&t| t as usize >= limit) {
            None => Ok(encoded),
            Some(&type_id) => Err(TokenizerError::TokenTypes {
                path: self.source.clone(),
                config: config.to_path_buf(),
                type_id,
                type_vocab_size: limit,
                text: excerpt(&format!("{text} | {}", pair.unwrap_or(""))),
            }),
        }
    }

    /// Tokenizes one example (a text, or a pair), truncated to `max_length`.
    /// An empty second text is no pair, as in transformers' tokenizers.
    pub fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoded, TokenizerError> {
        if pair.is_some_and(|p| !p.is_empty()) && self.pair_special >= self.max_length {
            return Err(TokenizerError::NoRoomForText {
                path: self.source.clone(),
                what: "a pair",
                special: self.pair_special,
                max_length: self.max_length,
            });
        }
        // A text of a pair is cut to its kept part only where the other is
        // not cut and has fewer tokens than any cut part has: the longer
        // text then stays the longer one, and truncation splits the tokens
        // between the two as it would the whole texts.
        let result = match pair.filter(|p| !p.is_empty()) {
            None => self.inner.encode(self.kept_part(text), true),
            Some(pair) => {
                let (a, b) = (self.kept_part(text), self.kept_part(pair));
                let cut = |kept: &str, whole: &str| kept.len() < whole.len();
                if cut(a, text) && !cut(b, pair) && self.reaches_max_length(pair) == Some(false) {
                    self.inner.encode((a, pair), true)
                } else if cut(b, pair)
                    && !cut(a, text)
                    && self.reaches_max_length(text) == Some(false)
                {
                    self.inner.encode((text, b), true)
                } else if cut(a, text) && cut(b, pair) {
                    self.encode_both_cut((text, a), (pair, b))
                } else {
                    self.inner.encode((text, pair), true)
                }
            }
        };
        let encoding = result.map_err(|e| TokenizerError::Encode {
            text: excerpt(text),
            message: e.to_string(),
        })?;
        Ok(Encoded {
            ids: encoding.get_ids().to_vec(),
            type_ids: encoding.get_type_ids().to_vec(),
        })
    }

    /// A pair whose texts are both cut to their kept parts. Truncation
    /// then keeps half the length of each, and only which whole text has
    /// more tokens (it keeps the odd one) depends on the parts cut off; so
    /// the kept parts are encoded where they compare as the whole texts do,
    /// else the longer whole text with the other's kept part. Encoding both
    /// whole texts would pair every truncated piece of one with every piece
    /// of the other: memory as the product of their lengths.
    fn encode_both_cut(
        &self,
        (text, a): (&str, &str),
        (pair, b): (&str, &str),
    ) -> tokenizers::Result<tokenizers::Encoding> {
        let (whole_a, whole_b) = (self.token_count(text)?, self.token_count(pair)?);
        let (kept_a, kept_b) = (self.token_count(a)?, self.token_count(b)?);
        if (kept_a > kept_b) == (whole_a > whole_b) {
            self.inner.encode((a, b), true)
        } else if whole_a > whole_b {
            self.inner.encode((text, b), true)
        } else {
            self.inner.encode((a, pair), true)
        }
    }

    /// Every token of `text` alone, without special tokens: truncation's
    /// pieces do not overlap (stride 0), so with the overflowing ones they
    /// are the whole text's.
    fn token_count(&self, text: &str) -> tokenizers::Result<usize> {
        let encoded = self.inner.encode(text, false)?;
        let overflowing: usize = encoded.get_overflowing().iter().map(|e| e.len()).sum();
        Ok(encoded.len() + overflowing)
    }

    /// Whether `text` alone gives at least `max_length` tokens (`None`: it
    /// cannot be encoded). Encoded with truncation and no special tokens,
    /// so it is as long as that only if the whole text gives as many.
    fn reaches_max_length(&self, text: &str) -> Option<bool> {
        let encoded = self.inner.encode(text, false).ok()?;
        Some(encoded.len() >= self.max_length)
    }

    /// `text`, or a prefix of it ending at a word boundary that on its own
    /// gives at least `max_length` tokens: truncation keeps no more, and
    /// every tokenizer here splits words at whitespace and normalises
    /// character by character, so the tokens kept are those of the whole
    /// text. A 10 MB record takes a minute to tokenize whole.
    fn kept_part<'t>(&self, text: &'t str) -> &'t str {
        // Each word gives at least one token; twice as many words leave
        // room for words a normaliser erases.
        let words = 2 * self.max_length;
        if text.len() < 16 * words {
            return text;
        }
        let mut seen = 0;
        let mut in_word = false;
        for (at, c) in text.char_indices() {
            // ASCII white space only: every normaliser keeps it (BERT's
            // deletes some other control characters, joining the words
            // around them).
            if !matches!(c, ' ' | '\t' | '\n' | '\r') {
                in_word = true;
                continue;
            }
            if in_word {
                seen += 1;
                if seen == words {
                    let prefix = &text[..at];
                    let enough = self.reaches_max_length(prefix) == Some(true);
                    return if enough { prefix } else { text };
                }
            }
            in_word = false;
        }
        text
    }

    /// The ids of `[CLS]`, `[SEP]` and `[PAD]` (or their RoBERTa spellings).
    pub fn special_tokens(&self) -> SpecialTokens {
        self.special
    }

    /// The length every example is truncated to, in tokens, special tokens
    /// included (at least [`MIN_MAX_LENGTH`]).
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// Number of distinct tokens, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of a token, if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The tokenizer as a Hugging Face `tokenizer.json`, without the
    /// truncation to `max_length` (a saved model's readers choose their own).
    pub fn to_json(&self) -> Result<String, TokenizerError> {
        let mut plain = self.inner.clone();
        let saved = plain
            .with_truncation(None)
            .map_err(|e| e.to_string())
            .and_then(|t| t.to_string(true).map_err(|e| e.to_string()));
        saved.map_err(|message| TokenizerError::Load {
            path: self.source.clone(),
            message,
        })
    }

    /// The file this tokenizer was loaded from.
    pub fn source(&self) -> &Path {
        &self.source
    }
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("source", &self.source)
            .field("max_length", &self.max_length)
            .field("special", &self.special)
            .field("vocab_size", &self.vocab_size())
            .finish()
    }
}

/// `do_lower_case` of a `tokenizer_config.json` (`path`): true when the file
/// or the key is absent, transformers' default for BERT's WordPiece.
fn do_lower_case(path: &Path) -> Result<bool, TokenizerError> {
    let load_error = |message: String| TokenizerError::Load {
        path: path.to_path_buf(),
        message,
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(load_error(e.to_string())),
    };
    let config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| load_error(e.to_string()))?;
    match config.get("do_lower_case") {
        None => Ok(true),
        Some(serde_json::Value::Bool(lowercase)) => Ok(*lowercase),
        Some(other) => Err(load_error(format!(
            "`do_lower_case` is {other}, not true or false"
        ))),
    }
}

fn find_special_tokens(inner: &Tokenizer, path: &Path) -> Result<SpecialTokens, TokenizerError> {
    let vocab: HashMap<String, u32> = inner.get_vocab(true);
    let find = |token: &'static str, candidates: &'static [&'static str]| {
        candidates
            .iter()
            .find_map(|c| vocab.get(*c).copied())
            .ok_or_else(|| TokenizerError::MissingSpecialToken {
                path: path.to_path_buf(),
                token,
                candidates,
            })
    };
    Ok(SpecialTokens {
        cls: find("classifier (CLS)", CLS_CANDIDATES)?,
        sep: find("separator (SEP)", SEP_CANDIDATES)?,
        pad: find("padding (PAD)", PAD_CANDIDATES)?,
    })
}

/// The start of a text, for error messages.
fn excerpt(text: &str) -> String {
    const MAX_CHARS: usize = 80;
    if text.chars().count() <= MAX_CHARS {
        text.to_string()
    } else {
        text.chars().take(MAX_CHARS).chain("...".chars()).collect()
    }
}
