//! NVRTC's PTX kept on disk between processes.
//!
//! Compiling every kernel family takes seconds (5.7 s for `compute_90` on a
//! 2-core machine, 4.2 s of it the tensor-core attention), and each worker
//! process of a study compiles them before its first trial, holding that
//! trial's lease. The cache keeps each family's PTX in
//! `<dir>/<file>-<arch>-<key>.ptx`, where `key` hashes the whole program,
//! the compile options and NVRTC's version: a changed kernel, flag or NVRTC
//! never reads an old file. A file that cannot be read, or lacks a kernel,
//! is compiled again; a directory that cannot be written costs only the
//! time. Files are written under a temporary name and renamed into place,
//! so processes compiling at once never read half a file.
//!
//! The directory is `$MEMTUNE_KERNEL_CACHE`, else `kernels/` in memtune's
//! cache directory ([`crate::cache_dir`]); `MEMTUNE_KERNEL_CACHE=off`
//! turns it off.

use cudarc::nvrtc::Ptx;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The variable naming the cache directory (`off`: no cache).
pub const KERNEL_CACHE_VAR: &str = "MEMTUNE_KERNEL_CACHE";

/// The cache directory the environment names, or `None` when it is off or
/// no directory is known.
pub fn dir() -> Option<PathBuf> {
    dir_in(|var| std::env::var_os(var))
}

/// [`dir`] with the environment given (tests).
fn dir_in(env: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    match env(KERNEL_CACHE_VAR).filter(|v| !v.is_empty()) {
        Some(dir) => (dir != "off").then(|| dir.into()),
        None => crate::cache_dir::cache_dir_in(&env).map(|d| d.join("kernels")),
    }
}

/// The file holding family `file`'s PTX for `arch`, named by a hash of
/// `key_parts` (the program, the compile options and NVRTC's version).
pub fn path(dir: &Path, file: &str, arch: &str, key_parts: &[&str]) -> PathBuf {
    let stem = file.strip_suffix(".cu").unwrap_or(file);
    dir.join(format!("{stem}-{arch}-{:016x}.ptx", fnv1a(key_parts)))
}

/// The cached PTX at `path`, when it is there and `valid` accepts its
/// text.
pub fn load(path: &Path, valid: impl Fn(&str) -> bool) -> Option<Ptx> {
    let text = std::fs::read_to_string(path).ok()?;
    valid(&text).then(|| Ptx::from_src(text))
}

/// Writes `ptx` to `path` (best effort: a cache that cannot be written is
/// a slower start, not an error).
pub fn store(path: &Path, ptx: &Ptx) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .map_or("ptx".into(), |n| n.to_string_lossy()),
        std::process::id()
    ));
    if std::fs::write(&tmp, ptx.to_src()).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// 64-bit FNV-1a over the parts, each followed by a zero byte (so parts
/// cannot run into each other): stable across Rust versions and machines,
/// unlike the standard library's hasher.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.as_bytes().iter().chain(&[0u8]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_is_the_variables_or_kernels_in_memtunes_cache() {
        let dir = |pairs: &'static [(&'static str, &'static str)]| {
            dir_in(move |var: &str| {
                let value = pairs.iter().find(|(name, _)| *name == var);
                value.map(|(_, v)| OsString::from(v))
            })
        };
        let both = &[(KERNEL_CACHE_VAR, "/k"), ("MEMTUNE_CACHE", "/m")];
        assert_eq!(dir(both), Some("/k".into()));
        assert_eq!(dir(&[(KERNEL_CACHE_VAR, "off"), ("HOME", "/h")]), None);
        let empty = &[(KERNEL_CACHE_VAR, ""), ("MEMTUNE_CACHE", "/m")];
        assert_eq!(dir(empty), Some("/m/kernels".into()));
        assert_eq!(
            dir(&[("HOME", "/h")]),
            Some("/h/.cache/memtune/kernels".into())
        );
        assert_eq!(dir(&[]), None);
    }

    #[test]
    fn the_key_changes_with_every_part_and_their_boundaries() {
        let dir = Path::new("/c");
        let p = |parts: &[&str]| path(dir, "attention_fused.cu", "compute_90", parts);
        let base = p(&["src", "--std=c++17", "13.0"]);
        assert!(
            base.to_string_lossy()
                .starts_with("/c/attention_fused-compute_90-")
        );
        assert_ne!(base, p(&["src ", "--std=c++17", "13.0"]));
        assert_ne!(base, p(&["src", "--std=c++17", "12.8"]));
        assert_ne!(base, p(&["sr", "c--std=c++17", "13.0"]));
        assert_eq!(base, p(&["src", "--std=c++17", "13.0"]));
        // No parts: FNV-1a's offset basis.
        assert_eq!(fnv1a(&[]), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn a_stored_file_loads_only_when_valid_and_a_missing_one_is_none() {
        let dir = std::env::temp_dir().join(format!("memtune-kernel-cache-{}", std::process::id()));
        let file = path(&dir, "x.cu", "compute_80", &["k"]);
        assert!(load(&file, |_| true).is_none());
        store(&file, &Ptx::from_src(".entry k("));
        assert_eq!(load(&file, |_| true).unwrap().to_src(), ".entry k(");
        assert!(load(&file, |t| t.contains(".entry other(")).is_none());
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![file.file_name().unwrap().to_owned()]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
