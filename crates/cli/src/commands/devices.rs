//! `memtune devices`: what memtune can train on.

use crate::error::Result;
use std::io::Write;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: &Args, out: &mut dyn Write) -> Result<()> {
    let report = crate::devices::probe_cuda();
    write!(out, "{}", crate::devices::render(&report))?;
    Ok(())
}
