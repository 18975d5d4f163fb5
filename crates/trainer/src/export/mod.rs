//! A fine-tuned classifier as a Hugging Face directory, and back, for every
//! architecture memtune trains: BERT, RoBERTa / XLM-RoBERTa / CamemBERT,
//! DistilBERT, ELECTRA and DeBERTa-v2/v3.
//!
//! [`save_hf_dir`] writes what `transformers`'
//! `AutoModelForSequenceClassification.from_pretrained(dir)` loads as the
//! same model:
//! - `config.json`: the source model's config with `architectures` (the
//!   `model_type`'s `*ForSequenceClassification`, e.g.
//!   `RobertaForSequenceClassification`), `num_labels`, `id2label`,
//!   `label2id` and the dropout the model was trained with, under the
//!   family's own keys (DistilBERT's `dropout`, ...);
//! - `model.safetensors` in that class's tensor names: the base model's
//!   prefix (`bert.`, `roberta.`, `distilbert.`, `electra.`, `deberta.`)
//!   before embeddings and encoder (and BERT's pooler), the head as the
//!   class has it (`classifier.*`; RoBERTa's and ELECTRA's
//!   `classifier.dense` / `classifier.out_proj`, DistilBERT's
//!   `pre_classifier`, DeBERTa's `pooler.dense`). The mapping is the
//!   family table's ([`crate::model::family::Family::checkpoint_name`]),
//!   not code per family;
//! - the tokenizer: `tokenizer.json` (and the source's other tokenizer
//!   files when it has them). Where the source has no
//!   `tokenizer_config.json`, one with `model_max_length` is written and no
//!   tokenizer class, so transformers picks the `model_type`'s own.
//!
//! Only what transformers loads as the same model is written. A head with
//! hidden layers ([`crate::model::HeadConfig::hidden`] not empty) has no
//! counterpart in any `*ForSequenceClassification`, and transformers would
//! load such a file with a fresh random classifier or not at all, so it is
//! refused ([`ExportError::HiddenHeadLayers`]).
//!
//! [`HfClassifier`] (`predict.rs`) loads such a directory, ours or one saved
//! by transformers' `save_pretrained`, and computes logits on the CPU. It
//! refuses a `problem_type` other than single-label classification
//! ([`ExportError::ProblemType`]), an output layer whose rows are not
//! `config.json`'s classes ([`ExportError::ClassCount`]) and head tensors
//! of other shapes than the config gives ([`ExportError::HeadShape`]).

mod hf_config;
mod predict;

pub use predict::{HfClassifier, probabilities};

use std::path::{Path, PathBuf};

use crate::backend::Backend;
use crate::config::ConfigError;
use crate::data::DataError;
use crate::finetune::FinetuneError;
use crate::model::{BatchError, BuildError, Classifier, HeadConfig, LoadError, ModelError};
use crate::tokenize::{TextTokenizer, TokenizerError};
use crate::weights::{HostTensor, NamedTensors, StoredDtype, WeightsError, save_safetensors};
use crate::write_whole::{check_dir_writable, write_dir_whole};

/// Tokenizer files copied from the source model when it has them: the fast
/// tokenizer, its config, and the files transformers' slow tokenizers read
/// (WordPiece's `vocab.txt`, byte-level BPE's `vocab.json` and
/// `merges.txt`, SentencePiece models).
const TOKENIZER_FILES: [&str; 9] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "sentencepiece.bpe.model",
    "spm.model",
];

