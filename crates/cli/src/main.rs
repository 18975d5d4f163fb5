//! `memtune`: parses the command line and runs [`cli::commands`].

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
    command: cli::commands::Command,
}

fn main() -> ExitCode {
    let cli = Cli::parse_from(cli::argv::attach_negative_numbers(std::env::args_os()));
    let ctx = cli::commands::Context {
        storage_url: cli.storage,
    };
    match cli::commands::run(cli.command, &ctx, &mut std::io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memtune: {e}");
            ExitCode::FAILURE
        }
    }
}
