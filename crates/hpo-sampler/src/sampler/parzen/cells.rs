//! Discrete dimensions: the log mass of a kernel on a grid cell, and the
//! cache that makes those masses cheap across asks.
//!
//! A discrete kernel's term at a value is the log of its normal mass on the
//! value's grid cell minus the log of its mass on the whole (widened)
//! range. The cell mass needs `erfc` or a series, tens of nanoseconds, and
//! an estimator of 1,000 kernels asks for it per kernel and per distinct
//! candidate value. But in a running study the same cells meet the same
//! kernels ask after ask: values lie on the grid, centres are observed
//! values, and most widths are the magic clip's minimum. [`CellCache`]
//! therefore keeps every term it computes, by (value, centre, width), for
//! as long as the estimators of one search space live; an estimator
//! refers to its kernels' (centre, width) pairs by id into it. Continuous
//! dimensions use the pairs alone, for the truncation normaliser of
//! kernels near an end of the range (erfc again).

use crate::special::{NORM_PDF_LOG_C, log_gauss_mass};
// FxHash: one multiply per word. The keys are float bits of values the
// study itself produced; nothing adversarial reaches them.
use rustc_hash::FxHashMap;

/// A grid cell `[l, r]` around a discrete value, in transformed space.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cell {
    /// The value and the cell's ends, transformed (log for a log
    /// dimension), and the log of the cell's transformed width.
    pub centre: f64,
    pub l: f64,
    pub r: f64,
    pub ln_width: f64,
}

impl Cell {
    pub fn new(x: f64, step: f64, log: bool) -> Self {
        let (mut centre, mut l, mut r) = (x, x - step / 2.0, x + step / 2.0);
        if log {
            centre = centre.ln();
            l = l.ln();
            r = r.ln();
        }
        Cell {
            centre,
            l,
            r,
            ln_width: (r - l).ln(),
        }
    }
}

/// Above this many cached terms (rows times pairs) a dimension's cache
/// starts over when its next estimator is built: 32 MiB of terms.
const MAX_ENTRIES: usize = 4 << 20;

/// One discrete dimension's cell terms, by value and (centre, width) pair.
#[derive(Default)]
pub struct CellCache {
    /// Pair id of each `(centre bits, width bits)`.
    pair_ids: FxHashMap<(u64, u64), u32>,
    pairs: Vec<Pair>,
    /// Row id of each value (by its bits).
    row_ids: FxHashMap<u64, u32>,
    /// `rows[row][pair]`: the pair's term at the row's value (NaN: not yet
    /// computed; a row is shorter than `pairs` until a later pair is used).
    rows: Vec<Vec<f64>>,
    cells: Vec<Cell>,
    /// Scratch for [`CellCache::distinct`]: all false between calls.
    seen: Vec<bool>,
}

struct Pair {
    mu: f64,
    sigma: f64,
    ln_sigma: f64,
    /// Log of the kernel's mass on the whole range.
    log_norm: f64,
}

impl CellCache {
    /// Forget everything if the cache has grown past its bound (only
    /// between estimators: ids handed out stay valid while one lives).
    pub fn trim(&mut self) {
        if self.over_bound() {
            *self = CellCache::default();
        }
    }

    /// Whether the cache has grown past its bound (the next [`trim`]
    /// starts it over).
    ///
    /// [`trim`]: CellCache::trim
    pub fn over_bound(&self) -> bool {
        let entries: usize = self.rows.iter().map(Vec::len).sum();
        entries > MAX_ENTRIES || self.pairs.len() > MAX_ENTRIES / 4
    }

    /// The id of the kernel `(mu, sigma)` on the range `[a_low, a_high]`
    /// (transformed, widened by half a step), and `-ln(sigma) - ln(sqrt(2
    /// pi)) - ln(normaliser)` (the log of its normalised density's peak).
    pub fn pair(&mut self, mu: f64, sigma: f64, a_low: f64, a_high: f64) -> (u32, f64) {
        let next = self.pairs.len() as u32;
        let id = *self
            .pair_ids
            .entry((mu.to_bits(), sigma.to_bits()))
            .or_insert(next);
        if id == next {
            self.pairs.push(Pair {
                mu,
                sigma,
                ln_sigma: sigma.ln(),
                log_norm: log_gauss_mass((a_low - mu) / sigma, (a_high - mu) / sigma),
            });
        }
        let p = &self.pairs[id as usize];
        (id, -p.ln_sigma - NORM_PDF_LOG_C - p.log_norm)
    }

    /// The row of value `x` (creating it), for [`CellCache::term`].
    pub fn row(&mut self, x: f64, step: f64, log: bool) -> u32 {
        let next = self.rows.len() as u32;
        let id = *self.row_ids.entry(x.to_bits()).or_insert(next);
        if id == next {
            self.rows.push(Vec::new());
            self.cells.push(Cell::new(x, step, log));
        }
        id
    }

