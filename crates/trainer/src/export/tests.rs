//! Saving and loading back: every family's names, labels and logits.

use std::path::{Path, PathBuf};

use serde_json::{Value as Json, json};

use super::predict::load_classifier;
use super::*;
use crate::backend::cpu::CpuBackend;
use crate::data::{BatchOrder, TokenizedDataset};
use crate::finetune::read_model_config;
use crate::model::family::{Family, OWN_MODULE_MODEL_TYPES};
use crate::model::{BertClassifier, DeviceBatch};
use crate::testing::{tiny_config, write_tiny_model};
use crate::tokenize::Encoded;
use crate::weights::load_safetensors;
use crate::write_whole::tests::entries;

/// The tensor names of `dir`'s `model.safetensors`, as stored.
fn names_in_file(dir: &Path) -> Vec<String> {
    let raw = std::fs::read(dir.join("model.safetensors")).unwrap();
    let mut names: Vec<String> = safetensors::SafeTensors::deserialize(&raw)
        .unwrap()
        .names()
        .into_iter()
        .map(str::to_string)
        .collect();
    names.sort();
    names
}

fn tiny_classifier(
    dir: &Path,
    hidden: Vec<usize>,
) -> (
    CpuBackend<f32>,
    BertClassifier<CpuBackend<f32>>,
    TextTokenizer,
) {
    let config = write_tiny_model(dir, &tiny_config(), &["good", "bad", "film"], 7).unwrap();
    let be = CpuBackend::<f32>::new();
    let head = HeadConfig {
        num_labels: 3,
        hidden,
    };
    let mut model = BertClassifier::new_random(&be, &config, &head, 11).unwrap();
    let weights = dir.join("model.safetensors");
    model
        .load(&be, &load_safetensors(&weights).unwrap(), &weights)
        .unwrap();
    let tokenizer = TextTokenizer::from_model_dir(dir, 16).unwrap();
    (be, model, tokenizer)
}

#[test]
fn a_saved_classifier_loads_back_with_the_same_logits_and_labels() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    let (be, model, tokenizer) = tiny_classifier(&source, vec![]);
    let out = tmp.path().join("out");
    let names: Vec<String> = ["neg", "neutral", "pos"].map(String::from).to_vec();
    save_hf_dir(&be, &model, &tokenizer, &source, &names, &out).unwrap();

    let config: Json =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        config["architectures"],
        json!(["BertForSequenceClassification"])
    );
    assert_eq!(config["id2label"]["2"], json!("pos"));
    assert_eq!(config["label2id"]["neg"], json!(0));
    assert_eq!(config["num_labels"], json!(3));
    let saved = load_safetensors(out.join("model.safetensors")).unwrap();
    assert!(saved.contains_key("classifier.weight"));
    let names_in_file = names_in_file(&out);
    assert!(names_in_file.contains(&"bert.embeddings.word_embeddings.weight".to_string()));
    assert!(names_in_file.contains(&"bert.pooler.dense.weight".to_string()));

    let loaded = HfClassifier::load(&out, Some(16)).unwrap();
    assert_eq!(loaded.labels(), names.as_slice());
    let texts = [("good film", None), ("bad", Some("film"))];
    let encoded: Vec<Encoded> = texts
        .iter()
        .map(|(t, p)| loaded.encode(t, *p).unwrap())
        .collect();
    let logits = loaded.logits(encoded.clone(), 1).unwrap();
    let set = TokenizedDataset::unlabelled(&tokenizer, encoded);
    for (i, batch) in set.batches(1, BatchOrder::Sequential).unwrap().enumerate() {
        let device = DeviceBatch::upload(&be, &model.config, 3, &batch).unwrap();
        assert_eq!(model.logits(&be, &device), logits[i]);
    }
    // Batched and one at a time agree up to rounding.
    let batched = loaded
        .logits(
            texts
                .iter()
                .map(|(t, p)| loaded.encode(t, *p).unwrap())
                .collect(),
            8,
        )
        .unwrap();
    for (a, b) in batched.iter().flatten().zip(logits.iter().flatten()) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
    let e = save_hf_dir(&be, &model, &tokenizer, &source, &names, &out)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not empty"), "{e}");
}

