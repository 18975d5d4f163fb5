//! The acquisition function the sampler maximises: log expected
//! improvement over the best value (Ament et al. 2023's stable form, as
//! Optuna's `LogEI`) or, on two objectives, log expected hypervolume
//! improvement over the front (`ehvi.rs`), plus the log probability of feasibility of each
//! constraint (Optuna's `LogCEI`), with gradients in the inputs.

use super::ehvi::{Normal, Strips};
use super::regressor::{GpRegressor, Posterior};
use crate::special::{log_ndtr, ndtr};

const LOG_SQRT_2PI: f64 = 0.918_938_533_204_672_8;
/// Optuna's `stabilizing_noise`.
const STABILIZING_NOISE: f64 = 1e-12;

/// Below this `z` [`log_ei_standard`] takes the asymptotic series: the
/// Mills-ratio form subtracts two logarithms of size `z^2 / 2`, whose
/// rounding grows with them (2e-4 off at `z = -1e3`, 0.14 at `-1e4`, NaN
/// from `-1e5`). Such `z` are common: at a noise floor of 1e-10 the
/// posterior near a bad trial is sure to 1e-5 of the objective's spread.
const LOG_EI_ASYMPTOTIC_BELOW: f64 = -100.0;

/// `log E[max(0, Z + z)]` for standard normal `Z`, and its derivative in `z`.
pub(crate) fn log_ei_standard(z: f64) -> (f64, f64) {
    if z < LOG_EI_ASYMPTOTIC_BELOW {
        return log_ei_series(z);
    }
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

/// [`log_ei_standard`] far in the left tail. With `x = -z`:
/// `ei = pdf(x) (1/x^2 - 3/x^4 + 15/x^6 - ...)` and
/// `cdf(z) = pdf(x) (1/x - 1/x^3 + 3/x^5 - ...)`; eight terms are exact to
/// rounding for `x >= 100`.
fn log_ei_series(z: f64) -> (f64, f64) {
    let inv = 1.0 / (z * z);
    let (mut ei_sum, mut cdf_sum, mut term) = (0.0, 0.0, 1.0);
    for k in 0..8 {
        cdf_sum += term;
        term *= -(2 * k + 1) as f64 * inv;
        ei_sum -= term;
    }
    let log_pdf = -0.5 * z * z - LOG_SQRT_2PI;
    (log_pdf + ei_sum.ln(), cdf_sum / (-z * ei_sum))
}

/// What the acquisition rewards besides feasibility.
pub(crate) enum Goal {
    /// Log EI of the objective's GP (fitted to be maximised) over the best
    /// (standardised) feasible value; `None` when no trial is feasible,
    /// where only feasibility counts.
    Improvement {
        gp: GpRegressor,
        threshold: Option<f64>,
    },
    /// Log EHVI of two objectives' GPs (fitted on standardised losses)
    /// over the feasible front's strips; `None` when no trial is feasible.
    Hypervolume {
        gps: Box<[GpRegressor; 2]>,
        strips: Option<Strips>,
    },
}

/// What the local search maximises.
pub(crate) struct Acquisition {
    pub goal: Goal,
    /// Constraint GPs (fitted on the negated standardised constraint values)
    /// and the standardised value of 0, above which a constraint holds.
    pub constraints: Vec<(GpRegressor, f64)>,
}

fn normal(mean: f64, var: f64) -> Normal {
    Normal {
        mean,
        std: (var + STABILIZING_NOISE).sqrt(),
    }
}

fn log_ei_term(f0: f64, mean: f64, var: f64) -> f64 {
    let sigma = (var + STABILIZING_NOISE).sqrt();
    log_ei_standard((mean - f0) / sigma).0 + sigma.ln()
}

impl Acquisition {
    /// The lengthscales the local search scales continuous coordinates by:
    /// the objective GP's, the shorter of the two objectives' per dimension.
    pub fn lengthscales(&self) -> Vec<f64> {
        let of = |gp: &GpRegressor| -> Vec<f64> {
            gp.params
                .inverse_squared_lengthscales
                .iter()
                .map(|t| 1.0 / t.sqrt())
                .collect()
        };
        match &self.goal {
            Goal::Improvement { gp, .. } => of(gp),
            Goal::Hypervolume { gps, .. } => of(&gps[0])
                .into_iter()
                .zip(of(&gps[1]))
                .map(|(a, b)| a.min(b))
                .collect(),
        }
    }

    /// The acquisition value at `x`.
    pub fn value(&self, x: &[f64]) -> f64 {
        self.combine_posteriors(1, |gp| vec![gp.posterior(x)])[0]
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
        match &self.goal {
            Goal::Improvement {
                gp,
                threshold: Some(f0),
            } => {
                for (t, (mean, var)) in total.iter_mut().zip(posteriors(gp)) {
                    *t += log_ei_term(*f0, mean, var);
                }
            }
            Goal::Hypervolume {
                gps,
                strips: Some(strips),
            } => {
                let first = posteriors(&gps[0]);
                let second = posteriors(&gps[1]);
                for (t, (a, b)) in total.iter_mut().zip(first.into_iter().zip(second)) {
                    *t += strips.log_ehvi([normal(a.0, a.1), normal(b.0, b.1)]).value;
                }
            }
            _ => {}
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
        // Adds `dm * d mean + dvar * d var` of a posterior to the gradient.
        let chain = |grad: &mut Vec<f64>, p: &Posterior, dm: f64, dvar: f64| {
            for (g, (a, b)) in grad.iter_mut().zip(p.d_mean.iter().zip(&p.d_var)) {
                *g += dm * a + dvar * b;
            }
        };
        match &self.goal {
            Goal::Improvement {
                gp,
                threshold: Some(f0),
            } => {
                let p = gp.posterior_grad(x);
                let sigma = (p.var + STABILIZING_NOISE).sqrt();
                let z = (p.mean - f0) / sigma;
                let (v, dv) = log_ei_standard(z);
                total += v + sigma.ln();
                // d/dmean = dv / sigma; d/dsigma = (1 - z dv) / sigma; dsigma/dvar = 1 / (2 sigma).
                let dvar = (1.0 - z * dv) / sigma / (2.0 * sigma);
                chain(&mut grad, &p, dv / sigma, dvar);
            }
            Goal::Hypervolume {
                gps,
                strips: Some(strips),
            } => {
                let p = [gps[0].posterior_grad(x), gps[1].posterior_grad(x)];
                let y = [normal(p[0].mean, p[0].var), normal(p[1].mean, p[1].var)];
                let r = strips.log_ehvi(y);
                total += r.value;
                for k in 0..2 {
                    chain(&mut grad, &p[k], r.d_mean[k], r.d_std[k] / (2.0 * y[k].std));
                }
            }
            _ => {}
        }
        for (gp, t) in &self.constraints {
            let p = gp.posterior_grad(x);
            let sigma = (p.var + STABILIZING_NOISE).sqrt();
            let z = (p.mean - t) / sigma;
            let v = log_ndtr(z);
            total += v;
            // d log cdf(z) / dz = pdf(z) / cdf(z)
            let dz = (-0.5 * z * z - LOG_SQRT_2PI - v).exp();
            let dvar = -dz * z / sigma / (2.0 * sigma);
            chain(&mut grad, &p, dz / sigma, dvar);
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
        for z in [
            -1e8, -1e3, -150.0, -30.0, -10.0, -3.0, -1.0, -0.2, 0.0, 0.7, 4.0,
        ] {
            let (v, d) = log_ei_standard(z);
            if z > -5.0 {
                let direct = (z * ndtr(z) + (-0.5 * z * z - LOG_SQRT_2PI).exp()).ln();
                assert!((v - direct).abs() < 1e-9, "z {z}: {v} vs {direct}");
            }
            assert!(v.is_finite() && d.is_finite(), "z {z}: {v}, {d}");
            let h = 1e-5;
            let fd = (log_ei_standard(z + h).0 - log_ei_standard(z - h).0) / (2.0 * h);
            assert!(
                (fd - d).abs() < 1e-4 * (1.0 + d.abs()),
                "z {z}: {d} vs {fd}"
            );
        }
    }

    /// Both forms at the switch against mpmath (50 digits: log EI
    /// -5010.1295788002498, its derivative 100.01999400419587), and the
    /// series far out against its leading term.
    #[test]
    fn log_ei_series_meets_the_direct_form() {
        let z = LOG_EI_ASYMPTOTIC_BELOW;
        let (value, slope) = (-5_010.129_578_800_25, 100.019_994_004_195_87);
        for (form, (v, d)) in [("series", log_ei_series(z)), ("direct", log_ei_standard(z))] {
            assert!((v - value).abs() < 1e-6, "{form}: {v} vs {value}");
            assert!((d - slope).abs() < 1e-7 * slope, "{form}: {d} vs {slope}");
        }
        let x: f64 = 1e6;
        let v = log_ei_standard(-x).0;
        let approx = -0.5 * x * x - 2.0 * x.ln() - LOG_SQRT_2PI;
        assert!((v - approx).abs() < 1e-6 * approx.abs(), "{v} vs {approx}");
    }
}
