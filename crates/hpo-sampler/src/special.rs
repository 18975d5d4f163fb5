//! Special functions for the truncated-normal kernels: erf/erfc (a port of
//! FreeBSD's `s_erf.c`, the same algorithm Optuna ports in `_erf.py`), the
//! normal CDF and its log, its inverse, and the log of a Gaussian mass on an
//! interval (Optuna's `_truncnorm._log_gauss_mass`).
//!
//! erf/erfc are not taken from the `libm` crate: its musl arrangement of the
//! same polynomials is up to 1 ulp (erf) and 3 ulps (erfc) away from this
//! port (`tests/erf_libm.rs` says where), which would move the samplers'
//! output, and the log-tail below shares this port's coefficients.

// The coefficients are FreeBSD's, digit for digit.
#![allow(clippy::excessive_precision)]

const ERX: f64 = 8.450_629_115_104_675e-1;
#[cfg(any(test, feature = "testing"))]
const EFX: f64 = 1.283_791_670_955_125_9e-1;
const PP: [f64; 5] = [
    1.283_791_670_955_125_6e-1,
    -3.250_421_072_470_015e-1,
    -2.848_174_957_559_851e-2,
    -5.770_270_296_489_442e-3,
    -2.376_301_665_665_016_3e-5,
];
const QQ: [f64; 5] = [
    3.979_172_239_591_553_5e-1,
    6.502_224_998_876_729e-2,
    5.081_306_281_875_766e-3,
    1.324_947_380_043_216_4e-4,
    -3.960_228_278_775_368e-6,
];
const PA: [f64; 7] = [
    -2.362_118_560_752_659_4e-3,
    4.148_561_186_837_483e-1,
    -3.722_078_760_357_013e-1,
    3.183_466_199_011_617_5e-1,
    -1.108_946_942_823_966_8e-1,
    3.547_830_432_561_823_6e-2,
    -2.166_375_594_868_790_8e-3,
];
const QA: [f64; 6] = [
    1.064_208_804_008_442_3e-1,
    5.403_979_177_021_71e-1,
    7.182_865_441_419_627e-2,
    1.261_712_198_087_616_5e-1,
    1.363_708_391_202_905e-2,
    1.198_449_984_679_910_8e-2,
];
const RA: [f64; 8] = [
    -9.864_944_034_847_148e-3,
    -6.938_585_727_071_818e-1,
    -1.055_862_622_532_329_1e1,
    -6.237_533_245_032_601e1,
    -1.623_966_694_625_734_7e2,
    -1.846_050_929_067_110_3e2,
    -8.128_743_550_630_66e1,
    -9.814_329_344_169_145,
];
const SA: [f64; 8] = [
    1.965_127_166_743_925_7e1,
    1.376_577_541_435_190_4e2,
    4.345_658_774_752_292_3e2,
    6.453_872_717_332_679e2,
    4.290_081_400_275_678_4e2,
    1.086_350_055_417_794_3e2,
    6.570_249_770_319_282,
    -6.042_441_521_485_81e-2,
];
const RB: [f64; 7] = [
    -9.864_942_924_700_099e-3,
    -7.992_832_376_805_23e-1,
    -1.775_795_491_775_475_2e1,
    -1.606_363_848_558_219_2e2,
    -6.375_664_433_683_896e2,
    -1.025_095_131_611_077_2e3,
    -4.835_191_916_086_514e2,
];
const SB: [f64; 7] = [
    3.033_806_074_348_246e1,
    3.257_925_129_965_739e2,
    1.536_729_586_084_437e3,
    3.199_858_219_508_595_6e3,
    2.553_050_406_433_164_4e3,
    4.745_285_412_069_553_6e2,
    -2.244_095_244_658_581_7e1,
];

/// `c[0] + z c[1] + z^2 c[2] + ...`
#[inline]
fn poly(c: &[f64], z: f64) -> f64 {
    c.iter().rev().fold(0.0, |acc, &k| acc * z + k)
}

