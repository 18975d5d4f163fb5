//! The Yeo-Johnson power transform of the objective, its exponent fitted
//! by maximum likelihood, as HEBO (Cowen-Rivers et al. 2022) warps its
//! outputs: objectives that span orders of magnitude (a loss that is huge
//! far from the optimum) are made near-Gaussian before the GP sees them,
//! so the GP's one kernel scale no longer has to explain both the far
//! cliffs and the small differences near the best trials.
//!
//! The transform is monotone, so the best trial stays the best and
//! expected improvement still ranks points by the same order.

/// Yeo-Johnson of one value under exponent `lambda`.
fn yeo_johnson(y: f64, lambda: f64) -> f64 {
    if y >= 0.0 {
        if lambda.abs() < 1e-9 {
            y.ln_1p()
        } else {
            ((y + 1.0).powf(lambda) - 1.0) / lambda
        }
    } else if (lambda - 2.0).abs() < 1e-9 {
        -(-y).ln_1p()
    } else {
        -((1.0 - y).powf(2.0 - lambda) - 1.0) / (2.0 - lambda)
    }
}

/// Profile log-likelihood of `lambda` for standardised `z` (scipy's
/// `yeojohnson_llf`); `jacobian` is `sum sign(z) ln(1 + |z|)`, which does
/// not depend on `lambda`.
fn log_likelihood(z: &[f64], jacobian: f64, lambda: f64) -> f64 {
    let n = z.len() as f64;
    let t: Vec<f64> = z.iter().map(|v| yeo_johnson(*v, lambda)).collect();
    let mean = t.iter().sum::<f64>() / n;
    let var = t.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    -0.5 * n * var.max(1e-300).ln() + (lambda - 1.0) * jacobian
}

/// `z` (finite, standardised) under the Yeo-Johnson exponent in
/// `[-2, 4]` of largest likelihood (golden-section search).
pub(super) fn power_warp(z: &[f64]) -> Vec<f64> {
    let jacobian: f64 = z.iter().map(|v| v.signum() * v.abs().ln_1p()).sum();
    let log_likelihood = |lambda| log_likelihood(z, jacobian, lambda);
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    let (mut a, mut b) = (-2.0f64, 4.0f64);
    let mut c = b - phi * (b - a);
    let mut d = a + phi * (b - a);
    let (mut fc, mut fd) = (log_likelihood(c), log_likelihood(d));
    while b - a > 1e-3 {
        if fc > fd {
            b = d;
            d = c;
            fd = fc;
            c = b - phi * (b - a);
            fc = log_likelihood(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + phi * (b - a);
            fd = log_likelihood(d);
        }
    }
    let lambda = (a + b) / 2.0;
    z.iter().map(|v| yeo_johnson(*v, lambda)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_order_and_tames_a_heavy_tail() {
        // Sign-flipped losses: most near 0, a few far below (cliffs).
        let mut y: Vec<f64> = (0..40).map(|i| -(i as f64 * 0.1)).collect();
        y.extend([-500.0, -2000.0, -10000.0]);
        let n = y.len() as f64;
        let mean = y.iter().sum::<f64>() / n;
        let std = (y.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
        let z: Vec<f64> = y.iter().map(|v| (v - mean) / std).collect();
        let w = power_warp(&z);
        for i in 1..y.len() {
            assert_eq!(
                y[i].total_cmp(&y[i - 1]),
                w[i].total_cmp(&w[i - 1]),
                "order kept at {i}"
            );
        }
        // The near-best values are spread apart relative to the whole range.
        let spread = |v: &[f64]| (v[0] - v[39]) / (v[0] - v[42]);
        assert!(
            spread(&w) > 10.0 * spread(&z),
            "{} vs {}",
            spread(&w),
            spread(&z)
        );
    }

    #[test]
    fn lambda_one_is_the_identity() {
        for y in [-3.0, -0.5, 0.0, 0.7, 5.0] {
            assert!((yeo_johnson(y, 1.0) - y).abs() < 1e-12);
        }
    }
}
