//! Every CUDA kernel compiles with NVRTC, without a GPU.
//!
//! Needs feature `cuda` and `MEMTUNE_NVRTC_LIB` (the pip wheel
//! `nvidia-cuda-nvrtc-cu12`'s libnvrtc, file or directory; `cargo xtask
//! test` installs it and sets the variable). Without the variable the tests
//! print a skip message, except under `CI`, where they fail.

#![cfg(feature = "cuda")]

use trainer::backend::cuda::error::CudaError;
use trainer::backend::cuda::kernels::{self, KernelSource};
use trainer::backend::cuda::nvrtc;

/// The architectures CI compiles for: A100 (8.0), the 24 GB cards (RTX
/// 3090/A10 8.6, RTX 4090/L4 8.9) and H100/H200 (9.0). Each kernel is
/// compiled once as PTX for the virtual target (`compute_`, what the backend
/// loads) and once assembled for the real one (`sm_`, whose assembler
/// report [`every_kernel_assembles_without_spills`] checks).
const VIRTUAL_ARCHS: &[&str] = &["compute_80", "compute_86", "compute_89", "compute_90"];
const REAL_ARCHS: &[&str] = &["sm_80", "sm_86", "sm_89", "sm_90"];

/// Spill and stack bytes a kernel may have: the assembler keeps a word or
/// two on the stack in a few tensor-core kernels (8 bytes at most as of
/// this writing), which costs nothing measurable; more is a kernel to fix.
const MAX_LOCAL_BYTES: u32 = 16;

fn nvrtc_configured(test: &str) -> bool {
    if std::env::var_os(nvrtc::NVRTC_LIB_VAR).is_some() {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!(
            "{test}: {} is not set under CI; run the tests through `cargo xtask test`, which \
             installs nvidia-cuda-nvrtc-cu12 and sets it",
            nvrtc::NVRTC_LIB_VAR
        );
    }
    eprintln!(
        "skipping {test}: set {} to libnvrtc (run `cargo xtask test`)",
        nvrtc::NVRTC_LIB_VAR
    );
    false
}

