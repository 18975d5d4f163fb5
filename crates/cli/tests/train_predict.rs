//! Using a study's result: `memtune train` retrains a recorded trial and
//! saves it as a Hugging Face directory, `memtune predict` classifies with
//! one. Round trips against transformers (a torch venv from `cargo xtask
//! test`, passed as MEMTUNE_TORCH_PYTHON), for every family: our saved
//! model loads in `AutoModelForSequenceClassification` as the family's
//! `*ForSequenceClassification` with the same logits, and a model
//! transformers saved predicts here with transformers' logits. Without that
//! venv those comparisons are skipped with a message, except under CI=true,
//! where they fail.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value as Json;
use store::{Storage, TrialFilter, TrialState};

const TOLERANCE: f64 = 1e-4;

fn torch_python() -> Option<PathBuf> {
    match std::env::var_os("MEMTUNE_TORCH_PYTHON") {
        Some(py) => Some(PathBuf::from(py)),
        None if std::env::var("CI").as_deref() == Ok("true") => {
            panic!(
                "MEMTUNE_TORCH_PYTHON is not set under CI: run the tests with `cargo xtask test`"
            )
        }
        None => {
            eprintln!(
                "skipping the transformers comparison: set MEMTUNE_TORCH_PYTHON to a python with \
                 torch and transformers (`cargo xtask python torch`)"
            );
            None
        }
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hf/transformers_classifier.py")
}

fn python(py: &Path, args: &[&Path]) -> String {
    let out = Command::new(py).arg(script()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What transformers made of one model directory.
#[derive(serde::Deserialize)]
struct Theirs {
    /// The class `AutoModelForSequenceClassification` loaded.
    class: String,
    /// The logits of each line of the texts.
    logits: Vec<Vec<f64>>,
}

/// transformers' reading of each of `models` (one Python process for all).
fn transformers_logits(py: &Path, texts: &Path, models: &[PathBuf]) -> Vec<Theirs> {
    let mut args = vec![Path::new("logits"), texts];
    args.extend(models.iter().map(PathBuf::as_path));
    let theirs: Vec<Theirs> = python(py, &args)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(theirs.len(), models.len());
    theirs
}

fn predict(model: &Path, data: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memtune"))
        .arg("predict")
        .arg("--model")
        .arg(model)
        .arg("--data")
        .arg(data)
        .args(extra)
        .output()
        .unwrap()
}

fn predictions(stdout: &str) -> Vec<Json> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn logits_of(prediction: &Json) -> Vec<f64> {
    serde_json::from_value(prediction["logits"].clone()).unwrap()
}

fn assert_close(ours: &[Vec<f64>], theirs: &[Vec<f64>]) {
    assert_eq!(ours.len(), theirs.len());
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= TOLERANCE, "record {i}: {a:?} vs {b:?}");
        }
    }
}

const TEXTS: &str = r#"{"text": "The film was good, really good."}
{"text": "boring plot", "text_pair": "awful acting and a bad end"}
{"text": "I loved every minute of it!"}
{"text": "Worst movie ever; the story is not funny."}
"#;

/// `memtune train --study winner --config CFG --output OUT [EXTRA]`.
fn train(db: &Path, cfg: &Path, output: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "train",
        "--study",
        "winner",
        "--config",
        cfg.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ];
    args.extend(extra);
    common::memtune(db, &args)
}

fn study_file(name: &str, model: &Path) -> String {
    format!(
        r#"
[study]
name = "{name}"
n_trials = 2
seed = 3

[data]
source = "embedded"

[objective]
metric = "accuracy"

[models.tiny]
dir = "{model}"

[[param]]
name = "learning_rate"
type = "float"
low = 1e-3
high = 5e-3
log = true

[fixed]
batch_size = 32
max_length = 32
epochs = 2
head_layers = 0

[sampler]
kind = "random"

[runner]
device = "cpu"
threads_per_worker = 1
"#,
        model = model.display()
    )
}

