//! Cheap guesses at an estimator's density at a sample, for the TPE's
//! screening of candidates: which kernels carry it and roughly how large
//! it is, from one `f32` row of guessed kernel terms per sample
//! ([`guess_row`]).
//!
//! A continuous kernel's term, `konst - ((x - mu) / sigma)^2 / 2`, is a
//! quadratic in the sample's value: written around the range's middle,
//! its constant joins the log weight in one per-kernel `base`, and the
//! rest is two fused multiply-adds per kernel. A categorical's term
//! depends only on the sample's choice, so the candidates' few
//! combinations of choices each get their own `base`. A discrete kernel's
//! term (the log of its mass on the sample's grid cell) is guessed as the
//! cell's width times the kernel's density at the value, capped at a mass
//! of one: the same quadratic plus a per-kernel constant, then a `min`.
//! Accuracy is that of `f32` around the range's middle, about 1e-3 nats
//! in a typical range, less where kernels are far narrower than it.
//!
//! The guesses only decide cost: the caller computes exact terms of the
//! kernels they name ([`Evaluator::exceeds`]), so a wrong guess costs a
//! full density, never a different result. That is also why the guesses
//! may use fused multiply-adds and differ in their last bits between
//! builds.

use super::rows::{GUESS_CHUNK, GuessParts, Quadratic, guess_row};
use super::{Dim, Evaluator, cells};

/// [`Evaluator::carriers`] returns at most this many kernels.
pub const MAX_CARRIERS: usize = 32;

/// An estimator's guess rows at a set of samples: per numeric dimension
/// the quadratics' coefficients, and a `base` per combination of
/// categorical choices among the samples. Arrays are padded to
/// [`GUESS_CHUNK`] kernels.
pub(super) struct Guesses {
    n_k: usize,
    numeric: Vec<Coefficients>,
    bases: Vec<Vec<f32>>,
    /// Each sample's `bases` entry.
    base_of: Vec<u32>,
    row: Vec<f32>,
}

/// A numeric dimension's kernels as quadratics in `u = x - centre` (`x`
/// in transformed space): `q u^2 + p u (+ a)`.
struct Coefficients {
    /// The dimension's index among the estimator's.
    dim: usize,
    centre: f64,
    q: Vec<f32>,
    p: Vec<f32>,
    /// Discrete only (a continuous one's constant is in the bases).
    a: Vec<f32>,
}

impl Guesses {
    pub(super) fn new(log_weights: &[f64], dims: &[Dim], samples: &[Vec<f64>]) -> Self {
        let n_k = log_weights.len();
        let padded = n_k.next_multiple_of(GUESS_CHUNK);
        let narrow = |v: Vec<f64>| -> Vec<f32> {
            let mut out: Vec<f32> = v.into_iter().map(|x| x as f32).collect();
            out.resize(padded, 0.0);
            out
        };
        let mut base = log_weights.to_vec();
        let mut numeric = Vec::new();
        for (dim, d) in dims.iter().enumerate() {
            let Dim::Numeric(d) = d else { continue };
            let centre = 0.5 * (d.adapted_low + d.adapted_high);
            // konst - s (m - u)^2 / 2 with s = 1 / sigma^2 and m = mu - centre.
            let (mut q, mut p, mut a) = (vec![0.0; n_k], vec![0.0; n_k], vec![0.0; n_k]);
            let konst = if d.step.is_none() { &d.konst } else { &d.peak };
            for k in 0..n_k {
                let s = d.inv_sigma[k] * d.inv_sigma[k];
                let m = d.mu[k] - centre;
                q[k] = -0.5 * s;
                p[k] = s * m;
                a[k] = konst[k] - 0.5 * s * m * m;
            }
            let a = if d.step.is_none() {
                base.iter_mut().zip(&a).for_each(|(b, a)| *b += a);
                Vec::new()
            } else {
                narrow(a)
            };
            numeric.push(Coefficients {
                dim,
                centre,
                q: narrow(q),
                p: narrow(p),
                a,
            });
        }
        // One base per combination of categorical choices among the samples.
        let n_s = samples.first().map_or(0, Vec::len);
        let choices = |i: usize| -> Vec<usize> {
            (dims.iter().zip(samples))
                .filter(|(d, _)| matches!(d, Dim::Categorical(_)))
                .map(|(_, xs)| xs[i] as usize)
                .collect()
        };
        let mut combos: Vec<Vec<usize>> = Vec::new();
        let base_of = (0..n_s)
            .map(|i| {
                let key = choices(i);
                let at = combos.iter().position(|c| *c == key).unwrap_or_else(|| {
                    combos.push(key);
                    combos.len() - 1
                });
                at as u32
            })
            .collect();
        let bases = combos
            .iter()
            .map(|combo| {
                let mut b = base.clone();
                let categoricals = dims.iter().filter_map(|d| match d {
                    Dim::Categorical(c) => Some(c),
                    Dim::Numeric(_) => None,
                });
                for (c, &choice) in categoricals.zip(combo) {
                    let terms = &c.log_probs_by_choice[choice * n_k..(choice + 1) * n_k];
                    b.iter_mut().zip(terms).for_each(|(b, t)| *b += t);
                }
                let mut b = narrow(b);
                b[n_k..].fill(f32::NEG_INFINITY);
                b
            })
            .collect();
        Guesses {
            n_k,
            numeric,
            bases,
            base_of,
            row: Vec::new(),
        }
    }

