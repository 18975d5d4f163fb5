//! Section 2: each trial's value in order with the best so far, and the
//! intermediate values (learning curves) with pruned trials marked.

use plotters::prelude::*;
use store::TrialState;

use super::chart::{self, BEST, COMPLETE, FAIL, PRUNED, WIDE};
use super::html::{Section, note};
use super::input::ReportInput;

pub fn section(input: &ReportInput) -> Section {
    let valued: Vec<(f64, f64, TrialState)> = input
        .trials
        .iter()
        .filter_map(|t| {
            let v = t.value().filter(|v| v.is_finite())?;
            matches!(t.state, TrialState::Complete | TrialState::Pruned).then_some((
                t.number as f64,
                v,
                t.state,
            ))
        })
        .collect();
    if valued.is_empty() {
        return Section::omitted(
            "history",
            "Optimization history",
            "no trial has a finite objective value yet",
        );
    }
    let mut html = history_chart(input, &valued);
    html.push_str(&intermediate_chart(input));
    Section::shown("history", "Optimization history", html)
}

fn history_chart(input: &ReportInput, valued: &[(f64, f64, TrialState)]) -> String {
    let xs = chart::span(input.trials.iter().map(|t| t.number as f64));
    let ys = chart::span(valued.iter().map(|p| p.1));
    // The best trial as `memtune best` names it after each COMPLETE trial
    // (feasible ones only, an infinite value included), the best of the
    // previous best and the new trial; an infinite best lies on the
    // chart's edge.
    let mut best_so_far: Vec<(f64, f64)> = Vec::new();
    let mut best: Option<&store::FrozenTrial> = None;
    for t in input
        .trials
        .iter()
        .filter(|t| t.state == TrialState::Complete)
    {
        best = store::best_feasible_trial(input.direction, best.into_iter().chain([t]));
        if let Some(v) = best.and_then(|b| b.value()) {
            best_so_far.push((t.number as f64, v.clamp(ys.start, ys.end)));
        }
    }
    chart::figure(
        "history",
        "Objective value per trial (blue: COMPLETE, orange: PRUNED at its last reported value), green: best so far",
        WIDE,
        |root| {
            let mut c = chart::plane(root, xs, ys, 64)?;
            c.configure_mesh()
                .x_desc("trial")
                .y_desc("objective value")
                .y_label_formatter(&|v| chart::short(*v))
                .draw()?;
            c.draw_series(valued.iter().map(|&(x, y, s)| {
                let color = if s == TrialState::Pruned {
                    PRUNED
                } else {
                    COMPLETE
                };
                Circle::new((x, y), 3, color.filled())
            }))?;
            if let Some(&(_, last)) = best_so_far.last() {
                // A step line: the best holds until the next improvement.
                let mut steps = Vec::with_capacity(best_so_far.len() * 2 + 1);
                for (i, &(x, y)) in best_so_far.iter().enumerate() {
                    if i > 0 {
                        steps.push((x, best_so_far[i - 1].1));
                    }
                    steps.push((x, y));
                }
                let end = input.trials.last().map_or(0.0, |t| t.number as f64);
                steps.push((end, last));
                c.draw_series(LineSeries::new(steps, BEST.stroke_width(2)))?;
            }
            Ok(())
        },
    )
}

fn intermediate_chart(input: &ReportInput) -> String {
    let curves: Vec<(&store::FrozenTrial, Vec<(f64, f64)>)> = input
        .trials
        .iter()
        .map(|t| {
            let points = t
                .intermediate_values
                .iter()
                .filter(|(_, v)| v.is_finite())
                .map(|(&s, &v)| (s as f64, v))
                .collect::<Vec<_>>();
            (t, points)
        })
        .filter(|(_, p)| !p.is_empty())
        .collect();
    if curves.is_empty() {
        return note("No trial reported intermediate values.");
    }
    let xs = chart::span(curves.iter().flat_map(|(_, p)| p.iter().map(|q| q.0)));
    let ys = chart::span(curves.iter().flat_map(|(_, p)| p.iter().map(|q| q.1)));
    chart::figure(
        "intermediate",
        "Intermediate values per trial and step (blue: COMPLETE, orange with a cross: PRUNED, red: FAIL, grey: RUNNING or WAITING)",
        WIDE,
        |root| {
            let mut c = chart::plane(root, xs, ys, 64)?;
            c.configure_mesh()
                .x_desc("step")
                .y_desc("intermediate value")
                .y_label_formatter(&|v| chart::short(*v))
                .draw()?;
            for (t, points) in &curves {
                let color = match t.state {
                    TrialState::Complete => COMPLETE,
                    TrialState::Pruned => PRUNED,
                    TrialState::Fail => FAIL,
                    TrialState::Running | TrialState::Waiting => chart::MUTED,
                };
                c.draw_series(LineSeries::new(points.iter().copied(), color.mix(0.6)))?;
                if t.state == TrialState::Pruned
                    && let Some(&last) = points.last()
                {
                    c.draw_series([Cross::new(last, 5, PRUNED.stroke_width(2))])?;
                }
            }
            Ok(())
        },
    )
}