#[test]
fn refuses_what_transformers_cannot_load_and_encoders_without_a_head() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    let (be, model, tokenizer) = tiny_classifier(&source, vec![8]);
    let names = default_label_names(3);
    let out = tmp.path().join("out");
    let e = save_hf_dir(&be, &model, &tokenizer, &source, &names, &out)
        .unwrap_err()
        .to_string();
    assert!(e.contains("hidden layer") && e.contains("[8]"), "{e}");
    assert!(!out.exists());
    // The source is a pretrained encoder: no classifier to predict with.
    let e = HfClassifier::load(&source, None).err().unwrap().to_string();
    assert!(e.contains("not a sequence classifier"), "{e}");
}

#[test]
fn probabilities_sum_to_one_without_overflow() {
    let p = probabilities(&[1000.0, 1000.0, f64::MIN]);
    assert_eq!(p, vec![0.5, 0.5, 0.0]);
}

fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/families")
        .join(family)
}

/// Every `model_type` memtune trains, from the family table: each has a
/// parity fixture of its name.
fn model_types() -> Vec<&'static str> {
    let own = OWN_MODULE_MODEL_TYPES.iter().map(|t| t.name);
    Family::supported_model_types()
        .into_iter()
        .chain(own)
        .collect()
}

fn logits_of(classifier: &HfClassifier) -> Vec<Vec<f64>> {
    let texts = [
        ("The film was good, really good.", None),
        ("boring plot", Some("awful acting and a bad end")),
        ("Hello", None),
    ];
    let encoded = texts
        .iter()
        .map(|(t, p)| classifier.encode(t, *p).unwrap())
        .collect();
    classifier.logits(encoded, 2).unwrap()
}

/// Each family's transformers-saved fixture, loaded and saved again, has
/// transformers' own tensor names, class and model type, and loads back
/// with the same logits to the bit.
#[test]
fn every_family_saves_under_transformers_names_and_loads_back_identically() {
    let tmp = tempfile::tempdir().unwrap();
    let families = model_types();
    assert_eq!(families.len(), 7);
    for family in families {
        let source = fixture(family);
        let original = HfClassifier::load(&source, None).unwrap();
        let config = read_model_config(&source.join("config.json")).unwrap();
        let be = CpuBackend::<f32>::new();
        let (model, fresh) = load_classifier(&be, &config, &source, 3).unwrap();
        assert!(fresh.is_empty(), "{family}: {fresh:?}");
        let out = tmp.path().join(family);
        let labels: Vec<String> = ["neg", "mid", "pos"].map(String::from).to_vec();
        save_hf_dir(&be, &*model, original.tokenizer(), &source, &labels, &out).unwrap();

        assert_eq!(names_in_file(&out), names_in_file(&source), "{family}");
        let read = |dir: &Path| -> Json {
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                .unwrap()
        };
        let (ours, theirs) = (read(&out), read(&source));
        for key in ["architectures", "model_type"] {
            assert_eq!(ours[key], theirs[key], "{family}: {key}");
        }
        assert_eq!(ours["num_labels"], json!(3), "{family}");
        assert_eq!(ours["id2label"]["2"], json!("pos"), "{family}");
        let tokenizer_config = read_json_file(&out.join("tokenizer_config.json"));
        assert_eq!(
            tokenizer_config["model_max_length"],
            json!(config.max_sequence())
        );
        assert!(tokenizer_config.get("tokenizer_class").is_none());

        let loaded = HfClassifier::load(&out, None).unwrap();
        assert_eq!(loaded.labels(), labels.as_slice(), "{family}");
        assert_eq!(loaded.model_config(), config, "{family}");
        assert_eq!(logits_of(&loaded), logits_of(&original), "{family}");
    }
}

