//! Expected hypervolume improvement of two objectives, exact and in log
//! space, with its derivatives in the two posteriors' means and standard
//! deviations.
//!
//! Both objectives are minimised. With the front sorted by the first
//! objective, the region a new point `y` can add to the dominated
//! hypervolume (up to the reference point `r`) is a staircase of strips:
//! strip `i` spans `z1` in `[a_i, b_i)` (consecutive front points' first
//! objectives, from `-inf` to `r1`) and `z2` below `u_i` (the second
//! objective of the front point to its left, `r2` for the first strip).
//! The improvement is `sum_i (b_i - max(a_i, y1))+ (u_i - y2)+`, and for
//! independent normal `y1`, `y2` its expectation factorises per strip:
//!
//! `EHVI = sum_i [G1(b_i) - G1(a_i)] G2(u_i)`, with
//! `Gk(c) = E[(c - yk)+] = sigma_k ei((c - mu_k) / sigma_k)` and
//! `ei(z) = z Phi(z) + phi(z)`,
//!
//! so the whole sum costs one pass over the front (Emmerich et al. 2016
//! give the same decomposition). Optuna's `LogEHVI` estimates it by
//! quasi-Monte Carlo over the posterior; two objectives need no sampling.
//! Each term is kept as a logarithm (`log G` from `log_ei_standard`, the
//! difference by `log1p`-style subtraction), so the acquisition keeps a
//! slope far from the front where the improvement underflows.

use super::acquisition::log_ei_standard;
use crate::special::NORM_PDF_LOG_C;

/// The strips of a two-objective front below a reference point: strip `i`
/// runs from the previous strip's right edge (`-inf` for the first) to
/// `right[i]`, under `height[i]`.
#[derive(Debug, Clone)]
pub(crate) struct Strips {
    right: Vec<f64>,
    height: Vec<f64>,
}

/// One posterior: mean and standard deviation of an objective.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Normal {
    pub mean: f64,
    pub std: f64,
}

/// `log EHVI` and its derivatives in each objective's mean and standard
/// deviation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogEhvi {
    pub value: f64,
    pub d_mean: [f64; 2],
    pub d_std: [f64; 2],
}

/// `log(exp(a) - exp(b))` for `a >= b`.
fn log_sub_exp(a: f64, b: f64) -> f64 {
    if b == f64::NEG_INFINITY {
        return a;
    }
    a + (-(b - a).exp_m1()).ln()
}

fn log_pdf(z: f64) -> f64 {
    -0.5 * z * z - NORM_PDF_LOG_C
}

/// `log G(c)` of a posterior, with `d log G / d mean` and `d log G / d std`
/// (`dG/dmean = -Phi(z)`, `dG/dstd = phi(z)`); `-inf` at `c = -inf`.
fn log_g(c: f64, p: Normal) -> (f64, f64, f64) {
    if c == f64::NEG_INFINITY {
        return (f64::NEG_INFINITY, 0.0, 0.0);
    }
    let z = (c - p.mean) / p.std;
    let (log_ei, cdf_over_ei) = log_ei_standard(z);
    let pdf_over_ei = (log_pdf(z) - log_ei).exp();
    (
        p.std.ln() + log_ei,
        -cdf_over_ei / p.std,
        pdf_over_ei / p.std,
    )
}

impl Strips {
    /// The strips of `front` (loss pairs, any order; dominated points and
    /// points outside the reference box are dropped) below `reference`.
    pub fn new(front: &[[f64; 2]], reference: [f64; 2]) -> Self {
        let mut points: Vec<[f64; 2]> = front
            .iter()
            .copied()
            .filter(|p| p[0] < reference[0] && p[1] < reference[1])
            .collect();
        points.sort_by(|a, b| a[0].total_cmp(&b[0]).then(a[1].total_cmp(&b[1])));
        // Sorted by the first objective, a point is on the front when its
        // second is below every earlier point's.
        let mut kept: Vec<[f64; 2]> = Vec::new();
        for p in points {
            if kept.last().is_none_or(|q| p[1] < q[1]) {
                kept.push(p);
            }
        }
        let mut height = vec![reference[1]];
        height.extend(kept.iter().map(|p| p[1]));
        let mut right: Vec<f64> = kept.iter().map(|p| p[0]).collect();
        right.push(reference[0]);
        Strips { right, height }
    }

