//! A small box-constrained limited-memory BFGS (projected L-BFGS): the
//! two-loop direction restricted to the free variables (those not held at
//! a bound by their projected gradient), a projected backtracking Armijo
//! line search, and SciPy's L-BFGS-B stopping rules (`pgtol` on the
//! projected gradient's largest component, `ftol` on the relative
//! decrease). It stands in for SciPy's L-BFGS-B, which Optuna uses for
//! both the hyperparameters (unbounded) and the acquisition function
//! (bounded).

/// Stopping rules.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub pgtol: f64,
    /// SciPy's default `factr * eps`.
    pub ftol: f64,
    pub max_iters: usize,
    pub memory: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            pgtol: 1e-5,
            ftol: 1e7 * f64::EPSILON,
            max_iters: 15_000,
            memory: 10,
        }
    }
}

/// The minimum found and the number of iterations taken.
#[derive(Debug, Clone)]
pub struct Minimum {
    pub x: Vec<f64>,
    pub f: f64,
    pub iterations: usize,
}

fn project(x: &mut [f64], bounds: &[(f64, f64)]) {
    for (v, (lo, hi)) in x.iter_mut().zip(bounds) {
        *v = v.clamp(*lo, *hi);
    }
}

/// Which variables a bound holds: at the bound with the gradient pushing out.
fn held(x: &[f64], g: &[f64], bounds: &[(f64, f64)]) -> Vec<bool> {
    x.iter()
        .zip(g)
        .zip(bounds)
        .map(|((x, g), (lo, hi))| (*x <= *lo && *g > 0.0) || (*x >= *hi && *g < 0.0))
        .collect()
}

fn projected_gradient_norm(x: &[f64], g: &[f64], bounds: &[(f64, f64)]) -> f64 {
    x.iter()
        .zip(g)
        .zip(bounds)
        .map(|((x, g), (lo, hi))| ((x - g).clamp(*lo, *hi) - x).abs())
        .fold(0.0, f64::max)
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Minimise `f` (value and gradient; `None` where undefined, treated as
/// +inf by the line search) from `x0` within `bounds`. `None` when `f` is
/// undefined at the start.
pub fn minimize<F>(mut f: F, x0: Vec<f64>, bounds: &[(f64, f64)], opts: Options) -> Option<Minimum>
where
    F: FnMut(&[f64]) -> Option<(f64, Vec<f64>)>,
{
    let mut x = x0;
    project(&mut x, bounds);
    let (mut fx, mut g) = f(&x)?;
    let mut s_hist: Vec<Vec<f64>> = Vec::new();
    let mut y_hist: Vec<Vec<f64>> = Vec::new();
    let mut iterations = 0;
    while iterations < opts.max_iters {
        if projected_gradient_norm(&x, &g, bounds) <= opts.pgtol {
            break;
        }
        let hold = held(&x, &g, bounds);
        // Two-loop recursion on the free variables.
        let mut q: Vec<f64> = g
            .iter()
            .zip(&hold)
            .map(|(g, h)| if *h { 0.0 } else { *g })
            .collect();
        let m = s_hist.len();
        let mut a = vec![0.0; m];
        for i in (0..m).rev() {
            let rho = 1.0 / dot(&y_hist[i], &s_hist[i]);
            a[i] = rho * dot(&s_hist[i], &q);
            for (qj, yj) in q.iter_mut().zip(&y_hist[i]) {
                *qj -= a[i] * yj;
            }
        }
        if let (Some(s), Some(y)) = (s_hist.last(), y_hist.last()) {
            let gamma = dot(s, y) / dot(y, y);
            q.iter_mut().for_each(|v| *v *= gamma);
        }
        for i in 0..m {
            let rho = 1.0 / dot(&y_hist[i], &s_hist[i]);
            let b = rho * dot(&y_hist[i], &q);
            for (qj, sj) in q.iter_mut().zip(&s_hist[i]) {
                *qj += sj * (a[i] - b);
            }
        }
        let mut d: Vec<f64> = q
            .iter()
            .zip(&hold)
            .map(|(v, h)| if *h { 0.0 } else { -v })
            .collect();
        if dot(&d, &g) >= 0.0 {
            // Not a descent direction: forget the curvature, steepest descent.
            s_hist.clear();
            y_hist.clear();
            d = g
                .iter()
                .zip(&hold)
                .map(|(g, h)| if *h { 0.0 } else { -g })
                .collect();
        }
        // First step of a fresh memory: at most a unit move in the largest component.
        let mut t = if s_hist.is_empty() {
            let dmax = d.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            if dmax > 0.0 {
                (1.0 / dmax).min(1.0)
            } else {
                1.0
            }
        } else {
            1.0
        };
        let mut accepted = None;
        for _ in 0..40 {
            let mut xn: Vec<f64> = x.iter().zip(&d).map(|(x, d)| x + t * d).collect();
            project(&mut xn, bounds);
            let step: Vec<f64> = xn.iter().zip(&x).map(|(a, b)| a - b).collect();
            if step.iter().all(|v| *v == 0.0) {
                break;
            }
            if let Some((fn_, gn)) = f(&xn)
                && fn_ <= fx + 1e-4 * dot(&g, &step)
            {
                accepted = Some((xn, fn_, gn, step));
                break;
            }
            t *= 0.5;
        }
        iterations += 1;
        let Some((xn, fn_, gn, step)) = accepted else {
            break;
        };
        let yv: Vec<f64> = gn.iter().zip(&g).map(|(a, b)| a - b).collect();
        if dot(&step, &yv) > 1e-10 * dot(&yv, &yv).max(1e-300) {
            if s_hist.len() == opts.memory {
                s_hist.remove(0);
                y_hist.remove(0);
            }
            s_hist.push(step);
            y_hist.push(yv);
        }
        let decrease = fx - fn_;
        x = xn;
        fx = fn_;
        g = gn;
        if decrease <= opts.ftol * fx.abs().max(fn_.abs()).max(1.0) {
            break;
        }
    }
    Some(Minimum {
        x,
        f: fx,
        iterations,
    })
}
