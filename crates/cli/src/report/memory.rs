//! Section 4, what only memtune records: predicted against measured peak
//! memory, the micro-batch and accumulation each trial was fitted with, a
//! map of configurations by how they fitted, the device timeline, and the
//! OOM retries and memory errors with their configurations.

use plotters::prelude::*;

use super::chart::{self, BEST, COMPLETE, FAIL, PRUNED, gib};
use super::html::{Section, note, table};
use super::input::{Fit, MemoryAttrs, ReportInput};
use super::timeline::{self, Timeline};
use gpu_mem::human_bytes;
use store::FrozenTrial;

pub fn section(input: &ReportInput) -> Section {
    let trials = input.memory();
    if trials.is_empty() {
        let ruled_out = input
            .trials
            .iter()
            .filter(|t| {
                t.user_attrs.get("error_kind").and_then(|k| k.as_str()) == Some("constraint")
            })
            .count();
        let why = if ruled_out > 0 && ruled_out == input.trials.len() {
            format!(
                "no trial was trained: {ruled_out} were ruled out by a [[constraint]] before they ran (see Failures)"
            )
        } else {
            "no trial carries memtune's memory attributes (the study was made by `memtune ask`/`tell` or by Optuna)".to_string()
        };
        return Section::omitted("memory", "Memory", why);
    }
    let mut html = String::from("<div class=\"grid\">");
    html.push_str(&predicted_vs_measured(&trials));
    html.push_str(&micro_batches(&trials));
    html.push_str(&configuration_map(&trials));
    html.push_str("</div>");
    match Timeline::of(input) {
        Some(t) => html.push_str(&timeline::charts(&t)),
        None => html.push_str(&note(
            "No trial recorded its worker and start time: no timeline.",
        )),
    }
    html.push_str(&errors(input, &trials));
    Section::shown("memory", "Memory", html)
}

fn predicted_vs_measured(trials: &[(&FrozenTrial, MemoryAttrs)]) -> String {
    let points: Vec<(f64, f64)> = trials
        .iter()
        .filter_map(|(_, m)| Some((gib(m.predicted_peak?), gib(m.measured_peak?))))
        .collect();
    if points.is_empty() {
        return note("No finished trial has both a predicted and a measured peak.");
    }
    let r = chart::span(points.iter().flat_map(|p| [p.0, p.1]).chain([0.0]));
    chart::figure(
        "predicted-measured",
        "Peak memory per trial: predicted by the plan (x) and measured (y), GiB; the line is equality",
        (540, 380),
        |root| {
            let mut c = chart::plane(root, r.clone(), r.clone(), 56)?;
            c.configure_mesh()
                .x_desc("predicted peak (GiB)")
                .y_desc("measured peak (GiB)")
                .draw()?;
            c.draw_series(LineSeries::new(
                [(r.start, r.start), (r.end, r.end)],
                chart::MUTED,
            ))?;
            c.draw_series(points.iter().map(|&p| Circle::new(p, 3, COMPLETE.filled())))?;
            Ok(())
        },
    )
}

fn micro_batches(trials: &[(&FrozenTrial, MemoryAttrs)]) -> String {
    let rows: Vec<(f64, f64, f64)> = trials
        .iter()
        .filter_map(|(t, m)| {
            Some((
                t.number as f64,
                m.micro_batch? as f64,
                m.accumulation.unwrap_or(1) as f64,
            ))
        })
        .collect();
    if rows.is_empty() {
        return note("No trial was admitted with a micro-batch.");
    }
    let xs = chart::span(rows.iter().map(|r| r.0));
    let ys = chart::log2_span(rows.iter().flat_map(|r| [r.1, r.2]).chain([1.0]));
    chart::figure(
        "micro-batch",
        "Micro-batch (blue dots) and gradient accumulation steps (orange triangles) per trial",
        (540, 380),
        |root| {
            let mut c = chart::plane(root, xs, ys, 48)?;
            c.configure_mesh()
                .y_label_formatter(&|v| chart::pow2_label(*v))
                .x_desc("trial")
                .y_desc("rows / steps")
                .draw()?;
            c.draw_series(
                rows.iter()
                    .map(|&(x, mb, _)| Circle::new((x, mb.log2()), 3, COMPLETE.filled())),
            )?;
            c.draw_series(
                rows.iter()
                    .map(|&(x, _, acc)| TriangleMarker::new((x, acc.log2()), 4, PRUNED.filled())),
            )?;
            Ok(())
        },
    )
}

fn fit_color(f: Fit) -> RGBColor {
    match f {
        Fit::Fits => BEST,
        Fit::SmallerMicroBatch => PRUNED,
        Fit::Recomputed => COMPLETE,
        Fit::Infeasible => FAIL,
    }
}

