//! Maximising the acquisition function over the normalised box, as
//! Optuna's `optimize_acqf_mixed`: quasi-random candidates (a randomly
//! shifted Halton sequence), the best of them plus starts drawn by
//! roulette (probability `exp(a - a_max)`) and the warm start (the best
//! trial), then from each start a local search alternating L-BFGS on the
//! continuous coordinates (scaled by the lengthscales, Optuna's
//! preconditioning) with a search of each discrete coordinate's grid,
//! until nothing changes.

use super::acquisition::Acquisition;
use super::lbfgs;
use super::space::Dim;
use crate::rng::Rng;

const PRIMES: [u32; 32] = [
    2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97,
    101, 103, 107, 109, 113, 127, 131,
];

fn radical_inverse(mut i: u64, base: u64) -> f64 {
    let inv = 1.0 / base as f64;
    let (mut f, mut r) = (inv, 0.0);
    while i > 0 {
        r += (i % base) as f64 * f;
        i /= base;
        f *= inv;
    }
    r
}

/// `n` quasi-random points of `[0, 1)^dim`: Halton (uniform random draws
/// beyond 32 dimensions) with a random shift modulo 1, rounded onto each
/// dimension's grid.
pub(crate) fn candidates(n: usize, dims: &[Dim], rng: &mut Rng) -> Vec<Vec<f64>> {
    let shift: Vec<f64> = dims.iter().map(|_| rng.next_f64()).collect();
    let skip = rng.below(1 << 16) as u64;
    (0..n)
        .map(|i| {
            dims.iter()
                .enumerate()
                .map(|(d, dim)| {
                    let u = match PRIMES.get(d) {
                        Some(p) => {
                            (radical_inverse(skip + i as u64 + 1, *p as u64) + shift[d]).fract()
                        }
                        None => rng.next_f64(),
                    };
                    if dim.is_categorical() {
                        (u * dim.n_choices as f64).floor()
                    } else {
                        dim.round(u)
                    }
                })
                .collect()
        })
        .collect()
}

/// Settings of the search (Optuna's defaults in [`super::GpConfig`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Search {
    pub n_candidates: usize,
    pub n_local_search: usize,
    pub tol: f64,
}

/// The normalised point of highest acquisition found.
pub(crate) fn maximize(
    acq: &Acquisition,
    dims: &[Dim],
    warm_start: Option<&[f64]>,
    search: Search,
    rng: &mut Rng,
) -> Vec<f64> {
    let xs = candidates(search.n_candidates, dims, rng);
    let vals = acq.values(&xs);
    let best = (0..xs.len())
        .max_by(|a, b| vals[*a].total_cmp(&vals[*b]))
        .expect("at least one candidate");
    let mut starts = vec![best];
    // Roulette without replacement among the others.
    let mut weights: Vec<f64> = vals.iter().map(|v| (v - vals[best]).exp()).collect();
    weights[best] = 0.0;
    let extra = search.n_local_search - 1 - usize::from(warm_start.is_some());
    for _ in 0..extra {
        let total: f64 = weights.iter().filter(|w| w.is_finite()).sum();
        if total <= 0.0 {
            break;
        }
        let mut r = rng.next_f64() * total;
        let mut pick = None;
        for (i, w) in weights.iter().enumerate() {
            if *w > 0.0 && w.is_finite() {
                pick = Some(i);
                if r < *w {
                    break;
                }
                r -= w;
            }
        }
        let Some(i) = pick else { break };
        weights[i] = 0.0;
        starts.push(i);
    }
    let mut start_points: Vec<Vec<f64>> = starts.iter().map(|i| xs[*i].clone()).collect();
    if let Some(w) = warm_start {
        start_points.push(w.to_vec());
    }
    let lengthscales = acq.lengthscales();
    let grids: Vec<Option<Vec<f64>>> = dims
        .iter()
        .map(|d| d.is_discrete().then(|| d.grid()))
        .collect();
    let mut best_x = xs[best].clone();
    let mut best_v = vals[best];
    for x0 in start_points {
        let (x, v) = local_search(acq, dims, &grids, &lengthscales, x0, search.tol);
        if v > best_v {
            best_x = x;
            best_v = v;
        }
    }
    best_x
}

