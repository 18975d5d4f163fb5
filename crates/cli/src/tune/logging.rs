//! Structured logs (tracing) of a run, to a file: every trial's settings,
//! lease, worker, messages and deaths, and the workers' stderr.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Mutex;

/// Appends this process's log to `path` (created with its directory if
/// missing). Global, so the threads reading workers' output log there too.
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
    let subscriber = tracing_subscriber::fmt()
        .with_writer(Mutex::new(file))
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|e| format!("cannot install the logger: {e}"))
}
