//! Charts as inline SVG drawn by `plotters`, and what they share: the
//! figure wrapper the page and its tests look for, axis ranges, colours.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::html::escape;

/// The area a chart draws on.
pub type Root<'a> = DrawingArea<SVGBackend<'a>, Shift>;
pub type DrawResult = Result<(), Box<dyn std::error::Error>>;

pub const WIDE: (u32, u32) = (1100, 380);
pub const SMALL: (u32, u32) = (360, 260);

pub const COMPLETE: RGBColor = RGBColor(31, 119, 180);
pub const PRUNED: RGBColor = RGBColor(255, 127, 14);
pub const FAIL: RGBColor = RGBColor(214, 39, 40);
pub const BEST: RGBColor = RGBColor(44, 160, 44);
pub const MUTED: RGBColor = RGBColor(150, 150, 150);

/// `<figure class="chart" data-chart="NAME">` holding the SVG that `draw`
/// makes on a white canvas of `size`; a chart that cannot be drawn becomes
/// a line saying why (the page's tests then find its SVG missing).
pub fn figure(
    name: &str,
    caption: &str,
    size: (u32, u32),
    draw: impl FnOnce(&Root<'_>) -> DrawResult,
) -> String {
    let mut svg = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)
            .map_err(Into::into)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present().map_err(Into::into))
    };
    match drawn {
        Ok(()) => format!(
            "<figure class=\"chart\" data-chart=\"{}\" style=\"width: {}px; max-width: 100%\">{svg}<figcaption class=\"note\">{}</figcaption></figure>",
            escape(name),
            size.0,
            escape(caption)
        ),
        Err(e) => format!(
            "<p class=\"omitted\">Chart {} could not be drawn: {}</p>",
            escape(name),
            escape(&e.to_string())
        ),
    }
}

/// An x-y plane over `xs` and `ys` with room for the axes' labels (`y_area`
/// pixels left of the plot for the y labels).
pub type Plane<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

pub fn plane<'a, 'b>(
    root: &'a Root<'b>,
    xs: Range<f64>,
    ys: Range<f64>,
    y_area: u32,
) -> Result<Plane<'a, 'b>, Box<dyn std::error::Error>> {
    Ok(ChartBuilder::on(root)
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(y_area)
        .build_cartesian_2d(bounded(xs), bounded(ys))?)
}

/// `range` itself when its width is finite and positive, else [`span`] of
/// its ends: the last guard before the axis' tick loop, which an infinite
/// or NaN width never ends, whatever a chart computed its range from.
fn bounded(range: Range<f64>) -> Range<f64> {
    if (range.end - range.start).is_finite() && range.end > range.start {
        range
    } else {
        span([range.start, range.end])
    }
}

/// A range from 0 to a little beyond `end` (at least a millisecond's
/// worth), for an axis of elapsed time; `end` is clamped as [`span`]'s
/// values are.
pub fn from_zero(end: f64) -> Range<f64> {
    let end = if end.is_finite() {
        end.clamp(1e-3, AXIS_LIMIT)
    } else {
        1e-3
    };
    0.0..end * 1.02
}

/// The largest magnitude an axis reaches. The axis' tick arithmetic needs
/// a finite width (an infinite one never ends its tick loop), and a range
/// from `-AXIS_LIMIT` to `AXIS_LIMIT` with its margins is still finite;
/// values beyond it (Optuna stores any finite float) lie off the chart.
const AXIS_LIMIT: f64 = f64::MAX / 4.0;

/// A range that holds every value with a margin, never empty, clamped to
/// a quarter of `f64::MAX` each side.
pub fn span(values: impl IntoIterator<Item = f64>) -> Range<f64> {
    let (lo, hi) = values
        .into_iter()
        .filter(|v| v.is_finite())
        .map(|v| v.clamp(-AXIS_LIMIT, AXIS_LIMIT))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        return 0.0..1.0;
    }
    let pad = if hi > lo {
        (hi - lo) * 0.05
    } else {
        lo.abs().max(1.0) * 0.05
    };
    (lo - pad)..(hi + pad)
}

/// The smallest and largest finite values, for [`fraction`]: an infinite
/// value then lies at an end of the axis instead of flattening the rest.
pub fn finite_range(values: impl IntoIterator<Item = f64>) -> (f64, f64) {
    values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        })
}

