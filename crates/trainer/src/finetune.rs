//! One fine-tuning run from files on disk: the work of one trial.
//!
//! Wires the seams together in the order a trial needs them: load and
//! validate the data, split it, tokenise with the model's tokenizer, build
//! the classifier from the pretrained weights, and train, reporting each
//! epoch to the caller's observer (where a pruner can stop the trial).

use std::path::PathBuf;

use crate::backend::cpu::CpuBackend;
use crate::config::{BertConfig, ConfigError};
use crate::data::{BatchOrder, DataError, DataSource, TokenizedDataset, stratified_split};
use crate::model::{BertClassifier, HeadConfig, LoadError, ModelError};
use crate::tokenize::{TextTokenizer, TokenizerError};
use crate::train::{Control, EpochMetrics, TrainConfig, TrainError, TrainReport, train};
use crate::weights::{WeightsError, load_safetensors};

/// Everything one run needs besides the observer.
#[derive(Clone, Debug)]
pub struct FinetuneSpec {
    /// A Hugging Face model directory: config.json, model.safetensors and
    /// tokenizer.json (or vocab.txt).
    pub model_dir: PathBuf,
    pub data: DataSource,
    pub validation_fraction: f64,
    pub split_seed: u64,
    /// Sequences are truncated to this many tokens (special tokens included).
    pub max_length: usize,
    /// Examples per forward/backward; `train.accumulation_steps` of them make
    /// one optimiser step.
    pub micro_batch: usize,
    /// Widths of the classifier head's hidden layers (0-3).
    pub head_hidden: Vec<usize>,
    pub train: TrainConfig,
}

/// What a run produced.
#[derive(Clone, Debug)]
pub struct FinetuneOutcome {
    pub report: TrainReport,
    pub train_examples: usize,
    pub validation_examples: usize,
    /// Records the loader skipped, as `file:line: reason` lines.
    pub skipped_records: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum FinetuneError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Weights(#[from] WeightsError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Train(#[from] TrainError),
}

/// Fine-tunes on the CPU backend (f32).
pub fn finetune_cpu(
    spec: &FinetuneSpec,
    observer: &mut dyn FnMut(&EpochMetrics) -> Control,
) -> Result<FinetuneOutcome, FinetuneError> {
    let dataset = spec.data.load()?;
    let num_classes = dataset.num_classes;
    let split = stratified_split(
        &dataset.examples,
        num_classes,
        spec.validation_fraction,
        spec.split_seed,
    )?;

    let config = BertConfig::from_file(spec.model_dir.join("config.json"))?;
    let tokenizer = TextTokenizer::from_model_dir(&spec.model_dir, spec.max_length)?;
    tokenizer.check_model(config.vocab_size, config.max_sequence())?;
    let train_set = TokenizedDataset::new(&tokenizer, &split.train, num_classes)?;
    let valid_set = TokenizedDataset::new(&tokenizer, &split.validation, num_classes)?;
    let order = BatchOrder::Shuffled {
        seed: spec.train.seed,
        epoch: 0,
    };
    let train_batches: Vec<_> = train_set.batches(spec.micro_batch, order)?.collect();
    let valid_batches: Vec<_> = valid_set
        .batches(spec.micro_batch, BatchOrder::Sequential)?
        .collect();

    let be = CpuBackend::<f32>::new();
    let head = HeadConfig {
        num_labels: num_classes,
        hidden: spec.head_hidden.clone(),
    };
    let mut model = BertClassifier::new_random(&be, &config, &head, spec.train.seed)?;
    model.load(
        &be,
        &load_safetensors(spec.model_dir.join("model.safetensors"))?,
    )?;
    let report = train(
        &be,
        &mut model,
        &train_batches,
        &valid_batches,
        &spec.train,
        observer,
    )?;
    Ok(FinetuneOutcome {
        report,
        train_examples: train_set.len(),
        validation_examples: valid_set.len(),
        skipped_records: dataset
            .report
            .skipped
            .iter()
            .map(ToString::to_string)
            .collect(),
    })
}
