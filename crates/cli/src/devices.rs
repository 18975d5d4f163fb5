//! What memtune can train on: the CPU, and each CUDA device or exactly why
//! CUDA is unavailable. `memtune devices` prints it; `device = "auto"`
//! picks from it.

use gpu_mem::cuda::cudarc::driver::{CudaContext, sys};
use gpu_mem::human_bytes;
use gpu_mem::libs::{CudaLib, Located};
use trainer::backend::MatmulPrecision;

/// One CUDA device as the driver reports it.
#[derive(Clone, Debug)]
pub struct CudaDeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub compute_capability: (i32, i32),
    /// `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`: whether
    /// gpu-mem's expandable segments work (else classic segments).
    pub virtual_memory: bool,
}

/// The CUDA side of this machine.
#[derive(Clone, Debug)]
pub struct CudaReport {
    /// The CUDA libraries found, and where memtune looked.
    pub libraries: Located,
    /// `cuDriverGetVersion`, e.g. 13000, when a driver loads.
    pub driver_version: Option<u32>,
    /// The devices, or why there are none to use.
    pub devices: Result<Vec<CudaDeviceInfo>, String>,
}

impl CudaReport {
    /// Device `ordinal`, or why it cannot be used.
    pub fn device(&self, ordinal: usize) -> Result<&CudaDeviceInfo, String> {
        let devices = self.devices.as_ref().map_err(Clone::clone)?;
        devices.get(ordinal).ok_or_else(|| {
            format!(
                "there is no CUDA device {ordinal} (the driver sees {})",
                devices.len()
            )
        })
    }
}

/// Finds the CUDA libraries, loads the driver and lists the devices (each
/// gets its primary context, which the driver keeps for the process).
pub fn probe_cuda() -> CudaReport {
    let loaded = gpu_mem::libs::ensure_loaded();
    let libraries = match loaded {
        Ok(l) => l.clone(),
        Err(_) => gpu_mem::libs::locate(&gpu_mem::libs::default_roots(), None),
    };
    let driver_version = gpu_mem::libs::driver_version();
    let devices = match (loaded, driver_version) {
        (Err(reason), _) => Err(reason.clone()),
        (Ok(_), None) => Err(
            "no NVIDIA driver: libcuda.so.1 is not on the loader path or in the folders searched"
                .into(),
        ),
        (Ok(_), Some(_)) => list_devices(),
    }
    .and_then(|devices| {
        // The trainer also needs NVRTC and cuBLAS.
        trainer::backend::cuda::probe()
            .map(|()| devices)
            .map_err(|e| e.to_string())
    });
    CudaReport {
        libraries,
        driver_version,
        devices,
    }
}

/// Device memory one trial's process holds outside its allocator (the CUDA
/// context, cuBLAS's own state, the loaded kernels), measured rather than
/// assumed: the device's free memory before, and while, `memtune worker
/// --hold-cuda N` holds a started backend, less what that backend's
/// allocator reserved (its cuBLAS workspace and scratch, which every
/// trial's lease prices). Another process
/// allocating on the device in between would skew it; studies on shared
/// devices can set `[runner] process_overhead`.
pub fn measure_process_overhead(ordinal: usize) -> Result<u64, String> {
    use std::io::{BufRead, Read};
    use std::process::{Command, Stdio};
    let free = || probe_cuda().device(ordinal).map(|d| d.free_bytes);
    let before = free()?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find memtune itself: {e}"))?;
    let mut child = Command::new(exe)
        .args(["worker", "--hold-cuda", &ordinal.to_string()])
        .env("MEMTUNE_RUNNER_PID", std::process::id().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start a worker to measure cuda:{ordinal}: {e}"))?;
    let mut line = String::new();
    let stdout = child.stdout.take().expect("stdout is piped");
    // `ready BYTES`: the bytes the backend's allocator holds, which a
    // trial's lease prices (its own buffers), so they are not overhead.
    let _ = std::io::BufReader::new(stdout).read_line(&mut line);
    let allocated: Option<u64> = line
        .trim()
        .strip_prefix("ready")
        .and_then(|rest| rest.trim().parse().ok());
    let ready = allocated.is_some();
    let during = if ready { free() } else { Ok(before) };
    drop(child.stdin.take());
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let _ = child.wait();
    if !ready {
        return Err(format!(
            "cuda:{ordinal}: the CUDA backend did not start in a worker: {}",
            stderr.trim()
        ));
    }
    let overhead = before
        .saturating_sub(during?)
        .saturating_sub(allocated.unwrap_or(0));
    crate::logging::note(&format!(
        "memtune: cuda:{ordinal}: a trial's process holds {} outside its tensors (measured)",
        human_bytes(overhead)
    ));
    Ok(overhead)
}

fn list_devices() -> Result<Vec<CudaDeviceInfo>, String> {
    // SAFETY: the driver library is loaded (checked by the caller).
    let r = unsafe { sys::cuInit(0) };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(format!("cuInit failed: {r:?}"));
    }
    let mut count = 0;
    // SAFETY: a valid out-pointer after cuInit.
    let r = unsafe { sys::cuDeviceGetCount(&mut count) };
    if r != sys::CUresult::CUDA_SUCCESS {
        return Err(format!("cuDeviceGetCount failed: {r:?}"));
    }
    if count == 0 {
        return Err("the NVIDIA driver loads but sees no CUDA device".into());
    }
    (0..count as usize).map(device_info).collect()
}

