//! Tokenizer loading, truncation, pairs and the model-fit check, on a tiny
//! vocabulary and on the real all-MiniLM-L6-v2 files.

mod io_support;

use io_support::{TINY_VOCAB, embeddings_fixture, minilm_dir, write_vocab};
use trainer::tokenize::{SpecialTokens, TextTokenizer, TokenizerError};

fn tiny(max_length: usize) -> (tempfile::TempDir, TextTokenizer) {
    let dir = tempfile::tempdir().unwrap();
    let vocab = write_vocab(dir.path(), TINY_VOCAB);
    let tokenizer = TextTokenizer::from_vocab_txt(&vocab, true, max_length).unwrap();
    (dir, tokenizer)
}

fn id(token: &str) -> u32 {
    TINY_VOCAB.iter().position(|t| *t == token).unwrap() as u32
}

/// BERT's special tokens written in a text are those tokens, as
/// transformers' BertTokenizer reads them; in lower case they are words.
#[test]
fn vocab_txt_tokenizer_reads_special_tokens_in_a_text_as_themselves() {
    let (_dir, tokenizer) = tiny(32);
    let encoded = tokenizer.encode("[CLS] the [MASK] [pad]", None).unwrap();
    let expected = [
        "[CLS]", "[CLS]", "the", "[MASK]", "[UNK]", "[UNK]", "[UNK]", "[SEP]",
    ];
    assert_eq!(encoded.ids, expected.map(id));
}

#[test]
fn vocab_txt_tokenizer_lowercases_splits_pieces_and_adds_cls_sep() {
    let (_dir, tokenizer) = tiny(32);
    assert_eq!(
        tokenizer.special_tokens(),
        SpecialTokens {
            cls: 2,
            sep: 3,
            pad: 0
        }
    );
    let encoded = tokenizer
        .encode("The movie is VERY good!  Playing films?", None)
        .unwrap();
    let expected = [
        "[CLS]", "the", "movie", "is", "very", "good", "!", "play", "##ing", "film", "##s", "?",
        "[SEP]",
    ];
    assert_eq!(encoded.ids, expected.map(id));
    assert_eq!(encoded.type_ids, vec![0; expected.len()]);
    // Unknown words become [UNK].
    assert_eq!(
        tokenizer.encode("zebra", None).unwrap().ids,
        ["[CLS]", "[UNK]", "[SEP]"].map(id)
    );
}

#[test]
fn pairs_get_segment_ids_and_are_truncated_longest_first() {
    let (_dir, tokenizer) = tiny(32);
    let encoded = tokenizer.encode("the movie", Some("is good")).unwrap();
    assert_eq!(
        encoded.ids,
        ["[CLS]", "the", "movie", "[SEP]", "is", "good", "[SEP]"].map(id)
    );
    assert_eq!(encoded.type_ids, [0, 0, 0, 0, 1, 1, 1]);

    let (_dir, short) = tiny(7);
    let encoded = short
        .encode("the movie is very very good", Some("bad"))
        .unwrap();
    // 7 = [CLS] + 3 of the first + [SEP] + "bad" + [SEP]: the longer text loses.
    assert_eq!(
        encoded.ids,
        ["[CLS]", "the", "movie", "is", "[SEP]", "bad", "[SEP]"].map(id)
    );
}

#[test]
fn single_texts_are_truncated_to_max_length_with_sep_kept() {
    let (_dir, tokenizer) = tiny(5);
    let encoded = tokenizer.encode("the movie is very good", None).unwrap();
    assert_eq!(
        encoded.ids,
        ["[CLS]", "the", "movie", "is", "[SEP]"].map(id)
    );
}

#[test]
fn a_vocab_without_pad_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let vocab = write_vocab(dir.path(), &["[UNK]", "[CLS]", "[SEP]", "the"]);
    let err = TextTokenizer::from_vocab_txt(&vocab, true, 16).unwrap_err();
    assert!(
        matches!(err, TokenizerError::MissingSpecialToken { .. }),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("[PAD]") && message.contains("vocab.txt"),
        "{message}"
    );
}

