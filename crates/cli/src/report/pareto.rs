//! A study of several objectives: its Pareto front (Optuna's
//! `best_trials`) drawn over every COMPLETE trial, as a scatter of the two
//! objectives or as parallel coordinates of three or more, and the
//! hypervolume of the front after each trial.
//!
//! The hypervolume's reference point is Optuna's `_get_reference_point`
//! over the losses (each objective signed so smaller is better) of every
//! feasible COMPLETE trial: the worst of each objective pushed 10% further
//! from 0. Every trial of any front then adds volume, and the history
//! needs no point from the user; it is comparable within one report, not
//! across studies (another study has another worst trial).

use std::collections::BTreeSet;

use plotters::prelude::*;
use store::{FrozenTrial, TrialState};

use super::chart::{self, BEST, MUTED, WIDE, short};
use super::html::{Section, note};
use super::input::ReportInput;
use super::parallel;
use hpo_sampler::multi::{hypervolume, loss_values, pareto_front_indices, reference_point};

const ID: &str = "pareto";
const TITLE: &str = "Pareto front";

/// `None` for a study of one objective.
pub fn section(input: &ReportInput) -> Option<Section> {
    if input.n_objectives < 2 {
        return None;
    }
    // The front counts trials with infinite values too (as Optuna's
    // best_trials), so the total does as well; only the charts leave them out.
    let valued: Vec<&FrozenTrial> = input
        .trials
        .iter()
        .filter(|t| t.state == TrialState::Complete)
        .filter(|t| {
            t.values
                .as_ref()
                .is_some_and(|v| v.len() == input.n_objectives)
        })
        .collect();
    let complete: Vec<&FrozenTrial> = valued
        .iter()
        .copied()
        .filter(|t| {
            t.values
                .as_ref()
                .is_some_and(|v| v.iter().all(|x| x.is_finite()))
        })
        .collect();
    if complete.is_empty() {
        return Some(Section::omitted(
            ID,
            TITLE,
            "no COMPLETE trial has a finite value for every objective yet",
        ));
    }
    let front: BTreeSet<u64> = input.front().iter().map(|t| t.number).collect();
    let mut html = note(&format!(
        "{} of {} COMPLETE trials are on the front: feasible (no constraint above 0) and \
         dominated by no other trial, as Optuna's best_trials.{}",
        front.len(),
        valued.len(),
        match valued.len() - complete.len() {
            0 => String::new(),
            1 => " One trial with an infinite value is not drawn.".into(),
            n => format!(" {n} trials with an infinite value are not drawn."),
        }
    ));
    html.push_str(&if input.n_objectives == 2 {
        scatter(input, &complete, &front)
    } else {
        objectives_parallel(input, &complete, &front)
    });
    html.push_str(&hypervolume_history(input, &complete));
    Some(Section::shown(ID, TITLE, html))
}

/// How an objective is drawn: a factor for its values and its axis label
/// (bytes in GiB, parameters in millions).
fn axis(name: &str) -> (f64, String) {
    match name {
        "peak_memory" => (1.0 / (1u64 << 30) as f64, "peak_memory (GiB)".into()),
        "inference_memory" => (1.0 / (1u64 << 30) as f64, "inference_memory (GiB)".into()),
        "params" => (1e-6, "params (millions)".into()),
        "train_seconds" => (1.0, "train_seconds (s)".into()),
        other => (1.0, other.to_string()),
    }
}

fn scatter(input: &ReportInput, complete: &[&FrozenTrial], front: &BTreeSet<u64>) -> String {
    let (fx, x_name) = axis(&input.objective_names[0]);
    let (fy, y_name) = axis(&input.objective_names[1]);
    let point = |t: &FrozenTrial| {
        let v = t.values.as_deref().unwrap_or_default();
        (v[0] * fx, v[1] * fy)
    };
    let xs = chart::span(complete.iter().map(|t| point(t).0));
    let ys = chart::span(complete.iter().map(|t| point(t).1));
    chart::figure(
        "pareto",
        "Every COMPLETE trial by its two objectives: green, the Pareto front; grey, dominated or infeasible",
        WIDE,
        |root| {
            let mut c = chart::plane(root, xs, ys, 64)?;
            c.configure_mesh()
                .x_desc(x_name)
                .y_desc(y_name)
                .x_label_formatter(&|v| short(*v))
                .y_label_formatter(&|v| short(*v))
                .draw()?;
            c.draw_series(
                complete
                    .iter()
                    .filter(|t| !front.contains(&t.number))
                    .map(|t| Circle::new(point(t), 3, MUTED.mix(0.45).filled())),
            )?;
            c.draw_series(
                complete
                    .iter()
                    .filter(|t| front.contains(&t.number))
                    .map(|t| Circle::new(point(t), 5, BEST.filled())),
            )?;
            Ok(())
        },
    )
}

