//! GELU (exact erf form), tanh and counter-based dropout.

use rayon::prelude::*;

use super::elementwise::CHUNK;
use crate::float::Float;
use crate::rng::{RngKey, dropout_threshold, keep_word};

const FRAC_1_SQRT_2: f64 = std::f64::consts::FRAC_1_SQRT_2;
/// 1 / sqrt(2 pi)
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

fn map<T: Float>(x: &[T], out: &mut [T], f: impl Fn(T) -> T + Sync) {
    assert_eq!(x.len(), out.len());
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(o, x)| {
            for i in 0..o.len() {
                o[i] = f(x[i]);
            }
        });
}

fn map2<T: Float>(x: &[T], y: &[T], out: &mut [T], f: impl Fn(T, T) -> T + Sync) {
    assert!(x.len() == out.len() && y.len() == out.len());
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK).zip(y.par_chunks(CHUNK)))
        .for_each(|(o, (x, y))| {
            for i in 0..o.len() {
                o[i] = f(x[i], y[i]);
            }
        });
}

pub fn gelu_forward<T: Float>(x: &[T], out: &mut [T]) {
    let half = T::from_f64(0.5);
    let c = T::from_f64(FRAC_1_SQRT_2);
    map(x, out, |v| half * v * (T::ONE + (v * c).erf()));
}

/// `d/dx x Phi(x) = Phi(x) + x phi(x)`.
pub fn gelu_backward<T: Float>(x: &[T], dout: &[T], dx: &mut [T]) {
    let half = T::from_f64(0.5);
    let c = T::from_f64(FRAC_1_SQRT_2);
    let k = T::from_f64(INV_SQRT_2PI);
    map2(x, dout, dx, |v, d| {
        let cdf = half * (T::ONE + (v * c).erf());
        let pdf = k * (-half * v * v).exp();
        d * (cdf + v * pdf)
    });
}

pub fn tanh_forward<T: Float>(x: &[T], out: &mut [T]) {
    map(x, out, |v| v.tanh());
}

pub fn tanh_backward<T: Float>(out: &[T], dout: &[T], dx: &mut [T]) {
    map2(out, dout, dx, |y, d| d * (T::ONE - y * y));
}

fn dropout_apply<T: Float>(x: &[T], out: &mut [T], p: f64, key: RngKey) {
    assert_eq!(x.len(), out.len());
    assert!(
        (0.0..1.0).contains(&p),
        "dropout probability {p} not in [0, 1)"
    );
    let keep_scale = T::from_f64(1.0 / (1.0 - p));
    let threshold = dropout_threshold(p);
    // CHUNK is a multiple of 4: one Philox call gives 4 elements' words.
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(ci, o)| {
        let base = ci * CHUNK;
        for (bi, group) in o.chunks_mut(4).enumerate() {
            let first = base + 4 * bi;
            let words = key.block((first / 4) as u64);
            for (j, v) in group.iter_mut().enumerate() {
                let xi = x[first + j];
                *v = if keep_word(words[j], threshold) {
                    xi * keep_scale
                } else {
                    T::ZERO
                };
            }
        }
    });
}

pub fn dropout_forward<T: Float>(x: &[T], out: &mut [T], p: f64, key: RngKey) {
    dropout_apply(x, out, p, key);
}

/// The same mask and scale applied to the gradient.
pub fn dropout_backward<T: Float>(dout: &[T], dx: &mut [T], p: f64, key: RngKey) {
    dropout_apply(dout, dx, p, key);
}
