//! Parameter distributions with Optuna's semantics: float and int ranges
//! (optionally `log` or with a `step`) and categoricals, plus conversions
//! between a parameter's external value and its internal `f64`
//! representation (the number itself for ranges, the choice index for
//! categoricals), which is what samplers and histories work in.

use crate::error::{Error, Result};
use std::fmt;

/// An external parameter value, also the type of a categorical choice
/// (Optuna allows None, bool, int, float and str choices).
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    /// Python's `None`.
    None,
    /// A `bool`.
    Bool(bool),
    /// An `int`.
    Int(i64),
    /// A `float`.
    Float(f64),
    /// A `str`.
    Str(String),
}

impl From<bool> for ParamValue {
    fn from(b: bool) -> Self {
        ParamValue::Bool(b)
    }
}

impl From<i64> for ParamValue {
    fn from(i: i64) -> Self {
        ParamValue::Int(i)
    }
}

impl From<f64> for ParamValue {
    fn from(x: f64) -> Self {
        ParamValue::Float(x)
    }
}

impl From<&str> for ParamValue {
    fn from(s: &str) -> Self {
        ParamValue::Str(s.to_string())
    }
}

impl From<String> for ParamValue {
    fn from(s: String) -> Self {
        ParamValue::Str(s)
    }
}

/// A categorical choice: any external value.
pub type CategoricalChoice = ParamValue;

impl ParamValue {
    /// The value as a float, for numeric values (Optuna's `float(v)`).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            ParamValue::Int(i) => Some(*i as f64),
            ParamValue::Float(f) => Some(*f),
            ParamValue::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
            _ => None,
        }
    }

    /// Optuna's choice equality (`_categorical_choice_equal`): Python's
    /// `==`, so `1 == 1.0 == True` and an int equals a float only when the
    /// float is exactly that integer, and NaN equals NaN.
    pub fn same_choice(&self, other: &ParamValue) -> bool {
        use ParamValue::{Bool, Float, Int};
        let int = |v: &ParamValue| match v {
            Int(i) => Some(i128::from(*i)),
            Bool(b) => Some(i128::from(*b)),
            _ => None,
        };
        match (self, other) {
            (ParamValue::None, ParamValue::None) => true,
            (ParamValue::Str(a), ParamValue::Str(b)) => a == b,
            (Float(x), Float(y)) => x == y || (x.is_nan() && y.is_nan()),
            (Float(x), v) | (v, Float(x)) => int(v).is_some_and(|i| float_is_int(*x, i)),
            (a, b) => matches!((int(a), int(b)), (Some(x), Some(y)) if x == y),
        }
    }
}

/// As JSON spells the value (`null`, `true`, `3`, `"adam"`), floats always
/// with a point or an exponent (`0.5`, `3.0`, `1e-5`) so they read apart
/// from ints.
impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::None => f.write_str("null"),
            ParamValue::Bool(b) => write!(f, "{b}"),
            ParamValue::Int(i) => write!(f, "{i}"),
            ParamValue::Float(x) => write!(f, "{x:?}"),
            ParamValue::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// Whether a float is exactly the integer `i`, as Python compares them.
fn float_is_int(x: f64, i: i128) -> bool {
    x.fract() == 0.0 && x.abs() < 2f64.powi(100) && x as i128 == i
}

