//! Samplers (random, TPE) and pruners for hyperparameter optimisation.
//!
//! Given the history of a study as a plain in-memory slice of frozen trials,
//! a sampler proposes the next parameters and a pruner decides whether a
//! running trial should stop early. Semantics follow Optuna's, so results are
//! comparable, and the hot path is allocation-light so that asking costs
//! microseconds even with thousands of trials in the history.
//!
//! It deliberately does not persist anything (the caller stores trials), nor
//! know about GPUs, memory or models: it depends on none of the other crates.