fn read_json_file(path: &Path) -> Json {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The dropout a model trained with is written under its family's keys,
/// which read back as the same config (DistilBERT's `dropout` is an alias
/// of `hidden_dropout_prob`: writing both would be a duplicate field).
#[test]
fn dropout_is_written_under_each_familys_own_keys() {
    let tmp = tempfile::tempdir().unwrap();
    for family in ["distilbert", "roberta", "deberta-v2"] {
        let source = fixture(family);
        let config = read_model_config(&source.join("config.json"))
            .unwrap()
            .with_dropout(0.25);
        let be = CpuBackend::<f32>::new();
        let (model, _) = load_classifier(&be, &config, &source, 3).unwrap();
        let tokenizer = TextTokenizer::from_model_dir(&source, 16).unwrap();
        let out = tmp.path().join(family);
        save_hf_dir(
            &be,
            &*model,
            &tokenizer,
            &source,
            &default_label_names(3),
            &out,
        )
        .unwrap();
        let written = read_json_file(&out.join("config.json"));
        for (key, p) in config.dropout_fields() {
            assert_eq!(written[key], json!(p), "{family}: {key}");
        }
        let expected_keys = match family {
            "distilbert" => ["dropout", "attention_dropout", "seq_classif_dropout"],
            "deberta-v2" => ["hidden_dropout_prob", "pooler_dropout", "cls_dropout"],
            _ => [
                "hidden_dropout_prob",
                "attention_probs_dropout_prob",
                "classifier_dropout",
            ],
        };
        for key in expected_keys {
            assert_eq!(written[key], json!(0.25), "{family}: {key}");
        }
        if family == "distilbert" {
            assert!(written.get("hidden_dropout_prob").is_none());
        }
        assert_eq!(
            read_model_config(&out.join("config.json")).unwrap(),
            config,
            "{family}"
        );
    }
}

#[test]
fn class_names_naming_one_class_twice_are_an_error() {
    let fields = hf_config::json_object(
        r#"{"id2label": {"0": "a", "00": "b"}}"#,
        Path::new("config.json"),
    )
    .unwrap();
    let e = hf_config::label_names(&fields, Path::new("config.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("names class 0 twice"), "{e}");
}

#[test]
fn fewer_than_two_classes_are_an_error_naming_the_file() {
    for json in [
        r#"{"id2label": {}}"#,
        r#"{"id2label": {"0": "a"}}"#,
        r#"{"num_labels": 1}"#,
        r#"{"num_labels": 0}"#,
    ] {
        let fields = hf_config::json_object(json, Path::new("m/config.json")).unwrap();
        let e = hf_config::label_names(&fields, Path::new("m/config.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("m/config.json") && e.contains("at least 2"),
            "{json}: {e}"
        );
    }
}

/// A model of one token type predicts single texts; a pair, whose second
/// text its tokenizer gives type 1, is an error naming the field.
#[test]
fn a_pair_for_a_model_of_one_token_type_is_an_error_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    let config = crate::config::BertConfig {
        type_vocab_size: 1,
        ..tiny_config()
    };
    let config = write_tiny_model(&source, &config, &["good", "bad", "film"], 7).unwrap();
    let be = CpuBackend::<f32>::new();
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let model = BertClassifier::new_random(&be, &config, &head, 11).unwrap();
    let tokenizer = TextTokenizer::from_model_dir(&source, 16).unwrap();
    let out = tmp.path().join("out");
    let names: Vec<String> = ["neg", "pos"].map(String::from).to_vec();
    save_hf_dir(&be, &model, &tokenizer, &source, &names, &out).unwrap();
    let loaded = HfClassifier::load(&out, Some(16)).unwrap();
    assert!(loaded.encode("good film", None).is_ok());
    let e = loaded.encode("bad", Some("film")).unwrap_err().to_string();
    assert!(
        e.contains("`type_vocab_size`") && e.contains("out/config.json"),
        "{e}"
    );
}

/// A saved 3-class classifier whose `config.json` is then edited by `edit`.
fn saved_classifier_with_config(
    tmp: &Path,
    edit: impl FnOnce(&mut serde_json::Map<String, Json>),
) -> PathBuf {
    let source = tmp.join("source");
    let (be, model, tokenizer) = tiny_classifier(&source, vec![]);
    let out = tmp.join("out");
    save_hf_dir(
        &be,
        &model,
        &tokenizer,
        &source,
        &default_label_names(3),
        &out,
    )
    .unwrap();
    let path = out.join("config.json");
    let Json::Object(mut fields) = read_json_file(&path) else {
        panic!("config.json is an object");
    };
    edit(&mut fields);
    std::fs::write(&path, Json::Object(fields).to_string()).unwrap();
    out
}

#[test]
fn a_classifier_of_another_class_count_than_its_config_is_named_not_called_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = saved_classifier_with_config(tmp.path(), |fields| {
        fields.insert("id2label".into(), json!({"0": "neg", "1": "pos"}));
        fields.insert("label2id".into(), json!({"neg": 0, "pos": 1}));
        fields.insert("num_labels".into(), json!(2));
    });
    let e = HfClassifier::load(&out, Some(16))
        .err()
        .unwrap()
        .to_string();
    let config = out.join("config.json").display().to_string();
    assert!(
        e.contains("`classifier.weight` is [3, 32]")
            && e.contains(&format!("{config}'s id2label gives 2 labels")),
        "{e}"
    );
    assert!(!e.contains("has no"), "{e}");
}

#[test]
fn a_multi_label_classifier_is_refused_naming_its_config() {
    let tmp = tempfile::tempdir().unwrap();
    let out = saved_classifier_with_config(tmp.path(), |fields| {
        fields.insert("problem_type".into(), json!("multi_label_classification"));
    });
    let e = HfClassifier::load(&out, Some(16))
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("out/config.json") && e.contains("multi_label_classification"),
        "{e}"
    );
    // The single-label problem type, or none, is what memtune trains.
    let tmp = tempfile::tempdir().unwrap();
    let out = saved_classifier_with_config(tmp.path(), |fields| {
        fields.insert("problem_type".into(), json!("single_label_classification"));
    });
    assert!(HfClassifier::load(&out, Some(16)).is_ok());
}

/// A tokenizer file of the source that cannot be read (a link to
/// `/proc/self/mem`, which reads fail at offset 0 even for root) fails the
/// export after config.json and the weights are written.
#[cfg(target_os = "linux")]
#[test]
fn a_failed_export_leaves_no_directory_and_a_retry_succeeds() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    let (be, model, tokenizer) = tiny_classifier(&source, vec![]);
    let names = default_label_names(3);
    let unreadable = source.join("special_tokens_map.json");
    std::os::unix::fs::symlink("/proc/self/mem", &unreadable).unwrap();
    let out = tmp.path().join("out");
    let e = save_hf_dir(&be, &model, &tokenizer, &source, &names, &out).unwrap_err();
    assert!(e.to_string().contains("special_tokens_map.json"), "{e}");
    assert!(!out.exists(), "{e}");
    assert_eq!(entries(tmp.path()), ["source"]);
    std::fs::remove_file(&unreadable).unwrap();
    // An empty directory made for the export is taken too.
    std::fs::create_dir(&out).unwrap();
    save_hf_dir(&be, &model, &tokenizer, &source, &names, &out).unwrap();
    assert_eq!(entries(tmp.path()), ["out", "source"]);
    assert!(HfClassifier::load(&out, Some(16)).is_ok());
}

