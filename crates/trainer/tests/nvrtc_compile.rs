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

/// The architectures CI compiles for: A100 (sm_80) and H100 (sm_90), as
/// real (`sm_`) and as virtual (`compute_`, what the backend loads) targets.
const ARCHS: &[&str] = &["sm_80", "compute_80", "sm_90", "compute_90"];

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
    for arch in ARCHS {
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
    for arch in ARCHS {
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
    kernels: &["broken"],
};

static MISSING_ENTRY: KernelSource = KernelSource {
    file: "missing.cu",
    source: "extern \"C\" __global__ void other_f32(float *x) { x[0] = 1.0f; }\n",
    kernels: &["expected"],
};

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
