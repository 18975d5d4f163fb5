//! The hot loop: one sample's log term for every kernel, then their
//! log-sum-exp (or their largest).
//!
//! A row is the kernels' log weights plus, per dimension, a [`Part`]: a
//! contiguous slice of per-kernel terms (a categorical's column for the
//! sample's choice, a discrete dimension's cell terms for its value), or
//! a formula over per-kernel slices computed in place (a continuous
//! dimension's `konst - z^2 / 2`, a discrete dimension's upper bound).
//! Every loop runs over kernels in memory order with no branch, so the
//! compiler vectorises it; on x86-64 the same code is also compiled for
//! AVX-512 and AVX2 and picked at run time. No fused multiply-add is ever
//! emitted (Rust does not contract float expressions) and the reduction
//! order is fixed, so every build gives the same bits.
//!
//! Rows are generic over the float type: densities are `f64`; the
//! screening bounds ([`argmax_row`]) run in `f32`, twice the lanes,
//! because they only guess (which kernels to try, which candidate first)
//! and the kernels' terms are then computed exactly.

use std::ops::{Add, Mul, Sub};

/// The float types rows are computed in.
pub(super) trait Lane:
    Copy + PartialOrd + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self>
{
    const ZERO: Self;
    const HALF: Self;
    const NEG_INFINITY: Self;
    fn abs(self) -> Self;
    fn max(self, other: Self) -> Self;
    fn min(self, other: Self) -> Self;
}

macro_rules! lane {
    ($t:ty) => {
        impl Lane for $t {
            const ZERO: Self = 0.0;
            const HALF: Self = 0.5;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                <$t>::max(self, other)
            }
            #[inline(always)]
            fn min(self, other: Self) -> Self {
                <$t>::min(self, other)
            }
        }
    };
}
lane!(f32);
lane!(f64);

/// One dimension's contribution to a row.
pub(super) enum Part<'a, F> {
    /// `konst[k] - ((x - mu[k]) * inv_sigma[k])^2 / 2`.
    Continuous {
        x: F,
        mu: &'a [F],
        inv_sigma: &'a [F],
        konst: &'a [F],
    },
    /// Terms already per kernel.
    Terms(&'a [F]),
    /// An upper bound on a discrete dimension's terms at a cell: its width
    /// times the kernel's density at the cell's point nearest the centre,
    /// `min(ln_width + peak[k] - (max(|centre - mu[k]| - half, 0) *
    /// inv_sigma[k])^2 / 2, 0)`, with `peak[k] = -ln(sigma) - ln(sqrt(2
    /// pi)) - ln(normaliser)`.
    CellBound {
        centre: F,
        half: F,
        ln_width: F,
        mu: &'a [F],
        inv_sigma: &'a [F],
        peak: &'a [F],
    },
}

impl<F: Lane> Part<'_, F> {
    /// Kernel `k`'s term, with the row's arithmetic.
    #[inline(always)]
    pub fn term(&self, k: usize) -> F {
        match *self {
            Part::Continuous {
                x,
                mu,
                inv_sigma,
                konst,
            } => normal_term(x, mu[k], inv_sigma[k], konst[k]),
            Part::Terms(t) => t[k],
            Part::CellBound {
                centre,
                half,
                ln_width,
                mu,
                inv_sigma,
                peak,
            } => cell_bound(centre, half, ln_width, mu[k], inv_sigma[k], peak[k]),
        }
    }
}

/// A continuous kernel's log density at `x`: `konst - ((x - mu) *
/// inv_sigma)^2 / 2`.
#[inline(always)]
fn normal_term<F: Lane>(x: F, mu: F, inv_sigma: F, konst: F) -> F {
    let z = (x - mu) * inv_sigma;
    konst - F::HALF * z * z
}

/// See [`Part::CellBound`].
#[inline(always)]
fn cell_bound<F: Lane>(centre: F, half: F, ln_width: F, mu: F, inv_sigma: F, peak: F) -> F {
    let gap = ((centre - mu).abs() - half).max(F::ZERO) * inv_sigma;
    (ln_width + peak - F::HALF * gap * gap).min(F::ZERO)
}

