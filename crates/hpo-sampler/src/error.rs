//! The crate's typed errors.

/// Everything that can go wrong building a search space or suggesting a value.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum Error {
    /// A distribution's attributes are inconsistent (`low > high`, `log`
    /// with a non-positive `low`, a non-positive `step`, no choices...).
    #[error("invalid distribution for parameter '{param}': {reason}")]
    InvalidDistribution { param: String, reason: String },
    /// A parameter suggested twice in one trial with different distributions.
    #[error(
        "parameter '{param}' was already suggested with {previous} and cannot now use {requested}"
    )]
    IncompatibleDistribution {
        param: String,
        previous: String,
        requested: String,
    },
    /// A distribution the study's history contradicts (Optuna's storage
    /// refuses it too): `reason` is Optuna's wording.
    /// `conflict` names both distributions, the trial that stored the
    /// first, and the reason.
    #[error("parameter `{param}` {conflict}")]
    ConflictsWithHistory { param: String, conflict: String },
    /// An external value that does not belong to the parameter's distribution.
    #[error("value {value} for parameter '{param}' is not in its distribution: {reason}")]
    InvalidValue {
        param: String,
        value: String,
        reason: String,
    },
    /// A report or tell the trial's state does not allow (an unknown
    /// number, a trial already finished, a COMPLETE trial without a value).
    #[error("trial {number}: {reason}")]
    Trial { number: u64, reason: String },
    /// Importances that cannot be computed (too few trials, a value that
    /// does not vary); `reason` says which.
    #[error("{reason}")]
    Importance { reason: String },
    /// A pruner or sampler option out of its documented range.
    #[error("invalid option {option}: {reason}")]
    InvalidOption { option: String, reason: String },
}

pub type Result<T> = std::result::Result<T, Error>;
