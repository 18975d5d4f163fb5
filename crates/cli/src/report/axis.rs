//! How a parameter is placed on a chart axis: float and int values as
//! they are (log parameters as log10, labelled with the value), categorical
//! choices by index, labelled with the choice.

use store::Distribution;

use super::chart::short;
use crate::render;

pub struct ParamAxis<'a> {
    pub dist: &'a Distribution,
}

impl ParamAxis<'_> {
    fn log(&self) -> bool {
        matches!(
            self.dist,
            Distribution::Float { log: true, .. } | Distribution::Int { log: true, .. }
        )
    }

    pub fn categorical(&self) -> bool {
        matches!(self.dist, Distribution::Categorical { .. })
    }

    /// The range a chart shows: the bounds and every point, a choice's
    /// dot never on the chart's edge.
    pub fn range(&self, points: impl IntoIterator<Item = f64>) -> std::ops::Range<f64> {
        let (lo, hi) = self.bounds();
        if self.categorical() {
            (lo - 0.5)..(hi + 0.5)
        } else {
            super::chart::span(points.into_iter().chain([lo, hi]))
        }
    }

    /// Where a stored internal value goes on the axis.
    pub fn position(&self, internal: f64) -> f64 {
        if self.log() {
            internal.max(f64::MIN_POSITIVE).log10()
        } else {
            internal
        }
    }

    /// The axis' whole range (the distribution's bounds).
    pub fn bounds(&self) -> (f64, f64) {
        match self.dist {
            Distribution::Float { low, high, .. } => (self.position(*low), self.position(*high)),
            Distribution::Int { low, high, .. } => {
                (self.position(*low as f64), self.position(*high as f64))
            }
            Distribution::Categorical { choices } => (0.0, choices.len().saturating_sub(1) as f64),
        }
    }

    /// The label of an axis position; between two choices, none.
    pub fn label(&self, position: f64) -> String {
        match self.dist {
            Distribution::Categorical { choices } => {
                let i = position.round();
                if (position - i).abs() > 1e-6 || i < 0.0 || i as usize >= choices.len() {
                    return String::new();
                }
                render::json_token(&store::value_to_json(&choices[i as usize]))
            }
            _ if self.log() => short(10f64.powf(position)),
            _ => short(position),
        }
    }

    /// How many labels the axis wants.
    pub fn n_labels(&self) -> usize {
        match self.dist {
            Distribution::Categorical { choices } => choices.len().max(2),
            _ => 6,
        }
    }

    pub fn describe(&self) -> &'static str {
        match self.dist {
            Distribution::Categorical { .. } => "categorical",
            _ if self.log() => "log scale",
            Distribution::Int { .. } => "int",
            Distribution::Float { .. } => "float",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_and_categorical_axes_label_the_values() {
        let lr = Distribution::Float {
            low: 1e-5,
            high: 1e-3,
            log: true,
            step: None,
        };
        let a = ParamAxis { dist: &lr };
        assert_eq!(a.bounds(), (-5.0, -3.0));
        assert_eq!(a.label(a.position(1e-4)), "1.00e-4");
        let c = Distribution::Categorical {
            choices: vec![8.into(), "x".into()],
        };
        let a = ParamAxis { dist: &c };
        assert_eq!(a.label(0.0), "8");
        assert_eq!(a.label(1.0), "x");
        assert_eq!(a.label(0.5), "");
    }
}
