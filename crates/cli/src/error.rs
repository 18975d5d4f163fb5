//! The CLI's errors, and the exit code each maps to.
//!
//! | code | meaning |
//! |---:|---|
//! | 0 | the command did what was asked |
//! | 1 | it failed while working: storage, data, model, workers, trials |
//! | 2 | the command line or a file it names is wrong (clap's own errors too) |
//! | 130 | interrupted (Ctrl-C or SIGTERM); run the same command to resume |
//!
//! A script can tell "fix the command" (2) from "look at the run" (1) from
//! "it was stopped" (130) without reading messages.

use crate::history::HistoryError;
use crate::tune::config::ConfigError;
use crate::tune::runner::TuneError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line, or a value it gives, is wrong.
    #[error("{0}")]
    Usage(String),
    /// The study file cannot be used.
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error(transparent)]
    History(#[from] HistoryError),
    #[error(transparent)]
    Tune(#[from] TuneError),
    /// A failure while working that has no type of its own (a model or
    /// data set that does not load, a retrain that did not repeat).
    #[error("{0}")]
    Failed(String),
    /// Stopped by Ctrl-C or SIGTERM; the run's state is saved.
    #[error("interrupted: run the same command again to resume")]
    Interrupted,
    #[error("cannot write output: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot write CSV: {0}")]
    Csv(#[from] csv::Error),
}

impl CliError {
    /// A [`CliError::Failed`] from any message (an error of another crate
    /// that the CLI reports as it is).
    pub fn failed(message: impl std::fmt::Display) -> Self {
        CliError::Failed(message.to_string())
    }

    /// The process exit code (see the module's table).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::Config(_) => 2,
            CliError::Interrupted => 130,
            CliError::Store(_)
            | CliError::History(_)
            | CliError::Tune(_)
            | CliError::Failed(_)
            | CliError::Io(_)
            | CliError::Csv(_) => 1,
        }
    }

    /// The message and, below it, each cause it does not already spell
    /// out, one per line: what `main` prints.
    pub fn report(&self) -> String {
        let mut text = format!("memtune: {self}");
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let line = cause.to_string();
            if !text.contains(&line) {
                text.push_str(&format!("\n  caused by: {line}"));
            }
            source = cause.source();
        }
        text
    }
}

impl From<crate::tune::setup::SetupError> for CliError {
    fn from(e: crate::tune::setup::SetupError) -> Self {
        match e {
            crate::tune::setup::SetupError::BadModel(m) => CliError::Usage(m),
            crate::tune::setup::SetupError::Failed(m) => CliError::Failed(m),
        }
    }
}

pub type Result<T> = std::result::Result<T, CliError>;

#[cfg(test)]
mod tests {
    use super::CliError;

    #[test]
    fn the_report_names_causes_the_message_leaves_out_once() {
        let e = CliError::Tune(crate::tune::runner::TuneError::Spawn {
            exe: "/nowhere/memtune".into(),
            source: std::io::Error::other("disk full"),
        });
        let report = e.report();
        assert!(
            report.starts_with("memtune: starting a worker process"),
            "{report}"
        );
        assert_eq!(report.matches("disk full").count(), 1, "{report}");

        let e = CliError::Failed("trial 3".into());
        assert_eq!(e.report(), "memtune: trial 3");
    }

    #[test]
    fn exit_codes_follow_the_table() {
        assert_eq!(CliError::Usage("x".into()).exit_code(), 2);
        assert_eq!(CliError::Failed("x".into()).exit_code(), 1);
        assert_eq!(CliError::Interrupted.exit_code(), 130);
    }
}