#[test]
fn a_tokenizer_larger_than_the_model_vocab_is_rejected() {
    let (_dir, tokenizer) = tiny(16);
    tokenizer.check_model(TINY_VOCAB.len(), 512).unwrap();
    let err = tokenizer
        .check_model(TINY_VOCAB.len() - 1, 512)
        .unwrap_err();
    assert!(matches!(err, TokenizerError::VocabTooLarge { .. }), "{err}");
    assert!(err.to_string().contains("do not match"), "{err}");
    let err = tokenizer.check_model(TINY_VOCAB.len(), 8).unwrap_err();
    assert!(
        matches!(err, TokenizerError::MaxLengthExceedsPositions { .. }),
        "{err}"
    );
}

#[test]
fn bad_tokenizer_files_and_lengths_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, "{\"model\": 42").unwrap();
    let err = TextTokenizer::from_tokenizer_json(&path, 16).unwrap_err();
    assert!(matches!(err, TokenizerError::Load { .. }), "{err}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
    let err = TextTokenizer::from_vocab_txt(dir.path().join("absent.txt"), true, 16).unwrap_err();
    assert!(err.to_string().contains("absent.txt"), "{err}");
    // A model directory without either file names both.
    let empty = tempfile::tempdir().unwrap();
    let err = TextTokenizer::from_model_dir(empty.path(), 16).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("tokenizer.json") && text.contains("vocab.txt"),
        "{text}"
    );
    let vocab = write_vocab(dir.path(), TINY_VOCAB);
    let err = TextTokenizer::from_vocab_txt(&vocab, true, 3).unwrap_err();
    assert!(
        matches!(err, TokenizerError::MaxLengthTooSmall { max_length: 3 }),
        "{err}"
    );
}

/// The family fixtures' `tokenizer.json` as JSON, to edit.
fn family_tokenizer(family: &str) -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/families")
        .join(family)
        .join("tokenizer.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A tokenizer that adds no [CLS] (no post-processor), or whose special
/// tokens fill `max_length`, is refused naming its file; a pair that would
/// keep no token of its texts is refused when encoded.
#[test]
fn tokenizers_without_room_for_the_text_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    let mut json = family_tokenizer("bert");
    json["post_processor"] = serde_json::Value::Null;
    std::fs::write(&path, json.to_string()).unwrap();
    let err = TextTokenizer::from_tokenizer_json(&path, 16).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("tokenizer.json") && text.contains("no post_processor"),
        "{text}"
    );

    // Five [CLS] before the text: 6 special tokens in all.
    let mut json = family_tokenizer("bert");
    let cls = serde_json::json!({"SpecialToken": {"id": "[CLS]", "type_id": 0}});
    let single = json["post_processor"]["single"].as_array_mut().unwrap();
    for _ in 0..4 {
        single.insert(0, cls.clone());
    }
    std::fs::write(&path, json.to_string()).unwrap();
    let err = TextTokenizer::from_tokenizer_json(&path, 6).unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::NoRoomForText {
                special: 6,
                max_length: 6,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("at least 7"), "{err}");
    TextTokenizer::from_tokenizer_json(&path, 7).unwrap();

    // RoBERTa's pair takes 4 special tokens: at max_length 4, none is left.
    std::fs::write(&path, family_tokenizer("roberta").to_string()).unwrap();
    let tokenizer = TextTokenizer::from_tokenizer_json(&path, 4).unwrap();
    tokenizer.encode("a good film", None).unwrap();
    let err = tokenizer.encode("a good film", Some("yes")).unwrap_err();
    assert!(
        matches!(err, TokenizerError::NoRoomForText { special: 4, .. }),
        "{err}"
    );
    let ids = TextTokenizer::from_tokenizer_json(&path, 5)
        .unwrap()
        .encode("a good film", Some("yes"))
        .unwrap()
        .ids;
    assert_eq!(ids.len(), 5);
}

fn fixture_sentences() -> Vec<(String, Vec<u32>)> {
    let fixture = embeddings_fixture();
    let sentences = fixture["sentences"].as_array().unwrap();
    let ids = fixture["token_ids"].as_array().unwrap();
    sentences
        .iter()
        .zip(ids)
        .map(|(s, ids)| {
            let ids = ids
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            (s.as_str().unwrap().to_string(), ids)
        })
        .collect()
}

