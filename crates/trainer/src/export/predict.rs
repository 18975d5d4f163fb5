//! [`HfClassifier`]: a Hugging Face sequence classification directory of any
//! family memtune trains, loaded for prediction on the CPU.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use super::ExportError;
use super::hf_config::{json_object, label_names, labels_key, other_problem_type};
use crate::backend::cpu::CpuBackend;
use crate::config::ConfigError;
use crate::data::{BatchOrder, TokenizedDataset};
use crate::finetune::{check_checkpoint_builds, read_model_config};
use crate::model::deberta::DebertaClassifier;
use crate::model::{BertClassifier, BuildError, Classifier, HeadConfig, ModelConfig};
use crate::tokenize::{Encoded, TextTokenizer, TokenizerError};
use crate::weights::load_safetensors;

/// A classifier on the CPU backend, of any architecture.
type CpuClassifier = Box<dyn Classifier<CpuBackend<f32>>>;

/// A Hugging Face sequence classifier loaded for prediction on the CPU.
pub struct HfClassifier {
    /// The model's `config.json`, named in errors.
    config_path: PathBuf,
    /// The token types the model reads (`None`: none).
    token_types: Option<usize>,
    backend: CpuBackend<f32>,
    model: CpuClassifier,
    tokenizer: TextTokenizer,
    labels: Vec<String>,
}

/// The classifier of `dir` on `be` with `num_labels` classes, and the head
/// parameters `model.safetensors` lacks (left at their random
/// initialisation). The architecture is `config.json`'s `model_type`.
pub(super) fn load_classifier(
    be: &CpuBackend<f32>,
    config: &ModelConfig,
    dir: &Path,
    num_labels: usize,
) -> Result<(CpuClassifier, Vec<String>), ExportError> {
    let path = dir.join("model.safetensors");
    let tensors = load_safetensors(&path)?;
    // On a simulated device first: the real one would allocate every size
    // the config gives before finding a tensor missing.
    check_checkpoint_builds(
        config,
        &tensors,
        &dir.join("config.json"),
        &path,
        num_labels,
    )?;
    let head = HeadConfig {
        num_labels,
        hidden: Vec::new(),
    };
    Ok(match config {
        ModelConfig::Bert(c) => {
            let mut model = BertClassifier::new_random(be, c, &head, 0)?;
            let report = model.load(be, &tensors, &path)?;
            (Box::new(model), report.initialised_randomly)
        }
        ModelConfig::Deberta(c) => {
            let mut model =
                DebertaClassifier::new_random(be, c, num_labels, 0).map_err(BuildError::from)?;
            let fresh = model.load(be, &tensors, &path).map_err(BuildError::from)?;
            (Box::new(model), fresh)
        }
    })
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
        let config = read_model_config(&path)?;
        let fields = json_object(&text, &path)?;
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
        if let Some(problem_type) = other_problem_type(&fields) {
            return Err(ExportError::ProblemType {
                config: path,
                problem_type,
            });
        }
        let labels = label_names(&fields, &path)?;
        let backend = CpuBackend::<f32>::new();
        let (model, fresh) = load_classifier(&backend, &config, dir, labels.len())?;
        if !fresh.is_empty() {
            let model_shapes: Vec<(&str, &[usize])> = fresh
                .iter()
                .filter_map(|name| {
                    let params = model.params();
                    let i = params.index_of(name)?;
                    Some((name.as_str(), params.info[i].shape.as_slice()))
                })
                .collect();
            return Err(head_not_loaded(
                &config,
                dir,
                &fields,
                labels.len(),
                &model_shapes,
            ));
        }
        let max_length = max_length.unwrap_or(config.max_sequence().min(512));
        let tokenizer = TextTokenizer::from_model_dir(dir, max_length)?;
        tokenizer.check_model(config.vocab_size(), config.max_sequence())?;
        Ok(Self {
            token_types: config.token_types_read(),
            config_path: path,
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

    /// The model's tokenizer, truncating to the `max_length` given to
    /// [`HfClassifier::load`] (by default the smaller of 512 and the
    /// model's positions).
    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// The architecture, as `config.json` gives it.
    pub fn model_config(&self) -> ModelConfig {
        self.model.model_config()
    }

    /// One text (or pair), tokenized and truncated as the model reads it;
    /// a pair's token types must be ones the model reads.
    pub fn encode(&self, text: &str, pair: Option<&str>) -> Result<Encoded, TokenizerError> {
        self.tokenizer
            .encode_within(text, pair, self.token_types, &self.config_path)
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
            let flat = self.model.logits(&self.backend, &batch)?;
            logits.extend(flat.chunks(classes).map(<[f64]>::to_vec));
        }
        Ok(logits)
    }
}

/// Why the head parameters `fresh` (each with the shape the model needs)
/// were not loaded from `dir`: an output layer of another class count
/// than `config.json`'s, a head tensor of another shape, or none at all.
fn head_not_loaded(
    config: &ModelConfig,
    dir: &Path,
    fields: &serde_json::Map<String, Json>,
    labels: usize,
    fresh: &[(&str, &[usize])],
) -> ExportError {
    let tensor = config.output_weight_name();
    // Read again on this error path only; it was readable a moment ago.
    let stored = load_safetensors(dir.join("model.safetensors")).ok();
    let shape_of = |name: &str| {
        stored
            .as_ref()
            .and_then(|tensors| tensors.get(name).map(|t| t.shape.clone()))
    };
    if let Some(shape) = shape_of(&tensor)
        && shape.len() == 2
        && shape.first() != Some(&labels)
    {
        return ExportError::ClassCount {
            tensor,
            shape,
            config: dir.join("config.json"),
            labels_key: labels_key(fields),
            labels,
        };
    }
    let misshapen: Vec<String> = fresh
        .iter()
        .filter_map(|&(name, needed)| {
            let shape = shape_of(name)?;
            Some(format!("{name}: checkpoint {shape:?} vs model {needed:?}"))
        })
        .collect();
    if !misshapen.is_empty() {
        return ExportError::HeadShape {
            path: dir.join("model.safetensors"),
            mismatched: misshapen,
        };
    }
    let names: Vec<&str> = fresh.iter().map(|&(name, _)| name).collect();
    ExportError::NotAClassifier {
        dir: dir.to_path_buf(),
        problem: format!("model.safetensors has no {}", names.join(", ")),
    }
}

/// Softmax of one example's logits.
pub fn probabilities(logits: &[f64]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let exp: Vec<f64> = logits.iter().map(|l| (l - max).exp()).collect();
    let sum: f64 = exp.iter().sum();
    exp.into_iter().map(|e| e / sum).collect()
}
