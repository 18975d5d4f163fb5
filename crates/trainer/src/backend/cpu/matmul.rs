//! Strided-batched GEMM: matrixmultiply's cache-blocked SIMD microkernels,
//! split across rayon threads by batch entry or by blocks of rows/columns of
//! C (disjoint outputs, so the result does not depend on the thread count).

use rayon::prelude::*;

use crate::backend::{MatmulPrecision, MatmulShape};
use crate::float::Float;

#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
// SAFETY: each task writes a disjoint block of C; A and B are only read.
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

/// A copy of `x` with every element as a product at `precision` reads it
/// (see [`MatmulPrecision`]).
pub fn rounded<T: Float>(precision: MatmulPrecision, x: &[T]) -> Vec<T> {
    x.par_iter()
        .with_min_len(1 << 12)
        .map(|&v| T::from_f64(precision.round(v.to_f64() as f32) as f64))
        .collect()
}

/// Below this many multiply-adds one thread does the whole product.
const PARALLEL_MIN_FLOPS: usize = 1 << 16;

/// The product [`MatmulShape`] describes, `C[i] = alpha * op(A[i]) *
/// op(B[i]) + beta * C[i]`, in `T` (no rounding of the operands). The
/// slices may be longer than the shape needs.
pub fn matmul<T: Float>(s: &MatmulShape, alpha: f64, a: &[T], b: &[T], beta: f64, c: &mut [T]) {
    let (m, n, k) = (s.m, s.n, s.k);
    assert!(a.len() >= s.batch * m * k, "matmul: A too small");
    assert!(b.len() >= s.batch * k * n, "matmul: B too small");
    assert!(c.len() >= s.batch * m * n, "matmul: C too small");
    let (rsa, csa) = if s.trans_a {
        (1, m as isize)
    } else {
        (k as isize, 1)
    };
    let (rsb, csb) = if s.trans_b {
        (1, k as isize)
    } else {
        (n as isize, 1)
    };
    let (alpha, beta) = (T::from_f64(alpha), T::from_f64(beta));
    let a_ptr = SendPtr(a.as_ptr() as *mut T);
    let b_ptr = SendPtr(b.as_ptr() as *mut T);
    let c_ptr = SendPtr(c.as_mut_ptr());
    // One block: rows [i0, i1) and columns [j0, j1) of C in batch entry `e`.
    let block = move |e: usize, i0: usize, i1: usize, j0: usize, j1: usize| {
        let (a_ptr, b_ptr, c_ptr) = (a_ptr, b_ptr, c_ptr);
        // SAFETY: offsets stay inside the asserted lengths; blocks of C are
        // disjoint between tasks.
        unsafe {
            let a0 = a_ptr.0.add(e * m * k).offset(i0 as isize * rsa);
            let b0 = b_ptr.0.add(e * k * n).offset(j0 as isize * csb);
            let c0 = c_ptr.0.add(e * m * n + i0 * n + j0);
            T::gemm(
                i1 - i0,
                k,
                j1 - j0,
                alpha,
                a0,
                rsa,
                csa,
                b0,
                rsb,
                csb,
                beta,
                c0,
                n as isize,
                1,
            );
        }
    };
    let threads = rayon::current_num_threads();
    if s.batch * m * n * k < PARALLEL_MIN_FLOPS || threads == 1 {
        for e in 0..s.batch {
            block(e, 0, m, 0, n);
        }
    } else if s.batch >= threads {
        (0..s.batch)
            .into_par_iter()
            .for_each(|e| block(e, 0, m, 0, n));
    } else {
        // Few large products: cut each into blocks along its longer side,
        // a few per thread for load balance, each at least 64 wide.
        let pieces_per_entry = (threads * 2).div_ceil(s.batch).max(1);
        let long = m.max(n);
        let width = long.div_ceil(pieces_per_entry).max(64).min(long);
        let pieces = long.div_ceil(width);
        (0..s.batch * pieces).into_par_iter().for_each(|task| {
            let (e, p) = (task / pieces, task % pieces);
            let lo = p * width;
            let hi = (lo + width).min(long);
            if m >= n {
                block(e, lo, hi, 0, n)
            } else {
                block(e, 0, m, lo, hi)
            }
        });
    }
}
