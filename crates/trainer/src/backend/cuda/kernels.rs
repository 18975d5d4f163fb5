//! The kernel sources and their run-time compilation.
//!
//! Each `.cu` file under `crates/trainer/kernels/` is one kernel family. The
//! sources are embedded in the binary; at run time [`compile`] prepends
//! `common.cuh`, compiles with NVRTC for the device's compute capability and
//! [`compiled`] caches the result per process and architecture, so a second
//! backend (the next trial in the same worker) loads modules without
//! compiling again, and on disk ([`kernel_cache`]), so the next process
//! does not compile either.

use super::error::CudaError;
use super::{kernel_cache, nvrtc};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// The storage types of activations every typed kernel is instantiated
/// for, as kernel name suffixes.
pub const STORED: &[&str] = &["f32", "bf16", "f16"];
/// The 16-bit storage types (the tensor-core kernels').
pub const HALF: &[&str] = &["bf16", "f16"];
/// The (first, second) storage type pairs of `add_assign` and `cast`.
pub const PAIRS: &[&str] = &[
    "f32_f32",
    "f32_bf16",
    "f32_f16",
    "bf16_f32",
    "bf16_bf16",
    "f16_f32",
    "f16_f16",
];
/// A kernel without a type suffix.
pub const PLAIN: &[&str] = &[];

/// One kernel family: its file, its source and the kernels it defines, each
/// a base name with the suffixes it is instantiated for (`name_suffix`, or
/// the bare name when there are none).
#[derive(Debug)]
pub struct KernelSource {
    /// The file name under `crates/trainer/kernels/` (`elementwise.cu`, ...).
    pub file: &'static str,
    /// The file's CUDA C++ source, without `common.cuh`.
    pub source: &'static str,
    /// Each kernel's base name and the type suffixes it is instantiated
    /// for ([`PLAIN`]: none).
    pub kernels: &'static [(&'static str, &'static [&'static str])],
}

/// Prepended to every family.
pub const COMMON: &str = include_str!("../../../kernels/common.cuh");

macro_rules! family {
    ($file:literal, [$(($kernel:literal, $suffixes:expr)),* $(,)?]) => {
        KernelSource {
            file: $file,
            source: include_str!(concat!("../../../kernels/", $file)),
            kernels: &[$(($kernel, $suffixes)),*],
        }
    };
}

