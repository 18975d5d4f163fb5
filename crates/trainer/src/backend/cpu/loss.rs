//! Cross-entropy with optional class weights (HF / PyTorch semantics:
//! weighted sum over rows divided by a caller-chosen denominator, normally
//! the sum of the rows' weights).

use crate::float::Float;

fn log_softmax_row<T: Float>(row: &[T]) -> (T, T) {
    let max = row.iter().fold(row[0], |m, &v| m.max(v));
    let sum = row.iter().fold(T::ZERO, |a, &v| a + (v - max).exp());
    (max, sum.ln())
}

/// `sum_i w[y_i] * -log softmax(logits_i)[y_i] / denom` over the rows of
/// `classes` logits, summed in f64 (`w` all 1 without `weights`). Panics on
/// a label not below `classes`.
pub fn forward<T: Float>(
    logits: &[T],
    labels: &[u32],
    weights: Option<&[T]>,
    classes: usize,
    denom: f64,
) -> f64 {
    assert_eq!(logits.len(), labels.len() * classes);
    let mut total = 0.0f64;
    for (i, &y) in labels.iter().enumerate() {
        let y = y as usize;
        assert!(y < classes, "label {y} out of range {classes}");
        let row = &logits[i * classes..(i + 1) * classes];
        let (max, lse) = log_softmax_row(row);
        let nll = (max + lse - row[y]).to_f64();
        let w = weights.map_or(1.0, |w| w[y].to_f64());
        total += w * nll;
    }
    total / denom
}

/// `dlogits_i = dloss * w[y_i] / denom * (softmax(logits_i) -
/// onehot(y_i))`; overwrites `dlogits`.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Float>(
    logits: &[T],
    labels: &[u32],
    weights: Option<&[T]>,
    classes: usize,
    denom: f64,
    dloss: f64,
    dlogits: &mut [T],
) {
    assert_eq!(dlogits.len(), logits.len());
    for (i, &y) in labels.iter().enumerate() {
        let y = y as usize;
        let row = &logits[i * classes..(i + 1) * classes];
        let d = &mut dlogits[i * classes..(i + 1) * classes];
        let (max, lse) = log_softmax_row(row);
        let w = weights.map_or(1.0, |w| w[y].to_f64());
        let f = T::from_f64(dloss * w / denom);
        for c in 0..classes {
            let p = (row[c] - max - lse).exp();
            d[c] = f * (p - if c == y { T::ONE } else { T::ZERO });
        }
    }
}