/// A parameter's distribution, as Optuna's `FloatDistribution`,
/// `IntDistribution` and `CategoricalDistribution`. Equality is Optuna's
/// `__eq__`: same class and attributes, choices compared by
/// [`ParamValue::same_choice`] (so `[1, nan]` equals `[1.0, nan]`).
#[derive(Debug, Clone)]
pub enum Distribution {
    /// Optuna's `FloatDistribution`: a float in `[low, high]`, built by
    /// [`Distribution::float`].
    Float {
        /// The smallest value (inclusive).
        low: f64,
        /// The largest value (inclusive); with a `step`, the last grid point.
        high: f64,
        /// Sampled in log space; needs `low > 0` and no `step`.
        log: bool,
        /// The spacing of the grid `low + k * step`; `None` for a continuous range.
        step: Option<f64>,
    },
    /// Optuna's `IntDistribution`: an integer in `[low, high]`, built by
    /// [`Distribution::int`].
    Int {
        /// The smallest value (inclusive).
        low: i64,
        /// The largest value (inclusive), a grid point `low + k * step`.
        high: i64,
        /// Sampled in log space; needs `low >= 1` and `step == 1`.
        log: bool,
        /// The spacing of the grid `low + k * step`, at least 1 (Optuna's default 1).
        step: i64,
    },
    /// Optuna's `CategoricalDistribution`, built by [`Distribution::categorical`].
    Categorical {
        /// The choices, at least one; a value's internal representation is its index here.
        choices: Vec<CategoricalChoice>,
    },
}

impl PartialEq for Distribution {
    fn eq(&self, other: &Distribution) -> bool {
        match (self, other) {
            (
                Distribution::Float {
                    low,
                    high,
                    log,
                    step,
                },
                Distribution::Float {
                    low: low2,
                    high: high2,
                    log: log2,
                    step: step2,
                },
            ) => low == low2 && high == high2 && log == log2 && step == step2,
            (
                Distribution::Int {
                    low,
                    high,
                    log,
                    step,
                },
                Distribution::Int {
                    low: low2,
                    high: high2,
                    log: log2,
                    step: step2,
                },
            ) => low == low2 && high == high2 && log == log2 && step == step2,
            (
                Distribution::Categorical { choices: a },
                Distribution::Categorical { choices: b },
            ) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same_choice(y)),
            _ => false,
        }
    }
}

/// 2^53: integers up to this size are exact as f64.
const EXACT_INT: f64 = 9_007_199_254_740_992.0;

const NO_CHOICES: &str = "`choices` must contain one or more elements";

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidDistribution {
        param: String::new(),
        reason: reason.into(),
    }
}

impl Distribution {
    /// A float range, validated as Optuna does; with a `step`, `high` is
    /// lowered to the last grid point (`low + k * step <= high`). A range
    /// whose `high - low` overflows is a distribution, as in Optuna, but
    /// cannot be sampled ([`Distribution::check_drawable`]).
    pub fn float(low: f64, high: f64, log: bool, step: Option<f64>) -> Result<Self> {
        if !low.is_finite() || !high.is_finite() {
            return Err(invalid(format!(
                "low and high must be finite, got low={low:?}, high={high:?}"
            )));
        }
        if log && step.is_some() {
            return Err(invalid("`step` is not supported when `log` is true"));
        }
        if low > high {
            return Err(invalid(format!(
                "`low <= high` must hold, got low={low:?}, high={high:?}"
            )));
        }
        if log && low <= 0.0 {
            return Err(invalid(format!(
                "`low > 0` must hold for log=true, got low={low:?}"
            )));
        }
        let mut high = high;
        if let Some(step) = step {
            if !(step > 0.0 && step.is_finite()) {
                return Err(invalid(format!("`step > 0` must hold, got step={step}")));
            }
            // Finite bounds and a positive step: an infinite count, never NaN.
            if (high - low) / step > EXACT_INT {
                return Err(invalid(format!(
                    "`step` {step:e} cuts [{low:?}, {high:?}] into more than 2^53 steps"
                )));
            }
            high = adjust_float_high(low, high, step);
        }
        Ok(Distribution::Float {
            low,
            high,
            log,
            step,
        })
    }