/// `1 + z c[0] + z^2 c[1] + ...`
#[inline]
fn poly1(c: &[f64], z: f64) -> f64 {
    1.0 + z * poly(c, z)
}

/// `exp(-x^2 - 0.5625 + R/S) / x` for the tails, split as FreeBSD does so
/// that `x^2` loses no precision.
#[inline]
fn tail(ax: f64) -> f64 {
    let s = 1.0 / (ax * ax);
    let (r, big_s) = if ax < 1.0 / 0.35 {
        (poly(&RA, s), poly1(&SA, s))
    } else {
        (poly(&RB, s), poly1(&SB, s))
    };
    let z = f64::from_bits(ax.to_bits() & 0xffff_ffff_0000_0000);
    (-z * z - 0.5625).exp() * ((z - ax) * (z + ax) + r / big_s).exp() / ax
}

/// The error function.
#[cfg(any(test, feature = "testing"))]
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let ax = x.abs();
    if ax < 0.84375 {
        if ax < 2f64.powi(-28) {
            return x + EFX * x;
        }
        let z = x * x;
        return x + x * (poly(&PP, z) / poly1(&QQ, z));
    }
    let magnitude = if ax < 1.25 {
        let s = ax - 1.0;
        ERX + poly(&PA, s) / poly1(&QA, s)
    } else if ax >= 6.0 {
        1.0
    } else {
        1.0 - tail(ax)
    };
    magnitude.copysign(x)
}

/// The complementary error function, accurate in the right tail.
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let ax = x.abs();
    if ax < 0.84375 {
        if ax < 2f64.powi(-56) {
            return 1.0 - x;
        }
        let z = x * x;
        let y = poly(&PP, z) / poly1(&QQ, z);
        return if x < 0.25 {
            1.0 - (x + x * y)
        } else {
            0.5 - (x * y + (x - 0.5))
        };
    }
    if ax < 1.25 {
        let s = ax - 1.0;
        let pq = poly(&PA, s) / poly1(&QA, s);
        return if x >= 0.0 {
            (1.0 - ERX) - pq
        } else {
            1.0 + (ERX + pq)
        };
    }
    if ax < 28.0 {
        if x < -6.0 {
            return 2.0;
        }
        let r = tail(ax);
        return if x > 0.0 { r } else { 2.0 - r };
    }
    if x > 0.0 { 0.0 } else { 2.0 }
}

const SQRT_2: f64 = std::f64::consts::SQRT_2;
/// `0.5 * ln(2 pi)`
pub const NORM_PDF_LOG_C: f64 = 0.918_938_533_204_672_8;

/// Standard normal CDF.
#[inline]
pub fn ndtr(a: f64) -> f64 {
    0.5 * erfc(-a / SQRT_2)
}

/// `ln(erfc(ax))` for `1.25 <= ax < 1e150`, from the same tail formula as
/// `erfc` but kept in log form, so it neither underflows nor pays an
/// `exp` followed by a `ln`.
#[inline]
fn log_erfc_tail(ax: f64) -> f64 {
    let s = 1.0 / (ax * ax);
    let (r, big_s) = if ax < 1.0 / 0.35 {
        (poly(&RA, s), poly1(&SA, s))
    } else {
        (poly(&RB, s), poly1(&SB, s))
    };
    let z = f64::from_bits(ax.to_bits() & 0xffff_ffff_0000_0000);
    (-z * z - 0.5625) + ((z - ax) * (z + ax) + r / big_s) - ax.ln()
}

