//! The CUDA backend: the [`Backend`](super::Backend) operations on an
//! NVIDIA GPU, fp32.
//!
//! - Memory: every buffer, the cuBLAS workspace and kernel scratch come from
//!   one `gpu_mem::CachingAllocator<CudaDevice>`, so its statistics (peak
//!   allocated bytes, fragmentation) are the trial's exact device memory and
//!   its `MemoryLimit` is the trial's lease. Buffers are allocated in the
//!   order the model asks for them, which is the memory plan's order.
//! - Kernels: the `.cu` files under `crates/trainer/kernels/`, compiled at
//!   run time by NVRTC for the device's compute capability and cached per
//!   process ([`kernels`]). Matrix products: cuBLAS strided-batched SGEMM
//!   ([`blas`]).
//! - Uploads: host data reaches the device through a pinned ring without
//!   waiting for the GPU ([`staging`]), or with `MEMTUNE_CUDA_UPLOADS=sync`
//!   by a copy the backend waits for.
//! - Determinism: no value is added by atomics (the split column sums count
//!   their blocks' arrivals with one); every reduction runs in a fixed order
//!   for a given shape, so the same inputs give bit-identical outputs run to
//!   run.
//!   Dropout masks are the CPU backend's (same Philox stream).
//! - Errors: the [`Backend`](super::Backend) trait is infallible, so the
//!   backend records the first failure, skips every later operation (a
//!   `download` then returns NaNs) and reports it from [`CudaBackend::check`],
//!   which the training loop calls once per step. A sticky CUDA error is
//!   [`CudaError::Sticky`]: the process must be replaced. An allocation
//!   failure is [`CudaError::Alloc`] carrying gpu-mem's typed error; an
//!   out-of-memory among them reaches the training loop as
//!   [`crate::backend::Failure::OutOfMemory`].
//!
//! Precision and kernel sets: matrix products may read fp32 operands as
//! bf16 or fp16 on the tensor cores ([`CudaBackend::with_matmul_precision`],
//! [`MatmulPrecision`]). With [`Kernels::Reference`] (the default) every
//! buffer is fp32 and each trait operation is its own launch; with
//! [`Kernels::Fused`] ([`CudaBackend::with_kernels`]) attention, the layer
//! body and AdamW run fused, and with 16-bit products the activations are
//! stored in 16 bits ([`Storage`]).

pub mod blas;
pub mod buffer;
pub mod device_assert;
pub mod error;
mod fill;
pub mod kernel_cache;
pub mod kernels;
pub mod nvrtc;
mod ops;
pub mod staging;

pub use buffer::{CudaBuf, CudaIds};
pub use error::CudaError;
pub use fill::PoisonVarError;

use super::{Dtype, Kernels, MatmulPrecision, Storage};
use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use error::{check, from_driver};
use fill::{Fill, nan_bits};
use gpu_mem::cuda::{CudaBuffer, CudaDevice};
use gpu_mem::{CachingAllocator, Config};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use crate::backend::HostCounters;

/// The backend's own buffers, listed (and priced in every plan of a CUDA
/// step) in [`crate::memory::backend_buffers`].
use crate::memory::backend_buffers::{
    CUDA_BLAS_WORKSPACE_BYTES as BLAS_WORKSPACE_BYTES, CUDA_COLUMN_COUNTERS as COLUMN_COUNTERS,
    CUDA_COLUMN_PARTIALS as COLUMN_PARTIALS, CUDA_FILL_ENTRY_BYTES as FILL_ENTRY_BYTES,
    CUDA_NORM_BLOCKS as NORM_BLOCKS, CUDA_TENSOR_ENTRY_BYTES as TENSOR_ENTRY_BYTES,
    CUDA_TENSOR_TABLE as TENSOR_TABLE,
};
/// Threads per block of the elementwise kernels.
const THREADS: u32 = 256;

/// A kernel argument, passed by value.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg {
    Ptr(u64),
    U64(u64),
    U32(u32),
    F32(f32),
    F64(f64),
}