fn device_info(ordinal: usize) -> Result<CudaDeviceInfo, String> {
    let err = |what: &str, e: &dyn std::fmt::Debug| format!("CUDA device {ordinal}: {what}: {e:?}");
    let ctx = CudaContext::new(ordinal).map_err(|e| err("cannot create its context", &e))?;
    let name = ctx.name().map_err(|e| err("cuDeviceGetName", &e))?;
    let compute_capability = ctx
        .compute_capability()
        .map_err(|e| err("cuDeviceGetAttribute", &e))?;
    let vmm = gpu_mem::cuda::driver::device_attribute(
        ctx.cu_device(),
        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
    )
    .map_err(|e| err("cuDeviceGetAttribute", &e))?;
    ctx.bind_to_thread()
        .map_err(|e| err("cuCtxSetCurrent", &e))?;
    let (free, total) =
        gpu_mem::cuda::driver::mem_get_info().map_err(|e| err("cuMemGetInfo", &e))?;
    Ok(CudaDeviceInfo {
        ordinal,
        name,
        total_bytes: total as u64,
        free_bytes: free as u64,
        compute_capability,
        virtual_memory: vmm != 0,
    })
}

/// Logical CPU cores and total RAM in bytes (`/proc/meminfo`, if readable).
pub fn cpu() -> (usize, Option<u64>) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ram = std::fs::read_to_string("/proc/meminfo").ok().and_then(|t| {
        let line = t.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    });
    (cores, ram)
}

/// The matrix-product precisions a device of compute capability `cc` runs
/// (`[runner] precision`), as `fp32/fp16/bf16`.
fn precisions(cc: (i32, i32)) -> String {
    MatmulPrecision::ALL
        .into_iter()
        .filter(|p| cc >= p.min_cuda_capability())
        .map(MatmulPrecision::name)
        .collect::<Vec<_>>()
        .join("/")
}

/// The report `memtune devices` prints.
pub fn render(cuda: &CudaReport) -> String {
    let (cores, ram) = cpu();
    let mut out = format!(
        "cpu: {cores} cores, {} RAM\n",
        ram.map_or("unknown".to_string(), human_bytes)
    );
    match &cuda.devices {
        Ok(devices) => {
            for d in devices {
                out += &format!(
                    "cuda:{}: {}, {} total, {} free, compute capability {}.{}, precision {}, virtual memory {}\n",
                    d.ordinal,
                    d.name,
                    human_bytes(d.total_bytes),
                    human_bytes(d.free_bytes),
                    d.compute_capability.0,
                    d.compute_capability.1,
                    precisions(d.compute_capability),
                    if d.virtual_memory {
                        "yes (expandable segments)"
                    } else {
                        "no (classic segments)"
                    }
                );
            }
        }
        Err(reason) => out += &format!("cuda: unavailable: {reason}\n"),
    }
    if let Some(v) = cuda.driver_version {
        out += &format!(
            "cuda driver: supports CUDA {}.{}\n",
            v / 1000,
            v % 1000 / 10
        );
    }
    for lib in CudaLib::ALL {
        let line = match cuda.libraries.get(lib) {
            Some(f) => format!("{}", f.path.display()),
            None => "not found".into(),
        };
        out += &format!("library {}: {line}\n", lib.stem());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::precisions;

    #[test]
    fn a_device_lists_the_precisions_its_tensor_cores_take() {
        assert_eq!(precisions((9, 0)), "fp32/bf16/fp16");
        assert_eq!(precisions((7, 5)), "fp32/fp16");
        assert_eq!(precisions((6, 1)), "fp32");
    }
}
