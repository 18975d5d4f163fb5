//! Quality test functions (minimisation), the same as in
//! benches/sampler/optuna_bench.py, each defined by run on a `Trial`.
#![allow(dead_code)]

use hpo_sampler::{Result, Sampler, Trial};

pub const HARTMANN6_MIN: f64 = -3.32237;
pub const BRANIN_MIN: f64 = 0.397887;
/// 5 continuous dims at -2.903534 and 5 integer dims at -3.
pub const STYBLINSKI_TANG_MIN: f64 = 5.0 * -39.16617 + 5.0 * -39.0;

pub fn hartmann6<S: Sampler + ?Sized>(t: &mut Trial<'_, S>) -> Result<f64> {
    const ALPHA: [f64; 4] = [1.0, 1.2, 3.0, 3.2];
    const A: [[f64; 6]; 4] = [
        [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
        [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
        [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
        [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
    ];
    const P: [[f64; 6]; 4] = [
        [0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
        [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
        [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
        [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381],
    ];
    let mut x = [0.0; 6];
    for (i, xi) in x.iter_mut().enumerate() {
        *xi = t.suggest_float(&format!("x{i}"), 0.0, 1.0)?;
    }
    let mut y = 0.0;
    for i in 0..4 {
        let inner: f64 = (0..6).map(|j| A[i][j] * (x[j] - P[i][j]).powi(2)).sum();
        y -= ALPHA[i] * (-inner).exp();
    }
    Ok(y)
}

pub fn branin<S: Sampler + ?Sized>(t: &mut Trial<'_, S>) -> Result<f64> {
    let x1 = t.suggest_float("x1", -5.0, 10.0)?;
    let x2 = t.suggest_float("x2", 0.0, 15.0)?;
    let pi = std::f64::consts::PI;
    let (a, b, c, r, s, tt) = (
        1.0,
        5.1 / (4.0 * pi * pi),
        5.0 / pi,
        6.0,
        10.0,
        1.0 / (8.0 * pi),
    );
    Ok(a * (x2 - b * x1 * x1 + c * x1 - r).powi(2) + s * (1.0 - tt) * x1.cos() + s)
}

/// 10-D Styblinski-Tang: x0..x4 floats in [-5, 5], x5..x9 ints in [-5, 5].
pub fn styblinski_tang10<S: Sampler + ?Sized>(t: &mut Trial<'_, S>) -> Result<f64> {
    let mut y = 0.0;
    for i in 0..10 {
        let x = if i < 5 {
            t.suggest_float(&format!("x{i}"), -5.0, 5.0)?
        } else {
            t.suggest_int(&format!("x{i}"), -5, 5)? as f64
        };
        y += x.powi(4) - 16.0 * x * x + 5.0 * x;
    }
    Ok(0.5 * y)
}
