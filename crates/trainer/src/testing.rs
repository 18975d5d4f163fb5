//! Tiny model directories for tests of everything above the trainer.
//!
//! [`write_tiny_model`] writes what a Hugging Face BERT directory holds
//! (`config.json`, `vocab.txt`, `model.safetensors` with random weights
//! under the real tensor names), so a study runner's tests can run real
//! fine-tunes through [`crate::finetune::finetune_cpu`] in about a second,
//! without the downloaded all-MiniLM-L6-v2. The weights are random: a tiny
//! model learns only what the data teaches it in a few epochs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::backend::Backend;
use crate::backend::cpu::CpuBackend;
use crate::config::BertConfig;
use crate::data::BadRecordPolicy;
use crate::data::embedded::load_sentiment;
use crate::model::{BertClassifier, HeadConfig};
use crate::weights::{HostTensor, NamedTensors, StoredDtype, WeightsError, save_safetensors};

/// BERT's special tokens, first in `vocab.txt` (`[PAD]` is id 0, the
/// config's `pad_token_id`).
pub const SPECIAL_TOKENS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

/// Why [`write_tiny_model`] could not write a model directory.
#[derive(Debug, thiserror::Error)]
pub enum TinyModelError {
    /// Creating the directory or writing one of its files failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The directory or file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Writing `model.safetensors` failed.
    #[error(transparent)]
    Weights(#[from] WeightsError),
    /// The config does not describe a valid BERT model (it fails
    /// validation, or the random model cannot be built from it).
    #[error("tiny model config: {0}")]
    Config(String),
}

/// A small architecture that trains fast on the CPU: hidden 32, 2 layers,
/// 4 heads, intermediate 64, 128 positions (`vocab_size` is set by
/// [`write_tiny_model`]).
pub fn tiny_config() -> BertConfig {
    BertConfig {
        max_position_embeddings: 128,
        ..BertConfig::tiny(32, 2, 4, 64, 1)
    }
}

/// Writes `config.json`, `vocab.txt` and `model.safetensors` of a BERT
/// model with architecture `config` into `dir` (created if missing).
/// The vocabulary is [`SPECIAL_TOKENS`], then `words` lowercased (the
/// tokenizer built from `vocab.txt` lowercases), without duplicates or
/// blanks; `vocab_size` is set to its length. The weights are the model's
/// random initialisation for `seed`, encoder and pooler (no classifier, as
/// in a pretrained checkpoint). Returns the config as written.
pub fn write_tiny_model(
    dir: &Path,
    config: &BertConfig,
    words: &[&str],
    seed: u64,
) -> Result<BertConfig, TinyModelError> {
    let write = |name: &str, contents: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, contents).map_err(|source| TinyModelError::Write { path, source })
    };
    std::fs::create_dir_all(dir).map_err(|source| TinyModelError::Write {
        path: dir.to_path_buf(),
        source,
    })?;

    let mut vocab: Vec<String> = SPECIAL_TOKENS.iter().map(|t| t.to_string()).collect();
    for word in words {
        let word = word.trim().to_lowercase();
        if word.is_empty() || word.contains(char::is_whitespace) || vocab.contains(&word) {
            continue;
        }
        vocab.push(word);
    }
    let config = BertConfig {
        vocab_size: vocab.len(),
        pad_token_id: 0,
        model_type: "bert".into(),
        ..config.clone()
    };
    let mut json = config.hf_config_json();
    json["architectures"] = serde_json::json!(["BertModel"]);
    // Validate as a reader would, before writing anything.
    let text = serde_json::to_string_pretty(&json).expect("a JSON value serialises");
    BertConfig::from_json(&text, &dir.join("config.json"))
        .map_err(|e| TinyModelError::Config(e.to_string()))?;

    let be = CpuBackend::<f32>::new();
    let head = HeadConfig {
        num_labels: 2,
        hidden: vec![],
    };
    let model = BertClassifier::new_random(&be, &config, &head, seed)
        .map_err(|e| TinyModelError::Config(e.to_string()))?;
    let tensors: NamedTensors = model
        .params
        .info
        .iter()
        .zip(&model.params.values)
        .filter(|(info, _)| !info.name.starts_with("classifier"))
        .map(|(info, value)| {
            let data = be.download(value).into_iter().map(|v| v as f32).collect();
            let tensor = HostTensor {
                shape: info.shape.clone(),
                data,
            };
            (info.name.clone(), tensor)
        })
        .collect::<BTreeMap<_, _>>();

    write("config.json", text.as_bytes())?;
    write("vocab.txt", (vocab.join("\n") + "\n").as_bytes())?;
    save_safetensors(dir.join("model.safetensors"), &tensors, StoredDtype::F32)?;
    Ok(config)
}

/// The `n` most frequent words of the embedded sentiment data set
/// (lowercased, split at whitespace and punctuation, ties by word), a
/// vocabulary under which a tiny model can learn that set.
pub fn sentiment_words(n: usize) -> Vec<String> {
    let dataset = load_sentiment(BadRecordPolicy::Skip).expect("the embedded data set loads");
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for example in &dataset.examples {
        let lower = example.text.to_lowercase();
        for word in lower.split(|c: char| !c.is_alphanumeric()) {
            if !word.is_empty() {
                *counts.entry(word.to_string()).or_insert(0) += 1;
            }
        }
    }
    let mut ranked: Vec<(String, usize)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let punctuation = [".", ",", "!", "?", "'", "-"].map(String::from);
    punctuation
        .into_iter()
        .chain(ranked.into_iter().map(|(w, _)| w))
        .take(n)
        .collect()
}
