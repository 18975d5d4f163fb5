//! Allocation latency on a real GPU, one table: this crate's cached path
//! (classic and expandable) vs `cuMemAlloc`/`cuMemFree` vs
//! `cuMemAllocAsync`/`cuMemFreeAsync`, and, with `--python PY`, PyTorch's
//! `torch.cuda.caching_allocator_alloc`/`_delete` (scripts/torch_latency.py,
//! run with that Python) for the same sizes.
//!
//! ```sh
//! cargo run -p gpu-mem --release --features cuda --example gpu_latency [-- --python python3]
//! ```
//!
//! Each figure is the median over many alloc+free pairs, in nanoseconds.

use gpu_mem::cuda::cudarc::driver::{CudaContext, sys};
use gpu_mem::cuda::{CudaDevice, driver, stream_id};
use gpu_mem::{CachingAllocator, Config};
use std::collections::BTreeMap;
use std::process::{Command, ExitCode};
use std::time::Instant;

const SIZES: [usize; 6] = [512, 64 << 10, 1 << 20, 8 << 20, 64 << 20, 256 << 20];

fn median_ns(mut samples: Vec<u64>) -> f64 {
    samples.sort_unstable();
    samples[samples.len() / 2] as f64
}

fn time_pairs(n: usize, mut pair: impl FnMut()) -> f64 {
    pair(); // warm up (first use creates segments / pools)
    let samples = (0..n)
        .map(|_| {
            let t = Instant::now();
            pair();
            t.elapsed().as_nanos() as u64
        })
        .collect();
    median_ns(samples)
}

fn torch_column(python: &str) -> Result<BTreeMap<usize, f64>, String> {
    // Overridable because the binary may run where the source tree is not
    // (the device bundle made by `cargo xtask gpu-test`).
    let script = std::env::var("MEMTUNE_TORCH_LATENCY_SCRIPT").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/torch_latency.py").to_string()
    });
    let out = Command::new(python)
        .arg(&script)
        .args(SIZES.iter().map(|s| s.to_string()))
        .output()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{script} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut col = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("bad line {line:?}: {e}"))?;
        let size = v["size"].as_u64().ok_or("no size")? as usize;
        col.insert(size, v["median_ns"].as_f64().ok_or("no median_ns")?);
    }
    Ok(col)
}

fn run(python: Option<&str>) -> Result<(), String> {
    let ctx = CudaContext::new(0).map_err(|e| format!("no CUDA device 0: {e:?}"))?;
    let stream = ctx.new_stream().map_err(|e| format!("{e:?}"))?;
    let sid = stream_id(&stream);
    let cu_stream: sys::CUstream = stream.cu_stream();
    let mk = |config| {
        CachingAllocator::new(
            CudaDevice::with_context(ctx.clone()).map_err(|e| e.to_string())?,
            config,
        )
        .map_err(|e| e.to_string())
    };
    let classic = mk(Config::default())?;
    let expandable = mk(Config::expandable())?;
    let torch = match python {
        Some(py) => Some(torch_column(py)?),
        None => None,
    };
    println!(
        "| size | gpu-mem classic | gpu-mem expandable | cuMemAlloc+cuMemFree | cuMemAllocAsync+cuMemFreeAsync |{}",
        if torch.is_some() {
            " torch caching_allocator_alloc+delete |"
        } else {
            ""
        }
    );
    println!(
        "| ---: | ---: | ---: | ---: | ---: |{}",
        if torch.is_some() { " ---: |" } else { "" }
    );
    for size in SIZES {
        let ours = |a: &CachingAllocator<CudaDevice>| {
            time_pairs(20_000, || {
                let x = a.allocate(size, sid).expect("allocate");
                a.free(x).expect("free");
            })
        };
        let (c, e) = (ours(&classic), ours(&expandable));
        let sync = time_pairs(200, || {
            let p = driver::mem_alloc(size).expect("cuMemAlloc");
            driver::mem_free(p).expect("cuMemFree");
        });
        let asynchronous = time_pairs(20_000, || {
            // SAFETY: a live stream of the current context.
            unsafe {
                let p = driver::mem_alloc_async(size, cu_stream).expect("cuMemAllocAsync");
                driver::mem_free_async(p, cu_stream).expect("cuMemFreeAsync");
            }
        });
        stream.synchronize().map_err(|e| format!("{e:?}"))?;
        print!("| {size} | {c:.0} | {e:.0} | {sync:.0} | {asynchronous:.0} |");
        if let Some(t) = &torch {
            print!(" {:.0} |", t.get(&size).copied().unwrap_or(f64::NAN));
        }
        println!();
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let python = match args.as_slice() {
        [] => None,
        [flag, py] if flag == "--python" => Some(py.as_str()),
        _ => {
            eprintln!("usage: gpu_latency [--python PYTHON_WITH_TORCH]");
            return ExitCode::FAILURE;
        }
    };
    match run(python) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpu_latency: {e}");
            ExitCode::FAILURE
        }
    }
}
