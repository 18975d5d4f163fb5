//! Helpers shared by the data, tokenizer and weights tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};

/// The all-MiniLM-L6-v2 directory from `MEMTUNE_MINILM_DIR`. Unset: under
/// `CI` the test fails; elsewhere it prints why it skips and gets `None`.
pub fn minilm_dir(test: &str) -> Option<PathBuf> {
    match std::env::var_os("MEMTUNE_MINILM_DIR") {
        Some(dir) => Some(PathBuf::from(dir)),
        None if std::env::var_os("CI").is_some() => panic!(
            "{test}: MEMTUNE_MINILM_DIR is not set but CI is: run `cargo xtask fetch-model minilm` \
             and point MEMTUNE_MINILM_DIR at the model directory"
        ),
        None => {
            eprintln!("skipping {test}: set MEMTUNE_MINILM_DIR to the all-MiniLM-L6-v2 directory");
            None
        }
    }
}

/// The Python of `MEMTUNE_PYTHON` (with benches/requirements.txt), under
/// the same rule as [`minilm_dir`].
pub fn python(test: &str) -> Option<PathBuf> {
    match std::env::var_os("MEMTUNE_PYTHON") {
        Some(python) => Some(PathBuf::from(python)),
        None if std::env::var_os("CI").is_some() => panic!(
            "{test}: MEMTUNE_PYTHON is not set but CI is: run `cargo xtask test`, or point it at a \
             python with the packages of benches/requirements.txt"
        ),
        None => {
            eprintln!(
                "skipping {test}: set MEMTUNE_PYTHON to a python with benches/requirements.txt"
            );
            None
        }
    }
}

/// The Python of `MEMTUNE_TORCH_PYTHON` (torch and transformers, `cargo
/// xtask python torch`), under the same rule as [`minilm_dir`].
pub fn torch_python(test: &str) -> Option<PathBuf> {
    match std::env::var_os("MEMTUNE_TORCH_PYTHON") {
        Some(python) => Some(PathBuf::from(python)),
        None if std::env::var_os("CI").is_some() => panic!(
            "{test}: MEMTUNE_TORCH_PYTHON is not set but CI is: run `cargo xtask test`, or point \
             it at a python with torch and transformers (`cargo xtask python torch`)"
        ),
        None => {
            eprintln!("skipping {test}: set MEMTUNE_TORCH_PYTHON (`cargo xtask python torch`)");
            None
        }
    }
}

/// A small BERT vocabulary: the five special tokens, then words and pieces.
pub const TINY_VOCAB: &[&str] = &[
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie", "is", "great", "bad", "a",
    "film", "not", "very", "good", "!", ".", ",", "?", "i", "it", "was", "play", "##ing", "##s",
];

/// Writes `tokens` as a vocab.txt in `dir` and returns its path.
pub fn write_vocab(dir: &Path, tokens: &[&str]) -> PathBuf {
    let path = dir.join("vocab.txt");
    std::fs::write(&path, tokens.join("\n") + "\n").unwrap();
    path
}

/// The committed reference fixture.
pub fn embeddings_fixture() -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/minilm_embeddings.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}