/// Every kernel family, in the order the backend loads them.
pub const SOURCES: &[KernelSource] = &[
    family!(
        "elementwise.cu",
        [
            ("fill", STORED),
            ("fill_multi", PLAIN),
            ("add", STORED),
            ("scale", STORED),
            ("bias_add", STORED),
            ("bias_backward", STORED),
            ("column_sums", STORED),
            ("add_assign", PAIRS),
            ("cast", PAIRS),
            ("cast_many_f32", HALF),
        ]
    ),
    family!(
        "global_norm.cu",
        [("sum_squares", STORED), ("sum_squares_multi", PLAIN)]
    ),
    family!(
        "activation.cu",
        [
            ("bias_gelu_forward", STORED),
            ("gelu_backward", STORED),
            ("tanh_forward", STORED),
            ("tanh_backward", STORED),
            ("relu_forward", STORED),
            ("relu_backward", STORED),
        ]
    ),
    family!("dropout.cu", [("dropout", STORED)]),
    family!("init.cu", [("init_normal", STORED)]),
    family!(
        "layernorm.cu",
        [
            ("layernorm_forward", STORED),
            ("residual_layernorm_forward", STORED),
            ("residual_layernorm_forward_warp", STORED),
            ("layernorm_backward_dx", STORED),
            ("residual_layernorm_backward", STORED),
            ("residual_layernorm_backward_warp", STORED),
            ("layernorm_backward_params", STORED),
        ]
    ),
    family!(
        "attention.cu",
        [
            ("permute_heads", STORED),
            ("unpermute_heads", STORED),
            ("softmax_forward", STORED),
            ("softmax_backward", STORED),
        ]
    ),
    family!(
        "attention_fused.cu",
        [
            ("attention_forward_simt", STORED),
            ("attention_backward_delta", STORED),
            ("attention_backward_dkdv_simt", STORED),
            ("attention_backward_dq_simt", STORED),
            ("attention_forward_mma32", HALF),
            ("attention_backward_dkdv_mma32", HALF),
            ("attention_backward_dq_mma32", HALF),
            ("attention_forward_mma64", HALF),
            ("attention_backward_dkdv_mma64", HALF),
            ("attention_backward_dq_mma64", HALF),
        ]
    ),
    family!(
        "embedding.cu",
        [
            ("embedding_forward", STORED),
            ("embedding_backward", STORED),
            ("cls_forward", STORED),
            ("cls_backward", STORED),
            ("mean_pool", STORED),
        ]
    ),
    family!(
        "loss.cu",
        [
            ("cross_entropy_forward", STORED),
            ("cross_entropy_backward", STORED)
        ]
    ),
    family!(
        "optim.cu",
        [
            ("adamw_f32", PLAIN),
            ("sgd_f32", PLAIN),
            ("adamw_multi", PLAIN)
        ]
    ),
    family!(
        "rel_pos.cu",
        [
            ("rel_pos_gather", STORED),
            ("rel_pos_scatter", STORED),
            ("mask_rows", STORED)
        ]
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
    match missing_kernel(family, &ptx.to_src()) {
        Some(name) => Err(CudaError::MissingKernel {
            file: family.file,
            name,
            message: format!("no `.entry` in the PTX compiled for {arch}"),
        }),
        None => Ok(ptx),
    }
}

/// The first kernel of `family` that the PTX `text` does not declare (PTX
/// declares each as `.entry NAME(`).
fn missing_kernel(family: &KernelSource, text: &str) -> Option<String> {
    kernel_names(family)
        .into_iter()
        .find(|name| !text.contains(&format!(".entry {name}(")))
}

/// [`compile`] through the PTX cache on disk ([`kernel_cache`]): a file
/// keyed by the program, the options and NVRTC's version, read when it
/// declares every kernel of the family, else compiled and written.
pub fn compile_cached(family: &'static KernelSource, arch: &str) -> Result<Ptx, CudaError> {
    match kernel_cache::dir() {
        Some(dir) => compile_cached_in(&dir, family, arch),
        None => compile(family, arch),
    }
}

/// [`compile_cached`] with the cache in `dir`.
pub fn compile_cached_in(
    dir: &std::path::Path,
    family: &'static KernelSource,
    arch: &str,
) -> Result<Ptx, CudaError> {
    nvrtc::ensure_loaded()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loaded (above); the pointers are to live integers.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    let (program, options) = (program(family), format!("{:?}", options(arch)));
    let version = format!("nvrtc {major}.{minor}");
    let file = kernel_cache::path(dir, family.file, arch, &[&program, &options, &version]);
    if let Some(ptx) = kernel_cache::load(&file, |text| missing_kernel(family, text).is_none()) {
        return Ok(ptx);
    }
    let ptx = compile(family, arch)?;
    kernel_cache::store(&file, &ptx);
    Ok(ptx)
}

/// How many parameters kernel `name` takes, as its PTX declares them
/// (`.entry NAME(` up to the closing parenthesis, one `.param` each);
/// `None` when the PTX has no such entry. The backend checks each launch's
/// argument list against it: a list of another length would make the
/// driver read arguments that are not there.
pub fn parameter_count(ptx: &str, name: &str) -> Option<usize> {
    let entry = format!(".entry {name}(");
    let start = ptx.find(&entry)? + entry.len();
    let declared = &ptx[start..];
    let end = declared.find(')')?;
    Some(declared[..end].matches(".param").count())
}

/// The full names (`add_f32`, `add_bf16`, ...) of a family's kernels.
pub fn kernel_names(family: &KernelSource) -> Vec<String> {
    family
        .kernels
        .iter()
        .flat_map(|&(k, suffixes)| {
            let bare = suffixes.is_empty().then(|| k.to_string());
            bare.into_iter()
                .chain(suffixes.iter().map(move |s| format!("{k}_{s}")))
        })
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
            .map(|family| compile_cached(family, arch))
            .collect::<Result<Vec<_>, _>>()?,
    );
    map.insert(arch.to_string(), Arc::clone(&ptx));
    Ok(ptx)
}