/// Where `x` lies from `lo` (0) to `hi` (1), clamped to that; 0.5 when the
/// range is empty or not finite. Computed on halves, so no finite input
/// overflows (`hi - lo` of values near `f64::MAX` does).
pub fn fraction(x: f64, (lo, hi): (f64, f64)) -> f64 {
    if !(hi > lo && lo.is_finite() && hi.is_finite()) {
        return 0.5;
    }
    ((x / 2.0 - lo / 2.0) / (hi / 2.0 - lo / 2.0)).clamp(0.0, 1.0)
}

/// A range for a log axis: positive, with a margin of a few percent.
pub fn log_span(values: impl IntoIterator<Item = f64>) -> Range<f64> {
    let (lo, hi) = values
        .into_iter()
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(|v| v.min(AXIS_LIMIT))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        return 1.0..10.0;
    }
    (lo / 1.2)..(hi * 1.2)
}

/// Labels of a log2 axis: `2^v` at whole `v`, nothing between.
pub fn pow2_label(v: f64) -> String {
    if (v - v.round()).abs() > 1e-9 {
        return String::new();
    }
    short(2f64.powf(v.round()))
}

/// A log2 axis' range over positive values, whole powers at both ends.
pub fn log2_span(values: impl IntoIterator<Item = f64>) -> Range<f64> {
    let logs: Vec<f64> = values
        .into_iter()
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(f64::log2)
        .collect();
    let r = span(logs);
    (r.start.floor() - 0.25)..(r.end.ceil() + 0.25)
}

/// Bytes in GiB, the unit every memory chart uses.
pub fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// A number short enough for an axis label or a table cell.
pub fn short(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if !(1e-3..1e5).contains(&a) {
        format!("{v:.2e}")
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.4}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_never_empty() {
        assert_eq!(span([]), 0.0..1.0);
        assert_eq!(from_zero(10.0), 0.0..10.2);
        for end in [f64::INFINITY, f64::NAN, f64::MAX, -1.0] {
            let r = from_zero(end);
            assert!((r.end - r.start).is_finite() && r.end > 0.0, "{end}: {r:?}");
        }
        for r in [
            0.0..f64::INFINITY,
            f64::NAN..1.0,
            -f64::MAX..f64::MAX,
            1.0..1.0,
        ] {
            let b = bounded(r.clone());
            assert!(
                (b.end - b.start).is_finite() && b.end > b.start,
                "{r:?}: {b:?}"
            );
        }
        let r = span([2.0]);
        assert!(r.start < 2.0 && r.end > 2.0);
        let r = log_span([0.0, -1.0]);
        assert!(r.start > 0.0 && r.end > r.start);
        let r = span([f64::NAN, 1.0, 3.0]);
        assert!(r.start < 1.0 && r.end > 3.0);
        for r in [
            span([-f64::MAX, f64::MAX]),
            span([0.0, 1.7e308]),
            log_span([1e-300, f64::MAX]),
        ] {
            assert!((r.end - r.start).is_finite() && r.end > r.start, "{r:?}");
        }
        assert_eq!(fraction(0.0, (-f64::MAX, f64::MAX)), 0.5);
        assert_eq!(fraction(3.0, (1.0, 5.0)), 0.5);
        assert_eq!(fraction(7.0, (1.0, 1.0)), 0.5);
        assert_eq!(fraction(f64::INFINITY, (1.0, 5.0)), 1.0);
        assert_eq!(
            finite_range([3.0, f64::INFINITY, 1.0, f64::NAN]),
            (1.0, 3.0)
        );
    }

    #[test]
    fn a_figure_holds_a_nonempty_svg() {
        let html = figure("demo", "a line", SMALL, |root| {
            let mut chart = ChartBuilder::on(root)
                .x_label_area_size(20)
                .y_label_area_size(30)
                .build_cartesian_2d(0.0..1.0, 0.0..1.0)?;
            chart.configure_mesh().draw()?;
            chart.draw_series(LineSeries::new([(0.0, 0.0), (1.0, 1.0)], &COMPLETE))?;
            Ok(())
        });
        assert!(html.starts_with("<figure class=\"chart\" data-chart=\"demo\" style=\"width: 360px; max-width: 100%\"><svg"), "{html}");
        assert!(html.contains("<polyline"), "{html}");
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short(3e-5), "3.00e-5");
        assert_eq!(short(32.0), "32");
        assert_eq!(short(0.12500), "0.125");
        assert_eq!(pow2_label(3.0), "8");
        assert_eq!(pow2_label(2.5), "");
    }
}