/// A head tensor of a shape the config does not give is named with both
/// shapes (an output layer with other rows than the labels is a class
/// count mismatch), not reported as missing.
#[test]
fn a_misshapen_head_tensor_is_named_with_its_shapes() {
    let tmp = tempfile::tempdir().unwrap();
    for family in ["bert", "deberta-v2"] {
        for (case, (name, shape, says)) in [
            (
                "classifier.bias",
                vec![5],
                "classifier.bias: checkpoint [5] vs model [3]",
            ),
            (
                "classifier.bias",
                vec![],
                "classifier.bias: checkpoint [] vs model [3]",
            ),
            (
                "classifier.weight",
                vec![3, 2],
                "classifier.weight: checkpoint [3, 2] vs model",
            ),
            ("classifier.weight", vec![5, 2], "gives 3 labels"),
        ]
        .into_iter()
        .enumerate()
        {
            let dir = tmp.path().join(format!("{family}-{case}"));
            std::fs::create_dir(&dir).unwrap();
            for entry in std::fs::read_dir(fixture(family)).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
            }
            let path = dir.join("model.safetensors");
            let mut tensors = load_safetensors(&path).unwrap();
            let numel = shape.iter().product();
            tensors.insert(
                name.to_string(),
                HostTensor {
                    shape: shape.clone(),
                    data: vec![0.0; numel],
                },
            );
            save_safetensors(&path, &tensors, StoredDtype::F32).unwrap();
            let e = HfClassifier::load(&dir, None).err().unwrap();
            let shown = e.to_string();
            assert!(shown.contains(says), "{family} {name} {shape:?}: {shown}");
            assert!(!shown.contains("fine-tune it first"), "{shown}");
        }
    }
}

