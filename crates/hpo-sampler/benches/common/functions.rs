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

/// A 6-D mixed space (the GP bench's): a float, a log float, an int, a
/// stepped int and two categoricals, with the float and the log float
/// coupled. Minimum 0.0 at x = 1.3, lr = 10^(0.3 x - 2),
/// layers = 7, width = 208, act = gelu, norm = layer.
pub fn mixed6<S: Sampler + ?Sized>(t: &mut Trial<'_, S>) -> Result<f64> {
    use hpo_sampler::ParamValue;
    let s = |v: &str| ParamValue::Str(v.into());
    let x = t.suggest_float("x", -5.0, 5.0)?;
    let lr = t.suggest_float_with("lr", 1e-4, 1.0, true, None)?;
    let layers = t.suggest_int("layers", 1, 12)? as f64;
    let width = t.suggest_int_with("width", 16, 512, false, 16)? as f64;
    let act = t.suggest_categorical("act", &[s("relu"), s("gelu"), s("tanh"), s("silu")])?;
    let norm = t.suggest_categorical("norm", &[s("none"), s("batch"), s("layer")])?;
    let act_cost = match act {
        ParamValue::Str(a) if a == "relu" => 0.3,
        ParamValue::Str(a) if a == "gelu" => 0.0,
        ParamValue::Str(a) if a == "tanh" => 0.6,
        _ => 0.2,
    };
    let norm_cost = match norm {
        ParamValue::Str(a) if a == "none" => 0.5,
        ParamValue::Str(a) if a == "batch" => 0.25,
        _ => 0.0,
    };
    let u = lr.log10();
    Ok((x - 1.3).powi(2)
        + 2.0 * (u + 2.0 - 0.3 * x).powi(2)
        + ((layers - 7.0) / 3.0).powi(2)
        + ((width - 208.0) / 160.0).powi(2)
        + act_cost
        + norm_cost)
}
