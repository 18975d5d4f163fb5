//! Where a study's built-in models are found.

use std::path::PathBuf;

/// The directory of a built-in model: `$MEMTUNE_MINILM_DIR`, where
/// `cargo xtask fetch-model minilm` (and `cargo xtask tune`) put it.
pub fn builtin_dir(name: &str) -> Result<PathBuf, String> {
    match name {
        "minilm-l6" => std::env::var_os("MEMTUNE_MINILM_DIR")
            .map(PathBuf::from)
            .ok_or_else(|| {
                "built-in model `minilm-l6`: set MEMTUNE_MINILM_DIR to its directory \
                 (`cargo xtask fetch-model minilm` downloads it and prints the path)"
                    .to_string()
            }),
        other => Err(format!(
            "unknown built-in model `{other}` (known: minilm-l6)"
        )),
    }
}