/// A tiny model of the sentiment words in `dir`, and the study database
/// beside it: the model's path and the database's.
fn tiny_model_and_db(dir: &Path) -> (PathBuf, PathBuf) {
    let words = trainer::testing::sentiment_words(600);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let model = dir.join("tiny");
    trainer::testing::write_tiny_model(&model, &trainer::testing::tiny_config(), &words, 3)
        .unwrap();
    (model, dir.join("study.db"))
}

#[test]
fn train_retrains_on_the_cpu_whatever_device_the_study_file_names() {
    // The study ran on a GPU; its file says so, and the retrain happens
    // where `train` always retrains: on the CPU, with or without a GPU.
    let dir = tempfile::tempdir().unwrap();
    let (model, db) = tiny_model_and_db(dir.path());
    let on_cpu = study_file("winner", &model);
    let cfg = dir.path().join("study.toml");
    std::fs::write(&cfg, &on_cpu).unwrap();
    common::ok(common::memtune(
        &db,
        &["tune", "--no-progress", "--config", cfg.to_str().unwrap()],
    ));
    for (i, device) in ["cuda", "cuda:3", "cuda:*", "auto"].iter().enumerate() {
        let text = on_cpu.replace(
            "device = \"cpu\"",
            &format!("device = \"{device}\"\nprecision = \"bf16\""),
        );
        let on_gpu = dir.path().join("gpu.toml");
        std::fs::write(&on_gpu, text).unwrap();
        let output = dir.path().join(format!("model-{i}"));
        let stdout = common::ok(train(&db, &on_gpu, &output, &[]));
        assert!(stdout.contains("saved to"), "{device}: {stdout}");
    }
}

/// Sets what a trial recorded in the SQLite file `db`: its `device` user
/// attribute, and `value` as its value and every epoch's.
fn record(db: &Path, number: u64, device: &str, value: f64) {
    let c = rusqlite::Connection::open(db).unwrap();
    let id: i64 = c
        .query_row(
            "SELECT trial_id FROM trials WHERE number = ?1",
            [number as i64],
            |r| r.get(0),
        )
        .unwrap();
    c.execute(
        "UPDATE trial_user_attributes SET value_json = ?1 WHERE trial_id = ?2 AND key = 'device'",
        rusqlite::params![serde_json::to_string(device).unwrap(), id],
    )
    .unwrap();
    c.execute(
        "UPDATE trial_values SET value = ?1 WHERE trial_id = ?2",
        rusqlite::params![value, id],
    )
    .unwrap();
    c.execute(
        "UPDATE trial_intermediate_values SET intermediate_value = ?1 WHERE trial_id = ?2",
        rusqlite::params![value, id],
    )
    .unwrap();
}

#[test]
fn train_retrains_in_the_trial_s_arithmetic_and_shows_a_gpu_trial_s_difference() {
    // A CPU study with bf16 products and the fused kernels: the retrain
    // takes both from the trial and repeats it to the bit.
    let dir = tempfile::tempdir().unwrap();
    let (model, db) = tiny_model_and_db(dir.path());
    let text = study_file("winner", &model).replace(
        "device = \"cpu\"",
        "device = \"cpu\"\nprecision = \"bf16\"\nkernels = \"fused\"",
    );
    let cfg = dir.path().join("study.toml");
    std::fs::write(&cfg, text).unwrap();
    common::ok(common::memtune(
        &db,
        &["tune", "--no-progress", "--config", cfg.to_str().unwrap()],
    ));
    let storage = Storage::open_existing(&db).unwrap();
    let study = storage.study("winner").unwrap();
    let best = storage.best_trial(study.study_id).unwrap().unwrap();
    assert_eq!(best.user_attrs["matmul_precision"], "bf16");
    assert_eq!(best.user_attrs["kernels"], "fused");
    drop(storage);
    let recorded = best.values.as_ref().unwrap()[0];
    let stdout = common::ok(train(&db, &cfg, &dir.path().join("repeat"), &[]));
    assert!(
        stdout.contains(&format!("validation accuracy {recorded} ")),
        "{stdout}"
    );

    // Recorded on a GPU (with other figures than the CPU's): the retrain
    // says so, shows both figures and succeeds.
    let number = best.number.to_string();
    let trial = ["--trial", number.as_str()];
    record(&db, best.number, "cuda:0 (NVIDIA H200)", 0.25);
    let out = train(&db, &cfg, &dir.path().join("gpu"), &trial);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("ran on cuda:0 (NVIDIA H200)")
            && stderr.contains("bf16 products, fused kernels")
            && stderr.contains(&format!("trial {number} recorded 0.25 on cuda:0")),
        "{stderr}"
    );
    assert!(dir.path().join("gpu/model.safetensors").is_file());

    // The same figures recorded on the CPU are a failed repeat.
    record(&db, best.number, "CPU", 0.25);
    let out = train(&db, &cfg, &dir.path().join("cpu"), &trial);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success() && !stderr.contains("panicked"),
        "{stderr}"
    );
    assert!(stderr.contains("did not repeat trial"), "{stderr}");
}

