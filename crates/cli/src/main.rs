//! `memtune`: parses the command line and runs [`cli::commands`]; the exit
//! code follows [`cli::error`]'s table.

use clap::{CommandFactory, Parser, Subcommand};
use std::io::Write;
use std::process::ExitCode;

/// Hyperparameter studies for BERT-style text classifiers that never lose a
/// trial to memory.
#[derive(Parser)]
#[command(name = "memtune", version, about)]
struct Cli {
    /// Study storage in Optuna's URL form, e.g. sqlite:///study.db or
    /// postgresql://user:password@host:port/db (password and port optional)
    #[arg(long, global = true, env = "MEMTUNE_STORAGE")]
    storage: Option<String>,

    /// Print only errors and warnings on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,

    /// Also print the structured log on stderr (-v info, -vv debug). The
    /// log file's own filter is `MEMTUNE_LOG`.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,

    #[command(subcommand)]
    command: TopCommand,
}

#[derive(Subcommand)]
enum TopCommand {
    #[command(flatten)]
    Run(cli::commands::Command),
    /// Print a shell completion script, e.g.
    /// `memtune completions bash > /etc/bash_completion.d/memtune`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// The long options of any subcommand that take several values.
fn multi_valued_options() -> Vec<String> {
    let cmd = Cli::command();
    cmd.get_subcommands()
        .flat_map(|c| c.get_arguments())
        .filter(|a| a.get_num_args().is_some_and(|n| n.max_values() > 1))
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect()
}

fn main() -> ExitCode {
    let multi_valued = multi_valued_options();
    let cli = Cli::parse_from(cli::argv::attach_negative_numbers(
        std::env::args_os(),
        |name| multi_valued.iter().any(|m| m == name),
    ));
    let verbosity = if cli.quiet {
        -1
    } else {
        cli.verbose.min(2) as i8
    };
    if let Err(e) = cli::logging::install(verbosity) {
        cli::logging::stderr_line(&format!("memtune: {e}"));
        return ExitCode::from(2);
    }
    let command = match cli.command {
        TopCommand::Run(command) => command,
        TopCommand::Completions { shell } => {
            // Generated in memory: clap_complete panics when its writer
            // fails, and a failed write here is an error like any other.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "memtune", &mut script);
            let mut out = std::io::stdout();
            let written = out.write_all(&script).and_then(|()| out.flush());
            return exit_code(written.map_err(cli::error::CliError::Io));
        }
    };
    let ctx = cli::commands::Context {
        storage_url: cli.storage,
    };
    // Not a held `StdoutLock`: the worker writes to stdout from its compute
    // pool's thread.
    exit_code(cli::commands::run(command, &ctx, &mut std::io::stdout()))
}

/// The exit code of a command's outcome, its error printed on stderr.
fn exit_code(outcome: cli::error::Result<()>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        // The reader left (`memtune trials | head -1`): it has what it
        // wanted, so this is no failure, as for any Unix filter.
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            cli::logging::stderr_line(&e.report());
            ExitCode::from(e.exit_code())
        }
    }
}
