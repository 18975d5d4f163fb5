//! Vectorisable f32 `exp` and normal CDF: the f32 backend's GELU and
//! softmax without calls into libm, so the compiler keeps whole rows in
//! vector registers (the kernels are compiled for AVX2 too, see
//! [`with_avx2`]).
//!
//! `Phi(x) = erfc(-x / sqrt 2) / 2`, with erfc from the Chebyshev fit of
//! Press et al. (Numerical Recipes, `erfcc`: fractional error below 1.2e-7
//! for every argument) and a Cephes-style `exp`. Writing Phi through erfc
//! keeps its relative accuracy for very negative x, where `1 + erf` cancels.
//! Measured against f64 `libm::erfc`, the forward's relative error is below
//! `5e-7 + 1.5e-7 x^2` (the tests; the second term is the f32 rounding of
//! `z * z` in the exponent, which matters only in the left tail, where
//! libm's f32 `erff` in `(1 + erf) / 2` is far worse: relative 1e-3 at
//! x = -4, and 0 below x = -5.5). The f64 backend (gradient checks) keeps
//! `libm::erf`.

use std::any::TypeId;

use crate::float::Float;

const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;

/// `e^x` in f32 to about 1 ulp, 0 below the smallest normal result.
// The coefficients are kept as published (the compiler rounds them to f32).
#[allow(clippy::excessive_precision)]
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that n * LN2_HI is exact for |n| < 512 (Cephes).
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let xc = x.clamp(-87.0, 88.0);
    // k = n + ROUND holds the integer n in its low mantissa bits.
    let k = xc * LOG2E + ROUND;
    let n = k - ROUND;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 5.000_000_1e-1;
    let p = p * r * r + r + 1.0;
    // 2^n from the bits of k (integer operations only, so it vectorises);
    // -126 <= n <= 127 after the clamp.
    let biased = k.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127);
    let scale = f32::from_bits(biased << 23);
    if x < -87.0 { 0.0 } else { p * scale }
}

/// `erfc(z)` for `z >= 0`.
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn erfc_nonneg(z: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.5 * z);
    let p = 0.170_872_77;
    let p = p * t - 0.822_152_23;
    let p = p * t + 1.488_515_9;
    let p = p * t - 1.135_203_98;
    let p = p * t + 0.278_868_07;
    let p = p * t - 0.186_288_06;
    let p = p * t + 0.096_784_18;
    let p = p * t + 0.374_091_96;
    let p = p * t + 1.000_023_68;
    let p = p * t - 1.265_512_23;
    t * exp_f32(p - z * z)
}

/// The standard normal CDF.
#[inline(always)]
pub fn phi_f32(x: f32) -> f32 {
    let e = erfc_nonneg((x * FRAC_1_SQRT_2).abs());
    if x >= 0.0 { 1.0 - 0.5 * e } else { 0.5 * e }
}

/// Whether the kernels run in f32 (and so take the fast paths here).
#[inline(always)]
pub fn is_f32<T: Float>() -> bool {
    TypeId::of::<T>() == TypeId::of::<f32>()
}

/// `e^x`: [`exp_f32`] in f32, the libm function otherwise. (The f32 to f64
/// and back conversions are exact, and the optimiser removes them.)
#[inline(always)]
pub fn exp<T: Float>(x: T) -> T {
    if is_f32::<T>() {
        T::from_f64(exp_f32(x.to_f64() as f32) as f64)
    } else {
        x.exp()
    }
}

/// The standard normal CDF `Phi(x) = (1 + erf(x / sqrt 2)) / 2`:
/// [`phi_f32`] in f32, through libm's `erf` otherwise.
#[inline(always)]
pub fn phi<T: Float>(x: T) -> T {
    if is_f32::<T>() {
        T::from_f64(phi_f32(x.to_f64() as f32) as f64)
    } else {
        let half = T::from_f64(0.5);
        half * (T::ONE + (x * T::from_f64(std::f64::consts::FRAC_1_SQRT_2)).erf())
    }
}

/// Runs `f` in a function compiled with AVX2 enabled when the CPU has it,
/// so the inlined loops of `f` are vectorised 8 wide. The result is the
/// same either way (no FMA contraction: Rust never fuses `a * b + c`).
#[inline(always)]
pub fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { avx2(f) };
        }
    }
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid() -> Vec<f32> {
        (-24_000..24_000).map(|i| i as f32 * 5e-4).collect()
    }

    fn exact_phi(x: f64) -> f64 {
        // erfc: no cancellation in the far left tail.
        0.5 * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)
    }

    #[test]
    fn exp_is_within_two_ulp() {
        for x in grid().into_iter().map(|v| v * 7.0) {
            let (got, want) = (exp_f32(x) as f64, (x as f64).exp());
            assert!(
                (got - want).abs() <= 2.5e-7 * want,
                "exp({x}) = {got}, want {want}"
            );
        }
        assert_eq!(exp_f32(-100.0), 0.0);
        assert_eq!(exp_f32(0.0), 1.0);
    }

    #[test]
    fn gelu_matches_the_exact_erf_form() {
        use crate::backend::cpu::activation::{gelu_backward, gelu_forward};
        let x = grid();
        let mut out = vec![0.0; x.len()];
        gelu_forward(&x, &mut out);
        let d: Vec<f32> = x.iter().map(|v| 0.5 + v.abs()).collect();
        let mut dx = vec![0.0; x.len()];
        gelu_backward(&x, &d, &mut dx);
        for i in 0..x.len() {
            let v = x[i] as f64;
            let want = v * exact_phi(v);
            // In the left tail the f32 rounding of z * z (relative 1e-7,
            // so absolute 1e-7 z^2 in the exponent) dominates.
            let rel = 5e-7 + 1.5e-7 * v * v;
            let tol = rel * want.abs() + 1e-30;
            assert!(
                (out[i] as f64 - want).abs() <= tol,
                "gelu({v}) = {}, want {want}",
                out[i]
            );
            let pdf = (-0.5 * v * v).exp() / (2.0 * std::f64::consts::PI).sqrt();
            let want = d[i] as f64 * (exact_phi(v) + v * pdf);
            let scale = d[i] as f64 * (exact_phi(v) + (v * pdf).abs());
            assert!(
                (dx[i] as f64 - want).abs() <= 2.0 * rel * scale + 1e-30,
                "gelu'({v}) = {}, want {want}",
                dx[i]
            );
        }
    }
}
