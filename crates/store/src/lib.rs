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
