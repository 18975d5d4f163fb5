//! `memtune studies`: every study with its directions and trial counts.
//!
//! Each study is read on its own, so one whose rows are broken (written by
//! hand, or by a tool that does not keep Optuna's schema) is named with its
//! error and the others are still listed; the command then exits 1.

use super::Context;
use crate::error::{CliError, Result};
use std::io::Write;
use store::{StoreError, TrialState};

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: &Args, ctx: &Context, out: &mut dyn Write) -> Result<()> {
    let storage = ctx.open_read_only()?;
    let names = storage.study_names()?;
    writeln!(
        out,
        "{:<24} {:<20} {:>6} {:>8} {:>6} {:>6} {:>7} {:>7}",
        "study", "directions", "trials", "complete", "pruned", "fail", "running", "waiting"
    )?;
    let mut unreadable = Vec::new();
    for (study_id, name) in names {
        let s = match storage.study_summary(study_id) {
            Ok(s) => s,
            // Deleted (by Optuna's `delete_study`) since the names were read.
            Err(StoreError::StudyIdNotFound { .. }) => continue,
            Err(e) => {
                let name = crate::render::printable(&name);
                writeln!(out, "{name:<24} cannot be read: {e}")?;
                unreadable.push(name);
                continue;
            }
        };
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
    match unreadable.len() {
        0 => Ok(()),
        1 => Err(CliError::Failed(format!(
            "study {} cannot be read; the others are listed above",
            unreadable[0]
        ))),
        n => Err(CliError::Failed(format!(
            "{n} studies cannot be read ({}); the others are listed above",
            unreadable.join(", ")
        ))),
    }
}
