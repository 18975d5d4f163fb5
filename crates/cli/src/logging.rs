//! Where a run's messages go.
//!
//! Two audiences: a person at the terminal and the log file beside the
//! study. [`install`] sets both up once per process:
//! - stderr shows the command's own notes (start, device, per-trial lines)
//!   unless `-q`, and the library crates' warnings (`store`, `gpu-mem`: a
//!   storage out of reach, expandable segments the device lacks); `-v`
//!   adds the structured events at info level, `-vv` at debug (off by
//!   default: the runner's lines say what a person needs);
//! - the log file ([`to_file`], opened once the study is known) gets the
//!   structured events (every trial's settings, lease, worker, messages and
//!   deaths, the workers' stderr) filtered by `MEMTUNE_LOG` (tracing's
//!   `EnvFilter` syntax, e.g. `info` or `cli::tune=debug`; default `debug`).
//!
//! Unless `[runner] log_file` names one, the file is the study's name made
//! safe for a file name ([`file_name`]) with `.log`, beside the storage
//! file: a study name is any string, and must never choose a directory.

use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The environment variable with the log file's filter.
pub const FILTER_VAR: &str = "MEMTUNE_LOG";

static QUIET: AtomicBool = AtomicBool::new(false);
static LOG_FILE: Mutex<Option<File>> = Mutex::new(None);

/// `-q` (negative), nothing (0), `-v` (1), `-vv` or more (2+).
pub type Verbosity = i8;

/// Installs the process's logger for `verbosity`, with the log file's
/// filter from `MEMTUNE_LOG`; a filter that does not parse is an error
/// naming the variable. Call once, before anything logs.
pub fn install(verbosity: Verbosity) -> Result<(), String> {
    QUIET.store(verbosity < 0, Ordering::Relaxed);
    let file_filter = match std::env::var(FILTER_VAR) {
        Ok(text) => EnvFilter::try_new(&text)
            .map_err(|e| format!("{FILTER_VAR}={text:?} is not a log filter: {e}"))?,
        Err(_) => EnvFilter::new("debug"),
    };
    // Quiet drops memtune's progress and notes, not the libraries' warnings
    // (a storage server out of reach, classic segments instead of
    // expandable ones).
    let stderr_filter = match verbosity {
        ..=0 => Targets::new()
            .with_target("store", LevelFilter::WARN)
            .with_target("gpu_mem", LevelFilter::WARN),
        1 => Targets::new().with_default(LevelFilter::INFO),
        _ => Targets::new().with_default(LevelFilter::DEBUG),
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal())
                .with_filter(stderr_filter),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(LogFileWriter)
                .with_ansi(false)
                .with_filter(file_filter),
        )
        .try_init()
        .map_err(|e| format!("cannot install the logger: {e}"))
}

/// Whether `-q` was given: the command's notes are not printed.
pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// A note for the person at the terminal (stderr), unless `-q`. Errors and
/// warnings that change what a result means are printed with
/// [`stderr_line`] whatever `-q` says.
pub fn note(text: &str) {
    if !quiet() {
        stderr_line(text);
    }
}

/// `text` and a newline on stderr. A closed stderr (`memtune tune 2>&1 |
/// head`) loses the line, not the study: `eprintln!` would panic there,
/// mid-study, leaving its trials RUNNING. The log file keeps every line.
pub fn stderr_line(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Appends this process's structured log to `path` from now on (created
/// with its directory if missing). Global, so the threads reading workers'
/// output log there too.
pub fn to_file(path: &Path) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create the log directory {}: {e}", dir.display()))?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot open the log file {}: {e}", path.display()))?;
    *LOG_FILE.lock().unwrap_or_else(|p| p.into_inner()) = Some(file);
    Ok(())
}

/// Writes to the file [`to_file`] opened, or nowhere before it.
struct LogFileWriter;

impl Write for LogFileWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match LOG_FILE.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(file) => file.write(buf),
            None => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match LOG_FILE.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(file) => file.flush(),
            None => Ok(()),
        }
    }
}

impl<'a> MakeWriter<'a> for LogFileWriter {
    type Writer = LogFileWriter;

    fn make_writer(&'a self) -> Self::Writer {
        LogFileWriter
    }
}

/// The log file name of a study: its name where it is a safe file name,
/// else the name with each character outside `A-Z a-z 0-9 _ - .` (and a
/// leading `.`) replaced by `_`, then `-` and 8 hex digits of a hash of the
/// whole name, so two names that differ only there keep apart logs.
/// `sentiment` → `sentiment.log`; `exp/1` → `exp_1-xxxxxxxx.log`;
/// `../escaped` → `_._escaped-xxxxxxxx.log`. Never a path separator, never
/// `.` or `..`, at most 100 characters before `.log`.
pub fn file_name(study: &str) -> String {
    format!("{}.log", safe_stem(study))
}

/// The study's name made safe as a file name's stem, as [`file_name`]
/// describes (the report, `NAME-report.html`, uses it too).
pub fn safe_stem(study: &str) -> String {
    const MAX: usize = 100;
    let mut safe: String = study
        .chars()
        .enumerate()
        .map(|(i, c)| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '_' | '-' => c,
            '.' if i > 0 => c,
            _ => '_',
        })
        .take(MAX)
        .collect();
    if safe != study || safe.is_empty() {
        safe.truncate(MAX - 9);
        safe.push_str(&format!("-{:08x}", fnv1a(study.bytes())));
    }
    safe
}

/// 32-bit FNV-1a: stable across builds and platforms (std's hasher is not).
pub(crate) fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u32 {
    bytes.into_iter().fold(0x811c_9dc5, |h: u32, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::file_name;

    #[test]
    fn study_names_become_safe_distinct_file_names() {
        assert_eq!(file_name("sentiment-v1.2"), "sentiment-v1.2.log");
        assert_eq!(file_name("exp/1"), "exp_1-a9b501dc.log");
        for name in [
            "../escaped",
            "exp/1",
            "..",
            ".",
            "",
            "a\\b",
            "/abs",
            "x\n",
            "é",
        ] {
            let f = file_name(name);
            assert!(
                !f.contains(['/', '\\']) && !f.starts_with('.'),
                "{name}: {f}"
            );
            assert!(f.len() <= 104, "{f}");
        }
        assert_ne!(file_name("exp/1"), file_name("exp_1"));
        assert_ne!(file_name("exp/1"), file_name("exp:1"));
        assert!(file_name(&"x".repeat(300)).len() <= 104);
    }
}
