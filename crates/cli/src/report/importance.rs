//! Section 3: hyperparameter importance (fANOVA), a slice plot per
//! parameter and parallel coordinates.

use hpo_sampler::importance::{self, Importance};
use plotters::prelude::*;
use store::FrozenTrial;

use super::axis::ParamAxis;
use super::chart::{self, COMPLETE, SMALL, WIDE};
use super::html::{Section, note};
use super::input::ReportInput;
use super::parallel;

pub fn section(input: &ReportInput) -> Section {
    let completed: Vec<(&FrozenTrial, f64)> = input.completed().collect();
    if input.params.is_empty() {
        return Section::omitted("importance", "Parameters", "the study has no parameters");
    }
    if completed.is_empty() {
        return Section::omitted(
            "importance",
            "Parameters",
            "no COMPLETE trial with a finite value yet",
        );
    }
    let mut html = String::from("<h3>Importance (fANOVA)</h3>");
    match importance::fanova_importances(&completed, &input.params) {
        Ok(imp) => html.push_str(&importance_chart(&imp)),
        Err(why) => html.push_str(&note(&format!("No importance: {why}."))),
    }
    html.push_str("<h3>Slices</h3><div class=\"grid\">");
    for (name, dist) in &input.params {
        html.push_str(&slice(name, &ParamAxis { dist }, &completed));
    }
    html.push_str("</div><h3>Parallel coordinates</h3>");
    html.push_str(&parallel::chart(input, &completed));
    Section::shown("importance", "Parameters", html)
}

fn importance_chart(imp: &[Importance]) -> String {
    let n = imp.len();
    let height = (70 + 28 * n as u32).clamp(140, 800);
    let caption = format!(
        "Share of the objective's variance per parameter: fANOVA over a random forest of {} trees (depth <= {}), as Optuna's FanovaImportanceEvaluator; a conditional parameter is scored on the trials that have it",
        importance::N_TREES,
        importance::MAX_DEPTH
    );
    chart::figure("importance", &caption, (WIDE.0, height), |root| {
        let mut c = chart::plane(root, 0.0..1.0, 0.0..n as f64, 12)?;
        c.configure_mesh()
            .x_desc("importance")
            .disable_y_mesh()
            .y_labels(0)
            .draw()?;
        for (i, e) in imp.iter().enumerate() {
            // Most important on top.
            let row = (n - 1 - i) as f64;
            c.draw_series([Rectangle::new(
                [(0.0, row + 0.2), (e.importance.clamp(0.0, 1.0), row + 0.8)],
                COMPLETE.mix(0.7).filled(),
            )])?;
            let label = if e.conditional {
                format!(
                    "{} {:.3} (conditional, {} trials)",
                    e.name, e.importance, e.trials
                )
            } else {
                format!("{} {:.3}", e.name, e.importance)
            };
            c.draw_series([Text::new(
                label,
                (0.01, row + 0.62),
                ("sans-serif", 13).into_font(),
            )])?;
        }
        Ok(())
    })
}

fn slice(name: &str, axis: &ParamAxis<'_>, completed: &[(&FrozenTrial, f64)]) -> String {
    let points: Vec<(f64, f64)> = completed
        .iter()
        .filter_map(|(t, v)| Some((axis.position(t.params.get(name)?.internal), *v)))
        .collect();
    if points.is_empty() {
        return note(&format!("{name}: no COMPLETE trial has it."));
    }
    let xs = axis.range(points.iter().map(|p| p.0));
    let ys = chart::span(points.iter().map(|p| p.1));
    chart::figure(
        &format!("slice-{name}"),
        &format!("{name} ({}) against the objective", axis.describe()),
        SMALL,
        |root| {
            let mut c = chart::plane(root, xs, ys, 52)?;
            c.configure_mesh()
                .x_labels(axis.n_labels())
                .x_label_formatter(&|x| axis.label(*x))
                .y_label_formatter(&|v| chart::short(*v))
                .x_desc(name)
                .draw()?;
            c.draw_series(
                points
                    .iter()
                    .map(|&p| Circle::new(p, 3, COMPLETE.mix(0.7).filled())),
            )?;
            Ok(())
        },
    )
}
