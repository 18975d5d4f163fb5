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

use super::rows::{GUESS_CHUNK, GuessParts, Point, Quadratics, dispatch, guess_row};
use super::{Dim, Evaluator};

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

dispatch! {
    fn build_guesses(ev: &Evaluator<'_>) -> Guesses {
        Guesses::build(ev)
    }
}

impl Guesses {
    /// The guesses of `ev`'s estimator at its samples (the per-kernel
    /// loops compiled for the vector units, see [`dispatch`]).
    #[inline(always)]
    fn build(ev: &Evaluator<'_>) -> Self {
        let (dims, samples) = (ev.dims, ev.samples);
        let n_k = ev.log_weights.len();
        let n_s = samples.first().map_or(0, Vec::len);
        let padded = n_k.next_multiple_of(GUESS_CHUNK);
        let mut base = ev.log_weights.to_vec();
        let mut numeric = Vec::new();
        let mut columns = Vec::new();
        for (((d, transformed), rows), cells) in dims
            .iter()
            .zip(&ev.transformed)
            .zip(&ev.discrete)
            .zip(ev.cells.iter())
        {
            let Dim::Numeric(d) = d else { continue };
            // `konst - s (u - m)^2 / 2 = q u^2 + p u + a` with `s = 1 /
            // sigma^2`, `m = mu - centre`, `u = x - centre`.
            let centre = 0.5 * (d.adapted_low + d.adapted_high);
            let discrete = d.step.is_some();
            let konst = if discrete { &d.peak } else { &d.konst };
            let mut quadratics = Quadratics {
                q: vec![0.0; padded],
                p: vec![0.0; padded],
                a: if discrete {
                    vec![0.0; padded]
                } else {
                    Vec::new()
                },
            };
            let kernels = d.inv_sigma.iter().zip(&d.mu).zip(konst).enumerate();
            for (k, ((&is, &mu), &konst)) in kernels {
                let (s, m) = (is * is, mu - centre);
                quadratics.q[k] = (-0.5 * s) as f32;
                quadratics.p[k] = (s * m) as f32;
                let a = konst - 0.5 * s * m * m;
                if discrete {
                    quadratics.a[k] = a as f32;
                } else {
                    base[k] += a;
                }
            }
            numeric.push(quadratics);
            // A discrete value's point comes from its cell, computed once
            // per value in the cell cache.
            let column: Vec<Point> = (0..n_s)
                .map(|i| {
                    let (t, shift) = match rows.of_sample.get(i) {
                        Some(&local) => {
                            let cell = cells.cell(rows.rows[local as usize]);
                            (cell.centre, cell.ln_width as f32)
                        }
                        None => (transformed[i], 0.0),
                    };
                    let u = (t - centre) as f32;
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
        let n_c = categoricals.len();
        // The combinations, `n_c` choices each, in order of first use
        // (with no categoricals, the one empty combination).
        let mut combos: Vec<u32> = Vec::new();
        let mut key = vec![0u32; n_c];
        let base_of = (0..n_s)
            .map(|i| {
                if n_c == 0 {
                    return 0;
                }
                for (k, (_, xs)) in key.iter_mut().zip(&categoricals) {
                    *k = xs[i] as u32;
                }
                let same = |c: &[u32]| c.iter().zip(&key).all(|(a, b)| a == b);
                let known = combos.chunks_exact(n_c).position(same);
                known.unwrap_or_else(|| {
                    combos.extend_from_slice(&key);
                    combos.len() / n_c - 1
                }) as u32
            })
            .collect();
        let n_combos = combos.len().checked_div(n_c).unwrap_or(1);
        // (Plain loops: an iterator's `fold` may stay out of line, compiled
        // without the vector units.)
        let mut bases = Vec::with_capacity(n_combos);
        let mut b = Vec::with_capacity(n_k);
        for combo in 0..n_combos {
            b.clear();
            b.extend_from_slice(&base);
            let choices = combos.get(combo * n_c..(combo + 1) * n_c).unwrap_or(&[]);
            for ((c, _), &choice) in categoricals.iter().zip(choices) {
                let choice = choice as usize;
                let terms = &c.log_probs_by_choice[choice][..n_k];
                for (b, t) in b.iter_mut().zip(terms) {
                    *b += t;
                }
            }
            let mut narrowed = vec![f32::NEG_INFINITY; padded];
            for (o, &x) in narrowed.iter_mut().zip(&b) {
                *o = x as f32;
            }
            bases.push(narrowed);
        }
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
        if self.guesses.is_none() {
            self.guesses = Some(build_guesses(self));
        }
        self.guesses.as_mut().expect("just made").fill(i)
    }
}
