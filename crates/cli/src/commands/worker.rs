//! `memtune worker`: serve trials for the runner (see `tune::worker`).

use crate::error::{CliError, Result};
use crate::tune::worker;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Instead of serving trials: start the CUDA backend on device N (its
    /// context, cuBLAS and kernels, what every trial's process holds),
    /// print one line, and hold it until stdin closes, so the runner can
    /// measure a process's device memory overhead around it.
    #[arg(long, value_name = "N")]
    pub hold_cuda: Option<usize>,
}

pub fn run(args: &Args) -> Result<()> {
    worker::die_with_parent();
    if let Some(ordinal) = args.hold_cuda {
        return worker::hold_cuda(ordinal).map_err(|e| CliError::Failed(format!("worker: {e}")));
    }
    // Unlocked handles: a trial may run on another thread's pool, and
    // locks are not `Send`.
    let mut stdin = std::io::BufReader::new(std::io::stdin());
    worker::serve(&mut stdin, &mut std::io::stdout())
        .map_err(|e| CliError::Failed(format!("worker: {e}")))
}
