//! Files and directories written whole or not at all: the content goes to a
//! temporary beside the target, renamed onto it once complete, so a reader
//! never sees half of it, a failure leaves what was there, and a retry finds
//! nothing in its way.

use std::ffi::{OsStr, OsString};
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

/// Makes the directory `dir`, which must be absent or empty, whole: `fill`
/// writes its files into a new temporary directory, and they become
/// `dir`'s once `fill` succeeds. On failure the temporary directory is
/// removed and `dir` is as it was. `io_error` turns a failure to create or
/// move into the caller's error.
///
/// An absent `dir` is the temporary, made beside it and renamed onto it. An
/// empty one that exists stays (it may be a mount point, a link, `.`, or
/// in a folder this process cannot write): the temporary is made inside
/// it and its files are moved out of it, each by a rename.
pub(crate) fn write_dir_whole<E>(
    dir: &Path,
    fill: impl FnOnce(&Path) -> Result<(), E>,
    io_error: impl Fn(io::Error) -> E,
) -> Result<(), E> {
    let exists = std::fs::metadata(dir).is_ok_and(|m| m.is_dir());
    if exists && std::fs::read_dir(dir).map_err(&io_error)?.next().is_some() {
        return Err(io_error(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "the directory is not empty",
        )));
    }
    let temporary = if exists {
        dir.join(hidden_name(".partial"))
    } else {
        beside(dir).map_err(&io_error)?
    };
    if let Some(parent) = temporary.parent() {
        std::fs::create_dir_all(parent).map_err(&io_error)?;
    }
    // `create_dir`, not `_all`: a directory already there is not ours to fill
    // or remove.
    std::fs::create_dir(&temporary).map_err(&io_error)?;
    let result = fill(&temporary).and_then(|()| {
        if exists {
            move_entries_out(&temporary, dir).map_err(&io_error)
        } else {
            std::fs::rename(&temporary, dir).map_err(&io_error)
        }
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&temporary);
    }
    result
}

/// Whether [`write_dir_whole`] could make `dir` now, where `dir` is absent
/// or an empty directory: it makes (and removes) a directory where that
/// would make its temporary, inside `dir` or in the nearest folder above
/// it that exists. For a check before long work whose end is the write;
/// the error says what is in the way (a file where a folder is needed, a
/// link to nothing, a folder that cannot be written).
pub(crate) fn check_dir_writable(dir: &Path) -> io::Result<()> {
    let in_the_way = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    if std::fs::symlink_metadata(dir).is_ok() && !dir.exists() {
        return Err(in_the_way(
            "it is a symbolic link to nothing (a directory cannot be made there)".into(),
        ));
    }
    let base = if dir.is_dir() {
        dir.to_path_buf()
    } else {
        beside(dir)?;
        let mut above = dir.parent();
        loop {
            match above {
                Some(p) if p.as_os_str().is_empty() => break PathBuf::from("."),
                Some(p)
                    if std::fs::symlink_metadata(p)
                        .is_err_and(|e| e.kind() == io::ErrorKind::NotFound) =>
                {
                    above = p.parent()
                }
                Some(p) if p.is_dir() => break p.to_path_buf(),
                Some(p) => {
                    return Err(in_the_way(format!(
                        "{} is not a directory, so no directory can be made in it",
                        p.display()
                    )));
                }
                None => break PathBuf::from("/"),
            }
        }
    };
    let probe = base.join(hidden_name(".probe"));
    std::fs::create_dir(&probe).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot make a directory in {}: {e}", base.display()),
        )
    })?;
    std::fs::remove_dir(&probe)
}

/// Moves every entry of `from` into `to` (its parent), then removes the
/// empty `from`; on failure the entries moved so far go back.
fn move_entries_out(from: &Path, to: &Path) -> io::Result<()> {
    let mut moved = Vec::new();
    let result = std::fs::read_dir(from).and_then(|entries| {
        for entry in entries {
            let name = entry?.file_name();
            std::fs::rename(from.join(&name), to.join(&name))?;
            moved.push(name);
        }
        std::fs::remove_dir(from)
    });
    if result.is_err() {
        for name in moved {
            let _ = std::fs::rename(to.join(&name), from.join(&name));
        }
    }
    result
}

/// A hidden name beside `path`, unique to this process and call, for its
/// temporary (the same file system, so the rename is atomic).
fn beside(path: &Path) -> io::Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path does not end in a file name",
        )
    })?;
    let mut temporary = OsString::from(".");
    temporary.push(name);
    Ok(path.with_file_name(hidden_name(&temporary)))
}

/// `PREFIX.tmpPID-N`, unique to this process and call.
fn hidden_name(prefix: impl AsRef<OsStr>) -> OsString {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut name = prefix.as_ref().to_os_string();
    name.push(format!(
        ".tmp{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    ));
    name
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The names in `dir`, sorted.
    pub(crate) fn entries(dir: &Path) -> Vec<String> {
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
        // An empty directory that stays (a mount point, a link to it, `.`):
        // filled in place, and left empty by a failure.
        let target = dir.path().join("target");
        std::fs::create_dir(&target).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        write_dir_whole(&link, failing, |e| e).unwrap_err();
        assert_eq!(entries(&target), Vec::<String>::new());
        assert!(link.is_symlink());
        write_dir_whole(&link, |at| std::fs::write(at.join("a"), "a"), |e| e).unwrap();
        assert!(link.is_symlink());
        assert_eq!(entries(&target), ["a"]);
        // A directory that is not empty is left as it is.
        let e = write_dir_whole(&out, |at| std::fs::write(at.join("b"), "b"), |e| e);
        assert!(e.is_err());
        assert_eq!(entries(&out), ["a"]);
        assert_eq!(entries(&dir.path().join("deeper")), ["out"]);
    }
}
