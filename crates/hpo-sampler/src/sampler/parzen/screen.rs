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

use super::rows::{GUESS_CHUNK, GuessParts, Point, Quadratics, guess_row};
use super::{Dim, Evaluator, cells};

/// [`Evaluator::carriers`] returns at most this many kernels.
pub const MAX_CARRIERS: usize = 32;

/// An estimator's guess rows at a set of samples: per numeric dimension
/// its kernels' quadratics and each sample's point, and a `base` per
/// combination of categorical choices among the samples. Kernel arrays
/// are padded to [`GUESS_CHUNK`].
pub(super) struct Guesses {
    n_k: usize,
    numeric: Vec<Quadratics>,
    /// `points[i * numeric.len() + j]`: sample `i` in numeric dimension `j`.
    points: Vec<Point>,
    bases: Vec<Vec<f32>>,
    /// Each sample's `bases` entry.
    base_of: Vec<u32>,
    row: Vec<f32>,
}

impl Guesses {
    pub(super) fn new(log_weights: &[f64], dims: &[Dim], samples: &[Vec<f64>]) -> Self {
        let n_k = log_weights.len();
        let n_s = samples.first().map_or(0, Vec::len);
        let padded = n_k.next_multiple_of(GUESS_CHUNK);
        let mut base = log_weights.to_vec();
        let mut numeric = Vec::new();
        let mut columns = Vec::new();
        for (d, xs) in dims.iter().zip(samples) {
            let Dim::Numeric(d) = d else { continue };
            // `konst - s (u - m)^2 / 2 = q u^2 + p u + a` with `s = 1 /
            // sigma^2`, `m = mu - centre`, `u = x - centre`.
            let centre = 0.5 * (d.adapted_low + d.adapted_high);
            let konst = if d.step.is_none() { &d.konst } else { &d.peak };
            let s_m = || (d.inv_sigma.iter().zip(&d.mu)).map(|(is, mu)| (is * is, mu - centre));
            let a = s_m().zip(konst).map(|((s, m), k)| k - 0.5 * s * m * m);
            let a = if d.step.is_none() {
                base.iter_mut().zip(a).for_each(|(b, a)| *b += a);
                Vec::new()
            } else {
                narrow(a, padded)
            };
            numeric.push(Quadratics {
                q: narrow(s_m().map(|(s, _)| -0.5 * s), padded),
                p: narrow(s_m().map(|(s, m)| s * m), padded),
                a,
            });
            let column: Vec<Point> = xs
                .iter()
                .map(|&x| {
                    let u = (d.transform(x) - centre) as f32;
                    let shift = match d.step {
                        None => 0.0,
                        Some(step) => cells::Cell::new(x, step, d.log).ln_width as f32,
                    };
                    Point {
                        u,
                        u2: u * u,
                        shift,
                    }
                })
                .collect();
            columns.push(column);
        }
        let points = (0..n_s)
            .flat_map(|i| columns.iter().map(move |c| c[i]))
            .collect();
        // One base per combination of categorical choices among the samples.
        let categoricals: Vec<(_, &Vec<f64>)> = (dims.iter().zip(samples))
            .filter_map(|(d, xs)| match d {
                Dim::Categorical(c) => Some((c, xs)),
                Dim::Numeric(_) => None,
            })
            .collect();
        let mut combos: Vec<Vec<usize>> = Vec::new();
        let base_of = (0..n_s)
            .map(|i| {
                let key: Vec<usize> = categoricals.iter().map(|(_, xs)| xs[i] as usize).collect();
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
                for ((c, _), &choice) in categoricals.iter().zip(combo) {
                    let terms = &c.log_probs_by_choice[choice * n_k..(choice + 1) * n_k];
                    b.iter_mut().zip(terms).for_each(|(b, t)| *b += t);
                }
                let mut b = narrow(b.into_iter(), padded);
                b[n_k..].fill(f32::NEG_INFINITY);
                b
            })
            .collect();
        Guesses {
            n_k,
            numeric,
            points,
            bases,
            base_of,
            row: Vec::new(),
        }
    }

    /// Fills the row of guesses at sample `i`; returns its largest and the
    /// first kernel with it.
    fn fill(&mut self, i: usize) -> (f32, usize) {
        let n_d = self.numeric.len();
        let parts = GuessParts {
            n: self.n_k,
            base: &self.bases[self.base_of[i] as usize],
            dims: &self.numeric,
            at: &self.points[i * n_d..(i + 1) * n_d],
        };
        guess_row(&parts, &mut self.row)
    }
}

/// `v` in `f32`, padded with zeros to `padded` values.
fn narrow(v: impl Iterator<Item = f64>, padded: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(padded);
    out.extend(v.map(|x| x as f32));
    out.resize(padded, 0.0);
    out
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
            .fill(i)
    }
}