#[test]
fn minilm_tokenizer_json_gives_known_ids_without_fixed_padding() {
    let Some(dir) = minilm_dir("minilm_tokenizer_json_gives_known_ids_without_fixed_padding")
    else {
        return;
    };
    let tokenizer = TextTokenizer::from_tokenizer_json(dir.join("tokenizer.json"), 128).unwrap();
    tokenizer.check_model(30522, 512).unwrap();
    assert_eq!(
        tokenizer.special_tokens(),
        SpecialTokens {
            cls: 101,
            sep: 102,
            pad: 0
        }
    );
    // The shipped file pads to 128; ours must not.
    let encoded = tokenizer.encode("The new movie is awesome", None).unwrap();
    assert_eq!(encoded.ids, [101, 1996, 2047, 3185, 2003, 12476, 102]);
    for (sentence, ids) in fixture_sentences() {
        assert_eq!(
            tokenizer.encode(&sentence, None).unwrap().ids,
            ids,
            "{sentence}"
        );
    }
    let pair = tokenizer
        .encode("The new movie is awesome", Some("so great"))
        .unwrap();
    assert_eq!(
        pair.ids,
        [101, 1996, 2047, 3185, 2003, 12476, 102, 2061, 2307, 102]
    );
    assert_eq!(pair.type_ids, [0, 0, 0, 0, 0, 0, 0, 1, 1, 1]);
    let long = "word ".repeat(300);
    assert_eq!(tokenizer.encode(&long, None).unwrap().ids.len(), 128);
    // A model with a smaller vocabulary does not fit this tokenizer.
    let err = tokenizer.check_model(30000, 512).unwrap_err();
    assert!(
        matches!(err, TokenizerError::VocabTooLarge { max_id: 30521, .. }),
        "{err}"
    );
}

#[test]
fn minilm_vocab_txt_matches_its_tokenizer_json() {
    let Some(dir) = minilm_dir("minilm_vocab_txt_matches_its_tokenizer_json") else {
        return;
    };
    let from_json = TextTokenizer::from_tokenizer_json(dir.join("tokenizer.json"), 64).unwrap();
    let from_vocab = TextTokenizer::from_vocab_txt(dir.join("vocab.txt"), true, 64).unwrap();
    assert_eq!(from_vocab.special_tokens(), from_json.special_tokens());
    for (sentence, ids) in fixture_sentences() {
        assert_eq!(
            from_vocab.encode(&sentence, None).unwrap().ids,
            ids,
            "{sentence}"
        );
    }
    for (a, b) in [
        ("Wasn't that café great?", "No — it was NOT."),
        ("I love pasta", "Do you like pizza?"),
        // Special tokens written in the text are those tokens, never split
        // into pieces (as transformers' BertTokenizer reads them); in
        // another case they are words.
        ("[CLS]", "hi [PAD] there"),
        ("a [MASK] b [SEP] c", "[UNK] x [cls]"),
    ] {
        assert_eq!(
            from_vocab.encode(a, Some(b)).unwrap(),
            from_json.encode(a, Some(b)).unwrap(),
            "{a} / {b}"
        );
        assert_eq!(
            from_vocab.encode(a, None).unwrap(),
            from_json.encode(a, None).unwrap(),
            "{a}"
        );
    }
}

