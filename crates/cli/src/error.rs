//! The CLI's errors, and the exit code each maps to.
//!
//! | code | meaning |
//! |---:|---|
//! | 0 | the command did what was asked |
//! | 1 | it failed while working: storage, training, workers, trials |
//! | 2 | the command line or a file it names is wrong: a study file, a model directory or data file that does not load (clap's own errors too) |
//! | 130 | interrupted (Ctrl-C, SIGTERM or SIGHUP); run the same command to resume |
//!
//! A script can tell "fix the command" (2) from "look at the run" (1) from
//! "it was stopped" (130) without reading messages.

use crate::history::HistoryError;
use crate::tune::config::ConfigError;
use crate::tune::runner::TuneError;
use crate::tune::setup::SetupError;
use trainer::data::DataError;
use trainer::export::ExportError;
use trainer::finetune::FinetuneError;
use trainer::tokenize::TokenizerError;

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
    /// A run that cannot start (its models and data are checked first).
    #[error(transparent)]
    Setup(Box<SetupError>),
    /// The trainer's error, typed, after what the command was doing
    /// (`context` ends with ": " when there is one).
    #[error("{context}{source}")]
    Trainer {
        context: String,
        #[source]
        source: Box<TrainerError>,
    },
    /// A failure while working that has no type of its own (a model or
    /// data set that does not load, a retrain that did not repeat).
    #[error("{0}")]
    Failed(String),
    /// Stopped by Ctrl-C, SIGTERM or SIGHUP; the run's state is saved.
    #[error("interrupted: run the same command again to resume")]
    Interrupted,
    #[error("cannot write output: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot write CSV: {0}")]
    Csv(#[from] csv::Error),
}

/// The trainer errors the commands meet, kept typed.
#[derive(Debug, thiserror::Error)]
pub enum TrainerError {
    #[error(transparent)]
    Finetune(#[from] FinetuneError),
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
}

impl TrainerError {
    /// Whether the model directory or data file the user gave is at fault
    /// (it does not load, or cannot be used as asked), rather than
    /// something that failed while working.
    pub fn is_bad_input(&self) -> bool {
        match self {
            TrainerError::Data(_) | TrainerError::Tokenizer(_) => true,
            TrainerError::Finetune(e) => finetune_input(e),
            TrainerError::Export(e) => match e {
                ExportError::ModelConfig(e) => finetune_input(e),
                ExportError::HiddenHeadLayers { .. }
                | ExportError::NotAClassifier { .. }
                | ExportError::Labels { .. }
                | ExportError::ClassCount { .. }
                | ExportError::HeadShape { .. }
                | ExportError::ProblemType { .. }
                | ExportError::OutputExists { .. }
                | ExportError::OutputUnwritable { .. }
                | ExportError::Json { .. }
                | ExportError::Config(_)
                | ExportError::Weights(_)
                | ExportError::Tokenizer(_)
                | ExportError::Model(_)
                | ExportError::Load(_)
                | ExportError::Data(_) => true,
                _ => false,
            },
        }
    }
}

/// A fine-tune's errors that say its model directory or data do not load.
fn finetune_input(e: &FinetuneError) -> bool {
    matches!(
        e,
        FinetuneError::Data(_)
            | FinetuneError::Config(_)
            | FinetuneError::Tokenizer(_)
            | FinetuneError::Weights(_)
            | FinetuneError::Model(_)
            | FinetuneError::Load(_)
            | FinetuneError::Deberta(_)
    )
}

/// `?` on a trainer call: the error, typed, without context.
macro_rules! from_trainer {
    ($($t:ty),*) => {$(
        impl From<$t> for CliError {
            fn from(e: $t) -> Self {
                CliError::trainer("", e)
            }
        }
    )*};
}
from_trainer!(FinetuneError, ExportError, DataError, TokenizerError);

impl From<SetupError> for CliError {
    fn from(e: SetupError) -> Self {
        CliError::Setup(Box::new(e))
    }
}

impl CliError {
    /// A trainer error after what the command was doing (`context`, empty
    /// for none).
    pub fn trainer(context: impl std::fmt::Display, e: impl Into<TrainerError>) -> Self {
        let context = context.to_string();
        CliError::Trainer {
            context: if context.is_empty() {
                context
            } else {
                format!("{context}: ")
            },
            source: Box::new(e.into()),
        }
    }

