//! The acquisition function the sampler maximises: log expected
//! improvement over the best value (Ament et al. 2023's stable form, as
//! Optuna's `LogEI`), plus the log probability of feasibility of each
//! constraint (Optuna's `LogCEI`), with gradients in the inputs.

use super::regressor::GpRegressor;
use crate::special::{log_ndtr, ndtr};

const LOG_SQRT_2PI: f64 = 0.918_938_533_204_672_8;
/// Optuna's `stabilizing_noise`.
const STABILIZING_NOISE: f64 = 1e-12;

/// `log E[max(0, Z + z)]` for standard normal `Z`, and its derivative in `z`.
pub(crate) fn log_ei_standard(z: f64) -> (f64, f64) {
    let log_pdf = -0.5 * z * z - LOG_SQRT_2PI;
    let value = if z > -1.0 {
        (z * ndtr(z) + log_pdf.exp()).ln()
    } else {
        // ei = pdf * (1 + z * cdf / pdf), with the Mills ratio from log_ndtr.
        log_pdf + (z * (log_ndtr(z) - log_pdf).exp()).ln_1p()
    };
    // d/dz ei = cdf(z).
    (value, (log_ndtr(z) - value).exp())
}

/// What the local search maximises.
pub(crate) struct Acquisition {
    pub objective: GpRegressor,
    /// The best (standardised, maximised) feasible value; `None` when no
    /// trial is feasible, where only feasibility counts.
    pub threshold: Option<f64>,
    /// Constraint GPs (fitted on the negated standardised constraint values)
    /// and the standardised value of 0, above which a constraint holds.
    pub constraints: Vec<(GpRegressor, f64)>,
}

impl Acquisition {
    /// The acquisition value at `x`.
    pub fn value(&self, x: &[f64]) -> f64 {
        let mut total = 0.0;
        if let Some(f0) = self.threshold {
            let (mean, var) = self.objective.posterior(x);
            let sigma = (var + STABILIZING_NOISE).sqrt();
            total += log_ei_standard((mean - f0) / sigma).0 + sigma.ln();
        }
        for (gp, t) in &self.constraints {
            let (mean, var) = gp.posterior(x);
            total += log_ndtr((mean - t) / (var + STABILIZING_NOISE).sqrt());
        }
        total
    }

    /// The acquisition values at many points.
    pub fn values(&self, xs: &[Vec<f64>]) -> Vec<f64> {
        self.combine_posteriors(xs.len(), |gp| gp.posterior_batch(xs))
    }

    /// The acquisition values at `base` with coordinate `d` set to each of
    /// `values` in turn.
    pub fn values_along(&self, base: &[f64], d: usize, values: &[f64]) -> Vec<f64> {
        self.combine_posteriors(values.len(), |gp| gp.posterior_along(base, d, values))
    }

    /// The acquisition values at `m` points, given each GP's posterior
    /// means and variances there.
    fn combine_posteriors(
        &self,
        m: usize,
        posteriors: impl Fn(&GpRegressor) -> Vec<(f64, f64)>,
    ) -> Vec<f64> {
        let mut total = vec![0.0; m];
        if let Some(f0) = self.threshold {
            for (t, (mean, var)) in total.iter_mut().zip(posteriors(&self.objective)) {
                let sigma = (var + STABILIZING_NOISE).sqrt();
                *t += log_ei_standard((mean - f0) / sigma).0 + sigma.ln();
            }
        }
        for (gp, th) in &self.constraints {
            for (t, (mean, var)) in total.iter_mut().zip(posteriors(gp)) {
                *t += log_ndtr((mean - th) / (var + STABILIZING_NOISE).sqrt());
            }
        }
        total
    }

    /// The value at `x` and its gradient.
    pub fn value_grad(&self, x: &[f64]) -> (f64, Vec<f64>) {
        let mut total = 0.0;
        let mut grad = vec![0.0; x.len()];
        if let Some(f0) = self.threshold {
            let p = self.objective.posterior_grad(x);
            let sigma = (p.var + STABILIZING_NOISE).sqrt();
            let z = (p.mean - f0) / sigma;
            let (v, dv) = log_ei_standard(z);
            total += v + sigma.ln();
            // d/dmean = dv / sigma; d/dsigma = (1 - z dv) / sigma; dsigma/dvar = 1 / (2 sigma).
            let dm = dv / sigma;
            let dvar = (1.0 - z * dv) / sigma / (2.0 * sigma);
            for (g, (a, b)) in grad.iter_mut().zip(p.d_mean.iter().zip(&p.d_var)) {
                *g += dm * a + dvar * b;
            }
        }
        for (gp, t) in &self.constraints {
            let p = gp.posterior_grad(x);
            let sigma = (p.var + STABILIZING_NOISE).sqrt();
            let z = (p.mean - t) / sigma;
            let v = log_ndtr(z);
            total += v;
            // d log cdf(z) / dz = pdf(z) / cdf(z)
            let dz = (-0.5 * z * z - LOG_SQRT_2PI - v).exp();
            let dm = dz / sigma;
            let dvar = -dz * z / sigma / (2.0 * sigma);
            for (g, (a, b)) in grad.iter_mut().zip(p.d_mean.iter().zip(&p.d_var)) {
                *g += dm * a + dvar * b;
            }
        }
        (total, grad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// log EI against its definition `z cdf(z) + pdf(z)` where that is
    /// exact, its derivative against central differences, and finite far
    /// in the left tail.
    #[test]
    fn log_ei_and_its_derivative() {
        for z in [-30.0, -10.0, -3.0, -1.0, -0.2, 0.0, 0.7, 4.0] {
            let (v, d) = log_ei_standard(z);
            if z > -5.0 {
                let direct = (z * ndtr(z) + (-0.5 * z * z - LOG_SQRT_2PI).exp()).ln();
                assert!((v - direct).abs() < 1e-9, "z {z}: {v} vs {direct}");
            }
            assert!(v.is_finite() && d.is_finite());
            let h = 1e-5;
            let fd = (log_ei_standard(z + h).0 - log_ei_standard(z - h).0) / (2.0 * h);
            assert!(
                (fd - d).abs() < 1e-4 * (1.0 + d.abs()),
                "z {z}: {d} vs {fd}"
            );
        }
    }
}
