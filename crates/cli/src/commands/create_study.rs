//! `memtune create-study`: Optuna's `optuna create-study` with the same
//! flags and output (the study name on stdout).

use super::Context;
use crate::error::{CliError, Result};
use std::io::Write;
use store::StudyDirection;

#[derive(clap::Args)]
pub struct Args {
    /// The study's name (`--study` is accepted too).
    #[arg(long = "study-name", alias = "study", value_parser = super::study_name)]
    pub study_name: String,
    /// The objective's direction (one objective).
    #[arg(long, value_parser = ["minimize", "maximize"], conflicts_with = "directions")]
    pub direction: Option<String>,
    /// One direction per objective, separated by spaces.
    #[arg(long, num_args = 1.., value_parser = ["minimize", "maximize"])]
    pub directions: Option<Vec<String>>,
    /// Succeed without changing anything when the study already exists
    /// (its directions must match).
    #[arg(long)]
    pub skip_if_exists: bool,
}

pub fn run(args: &Args, ctx: &Context, out: &mut dyn Write) -> Result<()> {
    let directions: Vec<StudyDirection> = match (&args.direction, &args.directions) {
        (Some(d), None) => vec![parse(d)?],
        (None, Some(ds)) => ds.iter().map(|d| parse(d)).collect::<Result<_>>()?,
        // Optuna's default: a single minimised objective.
        _ => vec![StudyDirection::Minimize],
    };
    let storage = ctx.open_or_create()?;
    let study = if args.skip_if_exists {
        storage.create_or_load_study(&args.study_name, &directions)?
    } else {
        storage.create_study(&args.study_name, &directions)?
    };
    writeln!(out, "{}", study.name)?;
    Ok(())
}

fn parse(d: &str) -> Result<StudyDirection> {
    StudyDirection::parse(d)
        .filter(|d| *d != StudyDirection::NotSet)
        .ok_or_else(|| CliError::Usage(format!("unknown direction `{d}` (minimize or maximize)")))
}
