//! The GP's input space, as Optuna's `optuna._gp.search_space`: every
//! numeric parameter mapped onto `[0, 1]` (log first where the
//! distribution is log; a stepped range widened by half a step on each
//! side so every grid value owns an equal cell), categoricals kept as their
//! choice index (the kernel compares them for equality only).

use crate::distribution::Distribution;

/// The most values of a discrete dimension the acquisition's search holds
/// (2^20): an integer range of up to 2^64 values must not be listed whole.
pub(crate) const MAX_GRID: usize = 1 << 20;

/// One dimension of the normalised space.
#[derive(Debug, Clone)]
pub(crate) struct Dim {
    /// Bounds of the (possibly log-) transformed, widened range.
    lo: f64,
    hi: f64,
    log: bool,
    /// Grid step (0 for continuous floats).
    step: f64,
    low: f64,
    high: f64,
    is_int: bool,
    /// Number of choices for a categorical, 0 otherwise.
    pub n_choices: usize,
}

impl Dim {
    pub fn new(distribution: &Distribution) -> Self {
        let (low, high, log, step, is_int) = match distribution {
            Distribution::Categorical { choices } => {
                return Dim {
                    lo: 0.0,
                    hi: choices.len() as f64,
                    log: false,
                    step: 1.0,
                    low: 0.0,
                    high: (choices.len() - 1) as f64,
                    is_int: true,
                    n_choices: choices.len(),
                };
            }
            Distribution::Float {
                low,
                high,
                log,
                step,
            } => (*low, *high, *log, step.unwrap_or(0.0), false),
            Distribution::Int {
                low,
                high,
                log,
                step,
            } => (*low as f64, *high as f64, *log, *step as f64, true),
        };
        let (mut lo, mut hi) = (low - 0.5 * step, high + 0.5 * step);
        if log {
            (lo, hi) = (lo.ln(), hi.ln());
        }
        Dim {
            lo,
            hi,
            log,
            step,
            low,
            high,
            is_int,
            n_choices: 0,
        }
    }

    pub fn is_categorical(&self) -> bool {
        self.n_choices > 0
    }

    /// Whether the dimension takes grid values only (ints, stepped floats,
    /// categoricals).
    pub fn is_discrete(&self) -> bool {
        self.step > 0.0
    }

    /// An internal value in `[0, 1]` (a choice index for categoricals).
    pub fn normalize(&self, internal: f64) -> f64 {
        if self.is_categorical() {
            return internal;
        }
        let v = if self.log { internal.ln() } else { internal };
        if self.hi == self.lo {
            0.5
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    /// A normalised value back in the distribution, clipped into
    /// `[low, high]` and snapped onto its grid.
    pub fn unnormalize(&self, x: f64) -> f64 {
        if self.is_categorical() {
            return x.floor().clamp(0.0, (self.n_choices - 1) as f64);
        }
        let mut v = x * (self.hi - self.lo) + self.lo;
        if self.log {
            v = v.exp();
        }
        if self.step > 0.0 {
            v = self.low + ((v - self.low) / self.step).round() * self.step;
        }
        v = v.clamp(self.low, self.high);
        if self.is_int { v.round() } else { v }
    }

    /// A normalised value moved onto the nearest grid value (Optuna's
    /// `_round_one_normalized_param`); continuous values are unchanged.
    pub fn round(&self, x: f64) -> f64 {
        if self.is_categorical() {
            return x.floor().clamp(0.0, (self.n_choices - 1) as f64);
        }
        if self.step == 0.0 {
            return x;
        }
        self.normalize(self.unnormalize(x))
    }

    /// The normalised grid of a discrete dimension (the choice indices for
    /// a categorical); of a grid longer than [`MAX_GRID`], that many of its
    /// values evenly spread from `low` to `high`.
    pub fn grid(&self) -> Vec<f64> {
        if self.is_categorical() {
            return (0..self.n_choices).map(|i| i as f64).collect();
        }
        let n = ((self.high - self.low) / self.step + 0.5).floor() + 1.0;
        if n <= MAX_GRID as f64 {
            return (0..n as usize)
                .map(|k| self.normalize((self.low + k as f64 * self.step).min(self.high)))
                .collect();
        }
        let stride = (n - 1.0) / (MAX_GRID - 1) as f64;
        (0..MAX_GRID)
            .map(|i| {
                let k = (i as f64 * stride).round();
                self.normalize((self.low + k * self.step).min(self.high))
            })
            .collect()
    }
}
