//! The CLI's errors: the store's typed errors, plus usage and output failures.

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("{0}")]
    Usage(String),
    #[error("cannot write output: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot write CSV: {0}")]
    Csv(#[from] csv::Error),
}

pub type Result<T> = std::result::Result<T, CliError>;