    /// An int range, validated as Optuna does; `high` is lowered to the last
    /// grid point when `high - low` is not a multiple of `step`.
    ///
    /// Any `i64` bounds are taken, as Optuna takes them. Beyond +-2^53 a
    /// value is held as its nearest `f64`, as Optuna's storage (a float
    /// column) and both libraries' samplers hold it, so beyond 2^53 not
    /// every integer of the range can be drawn.
    ///
    /// ```
    /// use hpo_sampler::Distribution;
    /// let seed = Distribution::int(0, 1 << 62, false, 1).unwrap();
    /// assert!(seed.contains((1u64 << 61) as f64));
    /// let grid = Distribution::int(i64::MIN, i64::MAX, false, 2).unwrap();
    /// assert!(matches!(grid, Distribution::Int { high, .. } if high == i64::MAX - 1));
    /// ```
    pub fn int(low: i64, high: i64, log: bool, step: i64) -> Result<Self> {
        if log && step != 1 {
            return Err(invalid(format!(
                "`step` must be 1 when `log` is true, got step={step}"
            )));
        }
        if low > high {
            return Err(invalid(format!(
                "`low <= high` must hold, got low={low}, high={high}"
            )));
        }
        if log && low < 1 {
            return Err(invalid(format!(
                "`low >= 1` must hold for log=true, got low={low}"
            )));
        }
        if step <= 0 {
            return Err(invalid(format!("`step > 0` must hold, got step={step}")));
        }
        // In i128: `high - low` of i64 bounds may overflow an i64. The
        // result lies in [low, high].
        let (low128, step128) = (i128::from(low), i128::from(step));
        let high = (low128 + (i128::from(high) - low128) / step128 * step128) as i64;
        Ok(Distribution::Int {
            low,
            high,
            log,
            step,
        })
    }

    /// A categorical over `choices` (at least one).
    pub fn categorical(choices: Vec<CategoricalChoice>) -> Result<Self> {
        if choices.is_empty() {
            return Err(invalid(NO_CHOICES));
        }
        Ok(Distribution::Categorical { choices })
    }

    /// Whether the samplers can draw from it at all: `low <= high` (not
    /// NaN), a positive step, a choice; a cheap part of
    /// [`Distribution::validate`].
    pub(crate) fn drawable(&self) -> bool {
        match self {
            Distribution::Float {
                low, high, step, ..
            } => low <= high && step.is_none_or(|s| s > 0.0),
            Distribution::Int {
                low, high, step, ..
            } => low <= high && *step > 0,
            Distribution::Categorical { choices } => !choices.is_empty(),
        }
    }

