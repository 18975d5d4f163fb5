//! AdamW (decoupled weight decay, bias correction) and SGD updates.

use rayon::prelude::*;

use super::elementwise::CHUNK;
use crate::backend::AdamWStep;
use crate::float::Float;

/// One AdamW update, reading each gradient multiplied by `grad_scale` (the
/// clip factor of a fused step; 1 otherwise).
pub fn adamw<T: Float>(
    param: &mut [T],
    grad: &[T],
    m: &mut [T],
    v: &mut [T],
    s: &AdamWStep,
    grad_scale: f64,
) {
    let n = param.len();
    assert!(grad.len() == n && m.len() == n && v.len() == n);
    let bc1 = 1.0 - s.beta1.powi(s.t as i32);
    let bc2 = 1.0 - s.beta2.powi(s.t as i32);
    let (b1, b2) = (T::from_f64(s.beta1), T::from_f64(s.beta2));
    let (ob1, ob2) = (T::from_f64(1.0 - s.beta1), T::from_f64(1.0 - s.beta2));
    let step = T::from_f64(s.lr / bc1);
    let inv_sqrt_bc2 = T::from_f64(1.0 / bc2.sqrt());
    let eps = T::from_f64(s.eps);
    let decay = T::from_f64(1.0 - s.lr * s.weight_decay);
    let gs = T::from_f64(grad_scale);
    let scaled = grad_scale != 1.0;
    param
        .par_chunks_mut(CHUNK)
        .zip(grad.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK).zip(v.par_chunks_mut(CHUNK)))
        .for_each(|((p, g), (m, v))| {
            for i in 0..p.len() {
                let g = if scaled { g[i] * gs } else { g[i] };
                m[i] = b1 * m[i] + ob1 * g;
                v[i] = b2 * v[i] + ob2 * g * g;
                p[i] = p[i] * decay - step * m[i] / (v[i].sqrt() * inv_sqrt_bc2 + eps);
            }
        });
}

pub fn sgd<T: Float>(param: &mut [T], grad: &[T], lr: f64) {
    let lr = T::from_f64(lr);
    param
        .par_chunks_mut(CHUNK)
        .zip(grad.par_chunks(CHUNK))
        .for_each(|(p, g)| {
            for i in 0..p.len() {
                p[i] -= lr * g[i];
            }
        });
}