    /// A [`CliError::Failed`] from any message (an error of another crate
    /// that the CLI reports as it is).
    pub fn failed(message: impl std::fmt::Display) -> Self {
        CliError::Failed(message.to_string())
    }

    /// Whether writing the command's output failed because its reader left
    /// (`memtune export --format csv | head -1`), however the writer
    /// wrapped the error.
    pub fn is_broken_pipe(&self) -> bool {
        let broken = |e: &std::io::Error| e.kind() == std::io::ErrorKind::BrokenPipe;
        match self {
            CliError::Io(e) => broken(e),
            CliError::Csv(e) => matches!(e.kind(), csv::ErrorKind::Io(e) if broken(e)),
            _ => false,
        }
    }

    /// The process exit code (see the module's table).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Usage(_) | CliError::Config(_) => 2,
            CliError::Setup(e)
                if matches!(
                    **e,
                    SetupError::Model { .. } | SetupError::Data(_) | SetupError::Runner(_)
                ) =>
            {
                2
            }
            CliError::Trainer { source, .. } if source.is_bad_input() => 2,
            // A storage URL that does not parse is a wrong command line, a
            // study or parameter name Optuna's schema cannot hold a wrong
            // name.
            CliError::Store(
                store::StoreError::InvalidUrl { .. } | store::StoreError::NameTooLong { .. },
            ) => 2,
            CliError::Interrupted => 130,
            CliError::Store(_)
            | CliError::History(_)
            | CliError::Tune(_)
            | CliError::Setup(_)
            | CliError::Trainer { .. }
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
        let url = store::StorageUrl::parse("mysql://h/db").unwrap_err();
        assert!(matches!(url, store::StoreError::InvalidUrl { .. }), "{url}");
        assert_eq!(CliError::from(url).exit_code(), 2);
        let long = store::check_study_name(&"n".repeat(513)).unwrap_err();
        assert_eq!(CliError::from(long).exit_code(), 2);
    }

    /// Trainer errors keep their type up to here: the input's fault (a
    /// model directory or data file that does not load, an output that
    /// exists) exits 2, a failure while working 1.
    #[test]
    fn trainer_errors_exit_by_their_kind() {
        use crate::tune::setup::SetupError;
        use trainer::data::DataError;
        use trainer::export::ExportError;
        let data = || DataError::Read {
            path: "/nowhere/d.csv".into(),
            source: std::io::Error::other("gone"),
        };
        let e = CliError::trainer("reading texts", data());
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            e.to_string(),
            "reading texts: cannot read data file /nowhere/d.csv: gone"
        );
        assert_eq!(
            CliError::from(data()).to_string(),
            "cannot read data file /nowhere/d.csv: gone"
        );
        let exists = ExportError::OutputExists {
            path: "/nowhere/out".into(),
        };
        assert_eq!(CliError::from(exists).exit_code(), 2);
        // A model directory whose config and checkpoint disagree does not
        // load: bad input too.
        let disagreeing = [
            ExportError::ClassCount {
                tensor: "classifier.weight".into(),
                shape: vec![3, 16],
                config: "/m/config.json".into(),
                labels_key: "id2label",
                labels: 2,
            },
            ExportError::ProblemType {
                config: "/m/config.json".into(),
                problem_type: "regression".into(),
            },
            ExportError::HeadShape {
                path: "/m/model.safetensors".into(),
                mismatched: vec!["classifier.bias: checkpoint [5] vs model [3]".into()],
            },
        ];
        for e in disagreeing {
            assert_eq!(CliError::from(e).exit_code(), 2);
        }
        let writing = ExportError::Io {
            path: "/full/disk".into(),
            source: std::io::Error::other("no space left"),
        };
        assert_eq!(CliError::from(writing).exit_code(), 1);
        assert_eq!(CliError::from(SetupError::Data(data())).exit_code(), 2);
        assert_eq!(
            CliError::from(SetupError::Other("no device".into())).exit_code(),
            1
        );
    }
}
