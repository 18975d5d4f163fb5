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
/// one per (model, length) in flight.
const CAPACITY: usize = 16;

/// Bytes of token ids the entries may hold together (the newest is kept
/// whatever its size): a large data set is then tokenised again for
/// another key rather than held many times over in the runner, whose
/// memory the CPU backend's trials lease.
const CAPACITY_BYTES: usize = 512 << 20;

/// The tokenised train and validation splits of a spec's data.
pub(super) struct Splits {
    pub dataset_report: Vec<String>,
    pub label_names: Option<Vec<String>>,
    pub num_classes: usize,
    pub train: TokenizedDataset,
    pub valid: TokenizedDataset,
}

impl Splits {
    /// Bytes of the token ids (and token type ids) held.
    fn bytes(&self) -> usize {
        [&self.train, &self.valid]
            .iter()
            .flat_map(|set| set.encoded())
            .map(|e| (e.ids.len() + e.type_ids.len()) * std::mem::size_of::<u32>())
            .sum()
    }
}

/// The most recently used splits, within a count and a byte budget.
struct Cache {
    /// The most recent first, with each one's bytes.
    entries: VecDeque<(String, Arc<Splits>, usize)>,
    max_entries: usize,
    max_bytes: usize,
}

impl Cache {
    const fn new(max_entries: usize, max_bytes: usize) -> Self {
        Cache {
            entries: VecDeque::new(),
            max_entries,
            max_bytes,
        }
    }

    fn get(&mut self, key: &str) -> Option<Arc<Splits>> {
        let i = self.entries.iter().position(|(k, _, _)| k == key)?;
        let entry = self.entries.remove(i)?;
        let splits = Arc::clone(&entry.1);
        self.entries.push_front(entry);
        Some(splits)
    }

    /// Keeps `splits` as the most recent, dropping the oldest entries
    /// past the count or the bytes (never the newest).
    fn insert(&mut self, key: String, splits: Arc<Splits>) {
        self.entries.retain(|(k, _, _)| *k != key);
        let bytes = splits.bytes();
        self.entries.push_front((key, splits, bytes));
        self.entries.truncate(self.max_entries.max(1));
        while self.entries.len() > 1
            && self.entries.iter().map(|(_, _, b)| b).sum::<usize>() > self.max_bytes
        {
            self.entries.pop_back();
        }
    }
}

static CACHE: Mutex<Cache> = Mutex::new(Cache::new(CAPACITY, CAPACITY_BYTES));

/// `spec`'s splits: remembered, or made by `make` and remembered (see
/// [`CAPACITY`] and [`CAPACITY_BYTES`]). An error is not remembered.
pub(super) fn splits(
    spec: &FinetuneSpec,
    make: impl FnOnce() -> Result<Splits, FinetuneError>,
) -> Result<Arc<Splits>, FinetuneError> {
    let key = key(spec);
    let cached = CACHE.lock().unwrap_or_else(|p| p.into_inner()).get(&key);
    if let Some(splits) = cached {
        return Ok(splits);
    }
    // Made without the lock: another thread's run is not held up by this
    // one's tokenisation (two runs of one key may both make it).
    let splits = Arc::new(make()?);
    CACHE
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, Arc::clone(&splits));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::LoadOptions;

    fn spec(dir: &Path, max_length: usize) -> FinetuneSpec {
        FinetuneSpec {
            model_dir: dir.join("model"),
            data: DataSource::Files {
                paths: vec![dir.join("data.csv")],
                options: LoadOptions::new(2),
            },
            validation_fraction: 0.2,
            split_seed: 1,
            max_length,
            micro_batch: 8,
            batch_size: None,
            head_hidden: vec![],
            dropout: None,
            memory_limit: None,
            matmul_precision: Default::default(),
            kernels: Default::default(),
            train: Default::default(),
        }
    }

    /// Splits holding `rows` x `tokens` ids and as many type ids.
    fn made(rows: usize, tokens: usize) -> Arc<Splits> {
        Arc::new(Splits {
            dataset_report: vec![],
            label_names: None,
            num_classes: 2,
            train: TokenizedDataset::filler(rows, tokens),
            valid: TokenizedDataset::filler(0, 0),
        })
    }

    #[test]
    fn the_key_changes_with_the_length_and_with_a_rewritten_file() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data.csv");
        std::fs::write(&data, "text,label\na,0\n").unwrap();
        let first = key(&spec(dir.path(), 64));
        assert_eq!(first, key(&spec(dir.path(), 64)));
        assert_ne!(first, key(&spec(dir.path(), 128)));
        std::fs::write(&data, "text,label\nab,0\n").unwrap();
        assert_ne!(first, key(&spec(dir.path(), 64)));
    }

    #[test]
    fn the_cache_keeps_the_most_recent_within_its_count_and_bytes() {
        // 2 x 10 ids of 4 bytes and as many type ids: 160 bytes each.
        let mut cache = Cache::new(3, 400);
        let a = made(2, 10);
        cache.insert("a".into(), Arc::clone(&a));
        cache.insert("b".into(), made(2, 10));
        assert!(Arc::ptr_eq(&cache.get("a").unwrap(), &a));
        // 480 bytes: the least recently used ("b") goes.
        cache.insert("c".into(), made(2, 10));
        assert!(cache.get("b").is_none());
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        // Larger than the budget alone: kept, and everything else goes.
        cache.insert("big".into(), made(10, 10));
        let keys: Vec<&str> = cache.entries.iter().map(|(k, _, _)| k.as_str()).collect();
        assert_eq!(keys, ["big"]);
        // The count: three small ones at most.
        let mut cache = Cache::new(3, usize::MAX);
        for k in ["1", "2", "3", "4"] {
            cache.insert(k.into(), made(1, 1));
        }
        assert!(cache.get("1").is_none() && cache.get("4").is_some());
    }
}
