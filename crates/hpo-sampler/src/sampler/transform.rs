//! A numeric distribution's transformed space, where samplers draw: the
//! range widened by half a step on each side (so every grid value owns an
//! equal cell), then log-transformed for log distributions; and the way
//! back onto the distribution's grid.

use crate::distribution::Distribution;

/// A numeric distribution's `(low, high, log, step)` as floats (an int's
/// step as a float step), or a categorical's number of choices.
pub(crate) fn numeric_bounds(d: &Distribution) -> Result<(f64, f64, bool, Option<f64>), usize> {
    match *d {
        Distribution::Categorical { ref choices } => Err(choices.len()),
        Distribution::Float {
            low,
            high,
            log,
            step,
        } => Ok((low, high, log, step)),
        Distribution::Int {
            low,
            high,
            log,
            step,
        } => Ok((low as f64, high as f64, log, Some(step as f64))),
    }
}

/// `[low, high]` in transformed space.
pub(crate) fn transformed_range(low: f64, high: f64, log: bool, step: Option<f64>) -> (f64, f64) {
    let (a, b) = match step {
        Some(s) => (low - s / 2.0, high + s / 2.0),
        None => (low, high),
    };
    if log { (a.ln(), b.ln()) } else { (a, b) }
}

/// A transformed-space value back in the distribution: exponentiated
/// (log), rounded onto the step grid from `low` (ties to even), clamped.
pub(crate) fn from_transformed(x: f64, low: f64, high: f64, log: bool, step: Option<f64>) -> f64 {
    let mut x = if log { x.exp() } else { x };
    if let Some(s) = step {
        x = low + ((x - low) / s).round_ties_even() * s;
    }
    x.clamp(low, high)
}