/// Why a trained model could not be saved as a Hugging Face directory
/// ([`save_hf_dir`] and its checks), or such a directory loaded for
/// prediction ([`HfClassifier::load`]).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(
        "the classifier head has {} hidden layer(s) of widths {hidden:?}; Hugging Face's \
         sequence classifiers have none (a dense layer or pooler, dropout, one output \
         layer), so transformers could not load it as the same model. Export a trial whose \
         head has no hidden layers (`head_layers = 0`)",
        hidden.len()
    )]
    /// The classifier head has hidden layers, which no
    /// `*ForSequenceClassification` has (see [`check_exportable`]).
    HiddenHeadLayers {
        /// Width of each hidden layer of the head, in order.
        hidden: Vec<usize>,
    },
    #[error(
        "{} is not a sequence classifier: {problem}; fine-tune it first (`memtune train`)",
        dir.display()
    )]
    /// The directory holds no sequence classifier: `config.json`'s
    /// `architectures` names no `*ForSequenceClassification`, or
    /// `model.safetensors` lacks head tensors the model needs.
    NotAClassifier {
        /// The model directory.
        dir: PathBuf,
        /// What shows it: the architectures listed, or the head tensors
        /// missing.
        problem: String,
    },
    #[error("{}: {problem}", path.display())]
    /// The class names cannot be used: on saving, not one distinct name
    /// per class; on loading, a `config.json` that is not a JSON object, or
    /// whose `id2label` or `num_labels` is malformed or gives fewer than 2
    /// classes.
    Labels {
        /// The `config.json` at fault, or the output directory when the
        /// names given to [`save_hf_dir`] do not match the class count.
        path: PathBuf,
        /// What is wrong with the names.
        problem: String,
    },
    /// The output layer's rows are not the classes `config.json` names.
    #[error(
        "`{tensor}` is {shape:?} but {}'s {labels_key} gives {labels} labels: the checkpoint and its config disagree",
        config.display()
    )]
    ClassCount {
        /// The output layer's weight, by its checkpoint name
        /// (`classifier.weight`, `classifier.out_proj.weight`, ...).
        tensor: String,
        /// That tensor's shape in the checkpoint (`[classes, in]`).
        shape: Vec<usize>,
        /// The directory's `config.json`.
        config: PathBuf,
        /// Where the class count came from: `id2label`, `num_labels`, or a
        /// note that HF's default of 2 applied.
        labels_key: &'static str,
        /// Classes the config gives.
        labels: usize,
    },
    /// Classifier head tensors present in the checkpoint with shapes its
    /// config does not give.
    #[error(
        "{}: the classifier head does not fit config.json: shapes differ: {}",
        path.display(),
        mismatched.join(", ")
    )]
    HeadShape {
        /// The checkpoint file (`model.safetensors`).
        path: PathBuf,
        /// `name: checkpoint [..] vs model [..]`.
        mismatched: Vec<String>,
    },
    /// A `problem_type` whose scores are not a softmax over the classes.
    #[error(
        "{}: problem_type is {problem_type}; memtune trains and scores single-label classifiers (a softmax over the classes), which this model is not",
        config.display()
    )]
    ProblemType {
        /// The directory's `config.json`.
        config: PathBuf,
        /// The `problem_type` it gives (a value that is not a string, in
        /// its JSON form).
        problem_type: String,
    },
    #[error(
        "{} {} and is not empty: choose a new directory (nothing is overwritten)",
        path.display(),
        if path.is_dir() { "exists" } else { "is a file" }
    )]
    /// The output path holds a file or a non-empty directory; nothing is
    /// overwritten.
    OutputExists {
        /// The output directory asked for.
        path: PathBuf,
    },
    /// The output directory cannot be made where it is asked for.
    #[error("cannot save to {}: {source}", path.display())]
    OutputUnwritable {
        /// The output directory asked for.
        path: PathBuf,
        /// What is in the way (a file where a folder is needed, a link to
        /// nothing, a folder that cannot be written).
        source: std::io::Error,
    },
    /// Reading the source model's `config.json` or tokenizer files, or
    /// writing the exported directory, failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory being read or written.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A `config.json` is not valid JSON.
    #[error("{}: {source}", path.display())]
    Json {
        /// The `config.json`.
        path: PathBuf,
        /// serde_json's message.
        source: serde_json::Error,
    },
    /// The directory's `config.json` cannot be read, or its class count is
    /// beyond the size limits.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The model directory does not load: `config.json` describes no
    /// supported model, or `model.safetensors` does not fit it (checked on a
    /// simulated device before anything is allocated).
    #[error(transparent)]
    ModelConfig(Box<FinetuneError>),
    /// `model.safetensors` cannot be read, or the exported one written.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// The tokenizer cannot be read, does not fit the model, or cannot be
    /// written as `tokenizer.json`.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// A BERT-lineage classifier cannot be built from the config.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// A DeBERTa classifier cannot be built or its checkpoint loaded.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The checkpoint does not fit the BERT-lineage model its config
    /// describes.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The texts to predict cannot be batched (a batch size of 0).
    #[error(transparent)]
    Data(#[from] DataError),
    /// A batch to predict does not fit the model (a sequence longer than
    /// its positions, an id out of range).
    #[error(transparent)]
    Batch(#[from] BatchError),
}

impl ExportError {
    /// Whether the model's config holds a size beyond the limits or one
    /// its checkpoint contradicts (see [`FinetuneError::is_size_error`]).
    pub fn is_size_error(&self) -> bool {
        match self {
            ExportError::Config(e) => e.is_size(),
            ExportError::ModelConfig(e) => e.is_size_error(),
            _ => false,
        }
    }

    /// The error with a path inside `temporary` (where [`save_hf_dir`]
    /// writes the files first) named where that file was to land, inside
    /// `out`: the temporary is removed before anyone reads the message.
    fn named_in(mut self, temporary: &Path, out: &Path) -> Self {
        let path = match &mut self {
            ExportError::Io { path, .. }
            | ExportError::Weights(WeightsError::Write { path, .. })
            | ExportError::Weights(WeightsError::ShapeMismatch { path, .. }) => path,
            _ => return self,
        };
        if let Ok(rest) = path.strip_prefix(temporary) {
            *path = out.join(rest);
        }
        self
    }
}

impl From<FinetuneError> for ExportError {
    fn from(e: FinetuneError) -> Self {
        ExportError::ModelConfig(Box::new(e))
    }
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
/// never overwrites anything, and unless [`save_hf_dir`] could make it
/// now (no file where a folder is needed, no link to nothing, a folder it
/// can write). Call it before a long run that ends in [`save_hf_dir`].
pub fn check_output_dir(dir: &Path) -> Result<(), ExportError> {
    if dir.exists() {
        let empty = dir.is_dir()
            && std::fs::read_dir(dir)
                .map_err(io_error(dir))?
                .next()
                .is_none();
        if !empty {
            return Err(ExportError::OutputExists {
                path: dir.to_path_buf(),
            });
        }
    }
    check_dir_writable(dir).map_err(|source| ExportError::OutputUnwritable {
        path: dir.to_path_buf(),
        source,
    })
}

/// Fails unless a model with `head` can be saved as transformers' sequence
/// classifier (see the module doc); [`save_hf_dir`] checks it too, this is
/// for checking before training.
pub fn check_exportable(head: &HeadConfig) -> Result<(), ExportError> {
    if head.hidden.is_empty() {
        Ok(())
    } else {
        Err(ExportError::HiddenHeadLayers {
            hidden: head.hidden.clone(),
        })
    }
}

/// Writes `model` as a Hugging Face classification directory `out` (created;
/// it must be absent or empty). The directory is written whole: its files go
/// into a temporary directory (beside an absent `out`, which it becomes once
/// all are written; inside an empty `out` that exists, whose files they then
/// become), so a failed export leaves nothing and can be retried. `source_dir` is the model it was fine-tuned
/// from (its `config.json` and tokenizer files are carried over), `tokenizer`
/// the tokenizer it was trained with, `labels` the class names in class
/// order (see [`default_label_names`]).
pub fn save_hf_dir<B: Backend>(
    be: &B,
    model: &dyn Classifier<B>,
    tokenizer: &TextTokenizer,
    source_dir: &Path,
    labels: &[String],
    out: &Path,
) -> Result<(), ExportError> {
    check_exportable(&HeadConfig {
        num_labels: model.num_labels(),
        hidden: model.head_hidden().to_vec(),
    })?;
    check_output_dir(out)?;
    if labels.len() != model.num_labels() {
        return Err(ExportError::Labels {
            path: out.to_path_buf(),
            problem: format!(
                "{} label names for {} classes",
                labels.len(),
                model.num_labels()
            ),
        });
    }
    let config = model.model_config();
    let config_text = hf_config::classifier_config(&config, source_dir, labels)?;
    let params = model.params();
    let tensors: NamedTensors = params
        .info
        .iter()
        .zip(&params.values)
        .map(|(info, value)| {
            let data = be.download(value).into_iter().map(|v| v as f32).collect();
            let shape = info.shape.clone();
            (
                config.checkpoint_name(&info.name),
                HostTensor { shape, data },
            )
        })
        .collect();

    write_dir_whole(
        out,
        |dir| {
            write_hf_files(dir, &config_text, &tensors, source_dir, tokenizer, &config)
                .map_err(|e| e.named_in(dir, out))
        },
        |e| io_error(out)(e),
    )
}

/// The files of [`save_hf_dir`], written into `dir`.
fn write_hf_files(
    dir: &Path,
    config_text: &str,
    tensors: &NamedTensors,
    source_dir: &Path,
    tokenizer: &TextTokenizer,
    config: &crate::model::ModelConfig,
) -> Result<(), ExportError> {
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(io_error(&path))
    };
    write("config.json", config_text)?;
    save_safetensors(dir.join("model.safetensors"), tensors, StoredDtype::F32)?;
    for name in TOKENIZER_FILES {
        let from = source_dir.join(name);
        if from.is_file() {
            let to = dir.join(name);
            std::fs::copy(&from, &to).map_err(io_error(&from))?;
        }
    }
    if !dir.join("tokenizer.json").is_file() {
        write("tokenizer.json", &tokenizer.to_json()?)?;
    }
    if !dir.join("tokenizer_config.json").is_file() {
        write(
            "tokenizer_config.json",
            &hf_config::tokenizer_config(config.max_sequence(), source_dir),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