/// What a kernel takes as an argument: a buffer's device address (an error
/// when its allocation failed, see [`CudaBuf::ptr`]) or a scalar [`Arg`].
pub(crate) trait KernelArg {
    fn arg(&self) -> Result<Arg, CudaError>;
}

impl<T: KernelArg + ?Sized> KernelArg for &T {
    fn arg(&self) -> Result<Arg, CudaError> {
        (**self).arg()
    }
}

impl<T: KernelArg + ?Sized> KernelArg for &mut T {
    fn arg(&self) -> Result<Arg, CudaError> {
        (**self).arg()
    }
}

impl KernelArg for Arg {
    fn arg(&self) -> Result<Arg, CudaError> {
        Ok(*self)
    }
}

impl KernelArg for CudaBuf {
    fn arg(&self) -> Result<Arg, CudaError> {
        Ok(Arg::Ptr(self.ptr()?))
    }
}

impl KernelArg for CudaIds {
    fn arg(&self) -> Result<Arg, CudaError> {
        Ok(Arg::Ptr(self.ptr()?))
    }
}

/// A launch's argument list, `[Arg; N]`, from buffers and [`Arg`]s in the
/// kernel's parameter order; returns early (`?`) when a buffer has no
/// memory.
macro_rules! args {
    ($($arg:expr),* $(,)?) => {
        &[$($crate::backend::cuda::KernelArg::arg(&$arg)?),*]
    };
}
pub(crate) use args;

/// The CUDA backend; see the module doc.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    allocator: Arc<CachingAllocator<CudaDevice>>,
    arch: String,
    /// Compute capability (major, minor).
    capability: (i32, i32),
    /// Operand format of matrix products.
    precision: MatmulPrecision,
    storage: Storage,
    kernels: Kernels,
    /// Each kernel with the number of parameters its PTX declares.
    functions: HashMap<String, (CudaFunction, usize)>,
    blas: Mutex<blas::Blas>,
    /// Partial sums of `sum_squares`, one fp64 per block.
    norm_partials: CudaBuffer<f64>,
    /// Partial column sums of the split bias and LayerNorm reductions.
    column_partials: CudaBuffer<f32>,
    /// How many blocks of a split column reduction have written their
    /// partials, per block of columns (zero between launches).
    column_counters: CudaBuffer<u32>,
    /// The multi-tensor optimiser's table, and what it holds (uploaded
    /// again only when the tensors change).
    tensor_table: CudaBuffer<u64>,
    table_contents: Mutex<Vec<u64>>,
    /// The multi-tensor fill's table (address and length per tensor), and
    /// what it holds.
    fill_table: CudaBuffer<u64>,
    fill_contents: Mutex<Vec<u64>>,
    /// Kept alive for the cuBLAS handle (dropped after it: field order).
    _blas_workspace: CudaBuffer<u8>,
    error: Mutex<Option<CudaError>>,
    /// The first sticky error (call, code), kept for good: nothing will run
    /// again and every later check reports it.
    lost: Mutex<Option<(&'static str, CUresult)>>,
    /// What the host has done on the stream so far ([`CudaBackend::host_counters`]).
    counters: AtomicCounters,
    /// The pinned ring of [`staging::Uploads::Staged`]; `None`: uploads
    /// wait for the stream.
    staging: Option<Mutex<staging::Staging>>,
    /// Fill overwritten buffers with NaN instead of leaving them as they
    /// are ([`fill`]).
    poison_overwritten: bool,
}

/// The live counters behind [`HostCounters`].
#[derive(Debug, Default)]
struct AtomicCounters {
    syncs: AtomicU64,
    sync_wait_ns: AtomicU64,
    kernel_launches: AtomicU64,
    blas_calls: AtomicU64,
}

impl AtomicCounters {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn read(&self) -> HostCounters {
        HostCounters {
            syncs: self.syncs.load(Ordering::Relaxed),
            sync_wait_ns: self.sync_wait_ns.load(Ordering::Relaxed),
            kernel_launches: self.kernel_launches.load(Ordering::Relaxed),
            blas_calls: self.blas_calls.load(Ordering::Relaxed),
        }
    }
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("ordinal", &self.ctx.ordinal())
            .field("arch", &self.arch)
            .finish()
    }
}

