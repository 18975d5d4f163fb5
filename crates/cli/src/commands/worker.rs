//! `memtune worker`: serve trials for the runner (see `tune::worker`).

use crate::error::{CliError, Result};
use crate::tune::worker;

pub fn run() -> Result<()> {
    worker::die_with_parent();
    // Unlocked handles: a trial may run on another thread's pool, and
    // locks are not `Send`.
    let mut stdin = std::io::BufReader::new(std::io::stdin());
    worker::serve(&mut stdin, &mut std::io::stdout())
        .map_err(|e| CliError::Failed(format!("worker: {e}")))
}
