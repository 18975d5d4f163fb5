//! `memtune worker`: serve trials for the runner (see `tune::worker`).

use crate::error::{CliError, Result};
use crate::tune::worker;

pub fn run() -> Result<()> {
    worker::die_with_parent();
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    worker::serve(&mut stdin.lock(), &mut stdout.lock())
        .map_err(|e| CliError::Failed(format!("worker: {e}")))
}
