//! The subcommands. Each file holds one command's arguments and `run`.

pub(crate) mod ask;
mod best;
mod create_study;
mod devices;
mod export;
mod predict;
mod report;
mod studies;
mod tell;
mod train;
mod trials;
mod tune;
mod worker;

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
    /// Write a study as one self-contained HTML page (history, importance,
    /// memory, device timeline, failures), or its timeline as a Chrome trace.
    Report(report::Args),
    /// Create a study (as `optuna create-study`); prints its name.
    CreateStudy(create_study::Args),
    /// Create a trial and sample its parameters (as `optuna ask`); prints
    /// `{"number": N, "params": {...}}`.
    Ask(ask::Args),
    /// Finish a trial made by `ask` (as `optuna tell`).
    Tell(tell::Args),
    /// What memtune can train on: CPU cores and RAM, each CUDA device
    /// (memory, compute capability, virtual memory), or why CUDA is
    /// unavailable, and the CUDA libraries found; with a storage, what its
    /// running trials lease on each device, and what is left free there.
    Devices(devices::Args),
    /// Run a study: trials in worker processes, packed onto the device by
    /// predicted memory, recorded as they go; the same command resumes it.
    Tune(tune::Args),
    /// Retrain a trial (default: the best) and save the model as a Hugging
    /// Face directory that transformers loads.
    Train(train::Args),
    /// Classify texts with a Hugging Face classification directory; prints
    /// a JSON line per record.
    Predict(predict::Args),
    /// Serve trials for `memtune tune` over stdin/stdout (started by the
    /// runner, not by hand).
    #[command(hide = true)]
    Worker(worker::Args),
}

/// Parses a study name given on the command line (`--study-name`): an
/// empty or blank name would be stored as a study that listings, logs and
/// file names cannot show, so it is refused as a wrong command line.
pub(crate) fn study_name(name: &str) -> std::result::Result<String, String> {
    if name.trim().is_empty() {
        Err("a study name must not be empty or only whitespace".into())
    } else {
        Ok(name.to_string())
    }
}

/// What every command may need besides its own arguments.
pub struct Context {
    pub storage_url: Option<String>,
}

impl Context {
    /// Open the storage of `--storage` read-only: a missing file is an
    /// error, never silently created, and the file is never modified.
    pub fn open_read_only(&self) -> Result<Storage> {
        self.open(OpenOptions {
            create: false,
            read_only: true,
            ..OpenOptions::default()
        })
    }

    /// Open an existing storage for writing (`ask`, `tell`): a missing file
    /// is an error, never silently created.
    pub fn open_existing(&self) -> Result<Storage> {
        self.open(OpenOptions {
            create: false,
            ..OpenOptions::default()
        })
    }

    /// Open `--storage`, creating the file and Optuna's schema if missing
    /// (what `optuna create-study` does).
    pub fn open_or_create(&self) -> Result<Storage> {
        self.open(OpenOptions::default())
    }

    fn open(&self, opts: OpenOptions) -> Result<Storage> {
        Ok(Storage::open_url(self.url()?, &opts)?)
    }

    fn url(&self) -> Result<&str> {
        self.storage_url.as_deref().ok_or_else(|| {
            CliError::Usage(
                "no storage given: pass --storage sqlite:///path.db or \
                 postgresql://user@host/db (or set MEMTUNE_STORAGE)"
                    .into(),
            )
        })
    }
}

pub fn run(command: Command, ctx: &Context, out: &mut dyn Write) -> Result<()> {
    match command {
        Command::Studies(args) => studies::run(&args, ctx, out),
        Command::Trials(args) => trials::run(&args, ctx, out),
        Command::Best(args) => best::run(&args, ctx, out),
        Command::Export(args) => export::run(&args, ctx, out),
        Command::Report(args) => report::run(&args, ctx, out),
        Command::CreateStudy(args) => create_study::run(&args, ctx, out),
        Command::Ask(args) => ask::run(&args, ctx, out),
        Command::Tell(args) => tell::run(&args, ctx, out),
        Command::Devices(args) => devices::run(&args, ctx, out),
        Command::Tune(args) => tune::run(&args, ctx, out),
        Command::Train(args) => train::run(&args, ctx, out),
        Command::Predict(args) => predict::run(&args, ctx, out),
        Command::Worker(args) => worker::run(&args),
    }
}
