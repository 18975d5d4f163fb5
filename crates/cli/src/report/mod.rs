//! `memtune report`: one self-contained HTML page that shows a study at a
//! glance (no scripts, nothing fetched, printable), and the device
//! timeline as a Chrome trace.
//!
//! Sections, one file each: [`summary`], [`pareto`] (a study of several
//! objectives: its front and hypervolume), [`history`] (optimization history
//! and learning curves), [`importance`] (fANOVA importances from
//! `hpo_sampler::importance`, slices,
//! [`parallel`] coordinates), [`memory`] (predicted against measured peaks,
//! micro-batches, the configuration map, the [`timeline`], OOM retries) and
//! [`failures`]. Charts are SVG drawn by `plotters` ([`chart`]). A section
//! that needs what the study lacks (memory attributes in a study made by
//! Optuna, values in an empty one) is replaced by one line saying why.
//!
//! It only reads: the store is opened read-only and nothing is computed
//! that the study did not record, except the importances.

pub mod axis;
pub mod chart;
pub mod failures;
pub mod history;
pub mod html;
pub mod importance;
pub mod input;
pub mod memory;
pub mod parallel;
pub mod pareto;
pub mod summary;
pub mod timeline;
pub mod trace;

use std::path::{Path, PathBuf};

use store::{Storage, TrialFilter};

pub use self::input::ReportInput;
use self::timeline::Timeline;

/// Reads study `name` whole from `storage` (named on the page by its file,
/// or a server's URL without the password).
pub fn read(storage: &Storage, name: &str) -> store::Result<ReportInput> {
    let study = storage.study(name)?;
    let trials = storage.trials(study.study_id, &TrialFilter::default())?;
    let attrs = storage.study_system_attrs(study.study_id)?;
    let label = storage.path().display().to_string();
    Ok(ReportInput::new(
        study,
        label,
        trials,
        attrs.get(crate::tune::record::METRIC_NAMES_KEY),
    ))
}

/// The page.
pub fn html(input: &ReportInput) -> String {
    let mut sections = vec![summary::section(input)];
    sections.extend(pareto::section(input));
    sections.extend([
        history::section(input),
        importance::section(input),
        memory::section(input),
        failures::section(input),
    ]);
    page(input, &sections)
}

fn page(input: &ReportInput, sections: &[html::Section]) -> String {
    html::page(
        &format!("memtune report: {}", input.study_name),
        &format!(
            "{} trials in {}, written {}",
            input.trials.len(),
            input.storage,
            store::time::now_local()
        ),
        sections,
    )
}

/// The device timeline as a Chrome trace, or why there is none.
pub fn trace(input: &ReportInput) -> Result<serde_json::Value, String> {
    Timeline::of(input)
        .map(|t| trace::chrome_trace(&t))
        .ok_or_else(|| {
            "no trial recorded its worker and start time (only `memtune tune` records them)".into()
        })
}

/// `NAME-report.html` beside `storage_file` (the study's name made safe as
/// the log file's is).
pub fn default_path(storage_file: &Path, study: &str) -> PathBuf {
    let dir = storage_file.parent().map(PathBuf::from).unwrap_or_default();
    dir.join(format!("{}-report.html", crate::logging::safe_stem(study)))
}

/// Writes `contents` to the file `path` names, so that a reader never sees
/// half a report: through a temporary file of a unique name beside the
/// final target (removed again on any failure), renamed over it. A symbolic
/// link is written through, not replaced; a device or FIFO (`/dev/stdout`,
/// a named pipe) is written in place, since renaming over it would replace
/// the node itself; a directory is refused.
pub fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind, Write};
    let is_a_directory = || {
        Error::new(
            ErrorKind::IsADirectory,
            "it is a directory; give a file name",
        )
    };
    if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        return Err(is_a_directory());
    }
    // Followed by the kernel, not by `final_target`: `/proc/self/fd/1`
    // (where `/dev/stdout` leads) links to a pipe that has no path.
    let existing = match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => return Err(is_a_directory()),
        Ok(m) if !m.is_file() => {
            let mut node = std::fs::OpenOptions::new().write(true).open(path)?;
            node.write_all(contents)?;
            return node.flush();
        }
        Ok(m) => Some(m.permissions()),
        Err(_) => None,
    };
    let target = final_target(path)?;
    let Some(name) = target.file_name() else {
        return Err(is_a_directory());
    };
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    let prefix = format!(".{}.", name.to_string_lossy());
    builder.prefix(&prefix).suffix(".tmp");
    // A new page gets the mode `std::fs::write` would give it (0666 less
    // the umask), not the temporary file's private 0600.
    #[cfg(unix)]
    if existing.is_none() {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    // Dropping the temporary file on any error below removes it.
    let mut tmp = builder.tempfile_in(dir)?;
    tmp.write_all(contents)?;
    if let Some(permissions) = existing {
        tmp.as_file().set_permissions(permissions)?;
    }
    tmp.persist(&target).map_err(|e| e.error)?;
    Ok(())
}

/// The file a write to `path` lands in: `path` with every symbolic link at
/// its end followed (a dangling link gives the file it would create).
pub fn final_target(path: &Path) -> std::io::Result<PathBuf> {
    // The kernel's own limit on links in one lookup.
    const MAX_LINKS: usize = 40;
    let mut target = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&target) {
            Ok(m) if m.file_type().is_symlink() => {
                let link = std::fs::read_link(&target)?;
                // A relative link is relative to the link's own folder
                // (`join` keeps an absolute one as it is).
                target = match target.parent() {
                    Some(dir) => dir.join(link),
                    None => link,
                };
            }
            _ => return Ok(target),
        }
    }
    Err(std::io::Error::other("too many levels of symbolic links"))
}