/// Runs `$body` (an expression over the function's arguments) compiled
/// for AVX-512 or AVX2 when the CPU has it, else for the baseline. The
/// arithmetic is the same in each (no fused multiply-adds, the same
/// reduction order), so are the bits; only the vector width differs.
macro_rules! dispatch {
    (fn $name:ident$(<$g:ident: $b:ident>)?($($arg:ident: $ty:ty),*) -> $ret:ty $body:block) => {
        pub(super) fn $name$(<$g: $b>)?($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512dq,avx512vl")]
                fn avx512$(<$g: $b>)?($($arg: $ty),*) -> $ret $body
                #[target_feature(enable = "avx2")]
                fn avx2$(<$g: $b>)?($($arg: $ty),*) -> $ret $body
                if std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                {
                    // SAFETY: the CPU has these features (checked just above).
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2 (checked just above).
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body
        }
    };
}

dispatch! {
    fn log_density_row(log_weights: &[f64], parts: &[Part<'_, f64>], row: &mut Vec<f64>) -> f64 {
        fill_row(log_weights, parts, row);
        log_sum_exp(row)
    }
}

dispatch! {
    fn argmax_row<F: Lane>(log_weights: &[F], parts: &[Part<'_, F>], row: &mut Vec<F>) -> (F, usize) {
        fill_row(log_weights, parts, row);
        lanes_argmax(row)
    }
}

/// `row[k]` = `log_weights[k]` plus each part's term, added in order.
#[inline(always)]
fn fill_row<F: Lane>(log_weights: &[F], parts: &[Part<'_, F>], row: &mut Vec<F>) {
    row.clear();
    row.extend_from_slice(log_weights);
    let n = row.len();
    for part in parts {
        // Each arm is `row[k] += part.term(k)` spelled over slices of
        // exactly `n`, so the loop has no bounds checks and vectorises.
        match *part {
            Part::Continuous {
                x,
                mu,
                inv_sigma,
                konst,
            } => {
                let (mu, inv_sigma, konst) = (&mu[..n], &inv_sigma[..n], &konst[..n]);
                for (((r, &m), &is), &k) in row.iter_mut().zip(mu).zip(inv_sigma).zip(konst) {
                    *r = *r + normal_term(x, m, is, k);
                }
            }
            Part::Terms(t) => {
                for (r, &t) in row.iter_mut().zip(&t[..n]) {
                    *r = *r + t;
                }
            }
            Part::CellBound {
                centre,
                half,
                ln_width,
                mu,
                inv_sigma,
                peak,
            } => {
                let (mu, inv_sigma, peak) = (&mu[..n], &inv_sigma[..n], &peak[..n]);
                for (((r, &m), &is), &p) in row.iter_mut().zip(mu).zip(inv_sigma).zip(peak) {
                    *r = *r + cell_bound(centre, half, ln_width, m, is, p);
                }
            }
        }
    }
}

/// The largest value (NaNs ignored; minus infinity if none), over 16
/// independent lanes so the reduction vectorises instead of waiting on
/// one long chain of dependent comparisons.
#[inline(always)]
fn lanes_max<F: Lane>(row: &[F]) -> F {
    const LANES: usize = 16;
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    let mut lane_max = [F::NEG_INFINITY; LANES];
    for c in chunks {
        for i in 0..LANES {
            lane_max[i] = lane_max[i].max(c[i]);
        }
    }
    tail.iter()
        .chain(&lane_max)
        .fold(F::NEG_INFINITY, |m, &v| m.max(v))
}

/// The largest value and the first index holding it (NaNs ignored; minus
/// infinity at 0 if there is no other): [`lanes_max`] per block of 128,
/// then a search of the first block holding the largest, so that only one
/// block is scanned element by element.
#[inline(always)]
fn lanes_argmax<F: Lane>(row: &[F]) -> (F, usize) {
    const BLOCK: usize = 128;
    let mut best = (F::NEG_INFINITY, 0);
    for (b, block) in row.chunks(BLOCK).enumerate() {
        let m = lanes_max(block);
        if m > best.0 {
            best = (m, b);
        }
    }
    let start = best.1 * BLOCK;
    let block = &row[start..row.len().min(start + BLOCK)];
    let at = block
        .iter()
        .position(|&v| v == best.0)
        .map_or(0, |i| start + i);
    (best.0, at)
}

/// `log_sum_exp` drops terms this far below the largest (relative weight
/// below 2e-22).
const DROP_BELOW_MAX: f64 = 50.0;

/// `ln(sum(exp(row)))`. Terms more than 50 below the maximum (relative
/// weight < 2e-22) are dropped; the rest use a branch-free `exp` that the
/// compiler vectorises. At least the largest term, exactly: its own
/// `exp(0)` is 1.
#[inline(always)]
pub(super) fn log_sum_exp(row: &[f64]) -> f64 {
    // Eight independent lanes so the reductions vectorise and pipeline.
    const LANES: usize = 8;
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    let max = lanes_max(row);
    if !max.is_finite() {
        return max;
    }
    let term = |v: f64| {
        let d = v - max;
        let keep = if d > -DROP_BELOW_MAX { 1.0 } else { 0.0 };
        keep * fast_exp(d.max(-DROP_BELOW_MAX))
    };
    let mut lane_sum = [0.0; LANES];
    for c in chunks {
        for i in 0..LANES {
            lane_sum[i] += term(c[i]);
        }
    }
    let sum: f64 = lane_sum.iter().sum::<f64>() + tail.iter().map(|&v| term(v)).sum::<f64>();
    sum.ln() + max
}

/// `exp(x)` for `x` in `[-50, 0]`, accurate to ~2 ulp: `x = n ln2 + r` with
/// `|r| <= ln2 / 2`, a degree-12 Taylor polynomial for `exp(r)` (truncation
/// below 2e-16) and `2^n` built from its bits. No branches, so it vectorises.
#[inline(always)]
#[allow(clippy::excessive_precision)]
pub(super) fn fast_exp(x: f64) -> f64 {
    const LOG2E: f64 = std::f64::consts::LOG2_E;
    const LN2_HI: f64 = 6.931_471_803_691_238_2e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    const SHIFT: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52: adding it rounds to an integer
    let t = x * LOG2E + SHIFT;
    let n = t - SHIFT;
    let r = x - n * LN2_HI - n * LN2_LO;
    let mut p = 1.0 / 479_001_600.0;
    for k in [
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = p * r + k;
    }
    let bits = ((t.to_bits() as i64 - SHIFT.to_bits() as i64 + 1023) << 52) as u64;
    p * f64::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_is_accurate() {
        for i in 0..=5000 {
            let x = -50.0 * i as f64 / 5000.0;
            let (fast, exact) = (fast_exp(x), x.exp());
            assert!(
                ((fast - exact) / exact).abs() < 1e-15,
                "{x}: {fast} vs {exact}"
            );
        }
    }

    /// One part of each kind over `[mu, inv_sigma, konst, terms, peak]`.
    fn one_of_each<'a, F: Lane + From<f32>>(a: [&'a [F]; 5]) -> [Part<'a, F>; 3] {
        let [mu, inv_sigma, konst, terms, peak] = a;
        [
            Part::Continuous {
                x: F::from(0.3),
                mu,
                inv_sigma,
                konst,
            },
            Part::Terms(terms),
            Part::CellBound {
                centre: F::from(-0.1),
                half: F::from(0.05),
                ln_width: F::from(0.1f32.ln()),
                mu,
                inv_sigma,
                peak,
            },
        ]
    }

    /// The dispatched (AVX-512 or AVX2) build and the baseline give the
    /// same bits; rows are the parts' terms added in order; the
    /// log-sum-exp is accurate and at least the largest term; the argmax
    /// is the first largest term (in `f32`, of the `f32` row).
    #[test]
    fn rows_are_the_same_in_every_build_and_match_their_terms() {
        let mut rng = crate::rng::Rng::seed_from(3);
        for n in [1usize, 7, 8, 9, 100, 1001] {
            let v = |rng: &mut crate::rng::Rng, s: f64| -> Vec<f64> {
                (0..n).map(|_| s * (rng.next_f64() - 0.5)).collect()
            };
            let lw = v(&mut rng, 4.0);
            let (mu, konst, terms) = (v(&mut rng, 2.0), v(&mut rng, 3.0), v(&mut rng, 80.0));
            let peak = v(&mut rng, 6.0);
            let inv_sigma: Vec<f64> = (0..n).map(|_| 1.0 + 50.0 * rng.next_f64()).collect();
            let parts = one_of_each([&mu, &inv_sigma, &konst, &terms, &peak]);
            let mut row = Vec::new();
            let fast = log_density_row(&lw, &parts, &mut row);
            let mut baseline = Vec::new();
            fill_row(&lw, &parts, &mut baseline);
            assert_eq!(fast.to_bits(), log_sum_exp(&baseline).to_bits(), "n = {n}");
            let direct: Vec<f64> = (0..n)
                .map(|k| parts.iter().fold(lw[k], |acc, p| acc + p.term(k)))
                .collect();
            assert_eq!(row, direct);
            let max = direct.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let exact = direct.iter().map(|t| (t - max).exp()).sum::<f64>().ln() + max;
            assert!(
                (fast - exact).abs() < 1e-13 * (1.0 + exact.abs()),
                "{fast} vs {exact}"
            );
            assert!(fast >= max);
            let (top_value, top) = argmax_row(&lw, &parts, &mut row);
            assert_eq!(
                (top_value, Some(top)),
                (max, direct.iter().position(|&v| v == max))
            );
            let narrow = |v: &[f64]| -> Vec<f32> { v.iter().map(|&x| x as f32).collect() };
            let (lw32, mu32, is32, k32, t32, p32) = (
                narrow(&lw),
                narrow(&mu),
                narrow(&inv_sigma),
                narrow(&konst),
                narrow(&terms),
                narrow(&peak),
            );
            let parts32 = one_of_each([&mu32, &is32, &k32, &t32, &p32]);
            let mut row32 = Vec::new();
            let (max32, top) = argmax_row(&lw32, &parts32, &mut row32);
            assert_eq!(Some(top), row32.iter().position(|&v| v == max32));
            assert!(direct[top] >= max - 1e-3 * (1.0 + max.abs()), "n = {n}");
        }
    }
}