    /// Row `row`'s cell.
    pub(super) fn cell(&self, row: u32) -> &Cell {
        &self.cells[row as usize]
    }

    /// Pair `pair`'s term at row `row`'s value: its log cell mass minus its
    /// log normaliser, computed on first use.
    #[inline]
    pub fn term(&mut self, row: u32, pair: u32) -> f64 {
        let (row, pair) = (row as usize, pair as usize);
        let slots = &mut self.rows[row];
        if slots.len() <= pair {
            slots.resize(self.pairs.len(), f64::NAN);
        }
        let slot = &mut slots[pair];
        if slot.is_nan() {
            let (c, p) = (&self.cells[row], &self.pairs[pair]);
            *slot = cell_log_mass(c.l, c.r, c.ln_width, p.mu, p.sigma, p.ln_sigma) - p.log_norm;
        }
        *slot
    }

    /// Each of `pairs` (ids into this cache) once, in order of first
    /// appearance: linear, without sorting or allocating per id.
    pub fn distinct(&mut self, pairs: &[u32]) -> Vec<u32> {
        self.seen.resize(self.pairs.len(), false);
        let out: Vec<u32> = (pairs.iter().copied())
            .filter(|&p| !std::mem::replace(&mut self.seen[p as usize], true))
            .collect();
        for &p in &out {
            self.seen[p as usize] = false;
        }
        out
    }

    /// Fill `out[k]` with the term of kernel `pairs[k]` at row `row`.
    /// `distinct` holds every id in `pairs` (each at least once): their
    /// missing terms are computed first, so that filling `out` is a plain
    /// gather (an estimator has a thousand kernels but a few dozen pairs).
    pub fn expand(&mut self, row: u32, pairs: &[u32], distinct: &[u32], out: &mut Vec<f64>) {
        for &p in distinct {
            self.term(row, p);
        }
        let slots = &self.rows[row as usize];
        out.clear();
        out.extend(pairs.iter().map(|&p| slots[p as usize]));
    }
}

/// Log of the normal(mu, s) mass on the grid cell `[l, r]` (`ln_s = ln s`,
/// `ln_width = ln(r - l)`). The mass is `2 h phi(z) sum_k He_2k(z) h^2k /
/// (2k+1)!` (`z` the cell centre and `h` its half-width in sigma units,
/// `He` the Hermite polynomials), which converges fast for narrow cells
/// and needs no erfc; cells 20 sigma away keep only the first term (such
/// kernels weigh < e^-150 and never matter); wide cells use the exact mass.
#[inline]
pub(super) fn cell_log_mass(l: f64, r: f64, ln_width: f64, mu: f64, s: f64, ln_s: f64) -> f64 {
    let h = 0.5 * (r - l) / s;
    let z = (0.5 * (l + r) - mu) / s;
    let head = -0.5 * z * z - NORM_PDF_LOG_C + ln_width - ln_s;
    if z.abs() - h > 20.0 {
        return head;
    }
    if h * (z.abs() + 3.0) > SERIES_LIMIT {
        return log_gauss_mass((l - mu) / s, (r - mu) / s);
    }
    head + log_hermite_series(h, z)
}

/// Cells with `h (|z| + 3)` up to this use the series (no erfc): its terms
/// shrink like `(h |z|)^2k / (2k+1)!`, so it converges in a few terms and
/// stays accurate (see `the_cell_series_matches_the_exact_mass`).
pub(super) const SERIES_LIMIT: f64 = 2.0;