#[test]
fn train_repeats_the_trial_and_transformers_gives_the_same_logits() {
    let dir = tempfile::tempdir().unwrap();
    let (model, db) = tiny_model_and_db(dir.path());
    let cfg = dir.path().join("study.toml");
    std::fs::write(&cfg, study_file("winner", &model)).unwrap();
    let cfg_arg = cfg.to_str().unwrap();
    common::ok(common::memtune(
        &db,
        &["tune", "--no-progress", "--config", cfg_arg],
    ));
    let storage = Storage::open_existing(&db).unwrap();
    let study = storage.study("winner").unwrap();
    let best = storage.best_trial(study.study_id).unwrap().unwrap();
    let trials = storage
        .trials(study.study_id, &TrialFilter::default())
        .unwrap();
    assert!(trials.iter().all(|t| t.state == TrialState::Complete));

    // The best trial by default, and another by number: each retrain stops
    // at the recorded epoch with exactly the recorded validation value.
    let out_best = dir.path().join("best");
    let stdout = common::ok(train(&db, &cfg, &out_best, &[]));
    let recorded = best.values.as_ref().unwrap()[0];
    assert!(
        stdout.contains(&format!(
            "trial {}: validation accuracy {recorded} ",
            best.number
        )),
        "{stdout}"
    );
    let other = trials.iter().find(|t| t.number != best.number).unwrap();
    let number = other.number.to_string();
    let out_other = dir.path().join("other");
    let stdout = common::ok(train(&db, &cfg, &out_other, &["--trial", &number]));
    let recorded = other.values.as_ref().unwrap()[0];
    assert!(
        stdout.contains(&format!("validation accuracy {recorded} ")),
        "{stdout}"
    );
    // Nothing is overwritten; a wrong study name, and a head transformers
    // has no counterpart for, are refused before any training.
    let err = common::fails(train(&db, &cfg, &out_best, &[]));
    assert!(err.contains("not empty"), "{err}");
    let err = common::fails(common::memtune(
        &db,
        &[
            "train", "--study", "other", "--config", cfg_arg, "--output", "x",
        ],
    ));
    assert!(err.contains("describes study `winner`"), "{err}");
    let hidden_cfg = dir.path().join("hidden.toml");
    let text = study_file("winner", &model).replace("head_layers = 0", "head_layers = 1");
    std::fs::write(&hidden_cfg, text).unwrap();
    let out_hidden = dir.path().join("hidden");
    let err = common::fails(train(&db, &hidden_cfg, &out_hidden, &[]));
    assert!(err.contains("hidden layer"), "{err}");
    assert!(!out_hidden.exists());

    let config: Json =
        serde_json::from_str(&std::fs::read_to_string(out_best.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(config["model_type"], "bert");
    assert_eq!(config["num_labels"], 2);
    assert_eq!(config["id2label"]["1"], "LABEL_1");
    assert!(out_best.join("tokenizer.json").is_file());

    let texts = dir.path().join("texts.jsonl");
    std::fs::write(&texts, TEXTS).unwrap();
    let ours = predictions(&common::ok(predict(
        &out_best,
        &texts,
        &["--batch-size", "3"],
    )));
    assert_eq!(ours.len(), 4);
    for (i, p) in ours.iter().enumerate() {
        assert_eq!(p["index"], i);
        let probs: Vec<f64> = serde_json::from_value(p["probabilities"].clone()).unwrap();
        assert!((probs.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let logits = logits_of(p);
        let argmax = if logits[1] > logits[0] { 1 } else { 0 };
        assert_eq!(p["label"], argmax);
    }
    let ours: Vec<Vec<f64>> = ours.iter().map(logits_of).collect();
    // The trained classifier separates the texts (not a constant output).
    assert!(
        ours.iter().any(|l| (l[0] - ours[0][0]).abs() > 1e-3),
        "{ours:?}"
    );
    if let Some(py) = torch_python() {
        let theirs = transformers_logits(&py, &texts, &[out_best]);
        assert_eq!(theirs[0].class, "BertForSequenceClassification");
        assert_close(&ours, &theirs[0].logits);
    }
}

/// Every family memtune trains, with transformers' classifier class.
const FAMILIES: [(&str, &str); 7] = [
    ("bert", "BertForSequenceClassification"),
    ("roberta", "RobertaForSequenceClassification"),
    ("xlm-roberta", "XLMRobertaForSequenceClassification"),
    ("camembert", "CamembertForSequenceClassification"),
    ("distilbert", "DistilBertForSequenceClassification"),
    ("electra", "ElectraForSequenceClassification"),
    ("deberta-v2", "DebertaV2ForSequenceClassification"),
];

#[test]
fn predict_gives_transformers_logits_for_transformers_saved_classifiers_of_every_family() {
    let Some(py) = torch_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![Path::new("make"), dir.path()];
    args.extend(FAMILIES.iter().map(|(family, _)| Path::new(family)));
    python(&py, &args);
    let texts = dir.path().join("texts.jsonl");
    std::fs::write(&texts, TEXTS).unwrap();
    let models: Vec<PathBuf> = FAMILIES.iter().map(|(f, _)| dir.path().join(f)).collect();
    let theirs = transformers_logits(&py, &texts, &models);
    for ((family, class), (model, theirs)) in FAMILIES.iter().zip(models.iter().zip(&theirs)) {
        assert_eq!(theirs.class, *class);
        let ours = predictions(&common::ok(predict(model, &texts, &["--batch-size", "3"])));
        let labels: Vec<Json> = ours.iter().map(|p| p["label"].clone()).collect();
        let ours: Vec<Vec<f64>> = ours.iter().map(logits_of).collect();
        eprintln!(
            "{family}: ours {ours:?}\n{family}: transformers' {:?}",
            theirs.logits
        );
        assert_close(&ours, &theirs.logits);
        for (label, logits) in labels.iter().zip(&theirs.logits) {
            let argmax = (0..3).fold(0, |b, k| if logits[k] > logits[b] { k } else { b });
            assert_eq!(*label, argmax, "{family}");
        }
    }
}

/// A small two-class data set in the words of `WORDS` (so every family's
/// tokenizer reads it), with its labels as names.
fn small_data() -> String {
    let good = ["good", "great", "fun", "loved", "really good"];
    let bad = ["bad", "awful", "boring", "worst", "not funny"];
    let mut lines = String::new();
    for i in 0..24 {
        let (words, label) = if i % 2 == 0 {
            (good, "pos")
        } else {
            (bad, "neg")
        };
        let text = format!(
            "the film was {} and {}",
            words[i % 5],
            words[(i / 2 + 1) % 5]
        );
        lines.push_str(&format!(
            "{{\"text\": \"{text}\", \"label\": \"{label}\"}}\n"
        ));
    }
    lines
}

/// The trainer's parity fixture of `family`: a tiny transformers-saved
/// `*ForSequenceClassification` of 3 labels with its `tokenizer.json`.
fn fixture(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../trainer/tests/fixtures/families")
        .join(family)
}

/// Names transformers' class of each family has (prefix and head), and a
/// name it must not have.
fn expected_tensor_names(family: &str) -> (Vec<&'static str>, &'static str) {
    match family {
        "roberta" | "xlm-roberta" | "camembert" => (
            vec![
                "roberta.embeddings.word_embeddings.weight",
                "roberta.encoder.layer.1.output.LayerNorm.weight",
                "classifier.dense.weight",
                "classifier.out_proj.bias",
            ],
            "roberta.pooler.dense.weight",
        ),
        "distilbert" => (
            vec![
                "distilbert.embeddings.word_embeddings.weight",
                "distilbert.transformer.layer.1.ffn.lin2.weight",
                "pre_classifier.weight",
                "classifier.bias",
            ],
            "distilbert.pre_classifier.weight",
        ),
        "electra" => (
            vec![
                "electra.embeddings.word_embeddings.weight",
                "electra.embeddings_project.weight",
                "classifier.dense.weight",
                "classifier.out_proj.bias",
            ],
            "electra.classifier.dense.weight",
        ),
        "deberta-v2" => (
            vec![
                "deberta.embeddings.word_embeddings.weight",
                "deberta.encoder.rel_embeddings.weight",
                "pooler.dense.weight",
                "classifier.weight",
            ],
            "deberta.pooler.dense.weight",
        ),
        _ => unreachable!("{family}"),
    }
}

/// The tensor names in `dir`'s `model.safetensors`, from the file's
/// header (8 bytes of length, then JSON keyed by name).
fn tensor_names(dir: &Path) -> Vec<String> {
    let raw = std::fs::read(dir.join("model.safetensors")).unwrap();
    let len = u64::from_le_bytes(raw[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, Json> = serde_json::from_slice(&raw[8..8 + len]).unwrap();
    header
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect()
}

/// `memtune tune` then `memtune train` on each non-BERT family's tiny
/// model (BERT's is the first test's), on a small data set: the saved
/// directory has transformers' names for that family, and transformers
/// loads it as the family's classifier with our logits.
#[test]
fn train_saves_every_family_so_transformers_gives_the_same_logits() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.jsonl");
    std::fs::write(&data, small_data()).unwrap();
    let texts = dir.path().join("texts.jsonl");
    std::fs::write(&texts, TEXTS).unwrap();
    let mut saved = Vec::new();
    let mut ours = Vec::new();
    for (family, class) in &FAMILIES[1..] {
        let db = dir.path().join(format!("{family}.db"));
        let cfg = dir.path().join(format!("{family}.toml"));
        let study = study_file("winner", &fixture(family))
            .replace(
                "source = \"embedded\"",
                &format!(
                    "source = \"files\"\nfiles = [\"{}\"]\nlabel_names = [\"neg\", \"pos\"]",
                    data.display()
                ),
            )
            .replace("n_trials = 2", "n_trials = 1")
            .replace("batch_size = 32", "batch_size = 8")
            .replace("max_length = 32", "max_length = 24")
            // A high rate, so the new output layer's logits grow well
            // beyond the tolerance within the run.
            .replace("low = 1e-3", "low = 3e-2")
            .replace("high = 5e-3", "high = 5e-2")
            .replace("epochs = 2", "epochs = 3");
        std::fs::write(&cfg, study).unwrap();
        common::ok(common::memtune(
            &db,
            &["tune", "--no-progress", "--config", cfg.to_str().unwrap()],
        ));
        let out = dir.path().join(format!("{family}-winner"));
        let stdout = common::ok(train(&db, &cfg, &out, &[]));
        assert!(stdout.contains("validation accuracy"), "{family}: {stdout}");

        let config: Json =
            serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap())
                .unwrap();
        assert_eq!(config["model_type"], *family);
        assert_eq!(config["architectures"], serde_json::json!([class]));
        assert_eq!(config["num_labels"], 2, "{family}");
        assert_eq!(config["label2id"]["neg"], 0, "{family}: {config}");
        assert_eq!(config["id2label"]["1"], "pos", "{family}: {config}");
        assert!(out.join("tokenizer.json").is_file());
        let names = tensor_names(&out);
        let (present, absent) = expected_tensor_names(family);
        for name in present {
            assert!(
                names.iter().any(|n| n == name),
                "{family}: {name} in {names:?}"
            );
        }
        assert!(!names.iter().any(|n| n == absent), "{family}: {absent}");

        let predicted = predictions(&common::ok(predict(&out, &texts, &[])));
        ours.push(predicted.iter().map(logits_of).collect::<Vec<_>>());
        saved.push(out);
    }
    if let Some(py) = torch_python() {
        let theirs = transformers_logits(&py, &texts, &saved);
        for (((family, class), ours), theirs) in FAMILIES[1..].iter().zip(&ours).zip(&theirs) {
            assert_eq!(theirs.class, *class);
            eprintln!(
                "{family}: ours {ours:?}\n{family}: transformers' {:?}",
                theirs.logits
            );
            assert_close(ours, &theirs.logits);
        }
    }
}

#[test]
fn predict_reports_bad_records_with_their_line_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let words = ["good", "bad", "film"];
    let model = dir.path().join("tiny");
    trainer::testing::write_tiny_model(&model, &trainer::testing::tiny_config(), &words, 3)
        .unwrap();
    // A pretrained encoder has no classifier to predict with.
    let texts = dir.path().join("texts.csv");
    std::fs::write(&texts, "text\ngood film\n").unwrap();
    let err = common::fails(predict(&model, &texts, &[]));
    assert!(err.contains("not a sequence classifier"), "{err}");

    // Give it a classifier: rename the encoder's tensors as HF's
    // BertForSequenceClassification and add a head.
    let mut tensors = trainer::weights::load_safetensors(model.join("model.safetensors")).unwrap();
    tensors.insert(
        "classifier.weight".into(),
        trainer::weights::HostTensor {
            shape: vec![2, 32],
            data: (0..64).map(|i| (i as f32 - 32.0) / 100.0).collect(),
        },
    );
    tensors.insert(
        "classifier.bias".into(),
        trainer::weights::HostTensor {
            shape: vec![2],
            data: vec![0.1, -0.1],
        },
    );
    trainer::weights::save_safetensors(
        model.join("model.safetensors"),
        &tensors,
        trainer::weights::StoredDtype::F32,
    )
    .unwrap();
    let config_path = model.join("config.json");
    let mut config: Json =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    config["architectures"] = serde_json::json!(["BertForSequenceClassification"]);
    std::fs::write(&config_path, config.to_string()).unwrap();

    let texts = dir.path().join("texts.jsonl");
    std::fs::write(
        &texts,
        "{\"text\": \"good film\"}\n{\"txt\": \"bad\"}\nnot json\n{\"text\": \"bad\", \"text_pair\": \"film\"}\n",
    )
    .unwrap();
    let out = predict(&model, &texts, &[]);
    assert!(!out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let indices: Vec<Json> = predictions(&stdout)
        .iter()
        .map(|p| p["index"].clone())
        .collect();
    assert_eq!(indices, [0, 3]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("texts.jsonl:2 (record 1): text field `text`"),
        "{stderr}"
    );
    assert!(stderr.contains("texts.jsonl:3 (record 2)"), "{stderr}");
    assert!(stderr.contains("2 of 4 record(s)"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let err = common::fails(predict(&model, &texts, &["--batch-size", "0"]));
    assert!(err.contains("--batch-size"), "{err}");
}