/// Where the output directory cannot be made, `check_output_dir` says so
/// before any training: a file where a folder is needed, a link to
/// nothing, a folder no directory can be made in. It leaves nothing
/// behind, and takes an absent path under absent folders or an empty
/// directory.
#[test]
fn an_output_directory_that_cannot_be_made_is_refused_before_training() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("afile"), "x").unwrap();
    std::os::unix::fs::symlink(d.join("nowhere"), d.join("dangling")).unwrap();
    let mut refused = vec![
        (d.join("afile/sub"), "is not a directory"),
        (d.join("afile/sub/deeper"), "is not a directory"),
        (d.join("dangling"), "symbolic link to nothing"),
    ];
    if cfg!(target_os = "linux") {
        refused.push((
            "/proc/memtune-out".into(),
            "cannot make a directory in /proc",
        ));
    }
    for (path, says) in refused {
        let e = check_output_dir(&path).unwrap_err();
        assert!(matches!(e, ExportError::OutputUnwritable { .. }), "{e:?}");
        let shown = e.to_string();
        assert!(
            shown.contains(&path.display().to_string()) && shown.contains(says),
            "{shown}"
        );
    }
    check_output_dir(&d.join("a/b/c")).unwrap();
    std::fs::create_dir(d.join("empty")).unwrap();
    check_output_dir(&d.join("empty")).unwrap();
    assert_eq!(entries(d), ["afile", "dangling", "empty"]);
    assert!(entries(&d.join("empty")).is_empty());
}

/// `model.safetensors` gets the permissions of the files saved beside it
/// (what `File::create` gives under the process's umask), not the private
/// 0600 of the temporary file safetensors writes through.
#[test]
fn saved_weights_are_as_readable_as_the_files_beside_them() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let weights = tmp.path().join("model.safetensors");
    let tensors = NamedTensors::from([(
        "w".to_string(),
        HostTensor {
            shape: vec![2],
            data: vec![1.0, 2.0],
        },
    )]);
    save_safetensors(&weights, &tensors, StoredDtype::F32).unwrap();
    let plain = tmp.path().join("config.json");
    std::fs::File::create(&plain).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&weights), mode(&plain));
}

/// An export's files are written in a temporary directory that is gone by
/// the time its error is read, so a failure names the file where it was to
/// land; a path outside the temporary (a source file) is kept.
#[test]
fn a_write_failure_names_the_output_file_not_the_temporary() {
    let temporary = Path::new("/models/.out.partial-7");
    let out = Path::new("/models/out");
    let failed = |path: &str| ExportError::Io {
        path: PathBuf::from(path),
        source: std::io::Error::other("no space left on device"),
    };
    let e = failed("/models/.out.partial-7/config.json").named_in(temporary, out);
    assert!(
        e.to_string().starts_with("/models/out/config.json: "),
        "{e}"
    );
    let weights = ExportError::Weights(WeightsError::Write {
        path: temporary.join("model.safetensors"),
        source: safetensors::SafeTensorError::IoError(std::io::Error::other("disk full")),
    })
    .named_in(temporary, out);
    assert!(
        weights
            .to_string()
            .contains("/models/out/model.safetensors"),
        "{weights}"
    );
    let e = failed("/models/source/vocab.txt").named_in(temporary, out);
    assert!(
        e.to_string().starts_with("/models/source/vocab.txt: "),
        "{e}"
    );
}

/// Class names that do not match the class count are the caller's mistake
/// about what is being saved: the error names the output, not the source.
#[test]
fn label_names_of_another_count_name_the_output() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    let (be, model, tokenizer) = tiny_classifier(&source, vec![]);
    let out = tmp.path().join("out");
    let names = default_label_names(2);
    let e = save_hf_dir(&be, &model, &tokenizer, &source, &names, &out).unwrap_err();
    assert!(
        matches!(&e, ExportError::Labels { path, .. } if path == &out),
        "{e}"
    );
    assert!(e.to_string().contains("2 label names for 3 classes"), "{e}");
    assert!(!out.exists());
}
