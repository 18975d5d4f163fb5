//! `memtune`: the command-line front end that composes the workspace's crates.
//!
//! It owns no logic of its own beyond wiring: storage comes from `store`,
//! sampling and pruning from `hpo-sampler`, training from `trainer`, device
//! memory from `gpu-mem`. Each subcommand lives in its own file under
//! `commands/`; adding one is a variant in [`commands::Command`] and a file.
//!
//! `create-study`, `ask` and `tell` take the same flags and print the same
//! JSON as Optuna 5.0's `optuna create-study/ask/tell`, so one shell script
//! drives either. [`history`] is the one seam between `store` and
//! `hpo-sampler`: it turns stored trials into the sampler's frozen trials.

mod commands;
mod error;
mod history;
mod render;

use clap::Parser;
use std::process::ExitCode;

/// Hyperparameter studies for BERT-style text classifiers that never lose a
/// trial to memory.
#[derive(Parser)]
#[command(name = "memtune", version, about)]
struct Cli {
    /// Study storage in Optuna's URL form, e.g. sqlite:///study.db
    #[arg(long, global = true, env = "MEMTUNE_STORAGE")]
    storage: Option<String>,

    #[command(subcommand)]
    command: commands::Command,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let ctx = commands::Context {
        storage_url: cli.storage,
    };
    match commands::run(cli.command, &ctx, &mut std::io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memtune: {e}");
            ExitCode::FAILURE
        }
    }
}