    /// Checks a distribution built from its variant's fields as the
    /// constructors ([`Distribution::float`], [`Distribution::int`],
    /// [`Distribution::categorical`]) check their arguments: samplers take
    /// `low <= high`, a positive step and at least one choice for granted.
    ///
    /// ```
    /// use hpo_sampler::Distribution;
    /// let bad = Distribution::Float { low: 1.0, high: 0.0, log: false, step: None };
    /// assert!(bad.validate().is_err());
    /// assert!(Distribution::float(0.0, 1.0, false, None).unwrap().validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<()> {
        match self {
            Distribution::Float {
                low,
                high,
                log,
                step,
            } => Distribution::float(*low, *high, *log, *step).map(drop),
            Distribution::Int {
                low,
                high,
                log,
                step,
            } => Distribution::int(*low, *high, *log, *step).map(drop),
            Distribution::Categorical { choices } if choices.is_empty() => Err(invalid(NO_CHOICES)),
            Distribution::Categorical { .. } => Ok(()),
        }
    }

    /// Whether values can be drawn from a valid distribution: not from a
    /// float range whose `high - low` overflows, where every draw would be
    /// `high` and the GP's normalised inputs NaN (Optuna stores such a
    /// range and raises `OverflowError` when it samples from it).
    ///
    /// ```
    /// use hpo_sampler::Distribution;
    /// let wide = Distribution::float(-1e308, 1e308, false, None).unwrap();
    /// assert!(wide.check_drawable().is_err());
    /// ```
    pub fn check_drawable(&self) -> Result<()> {
        match self {
            Distribution::Float { low, high, .. } if !(high - low).is_finite() => {
                Err(invalid(format!(
                    "`high - low` overflows (low={low:?}, high={high:?}): no value can be drawn"
                )))
            }
            _ => Ok(()),
        }
    }

    /// Whether the distribution has a single possible value (Optuna's `single()`).
    pub fn single(&self) -> bool {
        match self {
            Distribution::Float {
                low, high, step, ..
            } => match step {
                None => low == high,
                Some(s) => low == high || (high - low) < *s * (1.0 - 1e-12),
            },
            Distribution::Int {
                low,
                high,
                log,
                step,
            } => low == high || (!log && i128::from(*high) - i128::from(*low) < i128::from(*step)),
            Distribution::Categorical { choices } => choices.len() == 1,
        }
    }

    /// Whether an internal value lies in the distribution (respecting the
    /// grid for steps and the index range for categoricals); never, for a
    /// step of 0.
    pub fn contains(&self, internal: f64) -> bool {
        match self {
            Distribution::Float {
                low, high, step, ..
            } => {
                if !(*low <= internal && internal <= *high) {
                    return false;
                }
                match step {
                    None => true,
                    Some(s) if s.is_nan() || *s <= 0.0 => false,
                    Some(s) => {
                        // A grid point `low + k * step` computed in f64 is
                        // off by a few ulps of the bounds. Far from 0 that
                        // is more than Optuna's fixed 1e-8 steps (at 1e9
                        // steps from 0 most of its own RandomSampler's
                        // values miss it), so those ulps are allowed too;
                        // a grid finer than them holds any value.
                        let ulps = 2.0 * f64::EPSILON * low.abs().max(high.abs());
                        if *s <= ulps {
                            return true;
                        }
                        let nearest = low + ((internal - low) / s).round() * s;
                        (internal - nearest).abs() <= 1e-8 * s + ulps
                    }
                }
            }
            Distribution::Int {
                low, high, step, ..
            } => {
                if !(internal.fract() == 0.0
                    && (*low as f64) <= internal
                    && internal <= *high as f64
                    && *step > 0)
                {
                    return false;
                }
                // In i128: bounds, values and their differences all fit.
                // Beyond 2^53 a grid point is held as its nearest float,
                // so a value is on the grid when it is the float of the
                // grid point below it or above it (below 2^53, when it is
                // that point).
                let (low, step) = (i128::from(*low), i128::from(*step));
                let below = low + (internal as i128 - low).div_euclid(step) * step;
                below as f64 == internal || (below + step) as f64 == internal
            }
            Distribution::Categorical { choices } => {
                internal.fract() == 0.0 && internal >= 0.0 && (internal as usize) < choices.len()
            }
        }
    }

    /// The internal representation of an external value.
    pub fn to_internal(&self, value: &ParamValue) -> std::result::Result<f64, String> {
        match self {
            Distribution::Float { log, .. } | Distribution::Int { log, .. } => {
                let v = match value {
                    ParamValue::Int(_) | ParamValue::Float(_) | ParamValue::Bool(_) => {
                        value.as_f64().expect("numeric")
                    }
                    ParamValue::Str(s) => s
                        .trim()
                        .parse::<f64>()
                        .map_err(|_| format!("'{s}' is not a float-castable value"))?,
                    ParamValue::None => return Err("None is not a float-castable value".into()),
                };
                if v.is_nan() {
                    return Err("NaN is not a valid value".into());
                }
                if *log && v <= 0.0 {
                    return Err(format!("{v} is invalid for log=true"));
                }
                Ok(v)
            }
            Distribution::Categorical { choices } => choices
                .iter()
                .position(|c| c.same_choice(value))
                .map(|i| i as f64)
                .ok_or_else(|| format!("{value} is not one of the choices")),
        }
    }

    /// The internal value of an external one given for parameter `param`
    /// (a fixed or enqueued value, say): [`Distribution::to_internal`]
    /// that must also lie in the distribution ([`Distribution::contains`]).
    ///
    /// ```
    /// use hpo_sampler::{Distribution, Error, ParamValue};
    /// let lr = Distribution::float(1e-5, 1e-3, true, None).unwrap();
    /// assert_eq!(lr.internal_of("lr", &ParamValue::Float(1e-4)), Ok(1e-4));
    /// let err = lr.internal_of("lr", &ParamValue::Float(0.1)).unwrap_err();
    /// assert!(matches!(err, Error::InvalidValue { ref param, .. } if param == "lr"));
    /// ```
    pub fn internal_of(&self, param: &str, value: &ParamValue) -> Result<f64> {
        let invalid = |reason: String| Error::InvalidValue {
            param: param.to_string(),
            value: value.to_string(),
            reason,
        };
        let internal = self.to_internal(value).map_err(invalid)?;
        if self.contains(internal) {
            Ok(internal)
        } else {
            Err(invalid(format!("outside {self}")))
        }
    }

    /// The external value of an internal representation (ints truncate
    /// like Python's `int()`; categoricals index their choices, an index
    /// out of range taken as the nearest).
    ///
    /// # Panics
    ///
    /// On a categorical without choices, which no constructor builds and
    /// [`Distribution::validate`] refuses: it has no value to return.
    pub fn to_external(&self, internal: f64) -> ParamValue {
        match self {
            Distribution::Float { .. } => ParamValue::Float(internal),
            Distribution::Int { .. } => ParamValue::Int(internal as i64),
            Distribution::Categorical { choices } => {
                let i = (internal.max(0.0) as usize).min(choices.len() - 1);
                choices[i].clone()
            }
        }
    }

    /// Optuna's compatibility rule for a parameter suggested again: same
    /// kind, same `log`, and categoricals keep their choices. Ranges and
    /// steps may change.
    pub fn compatible_with(&self, other: &Distribution) -> bool {
        self.incompatibility(other).is_none()
    }

    /// Why `new` may not follow `self` (stored earlier for the same
    /// parameter name), as Optuna 5.0's `check_distribution_compatibility`
    /// words it; `None` when it may.
    pub fn incompatibility(&self, new: &Distribution) -> Option<&'static str> {
        match (self, new) {
            (Distribution::Float { log: a, .. }, Distribution::Float { log: b, .. })
            | (Distribution::Int { log: a, .. }, Distribution::Int { log: b, .. }) => (a != b)
                .then_some("Cannot set different log configuration to the same parameter name."),
            (a @ Distribution::Categorical { .. }, b @ Distribution::Categorical { .. }) => (a
                != b)
                .then_some(
                    "CategoricalDistribution does not support dynamic value space (its choices changed).",
                ),
            _ => Some("Cannot set different distribution kind to the same parameter name."),
        }
    }

    /// The one value of a `single()` distribution, in internal form.
    pub fn single_value(&self) -> f64 {
        match self {
            Distribution::Float { low, .. } => *low,
            Distribution::Int { low, .. } => *low as f64,
            Distribution::Categorical { .. } => 0.0,
        }
    }
}

