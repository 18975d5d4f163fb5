//! Crash-proof study storage on SQLite, in Optuna's own schema.
//!
//! A hyperparameter study is only as durable as the file its trials live in.
//! This crate writes studies, trials, parameters, objective values,
//! intermediate values, attributes and heartbeats to one SQLite file, laid out
//! exactly as Optuna's `RDBStorage` (schema version 12) lays it out, so that
//! `optuna.load_study(storage="sqlite:///x.db", ...)` and optuna-dashboard read
//! what we write, and we read what they wrote.
//!
//! It deliberately does not sample, prune, train or allocate: it knows nothing
//! of `hpo-sampler`, `gpu-mem` or `trainer`, and is reusable alone.
//!
//! # Seams
//! - [`Storage`] is one connection to one file; open one per process or
//!   thread. Every operation is one transaction; writes run in
//!   `BEGIN IMMEDIATE` with retry on SQLITE_BUSY, so many worker processes can
//!   share a file (WAL mode) and trial numbers stay dense and unique.
//! - Parameters are stored as Optuna stores them: an internal `f64` (the value
//!   for float/int distributions, the choice index for categorical ones) and
//!   the distribution as an opaque JSON string. [`Distribution`] converts, so
//!   the sampler crate's types never leak in here.
//! - Trial owners call [`Storage::heartbeat`]; anyone may call
//!   [`Storage::fail_stale_trials`] to fail (and optionally re-enqueue) trials
//!   whose owner died.
//! - Errors are [`StoreError`]; bad files are rejected by reading only, so
//!   nothing is ever written to a file that is not ours.

mod attrs;
mod distribution;
mod error;
mod model;
mod query;
mod schema;
mod stale;
mod storage;
mod study;
pub mod time;
mod trial;

pub use distribution::{Distribution, external_value};
pub use error::{Result, StoreError};
pub use model::{
    FrozenTrial, Param, Study, StudyDirection, StudySummary, TrialFilter, TrialRef, TrialState,
};
pub use schema::{ALEMBIC_VERSION, LIBRARY_VERSION, SCHEMA_VERSION};
pub use stale::{RetryPolicy, StaleTrial};
pub use storage::{Durability, OpenOptions, Storage, parse_sqlite_url};
pub use trial::{Claim, NewTrial};
