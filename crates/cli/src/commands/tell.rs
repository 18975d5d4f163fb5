//! `memtune tell`: Optuna's `optuna tell`, with `study.tell`'s semantics.
//!
//! - `--state complete` needs `--values`; `pruned` and `fail` refuse them.
//! - `pruned` stores the last intermediate value as the value when it is a
//!   usable single-objective value (not NaN), as Optuna does.
//! - No `--state`: the values decide; usable values COMPLETE the trial,
//!   missing, NaN or a wrong count FAIL it with a warning on stderr.
//! - Only a RUNNING trial may be told; a finished one is an error unless
//!   `--skip-if-finished`, which then succeeds without changing anything.
//!
//! Every check runs before the single write (`Storage::finish`, one
//! transaction), so a refused tell leaves the storage as it was.

use super::Context;
use crate::error::{CliError, Result};
use std::io::Write;
use store::TrialState;

#[derive(clap::Args)]
pub struct Args {
    /// The study's name (`--study` is accepted too).
    #[arg(long = "study-name", alias = "study", value_parser = super::study_name)]
    pub study_name: String,
    /// The trial's number, as `ask` printed it.
    #[arg(long)]
    pub trial_number: i64,
    /// Objective values, one per objective (`inf`/`-inf` allowed).
    #[arg(long, num_args = 1..)]
    pub values: Option<Vec<f64>>,
    /// The final state.
    #[arg(long, value_enum)]
    pub state: Option<TellState>,
    /// Succeed without changing anything if the trial is already finished.
    #[arg(long)]
    pub skip_if_finished: bool,
}

/// The states a tell may set, spelled as Optuna's CLI spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TellState {
    Complete,
    Pruned,
    Fail,
}

impl From<TellState> for TrialState {
    fn from(s: TellState) -> TrialState {
        match s {
            TellState::Complete => TrialState::Complete,
            TellState::Pruned => TrialState::Pruned,
            TellState::Fail => TrialState::Fail,
        }
    }
}

pub fn run(args: &Args, ctx: &Context, _out: &mut dyn Write) -> Result<()> {
    if args.trial_number < 0 {
        return Err(CliError::Usage(format!(
            "--trial-number must be 0 or more (the number `ask` printed), got {}",
            args.trial_number
        )));
    }
    let storage = ctx.open_existing()?;
    let study = storage.study(&args.study_name)?;
    let trial = storage
        .trial_by_number(study.study_id, args.trial_number)?
        .ok_or_else(|| {
            CliError::Usage(format!(
                "cannot tell trial {} of study `{}`: it has not been created",
                args.trial_number, study.name
            ))
        })?;
    if trial.state.is_finished() && args.skip_if_finished {
        crate::logging::note(&format!(
            "memtune: trial {} is already {}; skipped (--skip-if-finished)",
            trial.number, trial.state
        ));
        return Ok(());
    }
    if trial.state != TrialState::Running {
        return Err(CliError::Usage(format!(
            "cannot tell trial {}: it is {}, not RUNNING",
            trial.number, trial.state
        )));
    }
    // A runner's trial gets its result from its runner, which would
    // otherwise find it finished and drop the real one.
    if let Some(owner) = storage.trial_owner(trial.trial_id)? {
        return Err(CliError::Usage(format!(
            "cannot tell trial {}: a `memtune tune` runner ({}) is running it and records its result; tell only trials that `ask` gave you",
            trial.number, owner.id
        )));
    }
    let n_objectives = study.directions.len();
    let usable = |values: &[f64]| -> std::result::Result<(), String> {
        if let Some(v) = values.iter().find(|v| v.is_nan()) {
            return Err(format!("the value {v} is not acceptable"));
        }
        if values.len() != n_objectives {
            return Err(format!(
                "{} values given, the study has {n_objectives} objectives",
                values.len()
            ));
        }
        Ok(())
    };
    let values = args.values.as_deref();
    let (state, values): (TrialState, Vec<f64>) = match args.state {
        Some(TellState::Complete) => {
            let v = values.ok_or_else(|| {
                CliError::Usage("--values are required with --state complete".into())
            })?;
            usable(v)
                .map_err(|e| CliError::Usage(format!("cannot tell trial {}: {e}", trial.number)))?;
            (TrialState::Complete, v.to_vec())
        }
        Some(told @ (TellState::Pruned | TellState::Fail)) => {
            let s = TrialState::from(told);
            if values.is_some() {
                return Err(CliError::Usage(format!(
                    "--values cannot be given with --state {}",
                    s.as_str().to_ascii_lowercase()
                )));
            }
            let last = (s == TrialState::Pruned)
                .then(|| trial.intermediate_values.values().next_back().copied())
                .flatten()
                .map(|v| vec![v])
                .filter(|v| usable(v).is_ok());
            (s, last.unwrap_or_default())
        }
        None => {
            let checked = match values {
                None => Err("no values were given".to_string()),
                Some(v) => usable(v).map(|()| v.to_vec()),
            };
            match checked {
                Ok(v) => (TrialState::Complete, v),
                Err(why) => {
                    eprintln!("memtune: trial {} is marked FAIL: {why}", trial.number);
                    (TrialState::Fail, Vec::new())
                }
            }
        }
    };
    storage.finish(trial.trial_id, state, &values)?;
    Ok(())
}
