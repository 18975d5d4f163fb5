//! A run's data, read, split and tokenised once per process.
//!
//! A study's runner prices each trial by replaying it at a few
//! micro-batches, and a worker runs trial after trial on the same data:
//! each would otherwise read and tokenise the whole data set again (seconds
//! for long documents), on the runner's loop or before the worker's first
//! step. The splits depend only on the data, the split, the model
//! directory's tokenizer and the maximum length, so they are kept per such
//! key. Each file in the key carries its length and modification time, so a
//! file rewritten in place is read again.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::{FinetuneError, FinetuneSpec};
use crate::data::{DataSource, TokenizedDataset};

/// Entries kept: a study's search space over models and lengths needs
/// one per (model, length) in flight; each holds token ids only.
const CAPACITY: usize = 16;

/// The tokenised train and validation splits of a spec's data.
pub(super) struct Splits {
    pub dataset_report: Vec<String>,
    pub label_names: Option<Vec<String>>,
    pub num_classes: usize,
    pub train: TokenizedDataset,
    pub valid: TokenizedDataset,
}

static CACHE: Mutex<VecDeque<(String, Arc<Splits>)>> = Mutex::new(VecDeque::new());

/// `spec`'s splits: remembered, or made by `make` and remembered (the most
/// recently used [`CAPACITY`]). An error is not remembered.
pub(super) fn splits(
    spec: &FinetuneSpec,
    make: impl FnOnce() -> Result<Splits, FinetuneError>,
) -> Result<Arc<Splits>, FinetuneError> {
    let key = key(spec);
    {
        let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = cache.iter().position(|(k, _)| *k == key) {
            let entry = cache.remove(i).expect("the position is in range");
            let splits = Arc::clone(&entry.1);
            cache.push_front(entry);
            return Ok(splits);
        }
    }
    // Made without the lock: another thread's run is not held up by this
    // one's tokenisation (two runs of one key may both make it).
    let splits = Arc::new(make()?);
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    cache.retain(|(k, _)| *k != key);
    cache.push_front((key, Arc::clone(&splits)));
    cache.truncate(CAPACITY);
    Ok(splits)
}

/// What the splits depend on, with each file's length and modification
/// time.
fn key(spec: &FinetuneSpec) -> String {
    let data = match &spec.data {
        DataSource::EmbeddedSentiment { .. } => Vec::new(),
        DataSource::Files { paths, .. } => paths.iter().map(|p| stamp(p)).collect(),
    };
    let model = ["config.json", "tokenizer.json", "vocab.txt"]
        .iter()
        .map(|f| stamp(&spec.model_dir.join(f)))
        .collect::<Vec<_>>();
    format!(
        "{}|{}|{}|{}|{}|{data:?}|{model:?}",
        serde_json::to_string(&spec.data).expect("a data source serialises"),
        spec.validation_fraction,
        spec.split_seed,
        spec.model_dir.display(),
        spec.max_length,
    )
}

/// A file's length and modification time, `None` when it cannot be read.
fn stamp(path: &Path) -> Option<(u64, std::time::SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}
