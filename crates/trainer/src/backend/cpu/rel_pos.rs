//! DeBERTa's disentangled-attention gathers (content-to-position and
//! position-to-content scores read at each query/key pair's relative-position
//! bucket), their scatter backward, and the token-mask multiply of its
//! embeddings. See [`crate::backend::RelPosShape`] for the layout.

use rayon::prelude::*;

use crate::backend::RelPosShape;
use crate::float::Float;

fn check(shape: &RelPosShape, rel: usize, idx: &[u32], scores: usize) {
    let RelPosShape {
        b, heads, s, span2, ..
    } = *shape;
    assert_eq!(rel, heads * b * s * span2, "rel_pos: position scores size");
    assert_eq!(scores, b * heads * s * s, "rel_pos: scores size");
    assert_eq!(idx.len(), s * s, "rel_pos: index table size");
    if let Some(k) = idx.iter().find(|&&k| k as usize >= span2) {
        panic!("rel_pos: bucket {k} is not below {span2}");
    }
}

/// `scores[bi, h, i, j] += alpha * rel[h, bi, r, idx[r, c]]` with `(r, c) =
/// (i, j)`, or `(j, i)` when `transpose`. One task per score row.
pub fn gather<T: Float>(shape: &RelPosShape, alpha: f64, rel: &[T], idx: &[u32], scores: &mut [T]) {
    check(shape, rel.len(), idx, scores.len());
    let RelPosShape {
        b,
        heads,
        s,
        span2,
        transpose,
    } = *shape;
    let alpha = T::from_f64(alpha);
    scores.par_chunks_mut(s).enumerate().for_each(|(row, out)| {
        let (bh, i) = (row / s, row % s);
        let (bi, h) = (bh / heads, bh % heads);
        let base = (h * b + bi) * s;
        for (j, o) in out.iter_mut().enumerate() {
            let (r, c) = if transpose { (j, i) } else { (i, j) };
            let k = idx[r * s + c] as usize;
            *o += alpha * rel[(base + r) * span2 + k];
        }
    });
}

/// The backward of [`gather`], overwriting `drel`: `drel[h, bi, r, k] =
/// alpha * sum over c with idx[r, c] == k of dscores at (r, c)` (transposed
/// as in the forward), summed in increasing `c`. One task per `drel` row, so
/// writes are disjoint and the order fixed.
pub fn scatter<T: Float>(
    shape: &RelPosShape,
    alpha: f64,
    dscores: &[T],
    idx: &[u32],
    drel: &mut [T],
) {
    check(shape, drel.len(), idx, dscores.len());
    let RelPosShape {
        b,
        heads,
        s,
        span2,
        transpose,
    } = *shape;
    let alpha = T::from_f64(alpha);
    drel.par_chunks_mut(span2)
        .enumerate()
        .for_each(|(row, out)| {
            let (hb, r) = (row / s, row % s);
            let (h, bi) = (hb / b, hb % b);
            let block = &dscores[(bi * heads + h) * s * s..(bi * heads + h + 1) * s * s];
            out.iter_mut().for_each(|v| *v = T::ZERO);
            for c in 0..s {
                let k = idx[r * s + c] as usize;
                let (i, j) = if transpose { (c, r) } else { (r, c) };
                out[k] += block[i * s + j];
            }
            out.iter_mut().for_each(|v| *v *= alpha);
        });
}

/// Zeroes the rows of `n` of `x` whose token has `mask == 0`; its own
/// backward.
pub fn mask_rows<T: Float>(x: &mut [T], mask: &[u32], n: usize) {
    assert_eq!(x.len(), mask.len() * n, "mask_rows: size");
    x.par_chunks_mut(n)
        .zip(mask.par_iter())
        .for_each(|(row, &m)| {
            if m == 0 {
                row.iter_mut().for_each(|v| *v = T::ZERO);
            }
        });
}
