//! What can go wrong on the device, as one typed error.

use cudarc::driver::sys::CUresult;

/// Every failure of the CUDA backend. [`CudaError::Sticky`] is its own kind:
/// after it the CUDA context is unusable and the process must be replaced
/// (a trial runner restarts its worker); every other kind leaves the
/// process usable.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// A runtime library (libcuda, libnvrtc, libcublas) could not be loaded.
    #[error("CUDA library not available: {0}")]
    MissingLibrary(String),
    /// A kernel file did not compile; `log` is NVRTC's log (file:line).
    #[error("NVRTC could not compile {file} for {arch}: {message}\n{log}")]
    Compile {
        /// The kernel file (`elementwise.cu`, ...).
        file: &'static str,
        /// The architecture compiled for (`compute_XY` or `sm_XY`).
        arch: String,
        /// NVRTC's error.
        message: String,
        /// NVRTC's compilation log (empty when it gave none).
        log: String,
    },
    /// A kernel the backend launches is missing from the compiled module.
    #[error("kernel {name} not found in {file}: {message}")]
    MissingKernel {
        /// The kernel file that should define it.
        file: &'static str,
        /// The kernel's full name (`add_f32`, ...).
        name: String,
        /// Why it was not found (absent from the PTX, or the driver's
        /// error on loading it).
        message: String,
    },
    /// A driver call failed and the context is still usable.
    #[error("{call} failed: {code:?}")]
    Driver {
        /// The driver function that failed.
        call: &'static str,
        /// The driver's result code.
        code: CUresult,
    },
    /// A sticky error (illegal address, launch failure, ...): the context is
    /// corrupted for the rest of the process, which must be replaced.
    #[error(
        "{call} failed with sticky error {code:?}: the CUDA context is lost, restart the process"
    )]
    Sticky {
        /// The driver function that failed.
        call: &'static str,
        /// The driver's result code (one [`is_sticky`] accepts).
        code: CUresult,
    },
    /// A cuBLAS call failed.
    #[error("{call} failed: {status}")]
    Cublas {
        /// The cuBLAS function that failed.
        call: &'static str,
        /// cuBLAS's status code, as text.
        status: String,
    },
    /// Device memory could not be allocated: gpu-mem's typed error (an
    /// out-of-memory carries its report).
    #[error("allocating {name} ({bytes} bytes): {source}")]
    Alloc {
        /// The buffer's name, or what was being set up (`device`,
        /// `allocator`, `allocator limit`).
        name: String,
        /// Bytes requested (the limit, when setting one; 0 when creating
        /// the device or the allocator).
        bytes: usize,
        /// gpu-mem's error.
        #[source]
        source: gpu_mem::AllocError,
    },
    /// A caller broke an operation's contract (sizes, ids, labels).
    #[error("invalid call to {op}: {message}")]
    Invalid {
        /// The operation called (`matmul`, `upload`, ...).
        op: &'static str,
        /// What about the call was wrong.
        message: String,
    },
}

impl CudaError {
    /// A failed driver call, classified as sticky or not.
    pub fn driver(call: &'static str, code: CUresult) -> CudaError {
        if is_sticky(code) {
            CudaError::Sticky { call, code }
        } else {
            CudaError::Driver { call, code }
        }
    }

    /// Whether the process must be replaced to use CUDA again.
    pub fn is_sticky(&self) -> bool {
        matches!(self, CudaError::Sticky { .. })
    }

    /// The out-of-memory report, when this is one.
    pub fn as_oom(&self) -> Option<&gpu_mem::OutOfMemory> {
        match self {
            CudaError::Alloc { source, .. } => source.as_oom(),
            _ => None,
        }
    }
}

/// The errors after which CUDA documents that the context "cannot be used"
/// and every later call returns the same error.
pub fn is_sticky(code: CUresult) -> bool {
    use CUresult::*;
    matches!(
        code,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_LAUNCH_TIMEOUT
            | CUDA_ERROR_ASSERT
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_ECC_UNCORRECTABLE
    )
}

/// A driver result as our error.
pub fn check(call: &'static str, code: CUresult) -> Result<(), CudaError> {
    match code {
        CUresult::CUDA_SUCCESS => Ok(()),
        code => Err(CudaError::driver(call, code)),
    }
}

/// A cudarc driver error as our error.
pub fn from_driver(call: &'static str, e: cudarc::driver::DriverError) -> CudaError {
    CudaError::driver(call, e.0)
}
