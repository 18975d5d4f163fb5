//! Head permutes and the masked softmax of bidirectional self-attention.

use rayon::prelude::*;

use super::elementwise::CHUNK;
use super::fast_f32::{exp, with_avx2};
use crate::float::Float;

/// `[b, s, heads, dh] -> [b, heads, s, dh]`.
pub fn permute_heads<T: Float>(x: &[T], out: &mut [T], b: usize, s: usize, heads: usize) {
    let dh = x.len() / (b * s * heads);
    assert_eq!(out.len(), x.len());
    out.par_chunks_mut(s * dh).enumerate().for_each(|(bh, o)| {
        let (bi, h) = (bh / heads, bh % heads);
        for t in 0..s {
            let src = ((bi * s + t) * heads + h) * dh;
            o[t * dh..(t + 1) * dh].copy_from_slice(&x[src..src + dh]);
        }
    });
}

/// `[b, heads, s, dh] -> [b, s, heads, dh]`.
pub fn unpermute_heads<T: Float>(x: &[T], out: &mut [T], b: usize, s: usize, heads: usize) {
    let dh = x.len() / (b * s * heads);
    assert_eq!(out.len(), x.len());
    out.par_chunks_mut(heads * dh)
        .enumerate()
        .for_each(|(bt, o)| {
            let (bi, t) = (bt / s, bt % s);
            for h in 0..heads {
                let src = ((bi * heads + h) * s + t) * dh;
                o[h * dh..(h + 1) * dh].copy_from_slice(&x[src..src + dh]);
            }
        });
}

/// Partial sums and maxima are kept in this many lanes (one AVX2 register
/// of f32) and combined at the end: a fixed order, so the same result for
/// any thread count, and vectorisable.
const LANES: usize = 8;

/// `sum_j f(j)` over `0..n` in [`LANES`] interleaved partial sums.
#[inline(always)]
fn lane_sum<T: Float>(n: usize, f: impl Fn(usize) -> T) -> T {
    let mut acc = [T::ZERO; LANES];
    let full = n - n % LANES;
    for j0 in (0..full).step_by(LANES) {
        for (l, a) in acc.iter_mut().enumerate() {
            *a += f(j0 + l);
        }
    }
    for j in full..n {
        acc[j - full] += f(j);
    }
    acc.iter().fold(T::ZERO, |a, &v| a + v)
}

/// One row: `p = softmax(scale * x)` over the keys with `m != 0`, zeros
/// elsewhere (all zeros when every key is masked).
#[inline(always)]
fn softmax_row<T: Float>(x: &[T], m: &[u32], scale: T, p: &mut [T]) {
    let s = x.len();
    let neg_inf = T::from_f64(f64::NEG_INFINITY);
    let mut lane_max = [neg_inf; LANES];
    for j in 0..s {
        let v = if m[j] != 0 { x[j] * scale } else { neg_inf };
        let l = j % LANES;
        lane_max[l] = if v > lane_max[l] { v } else { lane_max[l] };
    }
    let max = lane_max
        .iter()
        .fold(neg_inf, |a, &v| if v > a { v } else { a });
    if max == neg_inf {
        // Every key masked: no attention at all.
        p.iter_mut().for_each(|v| *v = T::ZERO);
        return;
    }
    for j in 0..s {
        p[j] = if m[j] != 0 {
            exp(x[j] * scale - max)
        } else {
            T::ZERO
        };
    }
    let inv = T::ONE / lane_sum(s, |j| p[j]);
    p.iter_mut().for_each(|v| *v *= inv);
}

/// `probs = softmax(scale * scores)` over each row of `s` keys of scores
/// `[b, heads, s, s]`, with the keys whose `mask[b, key] == 0` at exactly 0
/// (a row whose every key is masked is all 0).
#[allow(clippy::too_many_arguments)]
pub fn softmax_forward<T: Float>(
    scores: &[T],
    mask: &[u32],
    b: usize,
    heads: usize,
    s: usize,
    scale: f64,
    probs: &mut [T],
) {
    assert!(scores.len() == b * heads * s * s && probs.len() == scores.len());
    assert_eq!(mask.len(), b * s);
    let scale = T::from_f64(scale);
    // One task per (batch entry, head): s rows sharing one mask row.
    probs
        .par_chunks_mut(s * s)
        .enumerate()
        .for_each(|(bh, block)| {
            let bi = bh / heads;
            let m = &mask[bi * s..(bi + 1) * s];
            with_avx2(|| {
                for (r, p) in block.chunks_mut(s).enumerate() {
                    let row = bh * s + r;
                    softmax_row(&scores[row * s..(row + 1) * s], m, scale, p);
                }
            })
        });
}

/// `dscores = scale * probs * (dprobs - sum(dprobs * probs))` per row of
/// `s`; overwrites `dscores`.
pub fn softmax_backward<T: Float>(
    dprobs: &[T],
    probs: &[T],
    s: usize,
    scale: f64,
    dscores: &mut [T],
) {
    assert!(dprobs.len() == probs.len() && dscores.len() == probs.len());
    let scale = T::from_f64(scale);
    let rows_per_task = (CHUNK / s).max(1);
    dscores
        .par_chunks_mut(rows_per_task * s)
        .enumerate()
        .for_each(|(task, block)| {
            with_avx2(|| {
                for (r, ds) in block.chunks_mut(s).enumerate() {
                    let row = task * rows_per_task + r;
                    let p = &probs[row * s..(row + 1) * s];
                    let dp = &dprobs[row * s..(row + 1) * s];
                    let dot = lane_sum(s, |j| p[j] * dp[j]);
                    for j in 0..s {
                        ds[j] = scale * p[j] * (dp[j] - dot);
                    }
                }
            })
        });
}
