//! `memtune best --study NAME`: the best trial, or the Pareto front of a
//! multi-objective study.

use super::Context;
use crate::error::Result;
use crate::render;
use std::io::Write;

#[derive(clap::Args)]
pub struct Args {
    /// The study's name (`--study-name` is accepted too).
    #[arg(long, alias = "study-name")]
    pub study: String,
}

pub fn run(args: &Args, ctx: &Context, out: &mut dyn Write) -> Result<()> {
    let storage = ctx.open_read_only()?;
    let study = storage.study(&args.study)?;
    let best = if study.directions.len() == 1 {
        storage.best_trial(study.study_id)?.into_iter().collect()
    } else {
        storage.best_trials(study.study_id)?
    };
    if best.is_empty() {
        let complete = store::TrialFilter {
            states: vec![store::TrialState::Complete],
            attr_key: None,
        };
        // Every COMPLETE trial is infeasible, or there is none.
        let why = if storage.trials(study.study_id, &complete)?.is_empty() {
            "no COMPLETE trial"
        } else {
            "no COMPLETE trial that meets its constraints"
        };
        writeln!(
            out,
            "study `{}` has {why} yet",
            render::printable(&study.name)
        )?;
        return Ok(());
    }
    for t in &best {
        writeln!(out, "trial {}: values {}", t.number, render::values(t))?;
        for (name, p) in &t.params {
            writeln!(
                out,
                "  {} = {}",
                render::printable(name),
                render::printable(&render::json_token(&render::param_json(p)))
            )?;
        }
    }
    Ok(())
}
