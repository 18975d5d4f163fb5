//! Finding libnvrtc.
//!
//! cudarc opens NVRTC with `dlopen("libnvrtc.so")`, then `libnvrtc.so.12`
//! and other versioned names, so it finds a system CUDA through the
//! loader's search path (`LD_LIBRARY_PATH`, ldconfig). The pip wheel
//! `nvidia-cuda-nvrtc-cu12` (what CI installs, and what PyTorch ships)
//! installs the library outside that path, so `MEMTUNE_NVRTC_LIB` may name
//! it: the file `.../nvidia/cuda_nvrtc/lib/libnvrtc.so.12` or its directory.
//! We open that file first and keep it open; the dynamic loader then
//! answers cudarc's `dlopen("libnvrtc.so.12")` with the already loaded
//! library (same soname), and NVRTC finds its builtins library next to it.

use super::error::CudaError;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The variable naming the NVRTC library (file or directory).
pub const NVRTC_LIB_VAR: &str = "MEMTUNE_NVRTC_LIB";

/// The file a `MEMTUNE_NVRTC_LIB` value points at.
pub fn library_file(value: &Path) -> PathBuf {
    if value.is_dir() {
        value.join("libnvrtc.so.12")
    } else {
        value.to_path_buf()
    }
}

/// Makes NVRTC loadable: opens `MEMTUNE_NVRTC_LIB` when it is set (once per
/// process), then checks that cudarc can load the library. Call before any
/// cudarc NVRTC function (cudarc panics when the library is missing).
pub fn ensure_loaded() -> Result<(), CudaError> {
    static PRELOAD: OnceLock<Result<(), String>> = OnceLock::new();
    let preload = PRELOAD.get_or_init(|| match std::env::var_os(NVRTC_LIB_VAR) {
        None => Ok(()),
        Some(value) => preload(&library_file(Path::new(&value))),
    });
    if let Err(message) = preload {
        return Err(CudaError::MissingLibrary(message.clone()));
    }
    // SAFETY: only tries to open the library.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::MissingLibrary(format!(
            "libnvrtc was not found on the loader path; install the pip package \
             nvidia-cuda-nvrtc-cu12 (or a CUDA toolkit) and set {NVRTC_LIB_VAR} to its \
             lib directory (`cargo xtask test` does this)"
        )))
    }
}

/// Opens `file` with global symbols and never closes it.
fn preload(file: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(file.as_os_str().as_bytes())
        .map_err(|_| format!("{NVRTC_LIB_VAR}={} contains a NUL byte", file.display()))?;
    // SAFETY: a valid C string; the handle is deliberately leaked so the
    // library stays loaded for the process.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a static C string or null.
        let reason = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                "unknown error".to_string()
            } else {
                std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(format!(
            "{NVRTC_LIB_VAR}={}: cannot load it: {reason}",
            file.display()
        ));
    }
    Ok(())
}
