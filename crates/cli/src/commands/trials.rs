//! `memtune trials --study NAME [--state S]... [--attr KEY]`: the trials of a
//! study with their parameters, e.g. every FAIL trial that recorded an `oom`
//! or `cuda_error` attribute together with the configuration that caused it.

use super::Context;
use crate::error::Result;
use crate::render;
use clap::ValueEnum;
use std::io::Write;
use store::{TrialFilter, TrialState};

#[derive(clap::Args)]
pub struct Args {
    /// The study's name (`--study-name` is accepted too).
    #[arg(long, alias = "study-name")]
    pub study: String,
    /// Only trials in these states (repeat or comma-separate).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub state: Vec<StateArg>,
    /// Only trials with this user (or system) attribute; its value is shown.
    #[arg(long)]
    pub attr: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum StateArg {
    Complete,
    Pruned,
    Fail,
    Running,
    Waiting,
}

impl From<StateArg> for TrialState {
    fn from(s: StateArg) -> TrialState {
        match s {
            StateArg::Complete => TrialState::Complete,
            StateArg::Pruned => TrialState::Pruned,
            StateArg::Fail => TrialState::Fail,
            StateArg::Running => TrialState::Running,
            StateArg::Waiting => TrialState::Waiting,
        }
    }
}

pub fn run(args: &Args, ctx: &Context, out: &mut dyn Write) -> Result<()> {
    let storage = ctx.open_read_only()?;
    let study = storage.study(&args.study)?;
    let filter = TrialFilter {
        states: args.state.iter().map(|&s| s.into()).collect(),
        attr_key: args.attr.clone(),
    };
    let trials = storage.trials(study.study_id, &filter)?;
    match &args.attr {
        Some(key) => writeln!(
            out,
            "{:>6} {:<8} {:<12} {:<16} params",
            "number",
            "state",
            "values",
            render::printable(key)
        )?,
        None => writeln!(
            out,
            "{:>6} {:<8} {:<12} params",
            "number", "state", "values"
        )?,
    }
    for t in &trials {
        let values = render::values(t);
        match &args.attr {
            Some(key) => {
                let v = render::attr(t, key)
                    .map(|v| render::printable(&render::json_token(v)))
                    .unwrap_or_default();
                writeln!(
                    out,
                    "{:>6} {:<8} {:<12} {:<16} {}",
                    t.number,
                    t.state,
                    values,
                    v,
                    render::params(t)
                )?
            }
            None => writeln!(
                out,
                "{:>6} {:<8} {:<12} {}",
                t.number,
                t.state,
                values,
                render::params(t)
            )?,
        }
    }
    writeln!(out, "{} trials", trials.len())?;
    Ok(())
}