/// Whether this machine can run the backend at all: libcuda, libnvrtc and
/// libcublas load. Cheap; touches no device.
pub fn probe() -> Result<(), CudaError> {
    if let Err(reason) = gpu_mem::libs::ensure_loaded() {
        return Err(CudaError::MissingLibrary(reason.clone()));
    }
    // SAFETY: this only tries to load the library.
    if !unsafe { sys::is_culib_present() } {
        return Err(CudaError::MissingLibrary(
            "libcuda.so was not found (no NVIDIA driver)".into(),
        ));
    }
    nvrtc::ensure_loaded()?;
    nvrtc::ensure_cublas_loaded()
}

impl CudaBackend {
    /// A backend on device `ordinal` with a fresh allocator of `config`.
    pub fn new(ordinal: usize, config: Config) -> Result<CudaBackend, CudaError> {
        probe()?;
        let device = CudaDevice::new(ordinal).map_err(|e| CudaError::Alloc {
            name: "device".into(),
            bytes: 0,
            source: e.into(),
        })?;
        let ctx = Arc::clone(device.context());
        let allocator =
            Arc::new(
                CachingAllocator::new(device, config).map_err(|source| CudaError::Alloc {
                    name: "allocator".into(),
                    bytes: 0,
                    source,
                })?,
            );
        CudaBackend::with_allocator(ctx, allocator)
    }