/// `ln(ndtr(a))`, accurate in both tails (Optuna's `_log_ndtr_single`,
/// with the left tail from `log_erfc_tail` instead of an asymptotic series).
pub fn log_ndtr(a: f64) -> f64 {
    if a > 6.0 {
        return -ndtr(-a);
    }
    let x = -a / SQRT_2;
    if (1.25..1e150).contains(&x) {
        return std::f64::consts::LN_2.mul_add(-1.0, log_erfc_tail(x));
    }
    if a > -20.0 {
        return ndtr(a).ln();
    }
    let log_lhs = -0.5 * a * a - (-a).ln() - NORM_PDF_LOG_C;
    let mut last_total: f64 = 0.0;
    let mut rhs: f64 = 1.0;
    let mut numerator = 1.0;
    let mut denom_factor = 1.0;
    let denom_cons = 1.0 / (a * a);
    let mut sign = 1.0;
    let mut i = 0.0;
    while (last_total - rhs).abs() > f64::EPSILON {
        i += 1.0;
        last_total = rhs;
        sign = -sign;
        denom_factor *= denom_cons;
        numerator *= 2.0 * i - 1.0;
        rhs += sign * numerator * denom_factor;
    }
    log_lhs + rhs.ln()
}

/// `ln(exp(x) - exp(y))` for `x >= y`.
#[inline]
fn log_diff(x: f64, y: f64) -> f64 {
    x + (-(y - x).exp()).ln_1p()
}

/// Log of the standard normal mass on `[a, b]`.
pub fn log_gauss_mass(a: f64, b: f64) -> f64 {
    // In one tail, the far end's share is below e^-40 (under an ulp) once
    // (b^2 - a^2) / 2 > 40, and then only the near end's tail mass counts.
    if b <= 0.0 {
        if 0.5 * (a * a - b * b) > 40.0 {
            return log_ndtr(b);
        }
        log_diff(log_ndtr(b), log_ndtr(a))
    } else if a > 0.0 {
        if 0.5 * (b * b - a * a) > 40.0 {
            return log_ndtr(-a);
        }
        log_diff(log_ndtr(-a), log_ndtr(-b))
    } else {
        // Central case; both tails below 1e-16 are exactly negligible.
        if a < -8.5 && b > 8.5 {
            return 0.0;
        }
        let left = if a < -8.5 { 0.0 } else { ndtr(a) };
        let right = if b > 8.5 { 0.0 } else { ndtr(-b) };
        (-left - right).ln_1p()
    }
}

/// Inverse of the standard normal CDF for `p` in `[0, 1]`: Acklam's
/// rational approximation, relative error below 1.15e-9. That is plenty
/// for drawing samples (the quantiles are random numbers), and polishing
/// it to a few ulps with a Halley step costs an `erfc` and an `exp` per
/// draw, a tenth of a TPE ask at 96 candidates. Callers pass `p <= 0.5`
/// where they can, for accuracy.
pub fn ndtri(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    let tail_x = |q: f64| {
        let t = (-2.0 * q.ln()).sqrt();
        (((((C[0] * t + C[1]) * t + C[2]) * t + C[3]) * t + C[4]) * t + C[5])
            / ((((D[0] * t + D[1]) * t + D[2]) * t + D[3]) * t + 1.0)
    };
    if p < 0.02425 {
        tail_x(p)
    } else if p <= 1.0 - 0.02425 {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -tail_x(1.0 - p)
    }
}

/// Quantile `q` of the standard normal truncated to `[a, b]` (`a < b`).
/// Works from whichever tail keeps the most precision.
#[cfg(test)]
pub fn truncnorm_ppf(q: f64, a: f64, b: f64) -> f64 {
    truncnorm_ppf_with_tails(q, a, b, truncnorm_tails(a, b))
}

/// `(ndtr(a), ndtr(-b))`: what [`truncnorm_ppf_with_tails`] needs of the
/// bounds, for a caller drawing many quantiles of one truncated normal.
pub fn truncnorm_tails(a: f64, b: f64) -> (f64, f64) {
    (ndtr(a), ndtr(-b))
}

