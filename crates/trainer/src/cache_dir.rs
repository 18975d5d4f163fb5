//! memtune's cache directory, where what outlives a run is kept (the
//! built-in model, compiled CUDA kernels): `$MEMTUNE_CACHE`, else
//! `$XDG_CACHE_HOME/memtune`, else `$HOME/.cache/memtune` (the XDG
//! default), so an installed `memtune` finds what it fetched or compiled
//! once for the user. Empty variables count as unset, as XDG says.
//!
//! ```
//! let dir = trainer::cache_dir::cache_dir_in(&|var: &str| {
//!     (var == "XDG_CACHE_HOME").then(|| "/x".into())
//! });
//! assert_eq!(dir, Some("/x/memtune".into()));
//! ```

use std::ffi::OsString;
use std::path::PathBuf;

/// The cache directory this process's environment names, if any.
pub fn cache_dir() -> Option<PathBuf> {
    cache_dir_in(&|var: &str| std::env::var_os(var))
}

/// [`cache_dir`] with the environment given.
pub fn cache_dir_in(env: &impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |var: &str| env(var).filter(|v| !v.is_empty()).map(PathBuf::from);
    set("MEMTUNE_CACHE")
        .or_else(|| set("XDG_CACHE_HOME").map(|d| d.join("memtune")))
        .or_else(|| set("HOME").map(|h| h.join(".cache").join("memtune")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_follows_memtune_cache_then_xdg_then_home() {
        let dir = |pairs: &[(&str, &str)]| {
            cache_dir_in(&|var: &str| {
                let value = pairs.iter().find(|(name, _)| *name == var);
                value.map(|(_, v)| OsString::from(v))
            })
        };
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
}