    /// `log EHVI` of a point whose two objectives are the independent
    /// normals `y`, with its derivatives.
    pub fn log_ehvi(&self, y: [Normal; 2]) -> LogEhvi {
        // A running log-sum-exp over the strips: the largest term so far,
        // the sum of exp(term - largest), and that sum weighted by each
        // term's derivatives (mean and std of the width, then of the height).
        let (mut max, mut sum, mut weighted) = (f64::NEG_INFINITY, 0.0, [0.0; 4]);
        // G1 at a strip's left edge is G1 at the previous strip's right edge.
        let mut left = log_g(f64::NEG_INFINITY, y[0]);
        for (&b, &u) in self.right.iter().zip(&self.height) {
            let (log_ga, dm_a, ds_a) = left;
            let (log_gb, dm_b, ds_b) = log_g(b, y[0]);
            left = (log_gb, dm_b, ds_b);
            let log_width = log_sub_exp(log_gb, log_ga);
            if log_width == f64::NEG_INFINITY || log_width.is_nan() {
                continue;
            }
            // d log(Gb - Ga) = (Gb dlogGb - Ga dlogGa) / (Gb - Ga).
            let wb = (log_gb - log_width).exp();
            let wa = if log_ga == f64::NEG_INFINITY {
                0.0
            } else {
                (log_ga - log_width).exp()
            };
            let (log_h, dm_h, ds_h) = log_g(u, y[1]);
            let term = log_width + log_h;
            let d = [wb * dm_b - wa * dm_a, wb * ds_b - wa * ds_a, dm_h, ds_h];
            let (scale, w) = if term > max {
                let scale = (max - term).exp();
                max = term;
                (scale, 1.0)
            } else {
                (1.0, (term - max).exp())
            };
            sum = sum * scale + w;
            for k in 0..4 {
                weighted[k] = weighted[k] * scale + w * d[k];
            }
        }
        if max == f64::NEG_INFINITY {
            return LogEhvi {
                value: f64::NEG_INFINITY,
                d_mean: [0.0; 2],
                d_std: [0.0; 2],
            };
        }
        LogEhvi {
            value: max + sum.ln(),
            d_mean: [weighted[0] / sum, weighted[2] / sum],
            d_std: [weighted[1] / sum, weighted[3] / sum],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::multi::hypervolume;
    use crate::rng::Rng;

    fn normal(mean: f64, std: f64) -> Normal {
        Normal { mean, std }
    }

    fn hvi(front: &[[f64; 2]], reference: [f64; 2], y: [f64; 2]) -> f64 {
        let as_vecs = |ps: &[[f64; 2]]| ps.iter().map(|p| p.to_vec()).collect::<Vec<_>>();
        let before = hypervolume(&as_vecs(front), &reference);
        let mut with = as_vecs(front);
        if y[0] < reference[0] && y[1] < reference[1] {
            with.push(y.to_vec());
        }
        hypervolume(&with, &reference) - before
    }

    const FRONT: [[f64; 2]; 5] = [
        [0.0, 3.0],
        [1.0, 1.5],
        [2.5, 0.5],
        [1.5, 2.0], // dominated by (1.0, 1.5)
        [3.5, 0.2],
    ];
    const REFERENCE: [f64; 2] = [4.0, 4.0];

    /// Against the mean of the exact improvement over normal draws.
    #[test]
    fn matches_monte_carlo() {
        let strips = Strips::new(&FRONT, REFERENCE);
        let mut rng = Rng::seed_from(7);
        for (m, s) in [
            ([1.2, 1.0], [0.5, 0.7]),
            ([0.5, 0.5], [0.1, 0.2]),
            ([3.0, 3.0], [1.0, 1.0]),
            ([-1.0, 5.0], [0.3, 2.0]),
        ] {
            let exact = strips
                .log_ehvi([normal(m[0], s[0]), normal(m[1], s[1])])
                .value
                .exp();
            let n = 200_000;
            let mut sum = 0.0;
            for _ in 0..n {
                let y: Vec<f64> = (0..2)
                    .map(|k| {
                        // Box-Muller from two uniforms.
                        let (u1, u2) = (1.0 - rng.next_f64(), rng.next_f64());
                        let g = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                        m[k] + s[k] * g
                    })
                    .collect();
                sum += hvi(&FRONT, REFERENCE, [y[0], y[1]]);
            }
            let mc = sum / n as f64;
            assert!(
                (exact - mc).abs() < 0.01 * exact.max(1e-3),
                "mean {m:?} std {s:?}: exact {exact} vs Monte Carlo {mc}"
            );
        }
    }

    /// With a tiny spread the expectation is the improvement at the mean.
    #[test]
    fn a_sure_point_improves_by_its_hypervolume() {
        let strips = Strips::new(&FRONT, REFERENCE);
        for y in [[0.5, 0.5], [3.0, 1.0], [-1.0, 3.5], [2.0, 0.1]] {
            let got = strips
                .log_ehvi([normal(y[0], 1e-9), normal(y[1], 1e-9)])
                .value
                .exp();
            let want = hvi(&FRONT, REFERENCE, y);
            assert!((got - want).abs() < 1e-6, "{y:?}: {got} vs {want}");
        }
    }

    /// The derivatives against central differences, near the front and far
    /// beyond it (where the improvement itself underflows).
    #[test]
    fn derivatives_match_differences() {
        let strips = Strips::new(&FRONT, REFERENCE);
        for (m, s) in [
            ([1.2, 1.0], [0.5, 0.7]),
            ([2.0, 2.0], [0.05, 0.1]),
            ([30.0, 40.0], [0.5, 0.5]),
        ] {
            let at = |m: [f64; 2], s: [f64; 2]| {
                strips.log_ehvi([normal(m[0], s[0]), normal(m[1], s[1])])
            };
            let base = at(m, s);
            assert!(base.value.is_finite(), "{m:?}: {}", base.value);
            // Central difference of log EHVI with mean (or std) k moved.
            let difference = |k: usize, of_std: bool| {
                let h = 1e-6;
                let moved = |d: f64| {
                    let (mut m, mut s) = (m, s);
                    if of_std {
                        s[k] += d
                    } else {
                        m[k] += d
                    }
                    at(m, s).value
                };
                (moved(h) - moved(-h)) / (2.0 * h)
            };
            for k in 0..2 {
                for (of_std, analytic) in [(false, base.d_mean[k]), (true, base.d_std[k])] {
                    let fd = difference(k, of_std);
                    assert!(
                        (fd - analytic).abs() < 1e-4 * (1.0 + fd.abs()),
                        "objective {k} (std: {of_std}) at {m:?}: {analytic} vs {fd}"
                    );
                }
            }
        }
    }
}