/// Optuna's class name and attributes, for messages:
/// `FloatDistribution(low=1e-5, high=0.01, log=true)` (with `, step=...`
/// when there is one), `IntDistribution(low=1, high=9, log=false, step=2)`,
/// `CategoricalDistribution(choices=["adam", "sgd", null])`.
impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distribution::Float {
                low,
                high,
                log,
                step,
            } => {
                write!(f, "FloatDistribution(low={low:?}, high={high:?}, log={log}")?;
                if let Some(step) = step {
                    write!(f, ", step={step:?}")?;
                }
                f.write_str(")")
            }
            Distribution::Int {
                low,
                high,
                log,
                step,
            } => write!(
                f,
                "IntDistribution(low={low}, high={high}, log={log}, step={step})"
            ),
            Distribution::Categorical { choices } => {
                f.write_str("CategoricalDistribution(choices=[")?;
                for (i, c) in choices.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{c}")?;
                }
                f.write_str("])")
            }
        }
    }
}

/// Optuna's `_adjust_discrete_uniform_high`: decimal arithmetic on the
/// shortest decimal forms, emulated by snapping `(high - low) / step` to an
/// integer when it is within rounding noise of one.
fn adjust_float_high(low: f64, high: f64, step: f64) -> f64 {
    let r = (high - low) / step;
    let k = r.round();
    if (r - k).abs() <= 1e-9 * k.abs().max(1.0) {
        return high;
    }
    if r < 1.0 {
        return low;
    }
    let adjusted = r.floor() * step + low;
    // Print-and-parse at 15 significant digits, as decimal arithmetic would
    // give, never leaving [low, high].
    let cleaned: f64 = format!("{adjusted:.14e}").parse().unwrap_or(adjusted);
    cleaned.clamp(low, high)
}

