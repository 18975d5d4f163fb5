//! AdamW (decoupled weight decay, bias correction) and SGD updates.

use rayon::prelude::*;

use super::elementwise::CHUNK;
use crate::backend::AdamWStep;
use crate::backend::row_slots::NO_SLOT;
use crate::float::Float;

/// One AdamW update, reading each gradient multiplied by `grad_scale` (the
/// clip factor of a fused step; 1 otherwise). With `rows` (the slot of
/// each row of `width`, see [`crate::backend::RowSlots`]) `grad` is
/// row-sparse: a row's gradient is at its slot, zero where it has none.
pub fn adamw<T: Float>(
    param: &mut [T],
    grad: &[T],
    rows: Option<(&[u32], usize)>,
    m: &mut [T],
    v: &mut [T],
    s: &AdamWStep,
    grad_scale: f64,
) {
    let n = param.len();
    assert!(m.len() == n && v.len() == n);
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
    // `g` None: a row without a slot, whose gradient is zero.
    let update = |p: &mut [T], g: Option<&[T]>, m: &mut [T], v: &mut [T]| {
        for i in 0..p.len() {
            let g = g.map_or(T::ZERO, |g| if scaled { g[i] * gs } else { g[i] });
            m[i] = b1 * m[i] + ob1 * g;
            v[i] = b2 * v[i] + ob2 * g * g;
            p[i] = p[i] * decay - step * m[i] / (v[i].sqrt() * inv_sqrt_bc2 + eps);
        }
    };
    match rows {
        None => {
            assert_eq!(grad.len(), n);
            param
                .par_chunks_mut(CHUNK)
                .zip(grad.par_chunks(CHUNK))
                .zip(m.par_chunks_mut(CHUNK).zip(v.par_chunks_mut(CHUNK)))
                .for_each(|((p, g), (m, v))| update(p, Some(g), m, v));
        }
        Some((slots, width)) => {
            assert_eq!(slots.len() * width, n, "adamw: one slot per row");
            param
                .par_chunks_mut(width)
                .zip(slots.par_iter())
                .zip(m.par_chunks_mut(width).zip(v.par_chunks_mut(width)))
                .for_each(|((p, &slot), (m, v))| {
                    let g = (slot != NO_SLOT).then(|| {
                        let at = slot as usize * width;
                        &grad[at..at + width]
                    });
                    update(p, g, m, v)
                });
        }
    }
}

/// Plain SGD: `param -= lr * grad`.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A row-sparse gradient updates every row as its dense expansion
    /// does, to the bit: moments and weights of the rows without a slot
    /// decay as with a zero gradient.
    #[test]
    fn a_row_sparse_gradient_updates_as_its_dense_expansion() {
        let (rows, width) = (7, 3);
        let value = |i: usize, k: f64| ((i as f64 * k).sin() * 0.5) as f32;
        let slots = [NO_SLOT, 2, NO_SLOT, 0, 1, NO_SLOT, NO_SLOT];
        let compact: Vec<f32> = (0..3 * width).map(|i| value(i, 1.7)).collect();
        let mut dense = vec![0.0f32; rows * width];
        for (row, &slot) in slots.iter().enumerate() {
            if slot != NO_SLOT {
                let at = slot as usize * width;
                dense[row * width..(row + 1) * width].copy_from_slice(&compact[at..at + width]);
            }
        }
        let step = AdamWStep {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            t: 3,
        };
        let start = |k: f64| -> Vec<f32> { (0..rows * width).map(|i| value(i, k)).collect() };
        let run = |grad: &[f32], slots: Option<(&[u32], usize)>| {
            let (mut p, mut m) = (start(0.3), start(0.9));
            let mut v: Vec<f32> = start(1.1).iter().map(|x| x * x).collect();
            adamw(&mut p, grad, slots, &mut m, &mut v, &step, 0.7);
            (p, m, v)
        };
        assert_eq!(run(&compact, Some((&slots, width))), run(&dense, None));
    }
}