/// What the assembler reports for one kernel compiled for a real
/// architecture (`sm_XY`): registers per thread, static shared memory,
/// stack frame and local-memory spills.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelResources {
    /// The kernel's entry name (`add_f32`, ...).
    pub name: String,
    /// Registers per thread.
    pub registers: u32,
    /// Bytes of static shared memory per block.
    pub shared_bytes: u32,
    /// Bytes of stack frame per thread.
    pub stack_bytes: u32,
    /// Bytes of register spill stores to local memory.
    pub spill_store_bytes: u32,
    /// Bytes of register spill loads from local memory.
    pub spill_load_bytes: u32,
}

/// Compiles `family` for the real architecture `arch` (`sm_80`, ...) with
/// the assembler's verbose report and returns each kernel's resources:
/// what costs no device time to read before a device run.
pub fn resources(
    family: &'static KernelSource,
    arch: &str,
) -> Result<Vec<KernelResources>, CudaError> {
    use cudarc::nvrtc::result as nvrtc_api;
    nvrtc::ensure_loaded()?;
    let fail = |message: String, log: String| CudaError::Compile {
        file: family.file,
        arch: arch.to_string(),
        message,
        log,
    };
    let source =
        std::ffi::CString::new(program(family)).map_err(|e| fail(e.to_string(), String::new()))?;
    let name =
        std::ffi::CString::new(family.file).map_err(|e| fail(e.to_string(), String::new()))?;
    let prog = nvrtc_api::create_program(&source, Some(&name))
        .map_err(|e| fail(format!("{e:?}"), String::new()))?;
    let mut opts = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "--prec-div=true".to_string(),
        "--prec-sqrt=true".to_string(),
        "--ftz=false".to_string(),
        "--ptxas-options=-v".to_string(),
    ];
    opts.dedup();
    // SAFETY: `prog` was created above and is destroyed once, below.
    let compiled = unsafe { nvrtc_api::compile_program(prog, &opts) };
    // SAFETY: as above.
    let log = unsafe { nvrtc_api::get_program_log(prog) }
        .map(|raw| {
            let bytes: Vec<u8> = raw
                .iter()
                .map(|&c| c as u8)
                .take_while(|&c| c != 0)
                .collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default();
    // SAFETY: as above.
    let _ = unsafe { nvrtc_api::destroy_program(prog) };
    if let Err(e) = compiled {
        return Err(fail(format!("{e:?}"), log));
    }
    Ok(parse_ptxas_report(&log))
}

/// The per-kernel figures of `ptxas -v` output.
pub fn parse_ptxas_report(log: &str) -> Vec<KernelResources> {
    let number_before = |line: &str, unit: &str| -> u32 {
        line.split(',')
            .find(|part| part.contains(unit))
            .and_then(|part| part.split_whitespace().find_map(|w| w.parse().ok()))
            .unwrap_or(0)
    };
    let mut out: Vec<KernelResources> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            out.push(KernelResources {
                name,
                ..KernelResources::default()
            });
        } else if let Some(k) = out.last_mut() {
            if line.contains("bytes stack frame") {
                k.stack_bytes = number_before(line, "stack frame");
                k.spill_store_bytes = number_before(line, "spill stores");
                k.spill_load_bytes = number_before(line, "spill loads");
            } else if line.contains("Used ") && line.contains("registers") {
                k.registers = number_before(line, "registers");
                k.shared_bytes = number_before(line, "smem");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::parameter_count;

    #[test]
    fn parameters_are_counted_from_the_ptx_entry() {
        let ptx = "\
.visible .entry fill_f32(
\t.param .u64 fill_f32_param_0,
\t.param .f32 fill_f32_param_1,
\t.param .align 8 .b8 fill_f32_param_2[16]
)
{
\tld.param.u64 %rd1, [fill_f32_param_0];
}
.visible .entry nothing()
{
}
";
        assert_eq!(parameter_count(ptx, "fill_f32"), Some(3));
        assert_eq!(parameter_count(ptx, "nothing"), Some(0));
        assert_eq!(parameter_count(ptx, "fill"), None);
    }
}
