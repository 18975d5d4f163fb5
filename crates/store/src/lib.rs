//! Crash-proof study storage on SQLite or PostgreSQL, in Optuna's own schema.
//!
//! A hyperparameter study is only as durable as the storage its trials live
//! in. This crate writes studies, trials, parameters, objective values,
//! intermediate values, attributes and heartbeats to one SQLite file or one
//! PostgreSQL database, laid out exactly as Optuna's `RDBStorage` (schema
//! version 12) lays it out, so that `optuna.load_study(storage=URL, ...)`
//! and optuna-dashboard read what we write, and we read what they wrote. A
//! PostgreSQL server lets runners on many machines share one study.
//!
//! Its data model is `hpo-sampler`'s, Optuna's own (distributions, trial
//! states, study directions, [`FrozenTrial`]), re-exported here, so what it
//! returns goes to a sampler as it is. It deliberately does not sample,
//! prune, train or allocate: it knows nothing of `gpu-mem` or `trainer`,
//! and uses `hpo-sampler` for those types alone.
//!
//! # Seams
//! - [`Storage`] is one connection to one file or database; open one per
//!   process or thread ([`Storage::open_url`] takes `sqlite:///PATH` and
//!   `postgresql://USER@HOST[:PORT]/DB`; the API is the same for both).
//!   Every operation is one transaction; SQLite writes run in `BEGIN
//!   IMMEDIATE` with retry on SQLITE_BUSY (WAL mode), PostgreSQL writes lock
//!   the study's or trial's row and retry deadlocks and serialization
//!   failures, so many worker processes share a study and trial numbers stay
//!   dense and unique. Every read sees one commit, on a read-only storage
//!   too, while writers open and close the file beside it.
//! - Parameters are stored as Optuna stores them: an internal `f64` (the value
//!   for float/int distributions, the choice index for categorical ones) and
//!   the distribution as Optuna's JSON, the bytes Optuna writes
//!   ([`distribution_to_json`], through [`python_json`], Python's
//!   `json.dumps` spelling). Reading decodes it as Optuna's
//!   `json_to_distribution` does ([`json_to_distribution`]: pre-3.0 class
//!   names and the short `{"type": "float", ...}` form included, checked
//!   by Optuna's constructors' rules); a row that does not decode is an
//!   error naming the trial and the parameter. [`search_space_from_json`]
//!   reads the search space `optuna ask --search-space` takes, and
//!   [`value_to_json`] / [`value_from_json`] a parameter value. This is the
//!   project's one reader and writer of Optuna's JSON.
//! - [`Storage::claim_or_create_within`] claims a WAITING trial or creates
//!   one while a study's budget lasts, with its first heartbeat, in one
//!   transaction: any number of processes can share one study.
//! - Trial owners call [`Storage::heartbeat`]; anyone may call
//!   [`Storage::fail_stale_trials`] to fail (and optionally re-enqueue) trials
//!   whose owner died.
//! - Errors are [`StoreError`]; bad files and databases are rejected by
//!   reading only, so nothing is ever written to a storage that is not ours.
//!   A stored row that does not read names the storage and its trial.
//!   It prints nothing: a warning (a file not in WAL mode) is a `tracing`
//!   event for the application's subscriber.
//! - `pg_server` (feature `testing`) starts a throwaway PostgreSQL server,
//!   for tests and benchmarks.
//!
//! # Example
//!
//! ```
//! use store::{Distribution, Storage, StudyDirection, TrialState};
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("study.db");
//! let storage = Storage::open(&path)?; // or Storage::open_url("sqlite:///study.db", &opts)
//! let study = storage.create_or_load_study("bert", &[StudyDirection::Maximize])?;
//! let trial = storage.create_or_claim_trial(study.study_id)?.trial();
//! let lr = Distribution::Float { low: 1e-5, high: 1e-2, log: true, step: None };
//! storage.set_param(trial.trial_id, "lr", 3e-4, &lr)?;
//! storage.heartbeat(trial.trial_id)?;
//! storage.report_intermediate(trial.trial_id, 0, 0.71)?;
//! storage.finish(trial.trial_id, TrialState::Complete, &[0.74])?;
//! let best = storage.best_trial(study.study_id)?.unwrap();
//! assert_eq!(best.number as i64, trial.number);
//! assert_eq!(best.params["lr"].value().as_f64(), Some(3e-4));
//! # Ok::<(), store::StoreError>(())
//! ```

#![warn(missing_docs)]

mod attrs;
mod db;
mod error;
mod model;
mod optuna_json;
mod pg;
#[cfg(feature = "testing")]
pub mod pg_server;
pub mod python_json;
mod query;
mod schema;
mod stale;
mod statement_cache;
mod storage;
mod study;
pub mod time;
mod tls;
mod trial;

pub use error::{Result, StoreError};
pub use hpo_sampler::{
    Distribution, FrozenTrial, Param, ParamValue, SearchSpace, StudyDirection, TrialState,
};
pub use model::{Study, StudySummary, TrialFilter, TrialRef};
pub use optuna_json::{
    distribution_to_json, json_to_distribution, json_value_to_distribution, search_space_from_json,
    value_from_json, value_to_json,
};
pub use pg::PgUrl;
pub use query::best_feasible_trial;
pub use schema::{ALEMBIC_VERSION, LIBRARY_VERSION, SCHEMA_VERSION};
pub use stale::{OWNER_KEY, Owner, RetryPolicy, StaleTrial};
pub use storage::{Durability, OpenOptions, Storage, StorageUrl, parse_sqlite_url, redact_url};
pub use trial::{Claim, MAX_PARAM_NAME_CHARS, NewTrial, check_param_name, check_study_name};
