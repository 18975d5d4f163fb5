//! The kernel sources and their run-time compilation.
//!
//! Each `.cu` file under `crates/trainer/kernels/` is one kernel family. The
//! sources are embedded in the binary; at run time [`compile`] prepends
//! `common.cuh`, compiles with NVRTC for the device's compute capability and
//! [`compiled`] caches the result per process and architecture, so a second
//! backend (the next trial in the same worker) loads modules without
//! compiling again.

use super::error::CudaError;
use super::nvrtc;
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Element types every family is instantiated for, as kernel name suffixes.
pub const TYPE_SUFFIXES: &[&str] = &["f32", "bf16"];

/// One kernel family: its file, its source and the kernels it defines
/// (without the element type suffix).
#[derive(Debug)]
pub struct KernelSource {
    pub file: &'static str,
    pub source: &'static str,
    pub kernels: &'static [&'static str],
}

/// Prepended to every family.
pub const COMMON: &str = include_str!("../../../kernels/common.cuh");

macro_rules! family {
    ($file:literal, [$($kernel:literal),* $(,)?]) => {
        KernelSource {
            file: $file,
            source: include_str!(concat!("../../../kernels/", $file)),
            kernels: &[$($kernel),*],
        }
    };
}

/// Every kernel family, in the order the backend loads them.
pub const SOURCES: &[KernelSource] = &[
    family!(
        "elementwise.cu",
        [
            "fill",
            "add",
            "add_assign",
            "scale",
            "bias_add",
            "bias_backward"
        ]
    ),
    family!("global_norm.cu", ["sum_squares"]),
    family!(
        "activation.cu",
        [
            "bias_gelu_forward",
            "gelu_backward",
            "tanh_forward",
            "tanh_backward",
            "relu_forward",
            "relu_backward"
        ]
    ),
    family!("dropout.cu", ["dropout"]),
    family!(
        "layernorm.cu",
        [
            "layernorm_forward",
            "layernorm_backward_dx",
            "layernorm_backward_params"
        ]
    ),
    family!(
        "attention.cu",
        [
            "permute_heads",
            "unpermute_heads",
            "softmax_forward",
            "softmax_backward"
        ]
    ),
    family!(
        "embedding.cu",
        [
            "embedding_forward",
            "embedding_backward",
            "cls_forward",
            "cls_backward",
            "mean_pool"
        ]
    ),
    family!(
        "loss.cu",
        ["cross_entropy_forward", "cross_entropy_backward"]
    ),
    family!("optim.cu", ["adamw", "sgd"]),
    family!(
        "rel_pos.cu",
        ["rel_pos_gather", "rel_pos_scatter", "mask_rows"]
    ),
];

/// The full program NVRTC compiles for `family`. The `#line` directive makes
/// NVRTC's diagnostics name the `.cu` file and its own line numbers.
pub fn program(family: &KernelSource) -> String {
    format!(
        "#line 1 \"common.cuh\"\n{COMMON}\n#line 1 \"{}\"\n{}",
        family.file, family.source
    )
}

/// The virtual architecture name for a compute capability, e.g. `compute_80`.
/// PTX for it is JIT-compiled by the driver for the exact device.
pub fn arch_for(major: i32, minor: i32) -> String {
    format!("compute_{major}{minor}")
}

/// NVRTC flags: the architecture, C++17, and IEEE-exact fp32 division and
/// square root (fp32 results are compared with the CPU reference at 1e-5).
pub fn options(arch: &str) -> CompileOptions {
    CompileOptions {
        prec_div: Some(true),
        prec_sqrt: Some(true),
        ftz: Some(false),
        options: vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()],
        name: None,
        ..Default::default()
    }
}

/// Compiles one family for `arch` (`compute_XY` or `sm_XY`) and checks that
/// every kernel the backend will look up is in the PTX.
pub fn compile(family: &'static KernelSource, arch: &str) -> Result<Ptx, CudaError> {
    nvrtc::ensure_loaded()?;
    let mut opts = options(arch);
    opts.name = Some(family.file.to_string());
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(program(family), opts).map_err(|e| {
        let (message, log) = match e {
            CompileError::CompileError { nvrtc, log, .. } => {
                (format!("{nvrtc:?}"), log.to_string_lossy().into_owned())
            }
            other => (format!("{other:?}"), String::new()),
        };
        CudaError::Compile {
            file: family.file,
            arch: arch.to_string(),
            message,
            log,
        }
    })?;
    let text = ptx.to_src();
    for name in kernel_names(family) {
        // PTX declares each kernel as `.entry NAME(`.
        if !text.contains(&format!(".entry {name}(")) {
            return Err(CudaError::MissingKernel {
                file: family.file,
                name,
                message: format!("no `.entry` in the PTX compiled for {arch}"),
            });
        }
    }
    Ok(ptx)
}

/// The full names (`add_f32`, `add_bf16`, ...) of a family's kernels.
pub fn kernel_names(family: &KernelSource) -> Vec<String> {
    family
        .kernels
        .iter()
        .flat_map(|k| TYPE_SUFFIXES.iter().map(move |s| format!("{k}_{s}")))
        .collect()
}

/// Every family compiled for `arch`, compiled at most once per process.
pub fn compiled(arch: &str) -> Result<Arc<Vec<Ptx>>, CudaError> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Vec<Ptx>>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    // Compiling under the lock: a second backend waits for the first
    // compilation instead of repeating it.
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(ptx) = map.get(arch) {
        return Ok(Arc::clone(ptx));
    }
    let ptx = Arc::new(
        SOURCES
            .iter()
            .map(|family| compile(family, arch))
            .collect::<Result<Vec<_>, _>>()?,
    );
    map.insert(arch.to_string(), Arc::clone(&ptx));
    Ok(ptx)
}
