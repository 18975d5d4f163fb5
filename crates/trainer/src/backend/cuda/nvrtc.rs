//! Making NVRTC and cuBLAS loadable.
//!
//! cudarc opens them by name (`dlopen("libnvrtc.so.13")`, `.so.12`, ...);
//! [`gpu_mem::libs`] finds the files of a CUDA 12 or 13 install (toolkit,
//! pip wheels' `nvidia/cu13/lib` or `nvidia/*/lib`, `MEMTUNE_CUDA_LIB_DIRS`,
//! `MEMTUNE_NVRTC_LIB`) and preloads them by path, so those names resolve.

use super::error::CudaError;

/// The variable naming the NVRTC library (file or directory); read by
/// [`gpu_mem::libs::default_roots`].
pub const NVRTC_LIB_VAR: &str = "MEMTUNE_NVRTC_LIB";

fn preloaded() -> Result<&'static gpu_mem::libs::Located, CudaError> {
    gpu_mem::libs::ensure_loaded()
        .as_ref()
        .map_err(|reason| CudaError::MissingLibrary(reason.clone()))
}

/// Preloads the CUDA libraries (once per process), then checks that cudarc
/// can load NVRTC. Call before any cudarc NVRTC function (cudarc panics
/// when the library is missing).
pub fn ensure_loaded() -> Result<(), CudaError> {
    let located = preloaded()?;
    // SAFETY: only tries to open the library.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::MissingLibrary(format!(
            "libnvrtc.so.13 or .so.12 was not found (searched {}); install the pip package \
             nvidia-cuda-nvrtc (or a CUDA toolkit), or name its lib folder in \
             {} or {NVRTC_LIB_VAR}",
            searched(located),
            gpu_mem::libs::LIB_DIRS_VAR
        )))
    }
}

/// Like [`ensure_loaded`] for cuBLAS and cuBLASLt.
pub fn ensure_cublas_loaded() -> Result<(), CudaError> {
    let located = preloaded()?;
    // SAFETY: these only try to open the libraries.
    let present = unsafe {
        cudarc::cublas::sys::is_culib_present() && cudarc::cublaslt::sys::is_culib_present()
    };
    if present {
        Ok(())
    } else {
        Err(CudaError::MissingLibrary(format!(
            "libcublas/libcublasLt .so.13 or .so.12 were not found (searched {}); install the \
             pip package nvidia-cublas (or a CUDA toolkit), or name its lib folder in {}",
            searched(located),
            gpu_mem::libs::LIB_DIRS_VAR
        )))
    }
}

fn searched(located: &gpu_mem::libs::Located) -> String {
    if located.searched.is_empty() {
        return "no existing folder".into();
    }
    located
        .searched
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
