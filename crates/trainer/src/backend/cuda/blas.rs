//! Matrix products through cuBLAS, with its workspace from gpu-mem.

use super::error::CudaError;
use crate::backend::MatmulShape;
use cudarc::cublas::{CudaBlas, result as blas, sys};
use std::ffi::c_int;

/// The cuBLAS handle of one backend, bound to its stream.
pub struct Blas {
    blas: CudaBlas,
}

// SAFETY: the handle is only used under the backend's mutex, one call at a
// time, on the stream it was created for.
unsafe impl Send for Blas {}

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
        let blas = CudaBlas::new(stream).map_err(|e| cublas_err("cublasCreate", e))?;
        let handle = *blas.handle();
        // SAFETY: a live handle; the workspace outlives it (see above).
        unsafe {
            let r = sys::cublasSetWorkspace_v2(handle, workspace as *mut _, workspace_bytes);
            r.result()
                .map_err(|e| cublas_err("cublasSetWorkspace", e))?;
            let r = sys::cublasSetMathMode(handle, sys::cublasMath_t::CUBLAS_DEFAULT_MATH);
            r.result().map_err(|e| cublas_err("cublasSetMathMode", e))?;
        }
        Ok(Blas { blas })
    }

    /// The row-major product of [`MatmulShape`] as cuBLAS's column-major
    /// one: row-major `C = op(A) op(B)` is column-major `C^T = op(B)^T
    /// op(A)^T`, so B is passed first and the shapes swap.
    ///
    /// # Safety
    /// `a`, `b`, `c` are device buffers of at least `batch * m * k`,
    /// `batch * k * n` and `batch * m * n` floats, live until the stream has
    /// run the product.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn sgemm(
        &self,
        s: &MatmulShape,
        alpha: f32,
        a: u64,
        b: u64,
        beta: f32,
        c: u64,
    ) -> Result<(), CudaError> {
        let (m, n, k) = (dim(s.m, "m")?, dim(s.n, "n")?, dim(s.k, "k")?);
        let batch = dim(s.batch, "batch")?;
        let op = |t: bool| {
            if t {
                sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let ldb = if s.trans_b { k } else { n };
        let lda = if s.trans_a { m } else { k };
        // SAFETY: guaranteed by the caller; dimensions checked above.
        unsafe {
            blas::sgemm_strided_batched(
                *self.blas.handle(),
                op(s.trans_b),
                op(s.trans_a),
                n,
                m,
                k,
                &alpha,
                b as *const f32,
                ldb,
                (s.k * s.n) as i64,
                a as *const f32,
                lda,
                (s.m * s.k) as i64,
                &beta,
                c as *mut f32,
                n,
                (s.m * s.n) as i64,
                batch,
            )
        }
        .map_err(|e| cublas_err("cublasSgemmStridedBatched", e))
    }
}
