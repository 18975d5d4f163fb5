//! The subcommands. Each file holds one command's arguments and `run`.

mod best;
mod export;
mod studies;
mod trials;

use crate::error::{CliError, Result};
use clap::Subcommand;
use std::io::Write;
use store::{OpenOptions, Storage};

#[derive(Subcommand)]
pub enum Command {
    /// List the studies in the storage with their trial counts.
    Studies(studies::Args),
    /// List a study's trials with their parameters (filter by state or attribute).
    Trials(trials::Args),
    /// Show the best trial (single objective) or the Pareto front.
    Best(best::Args),
    /// Write a study's trials as CSV or JSON.
    Export(export::Args),
}

/// What every command may need besides its own arguments.
pub struct Context {
    pub storage_url: Option<String>,
}

impl Context {
    /// Open the storage of `--storage` read-side: a missing file is an
    /// error, never silently created.
    pub fn open_existing(&self) -> Result<Storage> {
        let url = self.storage_url.as_deref().ok_or_else(|| {
            CliError::Usage(
                "no storage given: pass --storage sqlite:///path.db (or set MEMTUNE_STORAGE)"
                    .into(),
            )
        })?;
        let opts = OpenOptions {
            create: false,
            ..OpenOptions::default()
        };
        Ok(Storage::open_url(url, &opts)?)
    }
}

pub fn run(command: Command, ctx: &Context, out: &mut dyn Write) -> Result<()> {
    match command {
        Command::Studies(args) => studies::run(&args, ctx, out),
        Command::Trials(args) => trials::run(&args, ctx, out),
        Command::Best(args) => best::run(&args, ctx, out),
        Command::Export(args) => export::run(&args, ctx, out),
    }
}
