//! Matrix products through cuBLAS, with its workspace from gpu-mem.

use super::error::CudaError;
use crate::backend::{Dtype, MatmulPrecision, MatmulShape};
use cudarc::cublas::{result as blas, sys};
use std::ffi::c_int;

/// The cuBLAS handle of one backend, bound to its stream.
pub struct Blas {
    /// A raw handle rather than cudarc's `CudaBlas`, whose drop unwraps
    /// `cublasDestroy`: after a sticky error that fails, and a panic in a
    /// drop while unwinding aborts the process before the error is reported.
    handle: sys::cublasHandle_t,
    /// The handle's stream, kept alive as long as the handle.
    _stream: std::sync::Arc<cudarc::driver::CudaStream>,
}

// SAFETY: the handle is only used under the backend's mutex, one call at a
// time, on the stream it was created for.
unsafe impl Send for Blas {}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: our live handle, destroyed once. Its failure (after a
        // sticky error) is not reported here: the backend's `check` reports
        // the sticky error itself.
        let _ = unsafe { blas::destroy_handle(self.handle) };
    }
}

fn cublas_err(call: &'static str, e: blas::CublasError) -> CudaError {
    CudaError::Cublas {
        call,
        status: format!("{:?}", e.0),
    }
}

fn dim(value: usize, what: &str) -> Result<c_int, CudaError> {
    c_int::try_from(value).map_err(|_| CudaError::Invalid {
        op: "matmul",
        message: format!("{what} = {value} exceeds cuBLAS's 32-bit dimensions"),
    })
}

impl Blas {
    /// A handle on `stream` using the `workspace_bytes` at `workspace`
    /// (memory the caller keeps alive as long as the handle) and the default
    /// math mode: fp32 products stay fp32 (no TF32).
    pub fn new(
        stream: std::sync::Arc<cudarc::driver::CudaStream>,
        workspace: u64,
        workspace_bytes: usize,
    ) -> Result<Blas, CudaError> {
        let handle = blas::create_handle().map_err(|e| cublas_err("cublasCreate", e))?;
        let blas = Blas {
            handle,
            _stream: stream,
        };
        // SAFETY: a live handle and stream; the workspace outlives the
        // handle (see above).
        unsafe {
            blas::set_stream(handle, blas._stream.cu_stream() as _)
                .map_err(|e| cublas_err("cublasSetStream", e))?;
            let r = sys::cublasSetWorkspace_v2(handle, workspace as *mut _, workspace_bytes);
            r.result()
                .map_err(|e| cublas_err("cublasSetWorkspace", e))?;
            let r = sys::cublasSetMathMode(handle, sys::cublasMath_t::CUBLAS_DEFAULT_MATH);
            r.result().map_err(|e| cublas_err("cublasSetMathMode", e))?;
        }
        Ok(blas)
    }