/// Effective batch against sequence length, one dot per trial, coloured
/// by how it fitted; dots of one configuration are spread a little so
/// repeats stay visible.
fn configuration_map(trials: &[(&FrozenTrial, MemoryAttrs)]) -> String {
    let points: Vec<(f64, f64, Fit)> = trials
        .iter()
        .filter_map(|(t, m)| {
            let jitter = 1.0 + 0.04 * ((t.number.wrapping_mul(7919) % 11) as f64 / 10.0 - 0.5);
            Some((
                m.setting("batch_size")? * jitter,
                m.setting("max_length")? * jitter,
                m.fit(),
            ))
        })
        .collect();
    if points.is_empty() {
        return note("No trial recorded its batch size and sequence length: no configuration map.");
    }
    let xs = chart::log2_span(points.iter().map(|p| p.0));
    let ys = chart::log2_span(points.iter().map(|p| p.1));
    let legend = [
        Fit::Fits,
        Fit::SmallerMicroBatch,
        Fit::Recomputed,
        Fit::Infeasible,
    ]
    .map(|f| format!("{}: {}", color_name(f), f.label()))
    .join(", ");
    chart::figure(
        "config-map",
        &format!("Configurations by effective batch and sequence length ({legend})"),
        (540, 380),
        |root| {
            let mut c = chart::plane(root, xs, ys, 48)?;
            c.configure_mesh()
                .x_label_formatter(&|v| chart::pow2_label(*v))
                .y_label_formatter(&|v| chart::pow2_label(*v))
                .x_desc("effective batch size")
                .y_desc("max length (tokens)")
                .draw()?;
            c.draw_series(points.iter().map(|&(x, y, f)| {
                Circle::new((x.log2(), y.log2()), 4, fit_color(f).mix(0.8).filled())
            }))?;
            Ok(())
        },
    )
}

fn color_name(f: Fit) -> &'static str {
    match f {
        Fit::Fits => "green",
        Fit::SmallerMicroBatch => "orange",
        Fit::Recomputed => "blue",
        Fit::Infeasible => "red",
    }
}

/// Every OOM retry and memory or device error, with the configuration.
fn errors(input: &ReportInput, trials: &[(&FrozenTrial, MemoryAttrs)]) -> String {
    let mut rows = Vec::new();
    for (t, m) in trials {
        let config = m.config.as_ref().map(|c| c.to_string()).unwrap_or_default();
        for (from, to, msg) in &m.oom_retries {
            rows.push(vec![
                t.number.to_string(),
                "oom_retry".into(),
                format!("micro-batch {from} → {to}"),
                msg.clone(),
                config.clone(),
            ]);
        }
        if m.infeasible {
            rows.push(vec![
                t.number.to_string(),
                "infeasible".into(),
                match (m.needed_bytes, m.available_bytes) {
                    (Some(n), Some(a)) => format!("needs {} of {}", human_bytes(n), human_bytes(a)),
                    _ => String::new(),
                },
                attr_text(t, "error_msg"),
                config.clone(),
            ]);
        }
    }
    for t in &input.trials {
        if t.user_attrs.get("cuda_error").and_then(|v| v.as_bool()) == Some(true) {
            rows.push(vec![
                t.number.to_string(),
                "cuda_error".into(),
                String::new(),
                attr_text(t, "cuda_error_msg"),
                t.user_attrs
                    .get("config")
                    .map(|c| c.to_string())
                    .unwrap_or_default(),
            ]);
        }
    }
    let mut html = String::from("<h3>OOM retries and memory errors</h3>");
    if rows.is_empty() {
        html.push_str(&note(
            "None: every admitted trial ran with the micro-batch it was leased.",
        ));
    } else {
        html.push_str(&table(
            &["trial", "kind", "memory", "message", "configuration"],
            &rows,
        ));
    }
    html
}

fn attr_text(t: &FrozenTrial, key: &str) -> String {
    t.user_attrs
        .get(key)
        .map(crate::render::json_token)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::html::Body;
    use serde_json::json;
    use store::TrialState;

    /// A study whose every trial a constraint ruled out says so, not that
    /// it was made without the runner.
    #[test]
    fn trials_ruled_out_by_a_constraint_are_named_as_such() {
        let trials = (0..3)
            .map(|n| {
                let mut t = FrozenTrial::new(n);
                t.state = TrialState::Pruned;
                t.user_attrs
                    .insert("error_kind".into(), json!("constraint"));
                t
            })
            .collect();
        let study = store::Study {
            study_id: 1,
            name: "s".into(),
            directions: vec![store::StudyDirection::Maximize],
        };
        let input = ReportInput::new(study, "test".into(), trials, None);
        match section(&input).body {
            Body::Omitted(why) => assert!(
                why.contains("3 were ruled out by a [[constraint]]"),
                "{why}"
            ),
            Body::Shown(_) => panic!("shown without memory attributes"),
        }
    }

    /// Any trial number a storage holds places a dot: the spread of
    /// repeats, a function of the number, does not overflow.
    #[test]
    fn the_largest_trial_numbers_place_their_dots() {
        let trials: Vec<FrozenTrial> = [0, 1, u64::MAX / 7, i64::MAX as u64]
            .into_iter()
            .map(|n| {
                let mut t = FrozenTrial::new(n);
                t.user_attrs
                    .insert("predicted_peak_bytes".into(), json!(1 << 30));
                t.user_attrs.insert(
                    "config".into(),
                    json!({"batch_size": 16, "max_length": 128}),
                );
                t
            })
            .collect();
        let with_attrs: Vec<_> = trials
            .iter()
            .map(|t| (t, MemoryAttrs::of(t).expect("memory attributes")))
            .collect();
        let svg = configuration_map(&with_attrs);
        assert_eq!(svg.matches("<circle").count(), 4, "{svg}");
    }
}
