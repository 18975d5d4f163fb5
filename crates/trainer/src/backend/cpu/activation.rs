//! GELU (exact erf form), tanh, ReLU and counter-based dropout.

use rayon::prelude::*;

use super::elementwise::CHUNK;
use super::fast_f32::{exp, phi, with_avx2};
use crate::float::Float;
use crate::rng::RngKey;

/// 1 / sqrt(2 pi)
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

fn map<T: Float>(x: &[T], out: &mut [T], f: impl Fn(T) -> T + Sync) {
    assert_eq!(x.len(), out.len());
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(o, x)| {
            // Iterators, not indexing: no bounds checks, so it vectorises.
            with_avx2(|| o.iter_mut().zip(x).for_each(|(o, &x)| *o = f(x)))
        });
}

fn map2<T: Float>(x: &[T], y: &[T], out: &mut [T], f: impl Fn(T, T) -> T + Sync) {
    assert!(x.len() == out.len() && y.len() == out.len());
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK).zip(y.par_chunks(CHUNK)))
        .for_each(|(o, (x, y))| {
            with_avx2(|| {
                o.iter_mut()
                    .zip(x.iter().zip(y))
                    .for_each(|(o, (&x, &y))| *o = f(x, y))
            })
        });
}

/// `x Phi(x)`; in f32 through `fast_f32` (vectorised, relative error below
/// `5e-7 + 1.5e-7 x^2`), in f64 through libm's `erf`.
pub fn gelu_forward<T: Float>(x: &[T], out: &mut [T]) {
    map(x, out, |v| v * phi(v));
}

/// `d/dx x Phi(x) = Phi(x) + x phi(x)`.
pub fn gelu_backward<T: Float>(x: &[T], dout: &[T], dx: &mut [T]) {
    map2(x, dout, dx, gelu_grad);
}

/// [`gelu_backward`] with `d` both the incoming gradient and the output.
pub fn gelu_backward_in_place<T: Float>(x: &[T], d: &mut [T]) {
    assert_eq!(x.len(), d.len());
    d.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(d, x)| {
            with_avx2(|| {
                d.iter_mut()
                    .zip(x)
                    .for_each(|(d, &v)| *d = gelu_grad(v, *d))
            })
        });
}

/// `dout * (Phi(v) + v phi(v))`.
#[inline(always)]
fn gelu_grad<T: Float>(v: T, dout: T) -> T {
    let pdf = T::from_f64(INV_SQRT_2PI) * exp(-T::from_f64(0.5) * v * v);
    dout * (phi(v) + v * pdf)
}

/// `out = tanh(x)`, element by element.
pub fn tanh_forward<T: Float>(x: &[T], out: &mut [T]) {
    map(x, out, |v| v.tanh());
}

/// `dx = dout * (1 - out^2)` from the forward's output `out`.
pub fn tanh_backward<T: Float>(out: &[T], dout: &[T], dx: &mut [T]) {
    map2(out, dout, dx, |y, d| d * (T::ONE - y * y));
}

/// `max(x, 0)`; NaN stays NaN so a diverged run is seen, as in PyTorch.
pub fn relu_forward<T: Float>(x: &[T], out: &mut [T]) {
    map(x, out, |v| if v < T::ZERO { T::ZERO } else { v });
}

/// The gradient passes where the output is positive (0 at the kink, as
/// PyTorch).
pub fn relu_backward<T: Float>(out: &[T], dout: &[T], dx: &mut [T]) {
    map2(out, dout, dx, |y, d| if y > T::ZERO { d } else { T::ZERO });
}

/// Inverted dropout of `x` into `out`: each element dropped with
/// probability `p` (in `[0, 1)`) by `key`'s counter-based mask, the kept
/// ones scaled by `1 / (1 - p)`.
pub fn dropout_forward<T: Float>(x: &[T], out: &mut [T], p: f64, key: RngKey) {
    super::dropout::apply(x, out, p, key);
}

/// The same mask and scale applied to the gradient.
pub fn dropout_backward<T: Float>(dout: &[T], dx: &mut [T], p: f64, key: RngKey) {
    super::dropout::apply(dout, dx, p, key);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Several chunks and a ragged tail, in f32 (the vectorised `fast_f32`
    /// path) and f64.
    fn in_place_equals_out_of_place<T: Float>() {
        let n = 3 * CHUNK + 7;
        let x: Vec<T> = (0..n)
            .map(|i| T::from_f64(((i * 7919) % 2001) as f64 / 250.0 - 4.0))
            .collect();
        let dout: Vec<T> = (0..n)
            .map(|i| T::from_f64(((i * 104_729) % 1999) as f64 / 1000.0 - 1.0))
            .collect();
        let mut apart = vec![T::from_f64(0.0); n];
        gelu_backward(&x, &dout, &mut apart);
        let mut d = dout.clone();
        gelu_backward_in_place(&x, &mut d);
        let bits = |v: &[T]| v.iter().map(|t| t.to_f64().to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&d), bits(&apart));
    }

    #[test]
    fn gelu_backward_in_place_is_the_out_of_place_values_to_the_bit() {
        in_place_equals_out_of_place::<f32>();
        in_place_equals_out_of_place::<f64>();
    }
}