#[test]
fn every_kernel_family_compiles_for_every_architecture() {
    if !nvrtc_configured("every_kernel_family_compiles_for_every_architecture") {
        return;
    }
    let mut failures = Vec::new();
    for arch in VIRTUAL_ARCHS {
        for family in kernels::SOURCES {
            match kernels::compile(family, arch) {
                Ok(ptx) => assert!(!ptx.to_src().is_empty(), "{}: empty PTX", family.file),
                Err(e) => failures.push(e.to_string()),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_kernel_declares_the_parameters_its_launches_pass() {
    if !nvrtc_configured("every_kernel_declares_the_parameters_its_launches_pass") {
        return;
    }
    let mut counts = std::collections::HashMap::new();
    for family in kernels::SOURCES {
        let ptx = kernels::compile(family, "compute_80").unwrap().to_src();
        for name in kernels::kernel_names(family) {
            let n = kernels::parameter_count(&ptx, &name)
                .unwrap_or_else(|| panic!("{}: no parameter list for {name}", family.file));
            assert!(n > 0, "{name}: no parameters");
            counts.insert(name, n);
        }
    }
    // What ops.rs passes: `fill` (buffer, value, n) and `init_normal`
    // (buffer, n, scale, the zeroed range, seed, step and stream words).
    assert_eq!(counts["fill_f32"], 3);
    assert_eq!(counts["init_normal_bf16"], 10);
}

#[test]
fn every_kernel_file_is_listed() {
    // A new .cu file must be added to SOURCES, or CI would not compile it.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/kernels");
    let mut on_disk: Vec<String> = std::fs::read_dir(dir)
        .expect("kernels directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cu"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = kernels::SOURCES
        .iter()
        .map(|s| s.file.to_string())
        .collect();
    listed.sort();
    assert_eq!(on_disk, listed);
}

#[test]
fn the_device_assert_kernel_compiles_to_an_assert() {
    if !nvrtc_configured("the_device_assert_kernel_compiles_to_an_assert") {
        return;
    }
    for arch in VIRTUAL_ARCHS.iter().chain(REAL_ARCHS) {
        let ptx = trainer::backend::cuda::device_assert::compile(arch).unwrap();
        // The driver links `__assertfail`, the system call a failed assert
        // makes: the kernel fails with CUDA_ERROR_ASSERT, not a trap.
        assert!(
            ptx.to_src().contains(".extern .func __assertfail"),
            "{arch}: no assert in the PTX"
        );
    }
}

static BROKEN: KernelSource = KernelSource {
    file: "broken.cu",
    source: "extern \"C\" __global__ void broken_f32(float *x) {\n    x[0] = undeclared;\n}\n",
    kernels: &[("broken", &["f32"])],
};

static MISSING_ENTRY: KernelSource = KernelSource {
    file: "missing.cu",
    source: "extern \"C\" __global__ void other_f32(float *x) { x[0] = 1.0f; }\n",
    kernels: &[("expected", &["f32"])],
};

/// Every kernel assembles for every real architecture with at most
/// [`MAX_LOCAL_BYTES`] of spills and stack; the tensor-core attention
/// kernels also fit their registers (255 a thread). Prints each attention
/// and LayerNorm kernel's registers and shared memory, and every spill.
#[test]
fn every_kernel_assembles_without_spills() {
    if !nvrtc_configured("every_kernel_assembles_without_spills") {
        return;
    }
    let mut problems = Vec::new();
    for arch in REAL_ARCHS {
        let mut seen = 0;
        for family in kernels::SOURCES {
            let report = match kernels::resources(family, arch) {
                Ok(r) => r,
                Err(e) => {
                    problems.push(e.to_string());
                    continue;
                }
            };
            seen += report.len();
            for k in report {
                if family.file == "attention_fused.cu" || family.file == "layernorm.cu" {
                    println!(
                        "{arch} {:<40} {:>3} registers {:>6} bytes smem {:>4} bytes stack",
                        k.name, k.registers, k.shared_bytes, k.stack_bytes
                    );
                }
                let spills = k.spill_store_bytes.max(k.spill_load_bytes);
                if spills > 0 {
                    println!("{arch} {}: spills {k:?}", k.name);
                }
                if spills > MAX_LOCAL_BYTES || k.stack_bytes > MAX_LOCAL_BYTES {
                    problems.push(format!("{arch} {}: spills {k:?}", k.name));
                }
                if k.name.contains("_mma") && k.registers > 255 {
                    problems.push(format!("{arch} {}: {k:?}", k.name));
                }
            }
        }
        if seen == 0 {
            problems.push(format!("{arch}: the assembler reported no kernel"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_kernel_that_does_not_compile_fails_with_its_file_and_line() {
    if !nvrtc_configured("a_kernel_that_does_not_compile_fails_with_its_file_and_line") {
        return;
    }
    match kernels::compile(&BROKEN, "sm_80") {
        Err(CudaError::Compile { file, log, .. }) => {
            assert_eq!(file, "broken.cu");
            assert!(log.contains("broken.cu(2)"), "log: {log}");
            assert!(log.contains("undeclared"), "log: {log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn a_kernel_missing_from_its_file_is_an_error() {
    if !nvrtc_configured("a_kernel_missing_from_its_file_is_an_error") {
        return;
    }
    match kernels::compile(&MISSING_ENTRY, "compute_90") {
        Err(CudaError::MissingKernel { name, .. }) => assert_eq!(name, "expected_f32"),
        other => panic!("expected a missing kernel, got {other:?}"),
    }
}

/// The on-disk PTX cache: the first compilation writes each family's file,
/// the next reads it (the same PTX, without NVRTC's seconds), and a file
/// that lacks the family's kernels is compiled and written again. Prints
/// both times.
#[test]
fn compiled_ptx_is_kept_on_disk_and_a_bad_file_is_compiled_again() {
    if !nvrtc_configured("compiled_ptx_is_kept_on_disk_and_a_bad_file_is_compiled_again") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("memtune-ptx-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let arch = "compute_90";
    let all = |what: &str| -> Vec<String> {
        let start = std::time::Instant::now();
        let ptx: Vec<String> = kernels::SOURCES
            .iter()
            .map(|f| kernels::compile_cached_in(&dir, f, arch).unwrap().to_src())
            .collect();
        println!("{what}: {:.3} s", start.elapsed().as_secs_f64());
        ptx
    };
    let cold = all("every family compiled");
    let files = || {
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        names
    };
    assert_eq!(files().len(), kernels::SOURCES.len(), "{:?}", files());
    let warm = all("every family read from the cache");
    assert_eq!(cold, warm);
    // A file cut short (no kernel in it) is compiled again and replaced.
    let victim = files()
        .into_iter()
        .find(|p| p.to_string_lossy().contains("elementwise-compute_90-"))
        .expect("elementwise's file");
    std::fs::write(&victim, ".version 8.0\n").unwrap();
    let family = kernels::SOURCES
        .iter()
        .find(|f| f.file == "elementwise.cu")
        .unwrap();
    let again = kernels::compile_cached_in(&dir, family, arch)
        .unwrap()
        .to_src();
    assert!(again.contains(".entry fill_f32("));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), again);
    std::fs::remove_dir_all(&dir).unwrap();
}