/// Long texts are tokenized only as far as truncation keeps (a prefix of
/// whole words): the ids and token types must be those of tokenizing the
/// whole text, for every family's tokenizer, single texts and pairs.
#[test]
fn long_texts_give_the_tokens_of_the_whole_text() {
    use tokenizers::{Tokenizer, TruncationParams, TruncationStrategy};
    let families = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/families");
    let words = [
        "the",
        "film",
        "was",
        "Good,",
        "really",
        "good.",
        "Ünïcödé",
        "naïve",
        "東京",
        "—",
        "don't",
        "x",
        "supercalifragilisticexpialidocious",
        "42",
        "3.14",
        "!!",
        "\u{200b}",
        "e\u{301}",
        "\t",
        "  ",
        "\n",
    ];
    // Texts of whitespace-separated words, long enough to be cut.
    let text = |seed: usize, n: usize| -> String {
        (0..n)
            .map(|i| words[(i * 7 + seed * 13 + i * i) % words.len()])
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut checked = 0;
    for family in std::fs::read_dir(&families).unwrap() {
        let dir = family.unwrap().path();
        if !dir.join("tokenizer.json").is_file() {
            continue;
        }
        for max_length in [8, 40] {
            let ours = TextTokenizer::from_model_dir(&dir, max_length).unwrap();
            let mut whole = Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
            whole.with_padding(None);
            whole
                .with_truncation(Some(TruncationParams {
                    max_length,
                    strategy: TruncationStrategy::LongestFirst,
                    ..TruncationParams::default()
                }))
                .unwrap();
            let long = text(1, 20 * max_length);
            let also_long = text(2, 15 * max_length);
            let short = "a short one";
            for (a, b) in [
                (long.as_str(), None),
                (long.as_str(), Some(short)),
                (short, Some(long.as_str())),
                (long.as_str(), Some(also_long.as_str())),
                // Both cut: their kept parts compare otherwise than the
                // whole texts in some tokenizers, either way round.
                (also_long.as_str(), Some(long.as_str())),
            ] {
                let got = ours.encode(a, b).unwrap();
                let want = match b {
                    None => whole.encode(a, true),
                    Some(b) => whole.encode((a, b), true),
                }
                .unwrap();
                assert_eq!(got.ids, want.get_ids(), "{}: {max_length}", dir.display());
                assert_eq!(got.type_ids, want.get_type_ids(), "{}", dir.display());
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 7 * 2 * 5,
        "only {checked} cases: fixtures missing"
    );
}

/// A pair of long texts costs memory as their lengths, not as their
/// product: encoding both whole, truncation would pair each of the 10,000
/// pieces of one with each of the other's (gigabytes), where only their
/// first tokens are kept.
#[test]
fn a_pair_of_long_texts_is_encoded_in_memory_as_their_lengths() {
    let (_dir, tok) = tiny(8);
    let long = "good ".repeat(50_000);
    let also_long = "bad ".repeat(50_000);
    let got = tok.encode(&long, Some(&also_long)).unwrap();
    // Of the 5 tokens left between the specials the second text, the
    // longer one (or as long), keeps the odd one.
    assert_eq!(
        got.ids,
        [
            "[CLS]", "good", "good", "[SEP]", "bad", "bad", "bad", "[SEP]"
        ]
        .map(id)
    );
}

#[test]
fn a_vocab_txt_model_follows_do_lower_case_in_its_tokenizer_config() {
    let dir = tempfile::tempdir().unwrap();
    write_vocab(dir.path(), TINY_VOCAB);
    let ids = |tokenizer: &TextTokenizer| tokenizer.encode("The movie", None).unwrap().ids;
    // No tokenizer_config.json, or one without the key: HF's default, lowercased.
    let uncased = ["[CLS]", "the", "movie", "[SEP]"].map(id);
    assert_eq!(
        ids(&TextTokenizer::from_model_dir(dir.path(), 16).unwrap()),
        uncased
    );
    let config = dir.path().join("tokenizer_config.json");
    std::fs::write(&config, r#"{"model_max_length": 512}"#).unwrap();
    assert_eq!(
        ids(&TextTokenizer::from_model_dir(dir.path(), 16).unwrap()),
        uncased
    );
    // A cased model keeps the case: `The` is not in the vocabulary.
    std::fs::write(&config, r#"{"do_lower_case": false}"#).unwrap();
    let cased = TextTokenizer::from_model_dir(dir.path(), 16).unwrap();
    assert_eq!(ids(&cased), ["[CLS]", "[UNK]", "movie", "[SEP]"].map(id));
    // The tokenizer.json an export writes keeps the case too.
    let json = dir.path().join("written.json");
    std::fs::write(&json, cased.to_json().unwrap()).unwrap();
    assert_eq!(
        ids(&TextTokenizer::from_tokenizer_json(&json, 16).unwrap()),
        ids(&cased)
    );
    for bad in [r#"{"do_lower_case": "no"}"#, "{oops"] {
        std::fs::write(&config, bad).unwrap();
        let err = TextTokenizer::from_model_dir(dir.path(), 16).unwrap_err();
        assert!(err.to_string().contains("tokenizer_config.json"), "{err}");
    }
}