    /// A backend allocating from `allocator`, whose device is `ctx`'s. It
    /// works on a new stream of its own.
    pub fn with_allocator(
        ctx: Arc<CudaContext>,
        allocator: Arc<CachingAllocator<CudaDevice>>,
    ) -> Result<CudaBackend, CudaError> {
        probe()?;
        ctx.bind_to_thread()
            .map_err(|e| from_driver("cuCtxSetCurrent", e))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| from_driver("cuDeviceGetAttribute", e))?;
        let arch = kernels::arch_for(major, minor);
        let stream = ctx
            .new_stream()
            .map_err(|e| from_driver("cuStreamCreate", e))?;
        let mut functions = HashMap::new();
        for (family, ptx) in kernels::SOURCES
            .iter()
            .zip(kernels::compiled(&arch)?.iter())
        {
            let module = ctx
                .load_module(ptx.clone())
                .map_err(|e| from_driver("cuModuleLoadData", e))?;
            let text = ptx.to_src();
            for name in kernels::kernel_names(family) {
                let params = kernels::parameter_count(&text, &name).ok_or_else(|| {
                    CudaError::MissingKernel {
                        file: family.file,
                        name: name.clone(),
                        message: "no `.entry` with a parameter list in the PTX".into(),
                    }
                })?;
                let f = module
                    .load_function(&name)
                    .map_err(|e| CudaError::MissingKernel {
                        file: family.file,
                        name: name.clone(),
                        message: format!("{e:?}"),
                    })?;
                functions.insert(name, (f, params));
            }
        }
        let alloc = |name: &str, bytes: usize, e| CudaError::Alloc {
            name: name.into(),
            bytes,
            source: e,
        };
        let workspace = allocator
            .alloc_slice::<u8>(BLAS_WORKSPACE_BYTES, &stream)
            .map_err(|e| alloc("cublas workspace", BLAS_WORKSPACE_BYTES, e))?;
        let norm_partials = allocator
            .alloc_slice::<f64>(NORM_BLOCKS, &stream)
            .map_err(|e| alloc("norm partials", NORM_BLOCKS * 8, e))?;
        let column_partials = allocator
            .alloc_slice::<f32>(COLUMN_PARTIALS, &stream)
            .map_err(|e| alloc("column partials", COLUMN_PARTIALS * 4, e))?;
        let column_counters = allocator
            .alloc_slice::<u32>(COLUMN_COUNTERS, &stream)
            .map_err(|e| alloc("column counters", COLUMN_COUNTERS * 4, e))?;
        let table_words = TENSOR_TABLE * TENSOR_ENTRY_BYTES / 8;
        let tensor_table = allocator
            .alloc_slice::<u64>(table_words, &stream)
            .map_err(|e| alloc("tensor table", table_words * 8, e))?;
        let fill_words = TENSOR_TABLE * FILL_ENTRY_BYTES / 8;
        let fill_table = allocator
            .alloc_slice::<u64>(fill_words, &stream)
            .map_err(|e| alloc("fill table", fill_words * 8, e))?;
        let blas = blas::Blas::new(Arc::clone(&stream), workspace.ptr(), BLAS_WORKSPACE_BYTES)?;
        // A variable set to a value it does not take.
        let bad_var = |message: String| CudaError::Invalid {
            op: "CudaBackend::new",
            message,
        };
        let asked = staging::Uploads::from_env().map_err(|e| bad_var(e.to_string()))?;
        let poison_overwritten = fill::poison_from_env().map_err(|e| bad_var(e.to_string()))?;
        let staging = match asked {
            Some(uploads) => Self::staging_for(&ctx, uploads)?,
            None => match staging::Staging::new(&ctx) {
                Ok(staging) => Some(Mutex::new(staging)),
                // A locked-memory limit can refuse pinned memory; uploads
                // that wait need none.
                Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                    eprintln!("memtune: CUDA uploads wait for the GPU (no pinned ring: {e})");
                    None
                }
                Err(e) => return Err(from_driver("cuMemHostAlloc", e)),
            },
        };
        let backend = CudaBackend {
            ctx,
            stream,
            allocator,
            arch,
            capability: (major, minor),
            precision: MatmulPrecision::Fp32,
            storage: Storage::uniform(Dtype::F32),
            kernels: Kernels::Reference,
            functions,
            blas: Mutex::new(blas),
            norm_partials,
            column_partials,
            column_counters,
            tensor_table,
            table_contents: Mutex::new(Vec::new()),
            fill_table,
            fill_contents: Mutex::new(Vec::new()),
            _blas_workspace: workspace,
            error: Mutex::new(None),
            lost: Mutex::new(None),
            counters: AtomicCounters::default(),
            staging,
            poison_overwritten,
        };
        // The column reductions' counters start at zero, and each launch
        // leaves them so.
        let zeros = vec![0u32; COLUMN_COUNTERS];
        backend.copy_in(backend.column_counters.ptr(), &zeros)?;
        Ok(backend)
    }

    /// The backend with matrix products at `precision` (see [`MatmulPrecision`]);
    /// an error when the device's tensor cores do not take its operands.
    pub fn with_matmul_precision(
        mut self,
        precision: MatmulPrecision,
    ) -> Result<CudaBackend, CudaError> {
        let (major, minor) = self.capability;
        let need = precision.min_cuda_capability();
        if (major, minor) < need {
            return Err(CudaError::Invalid {
                op: "precision",
                message: format!(
                    "{precision} products need compute capability {}.{} or newer; this device is {major}.{minor}",
                    need.0, need.1
                ),
            });
        }
        self.precision = precision;
        self.storage = Storage::for_step(Dtype::F32, precision, self.kernels);
        Ok(self)
    }

    /// The backend running `kernels` (see [`Kernels`]): with the fused ones
    /// and 16-bit products, activations are stored in 16 bits.
    pub fn with_kernels(mut self, kernels: Kernels) -> CudaBackend {
        self.kernels = kernels;
        self.storage = Storage::for_step(Dtype::F32, self.precision, kernels);
        self
    }

    /// The backend filling the buffers of
    /// [`Backend::alloc_overwritten`](super::Backend::alloc_overwritten)
    /// with NaN (`true`), so that an operation reading an element it did
    /// not write shows up in its results, or leaving them as the memory
    /// was (`false`, the default of release builds: a training step
    /// allocates hundreds of them, and a fill is a pass over the buffer's
    /// bytes). [`CudaBackend::new`] takes `MEMTUNE_CUDA_POISON` (`1` or
    /// `0`; debug builds poison when it is unset).
    pub fn with_poisoned_scratch(mut self, poison: bool) -> CudaBackend {
        self.poison_overwritten = poison;
        self
    }

    /// The backend uploading host data as `uploads` says (see
    /// [`staging`]); [`CudaBackend::new`] takes `MEMTUNE_CUDA_UPLOADS`.
    pub fn with_uploads(mut self, uploads: staging::Uploads) -> Result<CudaBackend, CudaError> {
        self.synchronize()?;
        self.staging = Self::staging_for(&self.ctx, uploads)?;
        Ok(self)
    }

    fn staging_for(
        ctx: &Arc<CudaContext>,
        uploads: staging::Uploads,
    ) -> Result<Option<Mutex<staging::Staging>>, CudaError> {
        match uploads {
            staging::Uploads::Synchronous => Ok(None),
            staging::Uploads::Staged => staging::Staging::new(ctx)
                .map(|s| Some(Mutex::new(s)))
                .map_err(|e| from_driver("cuMemHostAlloc", e)),
        }
    }

    /// The device's compute capability (major, minor).
    pub fn capability(&self) -> (i32, i32) {
        self.capability
    }

    /// The allocator every buffer comes from (its stats are the measured
    /// memory of this backend).
    pub fn allocator(&self) -> &Arc<CachingAllocator<CudaDevice>> {
        &self.allocator
    }

    /// The architecture the kernels were compiled for (`compute_XY`).
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// Waits for the queued work and returns the first error since the last
    /// check, if any. After a sticky error every later check fails too.
    pub fn check(&self) -> Result<(), CudaError> {
        if self.pending().is_none() {
            let synced = self.synchronize();
            self.record(synced);
        }
        match (self.lock_error().take(), *self.lock_lost()) {
            (Some(e), _) => Err(e),
            (None, Some((call, code))) => Err(CudaError::Sticky { call, code }),
            (None, None) => Ok(()),
        }
    }

    /// What the host has done on this backend's stream since it was made:
    /// synchronisations and the time spent waiting in them, kernel launches,
    /// cuBLAS calls ([`HostCounters`]). Take two readings and
    /// [`HostCounters::since`] for a span of steps.
    pub fn host_counters(&self) -> HostCounters {
        self.counters.read()
    }

    fn synchronize(&self) -> Result<(), CudaError> {
        self.synchronize_since(Instant::now())
    }

    /// Waits for the stream, counting the wait from `start`: a copy to or
    /// from pageable memory may itself wait for the stream before it
    /// returns, and that time is the host's waiting too.
    fn synchronize_since(&self, start: Instant) -> Result<(), CudaError> {
        self.bind()?;
        // SAFETY: our own live stream.
        let result = check("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(self.stream.cu_stream())
        });
        let waited = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        AtomicCounters::add(&self.counters.sync_wait_ns, waited);
        AtomicCounters::add(&self.counters.syncs, 1);
        result
    }

    fn bind(&self) -> Result<(), CudaError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| from_driver("cuCtxSetCurrent", e))
    }

    fn lock_error(&self) -> std::sync::MutexGuard<'_, Option<CudaError>> {
        self.error.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_lost(&self) -> std::sync::MutexGuard<'_, Option<(&'static str, CUresult)>> {
        self.lost.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether an error is waiting to be reported (operations are skipped).
    fn pending(&self) -> Option<()> {
        (self.lock_error().is_some() || self.lock_lost().is_some()).then_some(())
    }

    /// Keeps the first error; remembers a sticky one for good.
    fn record(&self, result: Result<(), CudaError>) {
        if let Err(e) = result {
            if let CudaError::Sticky { call, code } = e {
                self.lock_lost().get_or_insert((call, code));
            }
            let mut slot = self.lock_error();
            if slot.is_none() {
                *slot = Some(e);
            }
        }
    }

    /// Runs `op` unless an error is pending, recording its failure.
    fn run(&self, op: impl FnOnce() -> Result<(), CudaError>) {
        if self.pending().is_some() {
            return;
        }
        let result = self.bind().and_then(|()| op());
        self.record(result);
    }

    /// Launches the kernel named `name` (with its type suffix).
    fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: &[Arg],
    ) -> Result<(), CudaError> {
        let (f, params) = self.functions.get(name).ok_or_else(|| CudaError::Invalid {
            op: "launch",
            message: format!("no kernel {name} was loaded"),
        })?;
        // The driver reads as many arguments as the kernel declares: a
        // shorter list would make it read past ours.
        if args.len() != *params {
            return Err(CudaError::Invalid {
                op: "launch",
                message: format!(
                    "kernel {name} takes {params} parameters, {} given",
                    args.len()
                ),
            });
        }
        let mut builder = self.stream.launch_builder(f);
        for arg in args {
            match arg {
                Arg::Ptr(v) | Arg::U64(v) => builder.arg(v),
                Arg::U32(v) => builder.arg(v),
                Arg::F32(v) => builder.arg(v),
                Arg::F64(v) => builder.arg(v),
            };
        }
        let cfg = LaunchConfig {
            grid_dim: grid,
            block_dim: block,
            shared_mem_bytes: 0,
        };
        // SAFETY: every kernel's parameter list is matched by the argument
        // lists in `ops` (pointers as u64, sizes as u64/u32); the buffers
        // they point to are live and sized by the checks in `ops`.
        unsafe { builder.launch(cfg) }.map_err(|e| from_driver("cuLaunchKernel", e))?;
        AtomicCounters::add(&self.counters.kernel_launches, 1);
        Ok(())
    }

    /// A grid-stride launch over `n` elements.
    fn launch_1d(&self, kernel: &str, n: u64, args: &[Arg]) -> Result<(), CudaError> {
        if n == 0 {
            return Ok(());
        }
        let blocks = n.div_ceil(THREADS as u64).min(1 << 16) as u32;
        self.launch(kernel, (blocks, 1, 1), (THREADS, 1, 1), args)
    }

    /// [`Self::launch_1d`] of an elementwise kernel that takes 8 elements
    /// a thread (`GRID_STRIDE_VEC` of common.cuh), whose 16-byte accesses
    /// need `buffers` 16-byte aligned (every allocation is; a misaligned
    /// one is an error here rather than a fault that loses the context).
    fn launch_vec8(
        &self,
        kernel: &str,
        n: u64,
        buffers: &[&CudaBuf],
        args: &[Arg],
    ) -> Result<(), CudaError> {
        for buf in buffers {
            let ptr = buf.ptr()?;
            if ptr % 16 != 0 {
                return Err(CudaError::Invalid {
                    op: "launch",
                    message: format!(
                        "{kernel} reads 16 bytes at a time; buffer at {ptr:#x} is not 16-byte \
                         aligned"
                    ),
                });
            }
        }
        self.launch_1d(kernel, n.div_ceil(8), args)
    }

    /// A new buffer of `len` elements of `T` holding what `fill` says.
    fn new_buf<T: cudarc::driver::DeviceRepr>(
        &self,
        name: &str,
        len: usize,
        fill: Fill,
    ) -> Result<Option<CudaBuffer<T>>, CudaError> {
        if len == 0 {
            return Ok(None);
        }
        let bytes = len * size_of::<T>();
        let buf = self
            .allocator
            .alloc_slice::<T>(len, &self.stream)
            .map_err(|source| CudaError::Alloc {
                name: name.to_string(),
                bytes,
                source,
            })?;
        let stream = self.stream.cu_stream();
        // SAFETY: `bytes` of our own live buffer, on our stream; every
        // allocation is 512-byte aligned and a buffer of `dtype` holds a
        // whole number of its elements, as the 16- and 32-bit fills need.
        match fill {
            Fill::Zeros => check("cuMemsetD8Async", unsafe {
                sys::cuMemsetD8Async(buf.ptr(), 0, bytes, stream)
            })?,
            Fill::Unspecified(dtype) if self.poison_overwritten => match dtype.bytes() {
                2 => check("cuMemsetD16Async", unsafe {
                    sys::cuMemsetD16Async(buf.ptr(), nan_bits(dtype) as u16, bytes / 2, stream)
                })?,
                _ => check("cuMemsetD32Async", unsafe {
                    sys::cuMemsetD32Async(buf.ptr(), nan_bits(dtype), bytes / 4, stream)
                })?,
            },
            Fill::Unspecified(_) => {}
        }
        Ok(Some(buf))
    }

    /// A new buffer, or none when an error is pending or the allocation
    /// failed (recorded for [`CudaBackend::check`]; out of memory reaches
    /// the training loop as [`crate::backend::Failure::OutOfMemory`], which
    /// halves the micro-batch).
    fn alloc_recorded<T: cudarc::driver::DeviceRepr>(
        &self,
        name: &str,
        len: usize,
        fill: Fill,
    ) -> Option<CudaBuffer<T>> {
        let mut mem = None;
        self.run(|| {
            mem = self.new_buf::<T>(name, len, fill)?;
            Ok(())
        });
        mem
    }

    /// Copies `src` into the device buffer at `dst`, and waits for it
    /// unless uploads are staged ([`staging`]).
    fn copy_in<T: staging::PlainData>(&self, dst: u64, src: &[T]) -> Result<(), CudaError> {
        if src.is_empty() {
            return Ok(());
        }
        if let Some(staging) = &self.staging {
            self.bind()?;
            // SAFETY: `T` is plain data without padding (`PlainData`), so
            // its values are their bytes.
            let bytes = unsafe {
                std::slice::from_raw_parts(src.as_ptr().cast::<u8>(), std::mem::size_of_val(src))
            };
            let mut staging = staging.lock().unwrap_or_else(|p| p.into_inner());
            let sent = staging
                .upload(dst, bytes, &self.stream)
                .map_err(|e| from_driver("cuMemcpyHtoDAsync", e))?;
            if let Some(waited) = sent {
                // A wait for the ring is a wait for the stream.
                if !waited.is_zero() {
                    let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
                    AtomicCounters::add(&self.counters.sync_wait_ns, ns);
                    AtomicCounters::add(&self.counters.syncs, 1);
                }
                return Ok(());
            }
        }
        let start = Instant::now();
        // SAFETY: `src` is valid for its bytes and outlives the copy (we
        // synchronise before returning); `dst` holds as many bytes.
        check("cuMemcpyHtoDAsync", unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                dst,
                src.as_ptr().cast(),
                std::mem::size_of_val(src),
                self.stream.cu_stream(),
            )
        })?;
        self.synchronize_since(start)
    }

    /// Copies the device buffer at `src` into `dst` and waits.
    fn copy_out<T: Copy>(&self, dst: &mut [T], src: u64) -> Result<(), CudaError> {
        if dst.is_empty() {
            return Ok(());
        }
        let start = Instant::now();
        // SAFETY: as in `copy_in`, the other way round.
        check("cuMemcpyDtoHAsync", unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                dst.as_mut_ptr().cast(),
                src,
                std::mem::size_of_val(dst),
                self.stream.cu_stream(),
            )
        })?;
        self.synchronize_since(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_between_two_readings_are_their_difference() {
        let live = AtomicCounters::default();
        AtomicCounters::add(&live.kernel_launches, 7);
        AtomicCounters::add(&live.sync_wait_ns, 1_000);
        let earlier = live.read();
        AtomicCounters::add(&live.kernel_launches, 5);
        AtomicCounters::add(&live.blas_calls, 2);
        AtomicCounters::add(&live.syncs, 1);
        AtomicCounters::add(&live.sync_wait_ns, 250);
        let span = live.read().since(&earlier);
        assert_eq!(
            span,
            HostCounters {
                syncs: 1,
                sync_wait_ns: 250,
                kernel_launches: 5,
                blas_calls: 2,
            }
        );
        // Readings in the wrong order give zeros, not a wrapped count.
        assert_eq!(earlier.since(&live.read()).kernel_launches, 0);
    }
}
