//! A model's `config.json` with sizes no model has (1e9 labels, positions,
//! hidden units, layers), or sizes its `model.safetensors` contradicts, is
//! refused with an error naming the file and the field, before anything of
//! that size is allocated: every check here would otherwise allocate
//! gigabytes to terabytes and abort.

use std::path::Path;

use serde_json::Value as Json;
use trainer::config::ConfigError;
use trainer::export::HfClassifier;
use trainer::finetune::check_model_dir;

fn tiny(dir: &Path) {
    let words = trainer::testing::sentiment_words(200);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    trainer::testing::write_tiny_model(dir, &trainer::testing::tiny_config(), &words, 3).unwrap();
}

/// The tiny model's config.json with `changes` applied.
fn edit_config(dir: &Path, changes: &[(&str, Json)]) {
    let path = dir.join("config.json");
    let mut json: Json = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for (k, v) in changes {
        json[*k] = v.clone();
    }
    std::fs::write(&path, serde_json::to_string(&json).unwrap()).unwrap();
}

#[test]
fn sizes_beyond_the_limits_are_refused_naming_the_field() {
    for field in [
        "hidden_size",
        "max_position_embeddings",
        "num_hidden_layers",
        "intermediate_size",
        "vocab_size",
        "num_attention_heads",
        "type_vocab_size",
    ] {
        let dir = tempfile::tempdir().unwrap();
        tiny(dir.path());
        edit_config(dir.path(), &[(field, Json::from(1_000_000_000u64))]);
        let err = check_model_dir(dir.path(), 2).unwrap_err();
        assert!(err.is_size_error(), "{field}: {err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("`{field}` = 1000000000")) && text.contains("config.json"),
            "{text}"
        );
        let Err(err) = HfClassifier::load(dir.path(), None) else {
            panic!("loaded")
        };
        assert!(err.is_size_error(), "{field}: {err}");
    }
}

#[test]
fn a_billion_labels_are_refused_before_the_head_is_built() {
    for labels in [
        ("num_labels", Json::from(1_000_000_000u64)),
        (
            "id2label",
            Json::Object(
                (0..100_001)
                    .map(|i| (i.to_string(), Json::from("x")))
                    .collect(),
            ),
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        tiny(dir.path());
        edit_config(
            dir.path(),
            &[
                (
                    "architectures",
                    serde_json::json!(["BertForSequenceClassification"]),
                ),
                labels.clone(),
            ],
        );
        let Err(err) = HfClassifier::load(dir.path(), None) else {
            panic!("loaded")
        };
        assert!(err.is_size_error(), "{}: {err}", labels.0);
        assert!(err.to_string().contains("`num_labels`"), "{err}");
    }
}

/// Within the limits, but not what the checkpoint holds: refused by the
/// checkpoint's own shapes.
#[test]
fn sizes_the_checkpoint_contradicts_are_refused() {
    for (field, value, names) in [
        ("hidden_size", 768, "embeddings.word_embeddings.weight"),
        ("vocab_size", 30_522, "embeddings.word_embeddings.weight"),
        ("max_position_embeddings", 4_096, "position_embeddings"),
        ("num_hidden_layers", 24, "2 encoder layers"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        tiny(dir.path());
        let mut changes = vec![(field, Json::from(value))];
        if field == "hidden_size" {
            changes.push(("num_attention_heads", Json::from(12)));
        }
        edit_config(dir.path(), &changes);
        let err = check_model_dir(dir.path(), 2).unwrap_err();
        assert!(err.is_size_error(), "{field}: {err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("`{field}` = {value}")) && text.contains(names),
            "{text}"
        );
        // The config alone reads: only the checkpoint contradicts it.
        assert!(trainer::finetune::read_model_config(&dir.path().join("config.json")).is_ok());
    }
    // A size error is a ConfigError::Size.
    let e = ConfigError::Size {
        path: "c.json".into(),
        field: "hidden_size",
        value: 1,
        problem: String::new(),
    };
    assert!(e.is_size());
}

/// Sizes within the limits whose checkpoint holds none of them: prediction
/// refuses the checkpoint before allocating the model (about 130 GB here,
/// which would abort the process), as a study's check does.
#[test]
fn prediction_checks_the_checkpoint_before_allocating_the_model() {
    let dir = tempfile::tempdir().unwrap();
    tiny(dir.path());
    edit_config(
        dir.path(),
        &[
            (
                "architectures",
                serde_json::json!(["BertForSequenceClassification"]),
            ),
            (
                "id2label",
                serde_json::json!({"0": "negative", "1": "positive"}),
            ),
            ("hidden_size", Json::from(16_384)),
            ("num_attention_heads", Json::from(16)),
            ("intermediate_size", Json::from(131_072)),
            ("num_hidden_layers", Json::from(256)),
            ("vocab_size", Json::from(2_000_000)),
        ],
    );
    // A safetensors file of no tensors: an 8-byte header length, then JSON.
    let header = br#"{"__metadata__":{"format":"pt"}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    std::fs::write(dir.path().join("model.safetensors"), bytes).unwrap();
    let Err(err) = HfClassifier::load(dir.path(), None) else {
        panic!("loaded")
    };
    let text = err.to_string();
    assert!(text.contains("embeddings.word_embeddings.weight"), "{text}");
}

/// A position table too small for the shortest sequence the trainer takes
/// is refused on `max_position_embeddings`, not later as a `max_length`.
#[test]
fn too_few_positions_are_refused_naming_the_field() {
    for (model_type, positions) in [("bert", 2), ("roberta", 4)] {
        let dir = tempfile::tempdir().unwrap();
        tiny(dir.path());
        edit_config(
            dir.path(),
            &[
                ("model_type", Json::from(model_type)),
                ("pad_token_id", Json::from(1)),
                ("max_position_embeddings", Json::from(positions)),
            ],
        );
        let err =
            trainer::finetune::read_model_config(&dir.path().join("config.json")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("`max_position_embeddings`") && text.contains("config.json"),
            "{model_type}: {text}"
        );
    }
}
