//! Structured logs (tracing) of a run, to a file: every trial's settings,
//! lease, worker, messages and deaths, and the workers' stderr.
//!
//! Unless `[runner] log_file` names one, the file is the study's name made
//! safe for a file name ([`file_name`]) with `.log`, beside the storage
//! file: a study name is any string, and must never choose a directory.

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

/// The log file name of a study: its name where it is a safe file name,
/// else the name with each character outside `A-Z a-z 0-9 _ - .` (and a
/// leading `.`) replaced by `_`, then `-` and 8 hex digits of a hash of the
/// whole name, so two names that differ only there keep apart logs.
/// `sentiment` → `sentiment.log`; `exp/1` → `exp_1-xxxxxxxx.log`;
/// `../escaped` → `_._escaped-xxxxxxxx.log`. Never a path separator, never
/// `.` or `..`, at most 100 characters before `.log`.
pub fn file_name(study: &str) -> String {
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
        safe.push_str(&format!("-{:08x}", fnv1a(study.as_bytes())));
    }
    format!("{safe}.log")
}

/// 32-bit FNV-1a: stable across builds and platforms (std's hasher is not).
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |h: u32, &b| {
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
