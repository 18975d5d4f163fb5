//! The hot loops: one sample's log term for every kernel, then their
//! log-sum-exp (a density) or their largest (a screening guess).
//!
//! A density row is the kernels' log weights plus, per dimension, a
//! [`Part`]: a contiguous slice of per-kernel terms (a categorical's
//! column for the sample's choice, a discrete dimension's cell terms for
//! its value), or a formula over per-kernel slices computed in place (a
//! continuous dimension's `konst - z^2 / 2`). Every loop runs over kernels
//! in memory order with no branch, so the compiler vectorises it; on x86-64
//! the same code is also compiled for AVX-512 and AVX2 and picked at run
//! time. Rust never fuses a multiply and an add on its own, the one
//! fused operation asked for (`exp`'s polynomial) is fused in every build,
//! and the reduction order is fixed, so every build gives the same bits.
//!
//! The screening's guesses ([`guess_row`]) are a separate, cheaper loop:
//! `f32` (twice the lanes), every dimension folded into a per-kernel
//! constant or a quadratic in the sample, two fused multiply-adds per
//! kernel and dimension where the CPU has them. Their bits may
//! differ between builds; they only decide which kernels to try and which
//! candidate first, and the kernels' terms are then computed exactly.

/// The float types whose largest value a row reduction finds: densities
/// (`f64`) and guesses (`f32`).
pub(super) trait Lane: Copy + PartialOrd {
    const NEG_INFINITY: Self;
}

impl Lane for f32 {
    const NEG_INFINITY: Self = f32::NEG_INFINITY;
}

impl Lane for f64 {
    const NEG_INFINITY: Self = f64::NEG_INFINITY;
}

/// One dimension's contribution to a density row.
#[derive(Clone, Copy)]
pub(super) enum Part<'a> {
    /// `konst[k] - ((x - mu[k]) * inv_sigma[k])^2 / 2`.
    Continuous {
        x: f64,
        mu: &'a [f64],
        inv_sigma: &'a [f64],
        konst: &'a [f64],
    },
    /// Terms already per kernel.
    Terms(&'a [f64]),
}

impl Part<'_> {
    /// Kernel `k`'s term, with the row's arithmetic.
    #[inline(always)]
    pub fn term(&self, k: usize) -> f64 {
        match *self {
            Part::Continuous {
                x,
                mu,
                inv_sigma,
                konst,
            } => normal_term(x, mu[k], inv_sigma[k], konst[k]),
            Part::Terms(t) => t[k],
        }
    }
}

/// A continuous kernel's log density at `x`: `konst - ((x - mu) *
/// inv_sigma)^2 / 2`.
#[inline(always)]
fn normal_term(x: f64, mu: f64, inv_sigma: f64, konst: f64) -> f64 {
    let z = (x - mu) * inv_sigma;
    konst - 0.5 * z * z
}

/// Runs `$body` (an expression over the function's arguments) compiled
/// for AVX-512 or AVX2 (with FMA) when the CPU has it, else for the
/// baseline. Rust never fuses a multiply and an add on its own, so unless
/// the body asks for it the arithmetic is the same in each (the same
/// reduction order too), and so are the bits: only the vector width
/// differs. A body that names a [`MulAdd`] type (`fused M;`) gets
/// [`Fused`] in the vector builds and [`Separate`] in the baseline one.
macro_rules! dispatch {
    ($(fused $m:ident;)? fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty $body:block) => {
        pub(super) fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512dq,avx512vl,fma")]
                fn avx512($($arg: $ty),*) -> $ret {
                    $(type $m = Fused;)?
                    $body
                }
                #[target_feature(enable = "avx2,fma")]
                fn avx2($($arg: $ty),*) -> $ret {
                    $(type $m = Fused;)?
                    $body
                }
                use std::arch::is_x86_feature_detected as has;
                if has!("fma") && has!("avx512f") && has!("avx512dq") && has!("avx512vl") {
                    // SAFETY: the CPU has these features (checked just above).
                    return unsafe { avx512($($arg),*) };
                }
                if has!("fma") && has!("avx2") {
                    // SAFETY: the CPU has these features (checked just above).
                    return unsafe { avx2($($arg),*) };
                }
            }
            $(type $m = Separate;)?
            $body
        }
    };
}
pub(super) use dispatch;

