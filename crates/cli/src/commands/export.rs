//! `memtune export --study NAME --format csv|json`: every trial of a study.
//!
//! CSV follows Optuna's `trials_dataframe()` column names (`number`, `value`
//! or `values_0..`, named after the study's metrics when it has them as
//! Optuna's `set_metric_names` stores them (`value_accuracy`,
//! `values_accuracy`, `values_peak_memory`), `datetime_start`,
//! `datetime_complete`, `params_*`, `user_attrs_*`, `state`); JSON holds
//! the metric names and each trial in full, including intermediate values
//! and system attributes.

use super::Context;
use crate::error::Result;
use crate::render;
use clap::ValueEnum;
use serde_json::{Map, Value as Json, json};
use std::collections::BTreeSet;
use std::io::Write;
use store::{FrozenTrial, TrialFilter};

#[derive(clap::Args)]
pub struct Args {
    /// The study's name (`--study-name` is accepted too).
    #[arg(long, alias = "study-name")]
    pub study: String,
    #[arg(long, value_enum)]
    pub format: Format,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Csv,
    Json,
}

pub fn run(args: &Args, ctx: &Context, out: &mut dyn Write) -> Result<()> {
    let storage = ctx.open_read_only()?;
    let study = storage.study(&args.study)?;
    let trials = storage.trials(study.study_id, &TrialFilter::default())?;
    let attrs = storage.study_system_attrs(study.study_id)?;
    let metric_names = metric_names(
        attrs.get(crate::tune::record::METRIC_NAMES_KEY),
        study.directions.len(),
    );
    match args.format {
        Format::Csv => csv(
            &trials,
            study.directions.len(),
            metric_names.as_deref(),
            out,
        ),
        Format::Json => {
            let all: Vec<Json> = trials.iter().map(trial_json).collect();
            let doc = json!({
                "study": study.name,
                "directions": study.directions.iter().map(|d| d.as_str()).collect::<Vec<_>>(),
                "metric_names": metric_names,
                "trials": all,
            });
            serde_json::to_writer_pretty(&mut *out, &doc).map_err(std::io::Error::from)?;
            writeln!(out)?;
            Ok(())
        }
    }
}

fn trial_json(t: &FrozenTrial) -> Json {
    let params: Map<String, Json> = t
        .params
        .iter()
        .map(|(name, p)| (name.clone(), render::param_json(p)))
        .collect();
    let inter: Map<String, Json> = t
        .intermediate_values
        .iter()
        .map(|(s, &v)| (s.to_string(), render::float_json(v)))
        .collect();
    json!({
        "number": t.number,
        "state": t.state.as_str(),
        "values": t.values.as_ref().map(|v| v.iter().map(|&x| render::float_json(x)).collect::<Vec<_>>()),
        "datetime_start": t.datetime_start,
        "datetime_complete": t.datetime_complete,
        "params": params,
        "intermediate_values": inter,
        "user_attrs": t.user_attrs,
        "system_attrs": t.system_attrs,
    })
}

/// The study's metric names (`study:metric_names`, one string per
/// objective), or `None` when it has none that fit.
fn metric_names(stored: Option<&Json>, objectives: usize) -> Option<Vec<String>> {
    let names = stored?.as_array()?;
    if names.len() != objectives {
        return None;
    }
    names.iter().map(|n| n.as_str().map(String::from)).collect()
}

fn csv(
    trials: &[FrozenTrial],
    objectives: usize,
    metric_names: Option<&[String]>,
    out: &mut dyn Write,
) -> Result<()> {
    let params: BTreeSet<&str> = trials
        .iter()
        .flat_map(|t| t.params.keys().map(String::as_str))
        .collect();
    let attrs: BTreeSet<&str> = trials
        .iter()
        .flat_map(|t| t.user_attrs.keys().map(String::as_str))
        .collect();
    let mut w = csv::Writer::from_writer(out);
    let mut header = vec!["number".to_string()];
    // As Optuna's `trials_dataframe()`: `value` alone is one objective's
    // column without names.
    let prefix = if objectives == 1 { "value" } else { "values" };
    match metric_names {
        Some(names) => header.extend(names.iter().map(|n| format!("{prefix}_{n}"))),
        None if objectives == 1 => header.push("value".into()),
        None => header.extend((0..objectives).map(|i| format!("values_{i}"))),
    }
    header.extend(["datetime_start".into(), "datetime_complete".into()]);
    header.extend(params.iter().map(|p| format!("params_{p}")));
    header.extend(attrs.iter().map(|a| format!("user_attrs_{a}")));
    header.push("state".into());
    w.write_record(&header)?;
    for t in trials {
        let mut row = vec![t.number.to_string()];
        for i in 0..objectives {
            row.push(
                t.values
                    .as_ref()
                    .and_then(|v| v.get(i))
                    .map(|&x| render::float(x))
                    .unwrap_or_default(),
            );
        }
        row.push(t.datetime_start.clone().unwrap_or_default());
        row.push(t.datetime_complete.clone().unwrap_or_default());
        for name in &params {
            row.push(
                t.params
                    .get(*name)
                    .map(|p| render::json_token(&render::param_json(p)))
                    .unwrap_or_default(),
            );
        }
        for key in &attrs {
            row.push(
                t.user_attrs
                    .get(*key)
                    .map(render::json_token)
                    .unwrap_or_default(),
            );
        }
        row.push(t.state.as_str().into());
        w.write_record(&row)?;
    }
    w.flush()?;
    Ok(())
}