/// Largest grid size searched exhaustively; larger grids are searched on
/// this many evenly spaced values plus the current value's neighbours.
const EXHAUSTIVE: usize = 64;

/// A block of coordinates the local search moves at once.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Block {
    Continuous,
    Discrete(usize),
}

fn local_search(
    acq: &Acquisition,
    dims: &[Dim],
    grids: &[Option<Vec<f64>>],
    lengthscales: &[f64],
    mut x: Vec<f64>,
    tol: f64,
) -> (Vec<f64>, f64) {
    let continuous: Vec<usize> = (0..dims.len())
        .filter(|d| !dims[*d].is_discrete())
        .collect();
    let mut fx = acq.value(&x);
    // As Optuna's `local_search_mixed`: coordinate blocks (the continuous
    // block, then each discrete coordinate) in turn, stopping when the
    // turn comes back to the last block that moved without another block
    // having moved since: that block's own optimum is unchanged.
    let mut last_changed: Option<Block> = None;
    for _ in 0..100 {
        if !continuous.is_empty() {
            if last_changed == Some(Block::Continuous) {
                return (x, fx);
            }
            let ls: Vec<f64> = continuous.iter().map(|d| lengthscales[*d]).collect();
            let z0: Vec<f64> = continuous.iter().zip(&ls).map(|(d, l)| x[*d] / l).collect();
            let bounds: Vec<(f64, f64)> = ls.iter().map(|l| (0.0, 1.0 / l)).collect();
            let base = x.clone();
            let r = lbfgs::minimize(
                |z: &[f64]| {
                    let mut p = base.clone();
                    for ((d, zi), l) in continuous.iter().zip(z).zip(&ls) {
                        p[*d] = zi * l;
                    }
                    let (v, g) = acq.value_grad(&p);
                    let g: Vec<f64> = continuous
                        .iter()
                        .zip(&ls)
                        .map(|(d, l)| -g[*d] * l)
                        .collect();
                    v.is_finite().then_some((-v, g))
                },
                z0,
                &bounds,
                lbfgs::Options {
                    pgtol: tol.sqrt(),
                    max_iters: 200,
                    ..Default::default()
                },
            );
            if let Some(r) = r.filter(|r| -r.f > fx + 1e-12 && r.iterations > 0) {
                for ((d, zi), l) in continuous.iter().zip(&r.x).zip(&ls) {
                    x[*d] = (zi * l).clamp(0.0, 1.0);
                }
                fx = acq.value(&x);
                last_changed = Some(Block::Continuous);
            }
        }
        for (d, grid) in grids.iter().enumerate() {
            let Some(grid) = grid else { continue };
            if last_changed == Some(Block::Discrete(d)) {
                return (x, fx);
            }
            let current = x[d];
            let pos = grid
                .iter()
                .enumerate()
                .min_by(|a, b| (a.1 - current).abs().total_cmp(&(b.1 - current).abs()))
                .map_or(0, |(i, _)| i);
            let tries: Vec<usize> = if grid.len() <= EXHAUSTIVE {
                (0..grid.len()).collect()
            } else {
                let step = grid.len() as f64 / EXHAUSTIVE as f64;
                let mut t: Vec<usize> = (0..EXHAUSTIVE)
                    .map(|k| (k as f64 * step) as usize)
                    .collect();
                t.extend([pos.saturating_sub(1), (pos + 1).min(grid.len() - 1)]);
                t
            };
            let values: Vec<f64> = tries
                .iter()
                .filter(|i| **i != pos)
                .map(|i| grid[*i])
                .collect();
            if values.is_empty() {
                continue;
            }
            let vals = acq.values_along(&x, d, &values);
            let (best, v) = vals
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .expect("non-empty");
            if *v > fx {
                fx = *v;
                x[d] = values[best];
                last_changed = Some(Block::Discrete(d));
            }
        }
        // Nothing moved in a whole turn; without discrete coordinates one
        // L-BFGS run is the whole search.
        if last_changed.is_none() || grids.iter().all(Option::is_none) {
            break;
        }
    }
    (x, fx)
}
