//! A fine-tuned classifier as a Hugging Face directory, and back.
//!
//! [`save_hf_dir`] writes what `transformers`'
//! `AutoModelForSequenceClassification.from_pretrained(dir)` loads:
//! `config.json` (the source model's config with `architectures`,
//! `num_labels`, `id2label` and `label2id`), `model.safetensors` in
//! `BertForSequenceClassification`'s names (`bert.` before every encoder,
//! embedding and pooler tensor; `classifier.weight` / `classifier.bias`),
//! and the tokenizer (`tokenizer.json`, `tokenizer_config.json`, and the
//! source's `vocab.txt` and `special_tokens_map.json` when it has them).
//!
//! Only what transformers loads as the same model is written. A head with
//! hidden layers ([`crate::model::HeadConfig::hidden`] not empty) has no
//! counterpart in `BertForSequenceClassification` (pooler, dropout, one
//! linear layer), and transformers would load such a file with a fresh
//! random classifier or not at all, so it is refused
//! ([`ExportError::HiddenHeadLayers`]); so is an architecture other than
//! BERT's.
//!
//! [`HfClassifier`] loads such a directory, ours or one saved by
//! transformers' `save_pretrained`, and computes logits on the CPU for
//! prediction. It refuses a checkpoint without a trained classifier (a
//! pretrained encoder such as `BertModel`), whose logits would be random.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value as Json, json};

use crate::backend::Backend;
use crate::backend::cpu::CpuBackend;
use crate::config::{BertConfig, ConfigError};
use crate::data::{BatchOrder, DataError, TokenizedDataset};
use crate::model::{
    BatchError, BertClassifier, DeviceBatch, HeadConfig, LoadError, ModelConfig, ModelError,
};
use crate::tokenize::{Encoded, TextTokenizer, TokenizerError};
use crate::weights::{
    HostTensor, NamedTensors, StoredDtype, WeightsError, load_safetensors, save_safetensors,
};