    /// Fills the row of guesses at sample `i`; returns its largest and the
    /// first kernel with it.
    fn fill(&mut self, dims: &[Dim], samples: &[Vec<f64>], i: usize) -> (f32, usize) {
        let (mut open, mut capped) = (Vec::new(), Vec::new());
        for c in &self.numeric {
            let Dim::Numeric(d) = &dims[c.dim] else {
                unreachable!("coefficients are of numeric dimensions")
            };
            let x = samples[c.dim][i];
            let u = (d.transform(x) - c.centre) as f32;
            let quadratic = |a, shift| Quadratic {
                u,
                u2: u * u,
                q: &c.q,
                p: &c.p,
                a,
                shift,
            };
            match d.step {
                None => open.push(quadratic(&[], 0.0)),
                Some(step) => {
                    let cell = cells::Cell::new(x, step, d.log);
                    capped.push(quadratic(&c.a, cell.ln_width as f32));
                }
            }
        }
        let parts = GuessParts {
            n: self.n_k,
            base: &self.bases[self.base_of[i] as usize],
            open: &open,
            capped: &capped,
        };
        guess_row(&parts, &mut self.row)
    }
}

impl Evaluator<'_> {
    /// The largest guessed kernel term at sample `i`, and its kernel: a
    /// cheap guess at the density and at the kernel carrying it.
    pub fn screen(&mut self, i: usize) -> (f32, u32) {
        let (max, top) = self.guess_row(i);
        (max, top as u32)
    }

    /// The kernels whose guessed term at sample `i` is at least `floor`:
    /// the ones that may carry its density, at most [`MAX_CARRIERS`] of
    /// them, the largest guesses first.
    pub fn carriers(&mut self, i: usize, floor: f32) -> Vec<u32> {
        self.guess_row(i);
        let g = self.guesses.as_ref().expect("guess_row made them");
        let mut near: Vec<(f32, u32)> = (g.row[..g.n_k].iter().enumerate())
            .filter(|&(_, &b)| b >= floor)
            .map(|(k, &b)| (b, k as u32))
            .collect();
        let larger_first = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if near.len() > MAX_CARRIERS {
            near.select_nth_unstable_by(MAX_CARRIERS - 1, larger_first);
            near.truncate(MAX_CARRIERS);
        }
        near.sort_unstable_by(larger_first);
        near.into_iter().map(|(_, k)| k).collect()
    }

    fn guess_row(&mut self, i: usize) -> (f32, usize) {
        let (log_weights, dims, samples) = (self.log_weights, self.dims, self.samples);
        self.guesses
            .get_or_insert_with(|| Guesses::new(log_weights, dims, samples))
            .fill(dims, samples, i)
    }
}
