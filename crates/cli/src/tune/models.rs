//! Where a study's built-in models are found.
//!
//! In order: `$MEMTUNE_MINILM_DIR` (a directory given outright), then the
//! model cache `models/minilm` that `cargo xtask fetch-model minilm`
//! fills, in memtune's cache directory ([`trainer::cache_dir`]). A cached
//! model counts only when its download finished (`.complete`).

use std::ffi::OsString;
use std::path::PathBuf;
use trainer::cache_dir::cache_dir_in;

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
        return utf8(PathBuf::from(dir), "MEMTUNE_MINILM_DIR");
    }
    let cached = cache_dir_in(&env).map(|c| c.join("models").join("minilm"));
    match cached {
        Some(dir) if dir.join(".complete").is_file() => utf8(dir, "the model cache's path"),
        _ => Err(format!(
            "built-in model `minilm-l6` is not in the model cache ({}): run \
             `cargo xtask fetch-model minilm`, or set MEMTUNE_MINILM_DIR to its directory",
            cached.map_or("no cache directory: set MEMTUNE_CACHE".into(), |d| d
                .display()
                .to_string())
        )),
    }
}

/// `dir` if it is valid UTF-8: a trial's job carries its model directory
/// to the worker as JSON text, which has no other way to say a path.
fn utf8(dir: PathBuf, origin: &str) -> Result<PathBuf, String> {
    if dir.to_str().is_some() {
        return Ok(dir);
    }
    Err(format!(
        "{origin} `{}` is not valid UTF-8: a study's paths are sent to its workers as text; \
         use a directory whose path is UTF-8",
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::os::unix::ffi::OsStringExt;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> + use<> {
        let map: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| map.get(k).cloned()
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
        let bad = OsString::from_vec(b"/given\xff".to_vec());
        let err = builtin_dir_in("minilm-l6", |k: &str| {
            (k == "MEMTUNE_MINILM_DIR").then(|| bad.clone())
        })
        .unwrap_err();
        assert!(
            err.contains("MEMTUNE_MINILM_DIR") && err.contains("not valid UTF-8"),
            "{err}"
        );
        assert!(
            builtin_dir_in("bert-huge", &env)
                .unwrap_err()
                .contains("unknown")
        );
    }
}