dispatch! {
    fn log_density_row(log_weights: &[f64], parts: &[Part<'_>], row: &mut Vec<f64>) -> f64 {
        fill_row(log_weights, parts, row);
        log_sum_exp(row)
    }
}

dispatch! {
    fn terms_log_sum_exp(terms: &[f64]) -> f64 {
        log_sum_exp(terms)
    }
}

dispatch! {
    fused M;
    fn guess_row(guess: &GuessParts<'_>, row: &mut Vec<f32>) -> (f32, usize) {
        fill_guesses::<M>(guess, row);
        lanes_argmax(&row[..guess.n])
    }
}

/// `a * b + c`, rounded once ([`Fused`], where the CPU has the
/// instruction) or twice ([`Separate`]).
pub(super) trait MulAdd {
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

pub(super) struct Fused;
pub(super) struct Separate;

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

impl MulAdd for Separate {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// [`guess_row`]'s per-kernel arrays are padded to a multiple of this
/// many kernels (a 512-bit vector of `f32`), so its loops have no tail.
pub(super) const GUESS_CHUNK: usize = 16;

/// One sample's guess row, over `n` kernels: per kernel, `base[k]` plus,
/// per numeric dimension `d` at the sample's point `at[d]`, `q[k] u^2 +
/// p[k] u` (an open dimension) or `min(q[k] u^2 + p[k] u + a[k] + shift,
/// 0)` (a capped one). Arrays hold [`GUESS_CHUNK`]-padded kernels
/// (padding: `base` minus infinity, the rest 0).
pub(super) struct GuessParts<'a> {
    pub n: usize,
    pub base: &'a [f32],
    pub dims: &'a [Quadratics],
    pub at: &'a [Point],
}

/// A numeric dimension's kernels as quadratics in a sample's (centred)
/// value.
pub(super) struct Quadratics {
    pub q: Vec<f32>,
    pub p: Vec<f32>,
    /// Capped dimensions only (empty for open ones).
    pub a: Vec<f32>,
}

/// A sample's (centred) value `u` in a numeric dimension, its square, and
/// (capped dimensions) its shift.
#[derive(Clone, Copy)]
pub(super) struct Point {
    pub u: f32,
    pub u2: f32,
    pub shift: f32,
}

/// Fills `row` with [`GuessParts`]' row, padding included: one pass per
/// dimension over the row (in L1), each kernel independent of the others
/// so that the passes pipeline. The first pass reads `base` rather than a
/// copy of it.
#[inline(always)]
fn fill_guesses<M: MulAdd>(g: &GuessParts<'_>, row: &mut Vec<f32>) {
    let n = g.base.len();
    // Whatever `row` held is overwritten: the first pass writes every
    // element from `base`.
    row.resize(n, 0.0);
    let mut first = true;
    for (d, &Point { u, u2, shift }) in g.dims.iter().zip(g.at) {
        let (q, p) = (&d.q[..n], &d.p[..n]);
        let rows = row.iter_mut().zip(g.base);
        if d.a.is_empty() {
            for (((r, &b), &q), &p) in rows.zip(q).zip(p) {
                let acc = if first { b } else { *r };
                *r = M::mul_add(q, u2, M::mul_add(p, u, acc));
            }
        } else {
            for ((((r, &b), &q), &p), &a) in rows.zip(q).zip(p).zip(&d.a[..n]) {
                let acc = if first { b } else { *r };
                let t = M::mul_add(q, u2, M::mul_add(p, u, a + shift));
                *r = acc + if t < 0.0 { t } else { 0.0 };
            }
        }
        first = false;
    }
    if first {
        row.copy_from_slice(g.base);
    }
}

/// `row[k]` = `log_weights[k]` plus each part's term, added in order. The
/// first part's terms are added as the weights are copied in (one pass
/// fewer over the row, the same sums).
#[inline(always)]
fn fill_row(log_weights: &[f64], parts: &[Part<'_>], row: &mut Vec<f64>) {
    // Whatever `row` held is overwritten by the first pass.
    row.resize(log_weights.len(), 0.0);
    match parts.split_first() {
        None => row.copy_from_slice(log_weights),
        Some((first, rest)) => {
            add_part(first, row, Some(log_weights));
            for part in rest {
                add_part(part, row, None);
            }
        }
    }
}

/// `row[k] = base[k] + part.term(k)`, or `row[k] += part.term(k)` without
/// a base. Each loop runs over slices of exactly the row's length, so it
/// has no bounds checks and vectorises.
#[inline(always)]
fn add_part(part: &Part<'_>, row: &mut [f64], base: Option<&[f64]>) {
    let n = row.len();
    match *part {
        Part::Continuous {
            x,
            mu,
            inv_sigma,
            konst,
        } => {
            let kernels = mu[..n].iter().zip(&inv_sigma[..n]).zip(&konst[..n]);
            match base {
                Some(base) => {
                    for ((r, &b), ((&m, &is), &k)) in row.iter_mut().zip(&base[..n]).zip(kernels) {
                        *r = b + normal_term(x, m, is, k);
                    }
                }
                None => {
                    for (r, ((&m, &is), &k)) in row.iter_mut().zip(kernels) {
                        *r += normal_term(x, m, is, k);
                    }
                }
            }
        }
        Part::Terms(t) => match base {
            Some(base) => {
                for ((r, &b), &t) in row.iter_mut().zip(&base[..n]).zip(&t[..n]) {
                    *r = b + t;
                }
            }
            None => {
                for (r, &t) in row.iter_mut().zip(&t[..n]) {
                    *r += t;
                }
            }
        },
    }
}

/// `v` if it is larger than `max`, else `max`: a NaN `v` is ignored, and
/// the comparison is one vector `max` instruction (`f64::max` needs three
/// to order NaNs).
#[inline(always)]
fn keep_larger<F: Lane>(max: F, v: F) -> F {
    if v > max { v } else { max }
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
            lane_max[i] = keep_larger(lane_max[i], c[i]);
        }
    }
    tail.iter()
        .chain(&lane_max)
        .fold(F::NEG_INFINITY, |m, &v| keep_larger(m, v))
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

/// `exp(x)` for `x` in `[-50, 0]`, accurate to ~2 ulp (4.6e-16 relative at
/// worst): `x = n ln2 + r` with `|r| <= ln2 / 2`, a degree-10 polynomial
/// for `exp(r)` (Chebyshev-fitted on that interval: nearly the degree-12
/// Taylor polynomial's 3.7e-16, in four operations less) and `2^n` built
/// from its bits. No branches, so it vectorises.
///
/// Its multiply-adds are fused in every build: a density's time is mostly
/// this polynomial, and one rounding per step is half the instructions
/// of two (ZDT1's ask + tell at 1,000 trials: 12-20% faster). A build
/// whose CPU lacks the instruction (x86-64 before AVX2, never dispatched to
/// on a CPU that has it) calls the C library's `fma`, which rounds the same.
#[inline(always)]
#[allow(clippy::excessive_precision)]
pub(super) fn fast_exp(x: f64) -> f64 {
    const LOG2E: f64 = std::f64::consts::LOG2_E;
    const LN2_HI: f64 = 6.931_471_803_691_238_2e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    const SHIFT: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52: adding it rounds to an integer
    let t = x.mul_add(LOG2E, SHIFT);
    let n = t - SHIFT;
    let r = (-n).mul_add(LN2_LO, (-n).mul_add(LN2_HI, x));
    let mut p: f64 = 2.762_635_724_144_722_3e-7;
    for k in [
        2.764_018_079_620_985e-6,
        2.480_150_434_699_768_6e-5,
        1.984_117_027_044_006_7e-4,
        1.388_888_893_248_859_9e-3,
        8.333_333_385_667_782e-3,
        4.166_666_666_657_314e-2,
        1.666_666_666_655_440_6e-1,
        5.000_000_000_000_006e-1,
        1.000_000_000_000_006_7,
        1.0,
    ] {
        p = p.mul_add(r, k);
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

    /// The dispatched (AVX-512 or AVX2) build and the baseline give the
    /// same bits; rows are the parts' terms added in order; the
    /// log-sum-exp is accurate and at least the largest term.
    #[test]
    fn rows_are_the_same_in_every_build_and_match_their_terms() {
        let mut rng = crate::rng::Rng::seed_from(3);
        for n in [1usize, 7, 8, 9, 100, 1001] {
            let v = |rng: &mut crate::rng::Rng, s: f64| -> Vec<f64> {
                (0..n).map(|_| s * (rng.next_f64() - 0.5)).collect()
            };
            let lw = v(&mut rng, 4.0);
            let (mu, konst, terms) = (v(&mut rng, 2.0), v(&mut rng, 3.0), v(&mut rng, 80.0));
            let inv_sigma: Vec<f64> = (0..n).map(|_| 1.0 + 50.0 * rng.next_f64()).collect();
            let parts = [
                Part::Continuous {
                    x: 0.3,
                    mu: &mu,
                    inv_sigma: &inv_sigma,
                    konst: &konst,
                },
                Part::Terms(&terms),
            ];
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
        }
    }

    /// A guess row is its formula, to `f32` rounding, in every build (fused
    /// or not), padding ignored; its argmax is the first largest guess.
    #[test]
    fn guess_rows_are_their_formula() {
        let mut rng = crate::rng::Rng::seed_from(5);
        for n in [1usize, 15, 16, 17, 100, 1001] {
            let padded = n.next_multiple_of(GUESS_CHUNK);
            let mut v = |s: f32| -> Vec<f32> {
                let mut out: Vec<f32> = (0..n).map(|_| s * (rng.next_f64() as f32 - 0.5)).collect();
                out.resize(padded, 0.0);
                out
            };
            let mut base = v(8.0);
            base[n..].fill(f32::NEG_INFINITY);
            let (q1, p1, q2, p2, a2) = (v(-40.0), v(30.0), v(-40.0), v(30.0), v(4.0));
            let negative = |q: Vec<f32>| -> Vec<f32> { q.iter().map(|q| -q.abs()).collect() };
            let (q1, q2) = (negative(q1), negative(q2));
            let dims = [
                Quadratics {
                    q: q1.clone(),
                    p: p1.clone(),
                    a: Vec::new(),
                },
                Quadratics {
                    q: q2.clone(),
                    p: p2.clone(),
                    a: a2.clone(),
                },
            ];
            let point = |u: f32, shift| Point {
                u,
                u2: u * u,
                shift,
            };
            let at = [point(0.3, 0.0), point(-0.2, -1.5)];
            let g = GuessParts {
                n,
                base: &base,
                dims: &dims,
                at: &at,
            };
            let direct: Vec<f32> = (0..n)
                .map(|k| {
                    let t = a2[k] - 1.5 + p2[k] * -0.2 + q2[k] * 0.04;
                    base[k] + q1[k] * 0.09 + p1[k] * 0.3 + t.min(0.0)
                })
                .collect();
            let mut rows = [Vec::new(), Vec::new()];
            let (max, top) = guess_row(&g, &mut rows[0]);
            fill_guesses::<Separate>(&g, &mut rows[1]);
            for row in &rows {
                for (k, (&a, &b)) in row[..n].iter().zip(&direct).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                        "{n}, {k}: {a} vs {b}"
                    );
                }
            }
            assert_eq!(Some(top), rows[0][..n].iter().position(|&v| v == max));
            assert!(rows[0][..n].iter().all(|&v| v <= max));
        }
    }
}
