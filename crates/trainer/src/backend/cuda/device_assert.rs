//! A device-side assert on demand: a kernel that checks a class label as
//! PyTorch's loss kernels do and fails it, which leaves the process's CUDA
//! context unusable (`CUDA_ERROR_ASSERT`, "device-side assert triggered").
//!
//! The legacy setup lost whole studies to this error. memtune's own loss
//! kernels never assert (labels are checked on the host before any kernel
//! runs), so tests of what a study does when one trial's process loses its
//! context need a real one: a worker calls [`trigger`] on its device between
//! epochs, and the trial's next step reports the sticky error from
//! [`super::CudaBackend::check`]. Compiled by NVRTC when called; nothing
//! else loads it.

use super::error::{CudaError, check, from_driver};
use super::kernels;
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

/// The kernel: one thread asserting that `label < classes`.
pub const SOURCE: &str = r#"
extern "C" __global__ void label_in_range(unsigned label, unsigned classes) {
    assert(label < classes);
}
"#;

/// The kernel compiled for `arch` (`compute_XY` or `sm_XY`).
pub fn compile(arch: &str) -> Result<Ptx, CudaError> {
    super::nvrtc::ensure_loaded()?;
    let mut opts = kernels::options(arch);
    opts.name = Some(FILE.into());
    let ptx =
        cudarc::nvrtc::compile_ptx_with_opts(SOURCE, opts).map_err(|e| CudaError::Compile {
            file: FILE,
            arch: arch.to_string(),
            message: format!("{e:?}"),
            log: String::new(),
        })?;
    if !ptx.to_src().contains(".entry label_in_range(") {
        return Err(CudaError::MissingKernel {
            file: FILE,
            name: "label_in_range".into(),
            message: format!("no `.entry` in the PTX compiled for {arch}"),
        });
    }
    Ok(ptx)
}

/// The name NVRTC and errors give the kernel's source.
const FILE: &str = "device_assert.cu";

/// Launches the kernel with a label out of range on device `ordinal`'s
/// primary context (the one every backend of the process uses) and waits
/// for it: the returned error is the sticky one the device reported. An
/// error of another kind means the kernel could not be compiled or
/// launched.
pub fn trigger(ordinal: usize) -> Result<CudaError, CudaError> {
    super::probe()?;
    let ctx = CudaContext::new(ordinal).map_err(|e| from_driver("cuDevicePrimaryCtxRetain", e))?;
    ctx.bind_to_thread()
        .map_err(|e| from_driver("cuCtxSetCurrent", e))?;
    let (major, minor) = ctx
        .compute_capability()
        .map_err(|e| from_driver("cuDeviceGetAttribute", e))?;
    let ptx = compile(&kernels::arch_for(major, minor))?;
    let module = ctx
        .load_module(ptx)
        .map_err(|e| from_driver("cuModuleLoadData", e))?;
    let f = module
        .load_function("label_in_range")
        .map_err(|e| CudaError::MissingKernel {
            file: FILE,
            name: "label_in_range".into(),
            message: format!("{e:?}"),
        })?;
    let stream = ctx.default_stream();
    let (label, classes) = (2u32, 2u32);
    let mut launch = stream.launch_builder(&f);
    launch.arg(&label).arg(&classes);
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the kernel takes two u32 by value and touches no memory.
    unsafe { launch.launch(cfg) }.map_err(|e| from_driver("cuLaunchKernel", e))?;
    // SAFETY: synchronising the current context, which `ctx` made current.
    match check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() }) {
        Err(e) if e.is_sticky() => Ok(e),
        Err(e) => Err(e),
        Ok(()) => Err(CudaError::Invalid {
            op: "device assert",
            message: "the asserting kernel ran without failing".into(),
        }),
    }
}