/// The one HF architecture written and read.
pub const ARCHITECTURE: &str = "BertForSequenceClassification";
/// The prefix HF puts before the encoder's tensors in that architecture.
const ENCODER_PREFIX: &str = "bert.";
/// Tokenizer files copied from the source model when it has them.
const TOKENIZER_FILES: [&str; 4] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
];

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(
        "the classifier head has {} hidden layer(s) of widths {hidden:?}; Hugging Face's \
         {ARCHITECTURE} has none (pooler, dropout, one linear layer), so transformers could \
         not load it as the same model. Export a trial whose head has no hidden layers \
         (`head_layers = 0`)",
        hidden.len()
    )]
    HiddenHeadLayers { hidden: Vec<usize> },
    #[error(
        "{}: model_type `{model_type}` is not supported here (only `bert`, as {ARCHITECTURE})",
        path.display()
    )]
    UnsupportedModelType { path: PathBuf, model_type: String },
    #[error(
        "{} is not a sequence classifier: {problem}; fine-tune it first (`memtune train`)",
        dir.display()
    )]
    NotAClassifier { dir: PathBuf, problem: String },
    #[error("{}: {problem}", path.display())]
    Labels { path: PathBuf, problem: String },
    #[error(
        "{} {} and is not empty: choose a new directory (nothing is overwritten)",
        path.display(),
        if path.is_dir() { "exists" } else { "is a file" }
    )]
    OutputExists { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Weights(#[from] WeightsError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Batch(#[from] BatchError),
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// HF's names for classes given as integers: `LABEL_0`, `LABEL_1`, ...
pub fn default_label_names(num_labels: usize) -> Vec<String> {
    (0..num_labels).map(|i| format!("LABEL_{i}")).collect()
}

/// Fails unless `dir` is absent or an empty directory, so that saving
/// never overwrites anything. Call it before a long run that ends in
/// [`save_hf_dir`].
pub fn check_output_dir(dir: &Path) -> Result<(), ExportError> {
    if !dir.exists() {
        return Ok(());
    }
    let empty = dir.is_dir()
        && std::fs::read_dir(dir)
            .map_err(io_error(dir))?
            .next()
            .is_none();
    if empty {
        Ok(())
    } else {
        Err(ExportError::OutputExists {
            path: dir.to_path_buf(),
        })
    }
}

/// Fails unless `model` can be saved as [`ARCHITECTURE`] (see the module
/// doc); [`save_hf_dir`] checks it too, this is for checking before training.
pub fn check_exportable(
    config: impl Into<ModelConfig>,
    head: &HeadConfig,
) -> Result<(), ExportError> {
    if !head.hidden.is_empty() {
        return Err(ExportError::HiddenHeadLayers {
            hidden: head.hidden.clone(),
        });
    }
    let config = config.into();
    if config.model_type() != "bert" {
        return Err(ExportError::UnsupportedModelType {
            path: PathBuf::from("config.json"),
            model_type: config.model_type().to_string(),
        });
    }
    Ok(())
}

/// Writes `model` as a Hugging Face classification directory `out` (created;
/// it must be absent or empty). `source_dir` is the model it was fine-tuned
/// from (its `config.json` and tokenizer files are carried over), `tokenizer`
/// the tokenizer it was trained with, `labels` the class names in class
/// order (see [`default_label_names`]).
pub fn save_hf_dir<B: Backend>(
    be: &B,
    model: &BertClassifier<B>,
    tokenizer: &TextTokenizer,
    source_dir: &Path,
    labels: &[String],
    out: &Path,
) -> Result<(), ExportError> {
    check_exportable(&model.config, &model.head)?;
    check_output_dir(out)?;
    if labels.len() != model.head.num_labels {
        return Err(ExportError::Labels {
            path: source_dir.to_path_buf(),
            problem: format!(
                "{} label names for {} classes",
                labels.len(),
                model.head.num_labels
            ),
        });
    }
    let config_text = hf_config(&model.config, source_dir, labels)?;
    let tensors: NamedTensors = model
        .params
        .info
        .iter()
        .zip(&model.params.values)
        .map(|(info, value)| {
            let name = if info.name.starts_with("classifier.") {
                info.name.clone()
            } else {
                format!("{ENCODER_PREFIX}{}", info.name)
            };
            let data = be.download(value).into_iter().map(|v| v as f32).collect();
            let shape = info.shape.clone();
            (name, HostTensor { shape, data })
        })
        .collect();

    std::fs::create_dir_all(out).map_err(io_error(out))?;
    let write = |name: &str, text: &str| {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(io_error(&path))
    };
    write("config.json", &config_text)?;
    save_safetensors(out.join("model.safetensors"), &tensors, StoredDtype::F32)?;
    for name in TOKENIZER_FILES {
        let from = source_dir.join(name);
        if from.is_file() {
            let to = out.join(name);
            std::fs::copy(&from, &to).map_err(io_error(&to))?;
        }
    }
    if !out.join("tokenizer.json").is_file() {
        write("tokenizer.json", &tokenizer.to_json()?)?;
    }
    if !out.join("tokenizer_config.json").is_file() {
        let lowercase = tokenizer_lowercases(source_dir);
        let tokenizer_config = json!({
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": lowercase,
            "model_max_length": model.config.max_sequence(),
        });
        write(
            "tokenizer_config.json",
            &serde_json::to_string_pretty(&tokenizer_config).expect("JSON serialises"),
        )?;
    }
    Ok(())
}

/// A model with only `vocab.txt` is read lowercased (see
/// [`TextTokenizer::from_model_dir`]); with a `tokenizer.json`, that file's
/// normalizer decides and this flag is only informative.
fn tokenizer_lowercases(source_dir: &Path) -> bool {
    !source_dir.join("tokenizer.json").is_file()
}

/// The source's `config.json` with the classification fields set, and the
/// dropout the model was trained with.
fn hf_config(
    config: &BertConfig,
    source_dir: &Path,
    labels: &[String],
) -> Result<String, ExportError> {
    let path = source_dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(io_error(&path))?;
    let mut fields: Map<String, Json> = serde_json::from_str(&text)
        .map_err(|source| ExportError::Json {
            path: path.clone(),
            source,
        })
        .and_then(|v: Json| match v {
            Json::Object(map) => Ok(map),
            _ => Err(ExportError::Labels {
                path: path.clone(),
                problem: "config.json is not a JSON object".into(),
            }),
        })?;
    let id2label: Map<String, Json> = labels
        .iter()
        .enumerate()
        .map(|(i, name)| (i.to_string(), json!(name)))
        .collect();
    let label2id: Map<String, Json> = labels
        .iter()
        .enumerate()
        .map(|(i, name)| (name.clone(), json!(i)))
        .collect();
    if label2id.len() != labels.len() {
        return Err(ExportError::Labels {
            path,
            problem: format!("label names {labels:?} are not distinct"),
        });
    }
    for (key, value) in [
        ("architectures", json!([ARCHITECTURE])),
        ("model_type", json!(config.model_type)),
        ("num_labels", json!(labels.len())),
        ("id2label", Json::Object(id2label)),
        ("label2id", Json::Object(label2id)),
        ("problem_type", json!("single_label_classification")),
        ("hidden_dropout_prob", json!(config.hidden_dropout_prob)),
        (
            "attention_probs_dropout_prob",
            json!(config.attention_probs_dropout_prob),
        ),
        ("dtype", json!("float32")),
    ] {
        fields.insert(key.to_string(), value);
    }
    Ok(serde_json::to_string_pretty(&Json::Object(fields)).expect("JSON serialises"))
}

/// The class names of a classification `config.json`: `id2label` in id
/// order, else `LABEL_i` for `num_labels` classes, else HF's default of 2.
fn label_names(fields: &Map<String, Json>, path: &Path) -> Result<Vec<String>, ExportError> {
    let bad = |problem: String| ExportError::Labels {
        path: path.to_path_buf(),
        problem,
    };
    if let Some(id2label) = fields.get("id2label") {
        let Json::Object(map) = id2label else {
            return Err(bad("`id2label` is not an object".into()));
        };
        let mut names = vec![None; map.len()];
        for (id, name) in map {
            let index = id
                .parse::<usize>()
                .ok()
                .filter(|&i| i < names.len())
                .ok_or_else(|| {
                    bad(format!(
                        "`id2label` key `{id}` is not a class id below {}",
                        map.len()
                    ))
                })?;
            let name = name
                .as_str()
                .ok_or_else(|| bad(format!("`id2label`.`{id}` is not a string")))?;
            names[index] = Some(name.to_string());
        }
        return Ok(names
            .into_iter()
            .map(|n| n.expect("ids distinct and in range"))
            .collect());
    }
    match fields.get("num_labels") {
        None => Ok(default_label_names(2)),
        Some(n) => n
            .as_u64()
            .map(|n| default_label_names(n as usize))
            .ok_or_else(|| bad(format!("`num_labels` {n} is not a count"))),
    }
}

/// A Hugging Face sequence classifier loaded for prediction on the CPU.
pub struct HfClassifier {
    backend: CpuBackend<f32>,
    model: BertClassifier<CpuBackend<f32>>,
    tokenizer: TextTokenizer,
    labels: Vec<String>,
}

impl HfClassifier {
    /// Loads `dir` (`config.json`, `model.safetensors`, `tokenizer.json` or
    /// `vocab.txt`). Texts are truncated to `max_length` tokens, by default
    /// the smaller of 512 and the model's positions.
    pub fn load(dir: &Path, max_length: Option<usize>) -> Result<Self, ExportError> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        let config = BertConfig::from_json(&text, &path)?;
        let fields: Map<String, Json> =
            serde_json::from_str(&text).map_err(|source| ExportError::Json {
                path: path.clone(),
                source,
            })?;
        if config.model_type != "bert" {
            return Err(ExportError::UnsupportedModelType {
                path,
                model_type: config.model_type,
            });
        }
        if let Some(Json::Array(architectures)) = fields.get("architectures")
            && !architectures
                .iter()
                .filter_map(Json::as_str)
                .any(|a| a.ends_with("ForSequenceClassification"))
        {
            return Err(ExportError::NotAClassifier {
                dir: dir.to_path_buf(),
                problem: format!("config.json's architectures are {architectures:?}"),
            });
        }
        let labels = label_names(&fields, &path)?;
        let tensors = load_safetensors(dir.join("model.safetensors"))?;
        let backend = CpuBackend::<f32>::new();
        let head = HeadConfig {
            num_labels: labels.len(),
            hidden: Vec::new(),
        };
        let mut model = BertClassifier::new_random(&backend, &config, &head, 0)?;
        let report = model.load(&backend, &tensors)?;
        if !report.initialised_randomly.is_empty() {
            return Err(ExportError::NotAClassifier {
                dir: dir.to_path_buf(),
                problem: format!(
                    "model.safetensors has no {}",
                    report.initialised_randomly.join(", ")
                ),
            });
        }
        let max_length = max_length.unwrap_or(config.max_sequence().min(512));
        let tokenizer = TextTokenizer::from_model_dir(dir, max_length)?;
        tokenizer.check_model(config.vocab_size, config.max_sequence())?;
        Ok(Self {
            backend,
            model,
            tokenizer,
            labels,
        })
    }

    /// The class names, in class order.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// One text (or pair), tokenized and truncated as the model reads it.
    pub fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoded, TokenizerError> {
        self.tokenizer.encode(text, pair)
    }

    /// Each example's logits (`[classes]`), in input order, computed in
    /// batches of `batch_size` padded to their longest example.
    pub fn logits(
        &self,
        encoded: Vec<Encoded>,
        batch_size: usize,
    ) -> Result<Vec<Vec<f64>>, ExportError> {
        let classes = self.labels.len();
        let set = TokenizedDataset::unlabelled(&self.tokenizer, encoded);
        let mut logits = Vec::with_capacity(set.len());
        for batch in set.batches(batch_size, BatchOrder::Sequential)? {
            let device = DeviceBatch::upload(&self.backend, &self.model.config, classes, &batch)?;
            let flat = self.model.logits(&self.backend, &device);
            logits.extend(flat.chunks(classes).map(<[f64]>::to_vec));
        }
        Ok(logits)
    }
}

/// Softmax of one example's logits.
pub fn probabilities(logits: &[f64]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exp: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
    let sum: f64 = exp.iter().sum();
    exp.into_iter().map(|e| e / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{tiny_config, write_tiny_model};

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
        model
            .load(
                &be,
                &load_safetensors(dir.join("model.safetensors")).unwrap(),
            )
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
            serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap())
                .unwrap();
        assert_eq!(config["architectures"], json!([ARCHITECTURE]));
        assert_eq!(config["id2label"]["2"], json!("pos"));
        assert_eq!(config["label2id"]["neg"], json!(0));
        assert_eq!(config["num_labels"], json!(3));
        let saved = load_safetensors(out.join("model.safetensors")).unwrap();
        assert!(saved.contains_key("classifier.weight"));
        let raw = std::fs::read(out.join("model.safetensors")).unwrap();
        let names_in_file: Vec<String> = safetensors::SafeTensors::deserialize(&raw)
            .unwrap()
            .names()
            .into_iter()
            .map(str::to_string)
            .collect();
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
}