/// `ln(sum_k He_2k(z) h^2k / (2k+1)!)`, the cell mass over its first-order
/// value `2 h phi(z)`.
#[inline]
pub(super) fn log_hermite_series(h: f64, z: f64) -> f64 {
    let h2 = h * h;
    let (mut he_n, mut he_n1) = (1.0, z); // He_n, He_{n+1}
    let mut coef = 1.0; // h^n / (n+1)!
    let mut rest = 0.0; // the series minus its first term
    let mut n = 0.0;
    for _ in 0..40 {
        let he_n2 = z * he_n1 - (n + 1.0) * he_n;
        let he_n3 = z * he_n2 - (n + 2.0) * he_n1;
        n += 2.0;
        coef *= h2 / (n * (n + 1.0));
        let term = he_n2 * coef;
        rest += term;
        (he_n, he_n1) = (he_n2, he_n3);
        // Stop on the coefficient, not the term: a term can vanish where
        // He_n(z) has a root while later ones do not.
        if coef * (he_n.abs() + he_n1.abs() + 1.0) <= 1e-17 {
            break;
        }
    }
    if rest.abs() < 1e-5 {
        rest - 0.5 * rest * rest + rest * rest * rest / 3.0
    } else {
        rest.ln_1p()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wherever `cell_log_mass` uses the series, it equals the exact mass
    /// (erfc-based) to a few ulps, and does so well past the limit. (Below
    /// h = 0.05 the exact mass itself loses digits to cancellation, so it
    /// cannot judge the series there.)
    #[test]
    fn the_cell_series_matches_the_exact_mass() {
        for limit in [SERIES_LIMIT, 1.5 * SERIES_LIMIT] {
            let mut worst: f64 = 0.0;
            for i in 0..=400 {
                for j in 0..=400 {
                    let h = 0.05 + i as f64 / 400.0;
                    let z = -25.0 + 50.0 * j as f64 / 400.0;
                    if h * (z.abs() + 3.0) > limit || z.abs() - h > 20.0 {
                        continue;
                    }
                    let head = -0.5 * z * z - NORM_PDF_LOG_C + (2.0 * h).ln();
                    let series = head + log_hermite_series(h, z);
                    let exact = log_gauss_mass(z - h, z + h);
                    worst = worst.max((series - exact).abs() / exact.abs().max(1.0));
                }
            }
            assert!(worst < 1e-14, "limit {limit}: {worst:e}");
        }
    }

    #[test]
    fn narrow_cells_match_the_exact_mass() {
        for &(l, r, mu, s) in &[
            (4.0, 4.001, 4.2, 0.5),
            (-1.0, -0.999, 0.0, 0.3),
            (10.0, 10.01, 0.0, 2.0),
            (0.0, 0.05, 0.3, 0.1),
            (1.0, 1.02, 0.0, 0.1),
            (232.0, 248.0, 240.0, 51.2),
            (232.0, 248.0, 230.0, 51.2),
            (232.0, 248.0, 160.0, 80.0),
            (0.0, 0.1, 0.02, 0.4),
        ] {
            let fast = cell_log_mass(l, r, (r - l).ln(), mu, s, s.ln());
            let exact = log_gauss_mass((l - mu) / s, (r - mu) / s);
            assert!((fast - exact).abs() < 1e-9, "{fast} vs {exact}");
        }
        // Far cells are only approximated, but stay negligible.
        let far = cell_log_mass(3.0, 4.0, 0.0, 0.0, 0.05, 0.05f64.ln());
        assert!(far < -150.0 && log_gauss_mass(60.0, 80.0) < -150.0);
    }

    /// A cached term is the term computed directly, whether it was
    /// computed through `term` or `expand`, before or after later pairs
    /// and rows joined, and after the cache started over.
    #[test]
    fn cached_terms_are_the_direct_ones() {
        let (a_low, a_high) = (0.5f64.ln(), 1000.5f64.ln());
        let direct = |x: f64, mu: f64, s: f64| {
            let c = Cell::new(x, 1.0, true);
            cell_log_mass(c.l, c.r, c.ln_width, mu, s, s.ln())
                - log_gauss_mass((a_low - mu) / s, (a_high - mu) / s)
        };
        let mut cache = CellCache::default();
        let kernels = [
            (3.0f64.ln(), 0.08),
            (50.0f64.ln(), 0.08),
            (3.0f64.ln(), 0.5),
        ];
        let ids: Vec<u32> = kernels
            .iter()
            .map(|&(m, s)| cache.pair(m, s, a_low, a_high).0)
            .collect();
        assert_eq!(ids, vec![0, 1, 2]);
        assert_eq!(cache.pair(kernels[1].0, 0.08, a_low, a_high).0, 1);
        for x in [1.0, 3.0, 49.0, 999.0] {
            let row = cache.row(x, 1.0, true);
            let mut out = Vec::new();
            cache.expand(row, &ids, &ids, &mut out);
            for (k, &(m, s)) in kernels.iter().enumerate() {
                assert_eq!(out[k].to_bits(), direct(x, m, s).to_bits());
                assert_eq!(cache.term(row, ids[k]).to_bits(), out[k].to_bits());
            }
        }
        // A pair added after the rows exist.
        let (late, _) = cache.pair(7.0f64.ln(), 0.2, a_low, a_high);
        let row = cache.row(3.0, 1.0, true);
        assert_eq!(
            cache.term(row, late).to_bits(),
            direct(3.0, 7.0f64.ln(), 0.2).to_bits()
        );
        cache
            .rows
            .iter_mut()
            .for_each(|r| r.resize(MAX_ENTRIES, 0.0));
        assert!(cache.over_bound());
        cache.trim();
        assert!(cache.pairs.is_empty() && cache.rows.is_empty());
        assert!(!cache.over_bound());
    }
}
