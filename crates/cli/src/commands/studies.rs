//! `memtune studies`: every study with its directions and trial counts.

use super::Context;
use crate::error::Result;
use std::io::Write;
use store::TrialState;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: &Args, ctx: &Context, out: &mut dyn Write) -> Result<()> {
    let storage = ctx.open_read_only()?;
    let studies = storage.studies()?;
    writeln!(
        out,
        "{:<24} {:<20} {:>6} {:>8} {:>6} {:>6} {:>7} {:>7}",
        "study", "directions", "trials", "complete", "pruned", "fail", "running", "waiting"
    )?;
    for s in studies {
        let n = |st: TrialState| s.counts.get(&st).copied().unwrap_or(0);
        let dirs: Vec<&str> = s.study.directions.iter().map(|d| d.as_str()).collect();
        writeln!(
            out,
            "{:<24} {:<20} {:>6} {:>8} {:>6} {:>6} {:>7} {:>7}",
            crate::render::printable(&s.study.name),
            dirs.join(","),
            s.n_trials,
            n(TrialState::Complete),
            n(TrialState::Pruned),
            n(TrialState::Fail),
            n(TrialState::Running),
            n(TrialState::Waiting),
        )?;
    }
    Ok(())
}