/// [`truncnorm_ppf`] given [`truncnorm_tails`]`(a, b)`; the same bits.
pub fn truncnorm_ppf_with_tails(q: f64, a: f64, b: f64, (phi_a, sf_b): (f64, f64)) -> f64 {
    let mass = 1.0 - phi_a - sf_b;
    let below = phi_a + q * mass;
    let x = if below <= 0.5 {
        ndtri(below)
    } else {
        -ndtri(sf_b + (1.0 - q) * mass)
    };
    x.clamp(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_known_values() {
        // Reference values from mpmath.
        let cases = [
            (0.1, 0.112_462_916_018_284_9),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.5, 0.999_999_256_901_627_7),
        ];
        for (x, want) in cases {
            assert!((erf(x) - want).abs() < 1e-15, "erf({x})");
            assert!((erf(-x) + want).abs() < 1e-15, "erf(-{x})");
        }
        // erfc keeps relative accuracy deep in the tail.
        let e5 = erfc(5.0);
        assert!(
            (e5 / 1.537_459_794_428_034_8e-12 - 1.0).abs() < 1e-13,
            "{e5}"
        );
    }

    #[test]
    fn ndtri_inverts_ndtr() {
        for &p in &[
            1e-300, 1e-20, 1e-5, 0.01, 0.1, 0.3, 0.5, 0.7, 0.99, 0.999_999,
        ] {
            let x = ndtri(p);
            let back = ndtr(x);
            // x within 1.15e-9 relative moves ndtr(x) by phi(x) |x| times
            // that, and phi(x) / ndtr(x) < |x| + 1 / |x| below the mean.
            let tolerance = 1.2e-9 * (x * x + 1.0);
            assert!(
                ((back - p) / p).abs() < tolerance,
                "p={p} x={x} back={back}"
            );
        }
    }

    #[test]
    fn log_ndtr_tail_matches_series() {
        // Optuna's asymptotic series (the branch below -20) against the tail formula.
        for &a in &[-2.0f64, -5.0, -19.0, -25.0, -40.0, -300.0] {
            let series = {
                let log_lhs = -0.5 * a * a - (-a).ln() - NORM_PDF_LOG_C;
                let (mut last, mut rhs, mut num, mut den, mut sign) =
                    (0.0f64, 1.0f64, 1.0, 1.0, 1.0);
                let mut i = 0.0;
                while (last - rhs).abs() > f64::EPSILON {
                    i += 1.0;
                    last = rhs;
                    sign = -sign;
                    den /= a * a;
                    num *= 2.0 * i - 1.0;
                    rhs += sign * num * den;
                }
                log_lhs + rhs.ln()
            };
            let got = log_ndtr(a);
            if a < -19.0 {
                assert!(
                    ((got - series) / series).abs() < 1e-13,
                    "{a}: {got} vs {series}"
                );
            }
            if a > -37.0 {
                let direct = ndtr(a).ln();
                assert!(
                    ((got - direct) / direct).abs() < 1e-13,
                    "{a}: {got} vs {direct}"
                );
            }
        }
    }

    #[test]
    fn log_gauss_mass_matches_cases() {
        // Whole line, half line, far tail.
        assert!(log_gauss_mass(-40.0, 40.0).abs() < 1e-15);
        assert!((log_gauss_mass(0.0, 50.0) - 0.5f64.ln()).abs() < 1e-14);
        assert!((log_gauss_mass(-50.0, 0.0) - 0.5f64.ln()).abs() < 1e-14);
        // Optuna's _truncnorm._log_gauss_mass(10, 11) = -53.23131023...
        let m = log_gauss_mass(10.0, 11.0);
        assert!((m + 53.231_310_23).abs() < 1e-7, "{m}");
        // The one-tail shortcut agrees with the full difference.
        let full = log_diff(log_ndtr(-3.0), log_ndtr(-12.0));
        assert!((log_gauss_mass(3.0, 12.0) - full).abs() < 1e-15);
        assert!((log_gauss_mass(-12.0, -3.0) - full).abs() < 1e-15);
    }

    #[test]
    fn truncnorm_ppf_stays_inside_and_is_monotone() {
        let (a, b) = (-0.3, 7.0);
        let mut prev = a;
        for i in 0..=100 {
            let x = truncnorm_ppf(i as f64 / 100.0, a, b);
            assert!((a..=b).contains(&x));
            assert!(x >= prev);
            prev = x;
        }
    }
}
