//! Fused attention, the reference: `out = dropout(softmax(scale q k^T)) v`
//! over the keys the mask keeps, with one log-sum-exp per query row saved
//! instead of the probabilities, and a backward that recomputes them from
//! it. The layout is the projections' own, `[b, s, heads * dh]`; the dropout
//! mask is the one the unfused path draws over the `[b, heads, s, s]`
//! probabilities, element by element. One task per sequence (its rows of
//! every output are disjoint); sums run in index order.

use rayon::prelude::*;

use crate::backend::AttentionShape;
use crate::float::Float;
use crate::rng::{RngKey, dropout_threshold, keep_word};

/// What multiplies probability (bh, i, j): 0 when dropped, the keep scale
/// when kept, 1 without dropout.
struct ProbsDropout {
    key: Option<RngKey>,
    threshold: u32,
    keep_scale: f64,
    s: usize,
}

impl ProbsDropout {
    fn new(sh: &AttentionShape, key: Option<RngKey>) -> Self {
        Self {
            key,
            threshold: dropout_threshold(sh.dropout),
            keep_scale: 1.0 / (1.0 - sh.dropout),
            s: sh.s,
        }
    }

    fn factor(&self, bh: usize, i: usize, j: usize) -> f64 {
        match &self.key {
            None => 1.0,
            Some(key) => {
                let index = ((bh * self.s + i) * self.s + j) as u64;
                if keep_word(key.word(index), self.threshold) {
                    self.keep_scale
                } else {
                    0.0
                }
            }
        }
    }
}

/// Token `t`'s slice of head `h` in a `[s, heads * dh]` sequence.
fn head_row<'a, T>(x: &'a [T], sh: &AttentionShape, t: usize, h: usize) -> &'a [T] {
    &x[(t * sh.heads + h) * sh.head_dim..][..sh.head_dim]
}

fn head_row_mut<'a, T>(x: &'a mut [T], sh: &AttentionShape, t: usize, h: usize) -> &'a mut [T] {
    &mut x[(t * sh.heads + h) * sh.head_dim..][..sh.head_dim]
}

/// Sequence `bi` of `x`, `seq` elements long.
fn sequence<T>(x: &[T], bi: usize, seq: usize) -> &[T] {
    &x[bi * seq..][..seq]
}

fn dot<T: Float>(a: &[T], b: &[T]) -> T {
    a.iter().zip(b).fold(T::ZERO, |acc, (&x, &y)| acc + x * y)
}

/// Query row `i` of head `h`'s probabilities into `p` (0 for masked keys;
/// all 0 when every key is masked), from its scores; returns the
/// log-sum-exp of the scaled scores (-inf when every key is masked). With a
/// saved `lse` the probabilities are recomputed from it instead.
#[allow(clippy::too_many_arguments)]
fn probs_row<T: Float>(
    sh: &AttentionShape,
    q: &[T],
    k: &[T],
    mask: &[u32],
    h: usize,
    i: usize,
    saved: Option<T>,
    p: &mut [T],
) -> T {
    let scale = T::from_f64(sh.scale);
    let neg_inf = T::from_f64(f64::NEG_INFINITY);
    let qi = head_row(q, sh, i, h);
    for (j, pj) in p.iter_mut().enumerate() {
        *pj = if mask[j] != 0 {
            dot(qi, head_row(k, sh, j, h)) * scale
        } else {
            neg_inf
        };
    }
    let lse = saved.unwrap_or_else(|| {
        let max = p.iter().fold(neg_inf, |a, &v| a.max(v));
        if max == neg_inf {
            return neg_inf;
        }
        let sum = p
            .iter()
            .filter(|&&v| v != neg_inf)
            .fold(T::ZERO, |a, &v| a + (v - max).exp());
        max + sum.ln()
    });
    for pj in p.iter_mut() {
        *pj = if *pj == neg_inf || lse == neg_inf {
            T::ZERO
        } else {
            (*pj - lse).exp()
        };
    }
    lse
}

/// Forward: `out` and the per-row log-sum-exp `lse` (`[b, heads, s]`).
#[allow(clippy::too_many_arguments)]
pub fn forward<T: Float>(
    sh: &AttentionShape,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: &[u32],
    key: Option<RngKey>,
    out: &mut [T],
    lse: &mut [T],
) {
    let (s, heads) = (sh.s, sh.heads);
    let seq = s * heads * sh.head_dim;
    assert!(q.len() == sh.len() && k.len() == q.len() && v.len() == q.len());
    assert!(out.len() == q.len() && lse.len() == sh.rows() && mask.len() == sh.b * s);
    let drop = ProbsDropout::new(sh, key);
    out.par_chunks_mut(seq.max(1))
        .zip(lse.par_chunks_mut((heads * s).max(1)))
        .enumerate()
        .for_each(|(bi, (out, lse))| {
            let (q, k, v) = (
                &q[bi * seq..][..seq],
                &k[bi * seq..][..seq],
                &v[bi * seq..][..seq],
            );
            let mask = &mask[bi * s..][..s];
            let mut p = vec![T::ZERO; s];
            for h in 0..heads {
                let bh = bi * heads + h;
                for i in 0..s {
                    lse[h * s + i] = probs_row(sh, q, k, mask, h, i, None, &mut p);
                    let o = head_row_mut(out, sh, i, h);
                    o.iter_mut().for_each(|x| *x = T::ZERO);
                    for (j, &pj) in p.iter().enumerate() {
                        let pd = pj * T::from_f64(drop.factor(bh, i, j));
                        for (x, &vj) in o.iter_mut().zip(head_row(v, sh, j, h)) {
                            *x += pd * vj;
                        }
                    }
                }
            }
        });
}

