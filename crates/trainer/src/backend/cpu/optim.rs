//! AdamW (decoupled weight decay, bias correction) and SGD updates.

use rayon::prelude::*;

use super::elementwise::CHUNK;
use crate::backend::AdamWStep;
use crate::float::Float;

pub fn adamw<T: Float>(param: &mut [T], grad: &[T], m: &mut [T], v: &mut [T], s: &AdamWStep) {
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
    param
        .par_chunks_mut(CHUNK)
        .zip(grad.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK).zip(v.par_chunks_mut(CHUNK)))
        .for_each(|((p, g), (m, v))| {
            for i in 0..p.len() {
                m[i] = b1 * m[i] + ob1 * g[i];
                v[i] = b2 * v[i] + ob2 * g[i] * g[i];
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
