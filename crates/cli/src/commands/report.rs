//! `memtune report --study NAME [-o FILE.html] [--trace FILE.json]`: the
//! study as one self-contained HTML page (see [`crate::report`]), and its
//! device timeline as a Chrome trace.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::Context;
use crate::error::{CliError, Result};
use crate::report;
use std::io::Write;
use store::Storage;

#[derive(clap::Args)]
pub struct Args {
    /// The study's name (`--study-name` is accepted too).
    #[arg(long, alias = "study-name")]
    pub study: String,
    /// Where to write the page (default: NAME-report.html beside the storage
    /// file; for PostgreSQL, in the working directory).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Write the device timeline as Chrome trace JSON (Perfetto and
    /// chrome://tracing open it) to this file; the page is then written
    /// only when `-o` is given too.
    #[arg(long)]
    pub trace: Option<PathBuf>,
}

pub fn run(args: &Args, ctx: &Context, out: &mut dyn Write) -> Result<()> {
    let storage = ctx.open_read_only()?;
    let input = report::read(&storage, &args.study)?;
    if let Some(path) = &args.trace {
        let trace = report::trace(&input).map_err(|why| {
            CliError::Failed(format!(
                "no device timeline in study `{}`: {why}",
                args.study
            ))
        })?;
        let text = serde_json::to_vec(&trace).map_err(CliError::failed)?;
        write_file(&storage, path, &text)?;
        writeln!(out, "trace: {}", path.display())?;
        if args.output.is_none() {
            return Ok(());
        }
    }
    let started = Instant::now();
    let path = write_html(&storage, &input, args.output.as_deref())?;
    crate::logging::note(&format!(
        "memtune: report of {} trials written in {:.2}s",
        input.trials.len(),
        started.elapsed().as_secs_f64()
    ));
    writeln!(out, "report: {}", path.display())?;
    Ok(())
}

/// Writes the page of `input` to `output`, or beside the storage; returns
/// the path.
pub(crate) fn write_html(
    storage: &Storage,
    input: &report::ReportInput,
    output: Option<&Path>,
) -> Result<PathBuf> {
    let path = match output {
        Some(p) => p.to_path_buf(),
        // A server's study gets its page where the command runs.
        None if storage.is_postgres() => report::default_path(Path::new(""), &input.study_name),
        None => report::default_path(storage.path(), &input.study_name),
    };
    write_file(storage, &path, report::html(input).as_bytes())?;
    Ok(path)
}

fn write_file(storage: &Storage, path: &Path, bytes: &[u8]) -> Result<()> {
    refuse_storage_file(storage, path)?;
    report::write_atomically(path, bytes)
        .map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display())))
}

/// Refuses an output that is the study's own SQLite file or one of its
/// companions (`-wal`, `-shm`, `-journal`): the page would replace the
/// database. Paths are compared after resolving links, `..` and the
/// working directory.
fn refuse_storage_file(storage: &Storage, path: &Path) -> Result<()> {
    if storage.is_postgres() {
        return Ok(());
    }
    let (Some(output), Ok(database)) = (
        canonical_destination(path),
        std::fs::canonicalize(storage.path()),
    ) else {
        return Ok(());
    };
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut file = database.clone().into_os_string();
        file.push(suffix);
        if output == Path::new(&file) {
            return Err(CliError::Usage(format!(
                "cannot write {}: it is the study's storage file {}; give another output file",
                path.display(),
                Path::new(&file).display()
            )));
        }
    }
    Ok(())
}

/// The absolute, link-free path a write to `path` lands in, whether or not
/// that file exists yet; `None` when its folder does not exist either (the
/// write then fails on its own).
fn canonical_destination(path: &Path) -> Option<PathBuf> {
    let target = report::final_target(path).ok()?;
    if let Ok(existing) = std::fs::canonicalize(&target) {
        return Some(existing);
    }
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(dir).ok()?.join(target.file_name()?))
}
