//! Embedding gather and its deterministic scatter-add backward, `[CLS]`
//! selection and masked mean pooling.

use rayon::prelude::*;

use crate::float::Float;

/// Row gather: `out[t] = table[ids[t]]` for rows of `dim`, or `+=` with
/// `accumulate` (summing token, position and type embeddings). Panics on
/// an id beyond the table.
pub fn forward<T: Float>(ids: &[u32], table: &[T], dim: usize, out: &mut [T], accumulate: bool) {
    assert_eq!(out.len(), ids.len() * dim, "embedding: output size");
    let rows = table.len() / dim;
    out.par_chunks_mut(dim)
        .zip(ids.par_iter())
        .for_each(|(o, &id)| {
            let id = id as usize;
            assert!(id < rows, "embedding id {id} out of range {rows}");
            let src = &table[id * dim..(id + 1) * dim];
            if accumulate {
                o.iter_mut().zip(src).for_each(|(o, s)| *o += *s);
            } else {
                o.copy_from_slice(src);
            }
        });
}

/// Tokens are added in their order: one pass of `ids.len() * dim`
/// additions, cheaper than any coordination between threads.
pub fn backward<T: Float>(ids: &[u32], dout: &[T], dim: usize, dtable: &mut [T]) {
    assert_eq!(dout.len(), ids.len() * dim);
    for (t, &id) in ids.iter().enumerate() {
        let id = id as usize;
        let dst = &mut dtable[id * dim..(id + 1) * dim];
        dst.iter_mut()
            .zip(&dout[t * dim..(t + 1) * dim])
            .for_each(|(d, g)| *d += *g);
    }
}

/// `out[i] = x[i, 0]`: the first (`[CLS]`) token's row of each sequence of
/// `x` `[b, s, h]`, with `h` taken from `out`'s length.
pub fn cls_forward<T: Float>(x: &[T], out: &mut [T], b: usize, s: usize) {
    let h = out.len() / b;
    assert_eq!(x.len(), b * s * h);
    for i in 0..b {
        out[i * h..(i + 1) * h].copy_from_slice(&x[i * s * h..i * s * h + h]);
    }
}

/// Overwrites `dx` (`[b, s, h]`) with `dout[i]` at token 0 of sequence `i`
/// and zeros elsewhere.
pub fn cls_backward<T: Float>(dout: &[T], dx: &mut [T], b: usize, s: usize) {
    let h = dout.len() / b;
    assert_eq!(dx.len(), b * s * h);
    dx.iter_mut().for_each(|v| *v = T::ZERO);
    for i in 0..b {
        dx[i * s * h..i * s * h + h].copy_from_slice(&dout[i * h..(i + 1) * h]);
    }
}

/// `out[i]` = the mean of `x[i, t]` (`[b, s, h]`) over the tokens with
/// `mask[i, t] != 0`; zeros for a sequence with none.
pub fn mean_pool<T: Float>(x: &[T], mask: &[u32], b: usize, s: usize, out: &mut [T]) {
    let h = out.len() / b;
    assert!(x.len() == b * s * h && mask.len() == b * s);
    for i in 0..b {
        let o = &mut out[i * h..(i + 1) * h];
        o.iter_mut().for_each(|v| *v = T::ZERO);
        let mut count = 0usize;
        for t in 0..s {
            if mask[i * s + t] != 0 {
                count += 1;
                let row = &x[(i * s + t) * h..(i * s + t + 1) * h];
                o.iter_mut().zip(row).for_each(|(o, v)| *o += *v);
            }
        }
        let inv = T::from_f64(1.0 / count.max(1) as f64);
        o.iter_mut().for_each(|v| *v *= inv);
    }
}
