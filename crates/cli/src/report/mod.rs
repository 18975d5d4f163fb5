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

/// Writes `contents` to `path` through a temporary file beside it, so a
/// reader never sees half a report.
pub fn write_atomically(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents)?;
    std::fs::rename(&tmp, path)
}
