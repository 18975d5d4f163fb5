//! The `memtune` command-line front end that composes the workspace's crates.
//!
//! Storage comes from `store`, sampling and pruning from `hpo-sampler`,
//! training from `trainer`, device memory from `gpu-mem`; what is its own is
//! what composes them: the study file, the runner (pricing each trial by its
//! memory plan, packing trials onto devices, worker processes) and the HTML
//! report. Each subcommand lives in its own file under
//! `commands/`; adding one is a variant in [`commands::Command`] and a file.
//!
//! `create-study`, `ask` and `tell` take the same flags and print the same
//! JSON as Optuna 5.0's `optuna create-study/ask/tell`, so one shell script
//! drives either. The samplers read the study through [`history`], which
//! checks the stored trials (`store` returns them as `hpo-sampler`'s frozen
//! trials) and keeps them between reads.

//!
//! The binary (`src/main.rs`) only parses arguments and prints shell
//! completions; everything else it runs is in this library, so benches and tests drive the same code (the study runner
//! in [`tune`] included).
//!
//! Not in a default build: the runner's fault injection (feature
//! `fault-injection`) and the packing policy's simulation, `tune::simulate`
//! (feature `sim`, for `cargo xtask bench packing`); this crate's tests turn
//! both on.

pub mod argv;
pub mod commands;
pub mod devices;
pub mod error;
pub mod history;
pub mod leases;
pub mod logging;
pub mod render;
pub mod report;
pub mod tune;