/// Parallel coordinates of the objectives: one axis each, scaled to its
/// own range; the front's trials dark, the others faint.
fn objectives_parallel(
    input: &ReportInput,
    complete: &[&FrozenTrial],
    front: &BTreeSet<u64>,
) -> String {
    let n = input.n_objectives;
    let ranges: Vec<(f64, f64)> = (0..n)
        .map(|k| {
            chart::finite_range(
                complete
                    .iter()
                    .map(|t| t.values.as_deref().unwrap_or_default()[k]),
            )
        })
        .collect();
    let line = |t: &FrozenTrial| -> Vec<(f64, f64)> {
        let v = t.values.as_deref().unwrap_or_default();
        (0..n)
            .map(|k| (k as f64, chart::fraction(v[k], ranges[k])))
            .collect()
    };
    chart::figure(
        "pareto-parallel",
        "Parallel coordinates of the objectives: green, the Pareto front; grey, dominated or infeasible",
        (WIDE.0, 420),
        |root| {
            let mut c = parallel::frame(root, n)?;
            for t in complete.iter().filter(|t| !front.contains(&t.number)) {
                c.draw_series(LineSeries::new(line(t), MUTED.mix(0.4)))?;
            }
            for t in complete.iter().filter(|t| front.contains(&t.number)) {
                c.draw_series(LineSeries::new(line(t), BEST.stroke_width(2)))?;
            }
            let labels = input
                .objective_names
                .iter()
                .zip(&ranges)
                .map(|(name, &(lo, hi))| (name.clone(), short(lo), short(hi)));
            parallel::draw_axes(&mut c, labels)
        },
    )
}

/// The hypervolume of the front of the feasible COMPLETE trials up to
/// each one, by trial number (see the module doc for the reference).
pub fn history(input: &ReportInput, complete: &[&FrozenTrial]) -> Vec<(u64, f64)> {
    let feasible: Vec<(u64, Vec<f64>)> = complete
        .iter()
        .filter(|t| t.is_feasible())
        .filter_map(|t| loss_values(t, &input.directions).map(|l| (t.number, l)))
        .collect();
    let all: Vec<Vec<f64>> = feasible.iter().map(|(_, l)| l.clone()).collect();
    if all.is_empty() {
        return Vec::new();
    }
    let reference = reference_point(&all);
    let mut front: Vec<Vec<f64>> = Vec::new();
    let mut volume = 0.0;
    let mut out = Vec::with_capacity(feasible.len());
    for (number, loss) in feasible {
        front.push(loss);
        let kept = pareto_front_indices(&front);
        // A dominated trial leaves the front, and its volume, as they were.
        let joined = kept.contains(&(front.len() - 1));
        front = kept.into_iter().map(|i| front[i].clone()).collect();
        if joined {
            volume = hypervolume(&front, &reference);
        }
        out.push((number, volume));
    }
    out
}