    /// `C = alpha op(A) op(B) + beta C` for the row-major [`MatmulShape`]
    /// (see [`column_major`]). `types` are the operands' and the result's
    /// storage: fp32 operands are read at `precision` ([`compute_type`]) into
    /// an fp32 result; 16-bit operands (both of one format) are multiplied
    /// on the tensor cores with fp32 accumulation into a result of their
    /// format or fp32.
    ///
    /// # Safety
    /// `a`, `b`, `c` are device buffers of at least `batch * m * k`,
    /// `batch * k * n` and `batch * m * n` elements of their types, live
    /// until the stream has run the product.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn gemm(
        &self,
        s: &MatmulShape,
        precision: MatmulPrecision,
        types: (Dtype, Dtype),
        alpha: f32,
        a: u64,
        b: u64,
        beta: f32,
        c: u64,
    ) -> Result<(), CudaError> {
        let g = column_major(s)?;
        let op = |t: bool| {
            if t {
                sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let (operand_type, c_type, compute) = match types {
            (Dtype::F32, Dtype::F32) => (
                data_type(Dtype::F32),
                data_type(Dtype::F32),
                compute_type(precision),
            ),
            (operands, result) if operands.is_half() => (
                data_type(operands),
                data_type(result),
                sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            ),
            (operands, result) => {
                return Err(CudaError::Invalid {
                    op: "matmul",
                    message: format!("no product of {operands} operands into {result}"),
                });
            }
        };
        // Column-major operand 1 is the row-major B, operand 2 the row-major A.
        // SAFETY: guaranteed by the caller; dimensions checked above; alpha
        // and beta are f32, as a 32F compute type reads them.
        unsafe {
            blas::gemm_strided_batched_ex(
                self.handle,
                op(g.trans1),
                op(g.trans2),
                g.m,
                g.n,
                g.k,
                (&alpha as *const f32).cast(),
                b as *const _,
                operand_type,
                g.ld1,
                g.stride1,
                a as *const _,
                operand_type,
                g.ld2,
                g.stride2,
                (&beta as *const f32).cast(),
                c as *mut _,
                c_type,
                g.ldc,
                g.stride_c,
                g.batch,
                compute,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(|e| cublas_err("cublasGemmStridedBatchedEx", e))
    }
}

/// cuBLAS's type of a buffer of `dtype`.
fn data_type(dtype: Dtype) -> sys::cudaDataType {
    match dtype {
        Dtype::F32 => sys::cudaDataType::CUDA_R_32F,
        Dtype::F64 => sys::cudaDataType::CUDA_R_64F,
        Dtype::Bf16 => sys::cudaDataType::CUDA_R_16BF,
        Dtype::F16 => sys::cudaDataType::CUDA_R_16F,
    }
}

/// cuBLAS's compute type for fp32 buffers at `precision`: fp32 throughout
/// (the default math mode allows no TF32), or operands converted to
/// bf16/fp16 for the tensor cores with fp32 accumulation.
pub fn compute_type(precision: MatmulPrecision) -> sys::cublasComputeType_t {
    match precision {
        MatmulPrecision::Fp32 => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        MatmulPrecision::Bf16 => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_16BF,
        MatmulPrecision::Fp16 => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_16F,
    }
}

/// The arguments of a column-major strided-batched GEMM `C' = op1(X1)
/// op2(X2)` (cuBLAS's convention, `C'` is `m x n` with leading dimension
/// `ldc`) that computes a row-major [`MatmulShape`].
///
/// A row-major `r x c` matrix is, read column-major, its `c x r`
/// transpose. So row-major `C = op(A) op(B)` is column-major `C^T = op(B)^T
/// op(A)^T`: operand 1 is the row-major B, operand 2 the row-major A, the
/// transpose flags carry over unchanged and `m`/`n` swap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnMajorGemm {
    /// Operand 1 (the row-major B) is transposed: the shape's `trans_b`.
    pub trans1: bool,
    /// Operand 2 (the row-major A) is transposed: the shape's `trans_a`.
    pub trans2: bool,
    /// Rows of `C'`: the row-major `n`.
    pub m: c_int,
    /// Columns of `C'`: the row-major `m`.
    pub n: c_int,
    /// The contracted dimension, as in the row-major shape.
    pub k: c_int,
    /// Leading dimension of operand 1: B's row length (`n`, or `k` when
    /// transposed).
    pub ld1: c_int,
    /// Elements from one batch entry of operand 1 to the next (`k * n`).
    pub stride1: i64,
    /// Leading dimension of operand 2: A's row length (`k`, or `m` when
    /// transposed).
    pub ld2: c_int,
    /// Elements from one batch entry of operand 2 to the next (`m * k`).
    pub stride2: i64,
    /// Leading dimension of `C'`: the row-major C's row length `n`.
    pub ldc: c_int,
    /// Elements from one batch entry of C to the next (`m * n`).
    pub stride_c: i64,
    /// Number of products.
    pub batch: c_int,
}

/// The cuBLAS arguments of the row-major product `s`; an
/// [`CudaError::Invalid`] when a dimension exceeds cuBLAS's 32-bit `int`.
pub fn column_major(s: &MatmulShape) -> Result<ColumnMajorGemm, CudaError> {
    let (m, n, k) = (dim(s.m, "m")?, dim(s.n, "n")?, dim(s.k, "k")?);
    Ok(ColumnMajorGemm {
        trans1: s.trans_b,
        trans2: s.trans_a,
        m: n,
        n: m,
        k,
        // B is stored [k, n] (row length n), or [n, k] when transposed.
        ld1: if s.trans_b { k } else { n },
        stride1: (s.k * s.n) as i64,
        // A is stored [m, k], or [k, m] when transposed.
        ld2: if s.trans_a { m } else { k },
        stride2: (s.m * s.k) as i64,
        ldc: n,
        stride_c: (s.m * s.n) as i64,
        batch: dim(s.batch, "batch")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::matmul::matmul;

    /// cuBLAS's strided-batched SGEMM as documented (column-major, element
    /// (i, j) of X at `X[i + j * ld]`), naively.
    #[allow(clippy::too_many_arguments)]
    fn reference_cublas(
        g: &ColumnMajorGemm,
        alpha: f64,
        x1: &[f64],
        x2: &[f64],
        beta: f64,
        c: &mut [f64],
    ) {
        let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
        for e in 0..g.batch as usize {
            let x1 = &x1[e * g.stride1 as usize..];
            let x2 = &x2[e * g.stride2 as usize..];
            let c = &mut c[e * g.stride_c as usize..];
            let op1 = |i: usize, l: usize| {
                let ld = g.ld1 as usize;
                if g.trans1 {
                    x1[l + i * ld]
                } else {
                    x1[i + l * ld]
                }
            };
            let op2 = |l: usize, j: usize| {
                let ld = g.ld2 as usize;
                if g.trans2 {
                    x2[j + l * ld]
                } else {
                    x2[l + j * ld]
                }
            };
            for i in 0..m {
                for j in 0..n {
                    let dot: f64 = (0..k).map(|l| op1(i, l) * op2(l, j)).sum();
                    let at = i + j * g.ldc as usize;
                    c[at] = alpha * dot + if beta == 0.0 { 0.0 } else { beta * c[at] };
                }
            }
        }
    }

    #[test]
    fn the_column_major_arguments_compute_the_row_major_product() {
        let mut seed = 1u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as f64 / (1u64 << 31) as f64) - 0.5
        };
        for (trans_a, trans_b) in [(false, false), (true, false), (false, true), (true, true)] {
            let s = MatmulShape {
                batch: 3,
                m: 5,
                n: 7,
                k: 4,
                trans_a,
                trans_b,
            };
            let a: Vec<f64> = (0..s.batch * s.m * s.k).map(|_| next()).collect();
            let b: Vec<f64> = (0..s.batch * s.k * s.n).map(|_| next()).collect();
            let c0: Vec<f64> = (0..s.batch * s.m * s.n).map(|_| next()).collect();
            let (mut want, mut got) = (c0.clone(), c0);
            matmul(&s, 0.7, &a, &b, 0.5, &mut want);
            let g = column_major(&s).unwrap();
            reference_cublas(&g, 0.7, &b, &a, 0.5, &mut got);
            for (w, v) in want.iter().zip(&got) {
                assert!((w - v).abs() < 1e-12, "{s:?}: {want:?} vs {got:?}");
            }
        }
    }
}