/// Distributions built from their fields that no constructor would
/// return: reversed or NaN bounds, a step of 0, no choices.
#[cfg(test)]
pub(crate) fn unchecked_bad_distributions() -> [Distribution; 4] {
    [
        Distribution::Float {
            low: 1.0,
            high: 0.0,
            log: false,
            step: None,
        },
        Distribution::Float {
            low: f64::NAN,
            high: 1.0,
            log: false,
            step: None,
        },
        Distribution::Int {
            low: 0,
            high: 10,
            log: false,
            step: 0,
        },
        Distribution::Categorical { choices: vec![] },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value a sampler put on a fine grid far from 0 (1e9 steps out)
    /// is on it, though `(value - low) / step` misses an integer by more
    /// than Optuna's 1e-8; a value between grid points is not, nor is any
    /// for a float step of 0.
    #[test]
    fn a_fine_grid_far_from_zero_holds_its_own_points() {
        let d = Distribution::float(1e6, 1e6 + 1.0, false, Some(1e-3)).unwrap();
        let on_grid: Vec<f64> = (0..=1000).map(|k| 1e6 + k as f64 * 1e-3).collect();
        assert!(on_grid.iter().all(|&v| d.contains(v)));
        assert!(on_grid.iter().any(|&v| {
            let k = (v - 1e6) / 1e-3;
            (k - k.round()).abs() >= 1e-8
        }));
        assert!(!d.contains(1e6 + 0.0005));
        assert!(!d.contains(1e6 + 0.7785));
        // Where f64 still tells the grid's points apart, a value halfway
        // between two is off it.
        let coarse = Distribution::float(1e15, 1e15 + 100.0, false, Some(1.0)).unwrap();
        assert!(coarse.contains(1e15 + 37.0) && !coarse.contains(1e15 + 0.5));
        // Near 0 the grid is held as tightly as Optuna holds it.
        let near = Distribution::float(0.0, 1.0, false, Some(0.1)).unwrap();
        assert!(near.contains(0.30000000000000004) && !near.contains(0.3 + 1e-6));
        // A grid finer than f64 resolves (which Optuna stores, and
        // `Distribution::float` refuses to build) holds every value in
        // range.
        let fine = Distribution::Float {
            low: 0.0,
            high: 1.0,
            log: false,
            step: Some(1e-310),
        };
        assert!(fine.contains(0.123456789) && !fine.contains(1.5));
        let zero = Distribution::Float {
            low: 0.0,
            high: 1.0,
            log: false,
            step: Some(0.0),
        };
        assert!(!zero.contains(0.5));
    }

    /// `contains` on an int built from its fields with a step of 0, or
    /// with bounds whose difference overflows an i64, answers rather than
    /// panicking on `% 0` or an overflow.
    #[test]
    fn contains_answers_for_any_int_fields() {
        let zero_step = Distribution::Int {
            low: 0,
            high: 10,
            log: false,
            step: 0,
        };
        assert!(!zero_step.contains(5.0));
        let wide = Distribution::Int {
            low: i64::MIN,
            high: i64::MAX,
            log: false,
            step: 3,
        };
        // 1e18 + 2^63 is a multiple of 3; 2 + 2^63 is not. 2^61 + 2^63 is
        // not either, but 2^61 is the float of the grid point next to it.
        assert!(wide.contains(1e18));
        assert!(!wide.contains(2.0));
        assert!(wide.contains(2f64.powi(61)));
        assert!(wide.contains(i64::MIN as f64));
    }

    /// Finite bounds whose span overflows: a distribution Optuna stores,
    /// so it is read, but every draw would be `high` and the GP's
    /// normalised inputs NaN, so it is not drawn from.
    #[test]
    fn a_span_that_overflows_is_read_but_not_drawn_from() {
        for (low, high) in [(-1e308, 1e308), (-f64::MAX, f64::MAX), (-1e308, 9e307)] {
            let d = Distribution::float(low, high, false, None).unwrap();
            let e = d.check_drawable().unwrap_err();
            assert!(e.to_string().contains("high - low"), "{e}");
        }
        for (low, high, log) in [(-1e307, 1e307, false), (1e-300, f64::MAX, true)] {
            let d = Distribution::float(low, high, log, None).unwrap();
            assert!(d.check_drawable().is_ok());
        }
    }

    /// Optuna takes any int bounds (`suggest_int("seed", 0, 2**62)`); the
    /// grid is lowered in i128, where `high - low` of i64 bounds fits.
    #[test]
    fn int_ranges_take_any_i64_bounds() {
        for (low, high, step, last) in [
            (i64::MIN, i64::MAX, 1, i64::MAX),
            (i64::MIN, i64::MAX, 2, i64::MAX - 1),
            (i64::MIN, 0, 7, -1),
            (0, i64::MAX, 1 << 62, 1 << 62),
            (1, i64::MAX, 1, i64::MAX),
        ] {
            let d = Distribution::int(low, high, low > 0, step).unwrap();
            assert!(
                matches!(d, Distribution::Int { high, .. } if high == last),
                "[{low}, {high}] step {step}: {d}"
            );
            assert!(!d.single() && d.check_drawable().is_ok());
            assert!(d.contains(low as f64) && d.contains(last as f64));
        }
        let d = Distribution::int(i64::MAX - 5, i64::MAX, false, i64::MAX);
        assert!(d.unwrap().single());
        // Beyond 2^53 a value is its nearest float, as in Optuna's storage.
        let seed = Distribution::int(0, 1 << 62, false, 1).unwrap();
        let v = 3_858_464_508_697_737_728i64;
        assert_eq!(seed.to_external(v as f64), ParamValue::Int(v));
        assert_eq!(seed.to_internal(&ParamValue::Int(v)), Ok(v as f64));
        // The float of a grid point is on the grid; below 2^53 nothing else.
        let thirds = Distribution::int(0, 1 << 62, false, 3).unwrap();
        let point = 3 * 1_000_000_000_000_000_086i64;
        assert_ne!((point as f64) as i64 % 3, 0);
        assert!(thirds.contains(point as f64));
        let exact = Distribution::int(0, 1 << 52, false, 3).unwrap();
        assert!(exact.contains(3e15) && !exact.contains(3e15 + 1.0) && !exact.contains(3e15 - 1.0));
    }

    #[test]
    fn steps_beyond_exact_floats_are_refused() {
        let e = Distribution::float(0.0, 0.2, false, Some(1e-320)).unwrap_err();
        assert!(e.to_string().contains("2^53 steps"), "{e}");
        assert!(Distribution::float(0.0, 1.0, false, Some(1e-9)).is_ok());
    }

    #[test]
    fn steps_lower_high_like_optuna() {
        let d = Distribution::float(0.0, 0.95, false, Some(0.1)).unwrap();
        assert_eq!(
            d,
            Distribution::Float {
                low: 0.0,
                high: 0.9,
                log: false,
                step: Some(0.1)
            }
        );
        let d = Distribution::int(16, 250, false, 16).unwrap();
        assert!(matches!(d, Distribution::Int { high: 240, .. }));
        assert!(Distribution::float(0.0, 1.0, true, None).is_err());
        assert!(Distribution::int(1, 10, true, 2).is_err());
        assert!(Distribution::categorical(vec![]).is_err());
    }

    #[test]
    fn internal_external_round_trip() {
        let c = Distribution::categorical(vec![
            ParamValue::Str("a".into()),
            ParamValue::Int(1),
            ParamValue::None,
        ])
        .unwrap();
        assert_eq!(c.to_internal(&ParamValue::None), Ok(2.0));
        assert_eq!(c.to_internal(&ParamValue::Float(1.0)), Ok(1.0));
        assert_eq!(c.to_external(0.0), ParamValue::Str("a".into()));
        assert!(c.to_internal(&ParamValue::Str("b".into())).is_err());
        let i = Distribution::int(1, 9, false, 2).unwrap();
        assert_eq!(i.to_external(5.0), ParamValue::Int(5));
        assert!(i.contains(5.0) && !i.contains(4.0));
    }

    #[test]
    fn equality_is_optunas() {
        use ParamValue::{Bool, Float, Int, Str};
        let cat = |c: Vec<ParamValue>| Distribution::categorical(c).unwrap();
        // `_categorical_choice_equal`: Python's `==`, and NaN equals NaN.
        assert_eq!(
            cat(vec![Int(1), Float(f64::NAN), Bool(true)]),
            cat(vec![Float(1.0), Float(f64::NAN), Int(1)])
        );
        assert_ne!(cat(vec![Int(1)]), cat(vec![Str("1".into())]));
        assert_ne!(cat(vec![Int(1), Int(2)]), cat(vec![Int(1)]));
        assert_ne!(cat(vec![ParamValue::None]), cat(vec![Int(0)]));
        // 2**53 + 1 is not the float 2**53, in Python as here.
        assert_ne!(
            cat(vec![Int((1 << 53) + 1)]),
            cat(vec![Float(9007199254740992.0)])
        );
        assert_eq!(cat(vec![Float(-0.0)]), cat(vec![Int(0)]));
        // Ranges compare their attributes; kinds never equal each other.
        let f = Distribution::float(0.0, 1.0, false, None).unwrap();
        assert_eq!(f, Distribution::float(0.0, 1.0, false, None).unwrap());
        assert_ne!(f, Distribution::float(0.0, 1.0, false, Some(0.5)).unwrap());
        assert_ne!(
            Distribution::int(0, 1, false, 1).unwrap(),
            Distribution::float(0.0, 1.0, false, None).unwrap()
        );
    }

    #[test]
    fn displays_class_and_attributes() {
        let shown = [
            (
                Distribution::float(1e-5, 0.01, true, None).unwrap(),
                "FloatDistribution(low=1e-5, high=0.01, log=true)",
            ),
            (
                Distribution::float(0.0, 1.0, false, Some(0.25)).unwrap(),
                "FloatDistribution(low=0.0, high=1.0, log=false, step=0.25)",
            ),
            (
                Distribution::int(1, 9, false, 2).unwrap(),
                "IntDistribution(low=1, high=9, log=false, step=2)",
            ),
            (
                Distribution::categorical(vec![
                    ParamValue::Str("a \"b\"".into()),
                    ParamValue::Int(3),
                    ParamValue::Float(3.0),
                    ParamValue::Bool(true),
                    ParamValue::None,
                ])
                .unwrap(),
                r#"CategoricalDistribution(choices=["a \"b\"", 3, 3.0, true, null])"#,
            ),
        ];
        for (d, want) in shown {
            assert_eq!(d.to_string(), want);
        }
    }
}
