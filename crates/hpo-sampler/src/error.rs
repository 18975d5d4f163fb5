//! The crate's typed errors.

/// Everything that can go wrong building a search space or suggesting a value.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum Error {
    /// A distribution's attributes are inconsistent (`low > high`, `log`
    /// with a non-positive `low`, a non-positive `step`, no choices...).
    #[error("invalid distribution for parameter '{param}': {reason}")]
    InvalidDistribution {
        /// The parameter's name; empty when the distribution was built on its own.
        param: String,
        /// What is inconsistent.
        reason: String,
    },
    /// A parameter suggested twice in one trial with different distributions.
    #[error(
        "parameter '{param}' was already suggested with {previous} and cannot now use {requested}"
    )]
    IncompatibleDistribution {
        /// The parameter's name.
        param: String,
        /// The distribution the trial already suggested it with.
        previous: String,
        /// The distribution asked for now.
        requested: String,
    },
    /// A distribution the study's history contradicts (Optuna's storage
    /// refuses it too, and the reason given is Optuna's wording).
    #[error("parameter `{param}` {conflict}")]
    ConflictsWithHistory {
        /// The parameter's name.
        param: String,
        /// Both distributions, the trial that stored the first, and the reason.
        conflict: String,
    },
    /// An external value that does not belong to the parameter's distribution.
    #[error("value {value} for parameter '{param}' is not in its distribution: {reason}")]
    InvalidValue {
        /// The parameter's name.
        param: String,
        /// The value, as text.
        value: String,
        /// Why it does not belong.
        reason: String,
    },
    /// A report or tell the trial's state does not allow (an unknown
    /// number, a trial already finished, a COMPLETE trial without a value).
    #[error("trial {number}: {reason}")]
    Trial {
        /// The trial's number.
        number: u64,
        /// What is wrong.
        reason: String,
    },
    /// Importances that cannot be computed (too few trials, a value that
    /// does not vary); `reason` says which.
    #[error("{reason}")]
    Importance {
        /// Why no importances were computed.
        reason: String,
    },
    /// A pruner or sampler option out of its documented range.
    #[error("invalid option {option}: {reason}")]
    InvalidOption {
        /// The option's name.
        option: String,
        /// What is wrong with its value.
        reason: String,
    },
}

/// A `Result` whose error is this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
