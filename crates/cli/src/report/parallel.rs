//! Parallel coordinates: one vertical axis per parameter and one for the
//! objective, each scaled to its own range; every COMPLETE trial is a line
//! across them, darker the better its value. A trial without a
//! (conditional) parameter breaks its line there.

use plotters::prelude::*;
use store::FrozenTrial;

use super::axis::ParamAxis;
use super::chart::{self, DrawResult, Plane, Root, WIDE, short};
use super::html::note;
use super::input::ReportInput;

/// From pale (worst) to dark blue (best).
fn shade(quality: f64) -> RGBColor {
    let q = quality.clamp(0.0, 1.0);
    let mix = |a: f64, b: f64| (a + (b - a) * q).round() as u8;
    RGBColor(mix(198.0, 8.0), mix(219.0, 48.0), mix(239.0, 107.0))
}

pub fn chart(input: &ReportInput, completed: &[(&FrozenTrial, f64)]) -> String {
    if completed.len() < 2 {
        return note("Parallel coordinates need at least 2 COMPLETE trials.");
    }
    let axes: Vec<(&String, ParamAxis<'_>)> = input
        .params
        .iter()
        .map(|(name, dist)| (name, ParamAxis { dist }))
        .collect();
    let (vmin, vmax) = chart::finite_range(completed.iter().map(|(_, v)| *v));
    let n_axes = axes.len() + 1;
    // Worst first, so the best lines are drawn on top.
    let mut order: Vec<&(&FrozenTrial, f64)> = completed.iter().collect();
    order.sort_by(|a, b| {
        if input.better(a.1, b.1) {
            std::cmp::Ordering::Greater
        } else if input.better(b.1, a.1) {
            std::cmp::Ordering::Less
        } else {
            std::cmp::Ordering::Equal
        }
    });
    chart::figure(
        "parallel",
        "Parallel coordinates: each COMPLETE trial across every parameter's range and the objective (darker is better)",
        (WIDE.0, 420),
        |root| {
            let mut c = frame(root, n_axes)?;
            for (rank, (t, v)) in order.iter().enumerate() {
                let quality = if order.len() > 1 {
                    rank as f64 / (order.len() - 1) as f64
                } else {
                    1.0
                };
                let color = shade(quality);
                let mut segment: Vec<(f64, f64)> = Vec::new();
                for (i, (name, axis)) in axes.iter().enumerate() {
                    match t.params.get(*name) {
                        Some(p) => segment.push((
                            i as f64,
                            chart::fraction(axis.position(p.internal), axis.bounds()),
                        )),
                        None => {
                            if segment.len() > 1 {
                                c.draw_series(LineSeries::new(segment.clone(), color))?;
                            }
                            segment.clear();
                        }
                    }
                }
                segment.push(((n_axes - 1) as f64, chart::fraction(*v, (vmin, vmax))));
                if segment.len() > 1 {
                    c.draw_series(LineSeries::new(segment, color))?;
                }
            }
            let labels = axes
                .iter()
                .map(|(name, axis)| {
                    let (lo, hi) = axis.bounds();
                    (name.to_string(), axis.label(lo), axis.label(hi))
                })
                .chain([("objective".to_string(), short(vmin), short(vmax))]);
            draw_axes(&mut c, labels)
        },
    )
}

/// The plane of parallel coordinates with `n_axes` vertical axes at x =
/// 0, 1, ...; each axis' values are drawn scaled to 0..1.
pub fn frame<'a, 'b>(
    root: &'a Root<'b>,
    n_axes: usize,
) -> Result<Plane<'a, 'b>, Box<dyn std::error::Error>> {
    Ok(ChartBuilder::on(root)
        .margin(16)
        .margin_left(40)
        .margin_right(60)
        .build_cartesian_2d(-0.05..n_axes.saturating_sub(1) as f64 + 0.05, -0.12..1.08)?)
}

/// Draws each axis of [`frame`] with its (name, low end, high end) labels.
pub fn draw_axes(
    c: &mut Plane<'_, '_>,
    labels: impl Iterator<Item = (String, String, String)>,
) -> DrawResult {
    let font = ("sans-serif", 12).into_font();
    for (i, (name, lo, hi)) in labels.enumerate() {
        let x = i as f64;
        c.draw_series(LineSeries::new([(x, 0.0), (x, 1.0)], BLACK.stroke_width(1)))?;
        c.draw_series([
            Text::new(name, (x, -0.06), font.clone()),
            Text::new(lo, (x, -0.0), font.clone()),
            Text::new(hi, (x, 1.06), font.clone()),
        ])?;
    }
    Ok(())
}
