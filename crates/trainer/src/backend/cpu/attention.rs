//! Head permutes and the masked softmax of bidirectional self-attention.

use rayon::prelude::*;

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
    probs.par_chunks_mut(s).enumerate().for_each(|(row, p)| {
        let bi = row / (heads * s);
        let m = &mask[bi * s..(bi + 1) * s];
        let x = &scores[row * s..(row + 1) * s];
        let mut max = None::<T>;
        for j in 0..s {
            if m[j] != 0 {
                let v = x[j] * scale;
                max = Some(match max {
                    Some(mx) => mx.max(v),
                    None => v,
                });
            }
        }
        let Some(max) = max else {
            // Every key masked: no attention at all.
            p.iter_mut().for_each(|v| *v = T::ZERO);
            return;
        };
        let mut sum = T::ZERO;
        for j in 0..s {
            p[j] = if m[j] != 0 {
                (x[j] * scale - max).exp()
            } else {
                T::ZERO
            };
            sum += p[j];
        }
        let inv = T::ONE / sum;
        p.iter_mut().for_each(|v| *v *= inv);
    });
}

pub fn softmax_backward<T: Float>(
    dprobs: &[T],
    probs: &[T],
    s: usize,
    scale: f64,
    dscores: &mut [T],
) {
    assert!(dprobs.len() == probs.len() && dscores.len() == probs.len());
    let scale = T::from_f64(scale);
    dscores.par_chunks_mut(s).enumerate().for_each(|(row, ds)| {
        let p = &probs[row * s..(row + 1) * s];
        let dp = &dprobs[row * s..(row + 1) * s];
        let dot = p.iter().zip(dp).fold(T::ZERO, |a, (&p, &d)| a + p * d);
        for j in 0..s {
            ds[j] = scale * p[j] * (dp[j] - dot);
        }
    });
}
