//! Cheap guesses about an estimator's density at a sample, for the TPE's
//! screening of candidates: which kernels carry it and roughly how large
//! it is, from `f32` upper bounds on the kernels' terms (exact in
//! continuous and categorical dimensions, the cell-width bound in discrete
//! ones, no cell mass), one vectorised row per sample ([`argmax_row`]).
//!
//! The guesses only decide cost: the caller computes exact terms of the
//! kernels they name ([`Evaluator::exceeds`]), so a wrong guess costs a
//! full density, never a different result.

use super::rows::{Part, argmax_row};
use super::{Dim, Evaluator, cells};

/// [`Evaluator::carriers`] returns at most this many kernels.
pub const MAX_CARRIERS: usize = 32;

/// An estimator's per-kernel arrays in `f32`, for guessing the largest
/// term: `log_weights`, then per dimension `arrays[d]`: a continuous
/// one's `[mu, inv_sigma, konst]`, a discrete one's `[mu, inv_sigma,
/// peak]`, a categorical's `[log-probabilities by choice]`.
pub(super) struct Narrow {
    log_weights: Vec<f32>,
    arrays: Vec<[Vec<f32>; 3]>,
    row: Vec<f32>,
}

impl Narrow {
    pub(super) fn new(log_weights: &[f64], dims: &[Dim]) -> Self {
        let narrow = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
        let arrays = dims
            .iter()
            .map(|dim| match dim {
                Dim::Categorical(c) => [narrow(&c.log_probs_by_choice), Vec::new(), Vec::new()],
                Dim::Numeric(d) if d.step.is_none() => {
                    [narrow(&d.mu), narrow(&d.inv_sigma), narrow(&d.konst)]
                }
                Dim::Numeric(d) => [narrow(&d.mu), narrow(&d.inv_sigma), narrow(&d.peak)],
            })
            .collect();
        Narrow {
            log_weights: narrow(log_weights),
            arrays,
            row: Vec::new(),
        }
    }
}

impl Evaluator<'_> {
    /// The largest upper bound on a kernel's term at sample `i`, and that
    /// kernel: a cheap guess at the density and at the kernel carrying it.
    /// The bounds are exact in continuous and categorical dimensions and
    /// the cell-width bound in discrete ones, computed in `f32` without
    /// any cell mass.
    pub fn screen(&mut self, i: usize) -> (f32, u32) {
        let (max, top) = self.bound_row(i);
        (max, top as u32)
    }

    /// The kernels whose bound at sample `i` (as [`Evaluator::screen`]'s)
    /// is at least `floor`: the ones that may carry its density, at most
    /// [`MAX_CARRIERS`] of them, the largest bounds first.
    pub fn carriers(&mut self, i: usize, floor: f32) -> Vec<u32> {
        self.bound_row(i);
        let row = &self.narrow.as_ref().expect("bound_row made it").row;
        let mut near: Vec<(f32, u32)> = (row.iter().enumerate())
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

    /// Fills the `f32` row of kernel bounds at sample `i`; returns its
    /// maximum and the first kernel with it.
    fn bound_row(&mut self, i: usize) -> (f32, usize) {
        let n_k = self.log_weights.len();
        let narrow = self
            .narrow
            .get_or_insert_with(|| Narrow::new(self.log_weights, self.dims));
        let parts: Vec<Part<'_, f32>> = self
            .dims
            .iter()
            .zip(&narrow.arrays)
            .zip(self.samples)
            .map(|((dim, [a, b, c]), xs)| match dim {
                Dim::Categorical(_) => {
                    let choice = xs[i] as usize;
                    Part::Terms(&a[choice * n_k..(choice + 1) * n_k])
                }
                Dim::Numeric(d) if d.step.is_none() => Part::Continuous {
                    x: d.transform(xs[i]) as f32,
                    mu: a,
                    inv_sigma: b,
                    konst: c,
                },
                Dim::Numeric(d) => {
                    let cell = cells::Cell::new(xs[i], d.step.expect("discrete"), d.log);
                    Part::CellBound {
                        centre: (0.5 * (cell.l + cell.r)) as f32,
                        half: (0.5 * (cell.r - cell.l)) as f32,
                        ln_width: cell.ln_width as f32,
                        mu: a,
                        inv_sigma: b,
                        peak: c,
                    }
                }
            })
            .collect();
        argmax_row(&narrow.log_weights, &parts, &mut narrow.row)
    }
}