/// What the backward reads.
pub struct Inputs<'a, T> {
    /// Queries, `[b, s, heads * dh]`.
    pub q: &'a [T],
    /// Keys, `[b, s, heads * dh]`.
    pub k: &'a [T],
    /// Values, `[b, s, heads * dh]`.
    pub v: &'a [T],
    /// Key mask `[b, s]`: nonzero keeps the key.
    pub mask: &'a [u32],
    /// The forward's output, `[b, s, heads * dh]`.
    pub out: &'a [T],
    /// Gradient of the output, `[b, s, heads * dh]`.
    pub dout: &'a [T],
    /// The forward's log-sum-exp per query row, `[b, heads, s]`.
    pub lse: &'a [T],
}

/// Backward: overwrites `[dq, dk, dv]` from `dout`, with the probabilities
/// recomputed from `lse`; `delta` (`[b, heads, s]`) gets each row's
/// `sum(dout * out)`. With `pd` the dropped probabilities: `dv = pd^T
/// dout`, `ds = p * (dropout'(dout v^T) - delta)`, `dq = scale ds k`, `dk =
/// scale ds^T q`.
pub fn backward<T: Float>(
    sh: &AttentionShape,
    x: Inputs<'_, T>,
    key: Option<RngKey>,
    delta: &mut [T],
    [dq, dk, dv]: [&mut [T]; 3],
) {
    let (s, heads) = (sh.s, sh.heads);
    let seq = s * heads * sh.head_dim;
    for t in [x.q, x.k, x.v, x.out, x.dout] {
        assert_eq!(t.len(), sh.len());
    }
    assert!(dq.len() == sh.len() && dk.len() == sh.len() && dv.len() == sh.len());
    assert!(x.lse.len() == sh.rows() && delta.len() == sh.rows());
    let scale = T::from_f64(sh.scale);
    let drop = ProbsDropout::new(sh, key);
    dq.par_chunks_mut(seq.max(1))
        .zip(dk.par_chunks_mut(seq.max(1)))
        .zip(dv.par_chunks_mut(seq.max(1)))
        .zip(delta.par_chunks_mut((heads * s).max(1)))
        .enumerate()
        .for_each(|(bi, (((dq, dk), dv), delta))| {
            let one = |t| sequence(t, bi, seq);
            let (q, k, v, out, dout) = (one(x.q), one(x.k), one(x.v), one(x.out), one(x.dout));
            let (mask, lse) = (
                &x.mask[bi * s..][..s],
                &x.lse[bi * heads * s..][..heads * s],
            );
            for t in [&mut *dq, &mut *dk, &mut *dv] {
                t.iter_mut().for_each(|x| *x = T::ZERO);
            }
            let mut p = vec![T::ZERO; s];
            for h in 0..heads {
                let bh = bi * heads + h;
                for i in 0..s {
                    let (dout_i, q_i) = (head_row(dout, sh, i, h), head_row(q, sh, i, h));
                    let d_i = dot(dout_i, head_row(out, sh, i, h));
                    delta[h * s + i] = d_i;
                    probs_row(sh, q, k, mask, h, i, Some(lse[h * s + i]), &mut p);
                    for (j, &pj) in p.iter().enumerate() {
                        if pj == T::ZERO {
                            continue;
                        }
                        let f = T::from_f64(drop.factor(bh, i, j));
                        let ds = pj * (dot(dout_i, head_row(v, sh, j, h)) * f - d_i);
                        let pd = pj * f;
                        let (k_j, dq_i) = (head_row(k, sh, j, h), head_row_mut(dq, sh, i, h));
                        for (g, &kj) in dq_i.iter_mut().zip(k_j) {
                            *g += scale * ds * kj;
                        }
                        for (g, &qi) in head_row_mut(dk, sh, j, h).iter_mut().zip(q_i) {
                            *g += scale * ds * qi;
                        }
                        for (g, &oi) in head_row_mut(dv, sh, j, h).iter_mut().zip(dout_i) {
                            *g += pd * oi;
                        }
                    }
                }
            }
        });
}
