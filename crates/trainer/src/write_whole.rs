//! Files and directories written whole or not at all: the content goes to a
//! temporary beside the target, renamed onto it once complete, so a reader
//! never sees half of it, a failure leaves what was there, and a retry finds
//! nothing in its way.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes the file `path`: `write` fills a temporary file beside it, which
/// replaces `path` once `write` succeeds. On failure the temporary is
/// removed and `path` is as it was. `io_error` turns a failure to rename
/// into the caller's error.
pub(crate) fn write_file_whole<E>(
    path: &Path,
    write: impl FnOnce(&Path) -> Result<(), E>,
    io_error: impl Fn(io::Error) -> E,
) -> Result<(), E> {
    let temporary = beside(path).map_err(&io_error)?;
    let result =
        write(&temporary).and_then(|()| std::fs::rename(&temporary, path).map_err(&io_error));
    if result.is_err() {
        // It may not exist (`write` failed before creating it).
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

/// Makes the directory `dir`, which must be absent or empty: `fill` writes
/// its files into a new temporary directory beside it, which becomes `dir`
/// once `fill` succeeds. On failure the temporary directory is removed and
/// `dir` is as it was. `io_error` turns a failure to create or rename into
/// the caller's error.
pub(crate) fn write_dir_whole<E>(
    dir: &Path,
    fill: impl FnOnce(&Path) -> Result<(), E>,
    io_error: impl Fn(io::Error) -> E,
) -> Result<(), E> {
    let temporary = beside(dir).map_err(&io_error)?;
    if let Some(parent) = temporary.parent() {
        std::fs::create_dir_all(parent).map_err(&io_error)?;
    }
    // `create_dir`, not `_all`: a directory already there is not ours to fill
    // or remove.
    std::fs::create_dir(&temporary).map_err(&io_error)?;
    let result =
        fill(&temporary).and_then(|()| replace_empty_dir(&temporary, dir).map_err(&io_error));
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&temporary);
    }
    result
}

/// Renames `from` to `to`, removing `to` first when it is an empty directory
/// (renaming onto a directory is not portable); a non-empty `to` is an error.
fn replace_empty_dir(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::remove_dir(to) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::rename(from, to)
}

/// A hidden name beside `path`, unique to this process and call, for its
/// temporary (the same file system, so the rename is atomic).
fn beside(path: &Path) -> io::Result<PathBuf> {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path does not end in a file name",
        )
    })?;
    let mut temporary = OsString::from(".");
    temporary.push(name);
    temporary.push(format!(
        ".tmp{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    ));
    Ok(path.with_file_name(temporary))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn failing(at: &Path) -> Result<(), io::Error> {
        std::fs::write(at.join("half"), "half").ok();
        std::fs::write(at, "half written").ok();
        Err(io::Error::other("failed half way"))
    }

    #[test]
    fn a_failed_file_write_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        std::fs::write(&path, "good").unwrap();
        let e = write_file_whole(&path, failing, |e| e).unwrap_err();
        assert_eq!(e.to_string(), "failed half way");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "good");
        assert_eq!(entries(dir.path()), ["model.safetensors"]);
        write_file_whole(&path, |at| std::fs::write(at, "better"), |e| e).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "better");
        assert_eq!(entries(dir.path()), ["model.safetensors"]);
    }

    #[test]
    fn a_failed_directory_leaves_nothing_and_a_full_one_replaces_an_empty_one() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("deeper/out");
        write_dir_whole(&out, failing, |e| e).unwrap_err();
        assert!(!out.exists());
        assert_eq!(entries(&dir.path().join("deeper")), Vec::<String>::new());
        std::fs::create_dir(&out).unwrap();
        write_dir_whole(&out, |at| std::fs::write(at.join("a"), "a"), |e| e).unwrap();
        assert_eq!(entries(&out), ["a"]);
        assert_eq!(entries(&dir.path().join("deeper")), ["out"]);
        // A directory that is not empty is left as it is.
        let e = write_dir_whole(&out, |at| std::fs::write(at.join("b"), "b"), |e| e);
        assert!(e.is_err());
        assert_eq!(entries(&out), ["a"]);
        assert_eq!(entries(&dir.path().join("deeper")), ["out"]);
    }
}