fn hypervolume_history(input: &ReportInput, complete: &[&FrozenTrial]) -> String {
    let points: Vec<(f64, f64)> = history(input, complete)
        .into_iter()
        .map(|(n, v)| (n as f64, v))
        .collect();
    if points.is_empty() {
        return note("No feasible COMPLETE trial: no hypervolume to draw.");
    }
    // Losses near f64's limit make the box's volume overflow: a chart of
    // infinities would be drawn as a flat line.
    if points.iter().any(|p| !p.1.is_finite()) {
        return note(
            "The hypervolume overflows a 64-bit float (objective values near 1e308, or spans \
             whose product is): no chart to draw.",
        );
    }
    let xs = chart::span(input.trials.iter().map(|t| t.number as f64));
    let ys = chart::span(points.iter().map(|p| p.1).chain([0.0]));
    chart::figure(
        "hypervolume",
        "Hypervolume of the Pareto front after each COMPLETE trial (reference: each objective's worst loss pushed 10% further, as Optuna's)",
        WIDE,
        |root| {
            let mut c = chart::plane(root, xs, ys, 64)?;
            c.configure_mesh()
                .x_desc("trial")
                .y_desc("hypervolume")
                .y_label_formatter(&|v| short(*v))
                .draw()?;
            c.draw_series(LineSeries::new(
                points.iter().copied(),
                BEST.stroke_width(2),
            ))?;
            c.draw_series(points.iter().map(|&p| Circle::new(p, 2, BEST.filled())))?;
            Ok(())
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use store::StudyDirection;

    fn input(directions: Vec<StudyDirection>, trials: Vec<(Vec<f64>, Option<f64>)>) -> ReportInput {
        let trials = trials
            .into_iter()
            .enumerate()
            .map(|(i, (values, violation))| {
                let mut t = FrozenTrial::new(i as u64);
                t.state = TrialState::Complete;
                t.values = Some(values);
                if let Some(v) = violation {
                    t.system_attrs.insert("constraints".into(), json!([v]));
                }
                t
            })
            .collect();
        let names = json!(["accuracy", "peak_memory", "params"][..directions.len()]);
        ReportInput::new(
            store::Study {
                study_id: 1,
                name: "mo".into(),
                directions,
            },
            "test".into(),
            trials,
            Some(&names),
        )
    }

    #[test]
    fn two_objectives_draw_a_scatter_with_the_front_and_a_growing_hypervolume() {
        use StudyDirection::{Maximize, Minimize};
        let gib = (1u64 << 30) as f64;
        let i = input(
            vec![Maximize, Minimize],
            vec![
                (vec![0.80, 4.0 * gib], None),
                (vec![0.90, 6.0 * gib], Some(-1.0)),
                (vec![0.70, 5.0 * gib], None),
                // Best on both, but infeasible: not on the front.
                (vec![0.95, 1.0 * gib], Some(0.5)),
                (vec![0.85, 3.0 * gib], None),
            ],
        );
        let numbers: Vec<u64> = i.front().iter().map(|t| t.number).collect();
        assert_eq!(numbers, vec![1, 4]);
        let html = section(&i).expect("two objectives have a section");
        let super::super::html::Body::Shown(body) = &html.body else {
            panic!("omitted")
        };
        assert!(body.contains("data-chart=\"pareto\""), "{body}");
        assert!(body.contains("data-chart=\"hypervolume\""));
        assert!(body.contains("peak_memory (GiB)"));
        assert!(body.contains("2 of 5 COMPLETE trials are on the front"));
        let complete: Vec<&FrozenTrial> = i.trials.iter().collect();
        let h = history(&i, &complete);
        // The infeasible trial adds nothing; a dominated one adds nothing.
        assert_eq!(h.iter().map(|p| p.0).collect::<Vec<_>>(), vec![0, 1, 2, 4]);
        assert!(h[0].1 > 0.0 && h[1].1 > h[0].1, "{h:?}");
        assert_eq!(h[2].1, h[1].1, "trial 2 is dominated by trial 0");
        assert!(h[3].1 > h[2].1);
    }

    /// Losses near f64's limit overflow the volume: the section says so
    /// instead of drawing infinities as a flat line.
    #[test]
    fn an_overflowing_hypervolume_is_a_note_not_a_flat_line() {
        use StudyDirection::{Maximize, Minimize};
        let i = input(
            vec![Minimize, Maximize],
            vec![
                (vec![1.0, 1.0], None),
                (vec![0.5, 0.2], None),
                (vec![1e200, -1e200], None),
            ],
        );
        let Some(Section {
            body: super::super::html::Body::Shown(body),
            ..
        }) = section(&i)
        else {
            panic!("no section")
        };
        assert!(!body.contains("data-chart=\"hypervolume\""), "{body}");
        assert!(body.contains("The hypervolume overflows"), "{body}");
    }

    #[test]
    fn three_objectives_draw_parallel_coordinates_and_one_has_no_section() {
        use StudyDirection::{Maximize, Minimize};
        let i = input(
            vec![Maximize, Minimize, Minimize],
            vec![(vec![0.8, 2.0, 1e8], None), (vec![0.9, 3.0, 2e8], None)],
        );
        let Some(Section {
            body: super::super::html::Body::Shown(body),
            ..
        }) = section(&i)
        else {
            panic!("no section")
        };
        assert!(body.contains("data-chart=\"pareto-parallel\""), "{body}");
        assert!(!body.contains("data-chart=\"pareto\""));
        let one = input(vec![Maximize], vec![(vec![0.8], None)]);
        assert!(section(&one).is_none());
    }
}
