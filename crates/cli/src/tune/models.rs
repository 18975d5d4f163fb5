//! Where a study's built-in models are found.
//!
//! In order: `$MEMTUNE_MINILM_DIR` (a directory given outright), then the
//! model cache `models/minilm` that `cargo xtask fetch-model minilm`
//! fills. The cache is `$MEMTUNE_CACHE` when set, else
//! `$XDG_CACHE_HOME/memtune`, else `~/.cache/memtune` (the XDG default), so
//! an installed `memtune` finds a model fetched once for the user. A cached
//! model counts only when its download finished (`.complete`).

use std::ffi::OsString;
use std::path::PathBuf;

/// The directory of a built-in model.
pub fn builtin_dir(name: &str) -> Result<PathBuf, String> {
    builtin_dir_in(name, |var| std::env::var_os(var))
}

/// [`builtin_dir`] with the environment given (tests).
fn builtin_dir_in(name: &str, env: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf, String> {
    if name != "minilm-l6" {
        return Err(format!(
            "unknown built-in model `{name}` (known: minilm-l6)"
        ));
    }
    if let Some(dir) = env("MEMTUNE_MINILM_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let cached = cache_dir(&env).map(|c| c.join("models").join("minilm"));
    match cached {
        Some(dir) if dir.join(".complete").is_file() => Ok(dir),
        _ => Err(format!(
            "built-in model `minilm-l6` is not in the model cache ({}): run \
             `cargo xtask fetch-model minilm`, or set MEMTUNE_MINILM_DIR to its directory",
            cached.map_or("no cache directory: set MEMTUNE_CACHE".into(), |d| d
                .display()
                .to_string())
        )),
    }
}

/// The model cache: `$MEMTUNE_CACHE`, `$XDG_CACHE_HOME/memtune` or
/// `$HOME/.cache/memtune` (empty variables count as unset, as XDG says).
fn cache_dir(env: &impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |var: &str| env(var).filter(|v| !v.is_empty()).map(PathBuf::from);
    set("MEMTUNE_CACHE")
        .or_else(|| set("XDG_CACHE_HOME").map(|d| d.join("memtune")))
        .or_else(|| set("HOME").map(|h| h.join(".cache").join("memtune")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + use<> {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn the_cache_follows_memtune_cache_then_xdg_then_home() {
        let dir = |pairs: &[(&str, &str)]| cache_dir(&env_of(pairs));
        assert_eq!(
            dir(&[
                ("MEMTUNE_CACHE", "/m"),
                ("XDG_CACHE_HOME", "/x"),
                ("HOME", "/h")
            ]),
            Some("/m".into())
        );
        assert_eq!(
            dir(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]),
            Some("/x/memtune".into())
        );
        assert_eq!(
            dir(&[("XDG_CACHE_HOME", ""), ("HOME", "/h")]),
            Some("/h/.cache/memtune".into())
        );
        assert_eq!(dir(&[]), None);
    }

    #[test]
    fn a_cached_model_is_used_only_once_its_download_finished() {
        let tmp = tempfile::tempdir().unwrap();
        let xdg = tmp.path().to_str().unwrap();
        let model = tmp.path().join("memtune/models/minilm");
        std::fs::create_dir_all(&model).unwrap();
        let env = env_of(&[("XDG_CACHE_HOME", xdg)]);
        let err = builtin_dir_in("minilm-l6", &env).unwrap_err();
        assert!(err.contains("fetch-model minilm"), "{err}");
        assert!(err.contains(&model.display().to_string()), "{err}");
        std::fs::write(model.join(".complete"), "").unwrap();
        assert_eq!(builtin_dir_in("minilm-l6", &env).unwrap(), model);
        let given = env_of(&[("XDG_CACHE_HOME", xdg), ("MEMTUNE_MINILM_DIR", "/given")]);
        assert_eq!(
            builtin_dir_in("minilm-l6", given).unwrap(),
            PathBuf::from("/given")
        );
        assert!(
            builtin_dir_in("bert-huge", &env)
                .unwrap_err()
                .contains("unknown")
        );
    }
}
