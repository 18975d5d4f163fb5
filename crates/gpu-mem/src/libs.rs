//! Finding the CUDA libraries of a CUDA 12 or CUDA 13 install at run time.
//!
//! cudarc opens each library by bare name (`dlopen("libnvrtc.so.13")`, then
//! `.so.12`, ...), so it only finds what the dynamic loader's search path
//! holds. Real installs put the libraries elsewhere: a toolkit under
//! `/usr/local/cuda*/lib64`, PyTorch's pip wheels under
//! `site-packages/nvidia/cu13/lib` (CUDA 13) or `site-packages/nvidia/*/lib`
//! (CUDA 12, one folder per library). [`locate`] looks in those places and
//! picks, for each library, the newest major version the driver can run;
//! `preload` (feature `cuda`) opens that file by path with global symbols.
//! The loader then answers cudarc's `dlopen` by name with the library already
//! loaded, since a bare name matches a loaded library's soname.
//!
//! NVRTC also opens its builtins library (`libnvrtc-builtins.so.13.0`) by
//! name when it compiles: it is preloaded too, from the folder NVRTC came
//! from.
//!
//! The search itself touches no library and is tested with fake folders.

use std::path::{Path, PathBuf};

/// CUDA major versions this build can use, newest first (cudarc's CUDA 13.0
/// bindings; the functions memtune calls exist in both).
pub const SUPPORTED_MAJORS: [u32; 2] = [13, 12];

/// Folders (`:`-separated) searched before any other place.
pub const LIB_DIRS_VAR: &str = "MEMTUNE_CUDA_LIB_DIRS";

/// The libraries memtune uses, in the order they must be loaded (cuBLASLt
/// before cuBLAS, NVRTC's builtins before NVRTC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CudaLib {
    /// The driver, `libcuda.so.1` (one soname for every CUDA version).
    Driver,
    /// NVRTC's builtins, which NVRTC opens by name when it compiles.
    NvrtcBuiltins,
    /// NVRTC, the run-time compiler of CUDA C++.
    Nvrtc,
    /// cuBLASLt, which cuBLAS needs.
    CublasLt,
    /// cuBLAS, dense linear algebra.
    Cublas,
}

impl CudaLib {
    /// Every library, in load order.
    pub const ALL: [CudaLib; 5] = [
        CudaLib::Driver,
        CudaLib::NvrtcBuiltins,
        CudaLib::Nvrtc,
        CudaLib::CublasLt,
        CudaLib::Cublas,
    ];

    /// The library's file name stem (`libnvrtc`).
    pub fn stem(self) -> &'static str {
        match self {
            CudaLib::Driver => "libcuda",
            CudaLib::NvrtcBuiltins => "libnvrtc-builtins",
            CudaLib::Nvrtc => "libnvrtc",
            CudaLib::CublasLt => "libcublasLt",
            CudaLib::Cublas => "libcublas",
        }
    }

    /// Whether `file_name` is this library at CUDA major `major`: the
    /// soname `stem.so.MAJOR` (the builtins: `stem.so.MAJOR.MINOR`).
    fn matches(self, file_name: &str, major: u32) -> bool {
        let Some(rest) = file_name
            .strip_prefix(self.stem())
            .and_then(|r| r.strip_prefix(".so."))
        else {
            return false;
        };
        match self {
            CudaLib::Driver => rest == "1",
            CudaLib::NvrtcBuiltins => rest
                .split_once('.')
                .is_some_and(|(m, minor)| m == major.to_string() && is_number(minor)),
            _ => rest == major.to_string(),
        }
    }
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// One library found on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Which library.
    pub lib: CudaLib,
    /// Its file.
    pub path: PathBuf,
    /// The CUDA major version (`None` for the driver).
    pub major: Option<u32>,
}

/// What [`locate`] found, and where it looked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Located {
    /// The libraries found, at most one of each.
    pub found: Vec<Found>,
    /// Every existing folder searched, in order.
    pub searched: Vec<PathBuf>,
}

impl Located {
    /// Where `lib` was found, if it was.
    pub fn get(&self, lib: CudaLib) -> Option<&Found> {
        self.found.iter().find(|f| f.lib == lib)
    }

    /// One line per library: its path and version, or "not found".
    pub fn describe(&self) -> Vec<String> {
        CudaLib::ALL
            .iter()
            .map(|&lib| match self.get(lib) {
                Some(f) => format!("{}: {}", lib.stem(), f.path.display()),
                None => format!("{}: not found", lib.stem()),
            })
            .collect()
    }
}

/// The folders a library may be in below `root`: the root itself, `lib64`,
/// `lib`, a toolkit's `targets/x86_64-linux/lib`, and pip's
/// `nvidia/cu13/lib` and `nvidia/*/lib` (also when `root` is `nvidia`).
pub fn expand_root(root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![
        root.to_path_buf(),
        root.join("lib64"),
        root.join("lib"),
        root.join("targets/x86_64-linux/lib"),
    ];
    let nvidia = if root.file_name().is_some_and(|n| n == "nvidia") {
        root.to_path_buf()
    } else {
        root.join("nvidia")
    };
    dirs.push(nvidia.join("cu13/lib"));
    dirs.extend(sorted_children(&nvidia).into_iter().map(|d| d.join("lib")));
    dirs.retain(|d| d.is_dir());
    dirs.dedup();
    dirs
}

fn sorted_children(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out
}

/// The places searched, before expansion: `MEMTUNE_CUDA_LIB_DIRS`,
/// `MEMTUNE_NVRTC_LIB` (a file or folder), `LD_LIBRARY_PATH`, `CUDA_HOME`,
/// `CUDA_PATH`, the active virtual environment's and the system Pythons'
/// `site-packages`, `/usr/local/cuda`, the newest `/usr/local/cuda-*` first,
/// the driver folders `/usr/local/nvidia`, `/usr/lib/x86_64-linux-gnu`,
/// `/usr/lib64`.
pub fn default_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    let split = |var: &str, roots: &mut Vec<PathBuf>| {
        if let Some(v) = std::env::var_os(var) {
            roots.extend(std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()));
        }
    };
    split(LIB_DIRS_VAR, &mut roots);
    if let Some(v) = std::env::var_os("MEMTUNE_NVRTC_LIB") {
        let p = PathBuf::from(v);
        roots.push(if p.is_file() {
            p.parent().map(Path::to_path_buf).unwrap_or(p)
        } else {
            p
        });
    }
    split("LD_LIBRARY_PATH", &mut roots);
    split("CUDA_HOME", &mut roots);
    split("CUDA_PATH", &mut roots);
    let mut prefixes: Vec<PathBuf> = Vec::new();
    if let Some(v) = std::env::var_os("VIRTUAL_ENV") {
        prefixes.push(v.into());
    }
    prefixes.extend(
        ["/opt/torch/.venv", "/usr/local", "/usr"]
            .iter()
            .map(PathBuf::from),
    );
    for prefix in prefixes {
        for lib in ["lib", "lib64"] {
            let mut pythons = sorted_children(&prefix.join(lib));
            pythons.retain(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("python3"))
            });
            pythons.reverse();
            for py in pythons {
                roots.push(py.join("site-packages"));
                roots.push(py.join("dist-packages"));
            }
        }
    }
    roots.push("/usr/local/cuda".into());
    let mut versioned = sorted_children(Path::new("/usr/local"));
    versioned.retain(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("cuda-"))
    });
    versioned.reverse();
    roots.extend(versioned);
    roots.extend(
        [
            "/usr/local/nvidia",
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/usr/lib/wsl/lib",
        ]
        .iter()
        .map(PathBuf::from),
    );
    roots
}

/// Finds each library under `roots` (see [`expand_root`]). For each library
/// the newest major version that is supported and at most `max_major` (what
/// the driver runs; `None` when unknown) wins; among folders holding it, the
/// first. NVRTC's builtins are taken from the folder NVRTC was found in, of
/// the same major version.
pub fn locate(roots: &[PathBuf], max_major: Option<u32>) -> Located {
    let mut searched: Vec<PathBuf> = Vec::new();
    for root in roots {
        for dir in expand_root(root) {
            if !searched.contains(&dir) {
                searched.push(dir);
            }
        }
    }
    let listings: Vec<(PathBuf, Vec<String>)> = searched
        .iter()
        .map(|dir| {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            (dir.clone(), names)
        })
        .collect();
    let majors: Vec<u32> = SUPPORTED_MAJORS
        .iter()
        .copied()
        .filter(|&m| max_major.is_none_or(|max| m <= max))
        .collect();
    // `only`: search that one folder.
    let find_in = |lib: CudaLib, major: u32, only: Option<&Path>| {
        listings
            .iter()
            .filter(|(dir, _)| only.is_none_or(|o| o == dir))
            .find_map(|(dir, names)| {
                // The builtins' highest minor, compared as a number (as text,
                // 13.9 sorts after 13.10). Other libraries have one name per
                // major.
                names
                    .iter()
                    .filter(|n| lib.matches(n, major))
                    .max_by_key(|n| n.rsplit('.').next().and_then(|v| v.parse::<u64>().ok()))
                    .map(|n| dir.join(n))
            })
    };
    let mut found = Vec::new();
    for lib in CudaLib::ALL {
        let hit = match lib {
            CudaLib::Driver => find_in(lib, 0, None).map(|p| (p, None)),
            CudaLib::NvrtcBuiltins => continue,
            _ => majors
                .iter()
                .find_map(|&m| find_in(lib, m, None).map(|p| (p, Some(m)))),
        };
        if let Some((path, major)) = hit {
            if lib == CudaLib::Nvrtc
                && let (Some(dir), Some(m)) = (path.parent(), major)
                && let Some(builtins) = find_in(CudaLib::NvrtcBuiltins, m, Some(dir))
            {
                found.push(Found {
                    lib: CudaLib::NvrtcBuiltins,
                    path: builtins,
                    major,
                });
            }
            found.push(Found { lib, path, major });
        }
    }
    Located { found, searched }
}

/// Opens every found library by path, in load order, with global symbols,
/// and keeps it open for the process. Then cudarc's `dlopen` by soname gets
/// these files. Errors name the file and the loader's reason.
#[cfg(feature = "cuda")]
pub fn preload(located: &Located) -> Result<(), String> {
    for found in &located.found {
        dlopen_global(&found.path)?;
    }
    Ok(())
}

/// Opens `file` with global symbols and never closes it.
#[cfg(feature = "cuda")]
pub fn dlopen_global(file: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(file.as_os_str().as_bytes())
        .map_err(|_| format!("{} contains a NUL byte", file.display()))?;
    // SAFETY: a valid C string; the handle is deliberately leaked so the
    // library stays loaded for the process.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a C string owned by the loader, or null.
        let reason = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                "unknown error".to_string()
            } else {
                std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(format!("cannot load {}: {reason}", file.display()));
    }
    Ok(())
}

/// Locates and preloads the libraries once per process; later calls return
/// the first result. The driver is loaded first so its version bounds the
/// toolkit libraries' (a CUDA 12 driver cannot run CUDA 13's cuBLAS).
#[cfg(feature = "cuda")]
pub fn ensure_loaded() -> &'static Result<Located, String> {
    static LOADED: std::sync::OnceLock<Result<Located, String>> = std::sync::OnceLock::new();
    LOADED.get_or_init(|| {
        let roots = default_roots();
        let driver = locate(&roots, None);
        if let Some(found) = driver.get(CudaLib::Driver) {
            dlopen_global(&found.path)?;
        }
        let max_major = driver_major();
        let located = locate(&roots, max_major);
        preload(&Located {
            found: located
                .found
                .iter()
                .filter(|f| f.lib != CudaLib::Driver)
                .cloned()
                .collect(),
            searched: Vec::new(),
        })?;
        Ok(located)
    })
}

/// The newest CUDA major version the loaded driver supports, if a driver
/// loads.
#[cfg(feature = "cuda")]
pub fn driver_major() -> Option<u32> {
    driver_version().map(|v| v / 1000)
}

/// `cuDriverGetVersion` (e.g. 13000), if a driver loads.
#[cfg(feature = "cuda")]
pub fn driver_version() -> Option<u32> {
    use cudarc::driver::sys;
    // SAFETY: only tries to load the library.
    if !unsafe { sys::is_culib_present() } {
        return None;
    }
    let mut version = 0i32;
    // SAFETY: a valid out-pointer; this call needs no cuInit.
    let r = unsafe { sys::cuDriverGetVersion(&mut version) };
    (r == sys::CUresult::CUDA_SUCCESS && version > 0).then_some(version as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(root: &Path, rel: &str) -> PathBuf {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"not a library").unwrap();
        p
    }

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn pip_cuda13_layout_is_found_with_its_builtins() {
        let t = tmp();
        let site = t.path().join("site-packages");
        let nvrtc = touch(&site, "nvidia/cu13/lib/libnvrtc.so.13");
        let builtins = touch(&site, "nvidia/cu13/lib/libnvrtc-builtins.so.13.0");
        let cublas = touch(&site, "nvidia/cu13/lib/libcublas.so.13");
        let lt = touch(&site, "nvidia/cu13/lib/libcublasLt.so.13");
        let got = locate(&[site], Some(13));
        assert_eq!(got.get(CudaLib::Nvrtc).unwrap().path, nvrtc);
        assert_eq!(got.get(CudaLib::Nvrtc).unwrap().major, Some(13));
        assert_eq!(got.get(CudaLib::NvrtcBuiltins).unwrap().path, builtins);
        assert_eq!(got.get(CudaLib::Cublas).unwrap().path, cublas);
        assert_eq!(got.get(CudaLib::CublasLt).unwrap().path, lt);
        assert!(got.get(CudaLib::Driver).is_none());
        // Load order: builtins before NVRTC, cuBLASLt before cuBLAS.
        let order: Vec<CudaLib> = got.found.iter().map(|f| f.lib).collect();
        assert_eq!(
            order,
            [
                CudaLib::NvrtcBuiltins,
                CudaLib::Nvrtc,
                CudaLib::CublasLt,
                CudaLib::Cublas
            ]
        );
    }

    #[test]
    fn pip_cuda12_layout_has_one_folder_per_library() {
        let t = tmp();
        let nvidia = t.path().join("venv/lib/python3.12/site-packages/nvidia");
        let nvrtc = touch(&nvidia, "cuda_nvrtc/lib/libnvrtc.so.12");
        touch(&nvidia, "cuda_nvrtc/lib/libnvrtc-builtins.so.12.8");
        let cublas = touch(&nvidia, "cublas/lib/libcublas.so.12");
        // The root may be the nvidia folder itself or site-packages.
        for root in [nvidia.clone(), nvidia.parent().unwrap().to_path_buf()] {
            let got = locate(&[root], None);
            assert_eq!(got.get(CudaLib::Nvrtc).unwrap().path, nvrtc);
            assert_eq!(got.get(CudaLib::Cublas).unwrap().path, cublas);
            assert_eq!(
                got.get(CudaLib::NvrtcBuiltins).unwrap().path,
                nvidia.join("cuda_nvrtc/lib/libnvrtc-builtins.so.12.8")
            );
        }
    }

    #[test]
    fn newest_major_the_driver_runs_wins_over_folder_order() {
        let t = tmp();
        let old = t.path().join("usr/local/cuda-12.8");
        let new = t.path().join("pip");
        let nvrtc12 = touch(&old, "lib64/libnvrtc.so.12");
        let nvrtc13 = touch(&new, "nvidia/cu13/lib/libnvrtc.so.13");
        let roots = [old, new];
        assert_eq!(
            locate(&roots, None).get(CudaLib::Nvrtc).unwrap().path,
            nvrtc13
        );
        assert_eq!(
            locate(&roots, Some(13)).get(CudaLib::Nvrtc).unwrap().path,
            nvrtc13
        );
        // A CUDA 12 driver cannot run CUDA 13 libraries.
        let got = locate(&roots, Some(12));
        assert_eq!(got.get(CudaLib::Nvrtc).unwrap().path, nvrtc12);
        assert_eq!(got.get(CudaLib::Nvrtc).unwrap().major, Some(12));
        // An 11 driver: nothing this build supports.
        assert!(locate(&roots, Some(11)).get(CudaLib::Nvrtc).is_none());
    }

    #[test]
    fn toolkit_driver_and_unversioned_names() {
        let t = tmp();
        let cuda = t.path().join("cuda");
        // Unversioned dev symlinks and other versions are not sonames we load.
        touch(&cuda, "lib64/libnvrtc.so");
        touch(&cuda, "lib64/libcublas.so.11");
        let lt = touch(&cuda, "targets/x86_64-linux/lib/libcublasLt.so.12");
        let driver_dir = t.path().join("drv");
        let driver = touch(&driver_dir, "lib64/libcuda.so.1");
        touch(&driver_dir, "lib64/libcuda.so");
        let got = locate(&[cuda.clone(), driver_dir], None);
        assert!(got.get(CudaLib::Nvrtc).is_none());
        assert!(got.get(CudaLib::Cublas).is_none());
        assert_eq!(got.get(CudaLib::CublasLt).unwrap().path, lt);
        assert_eq!(got.get(CudaLib::Driver).unwrap().path, driver);
        assert!(got.searched.contains(&cuda.join("lib64")));
        let lines = got.describe();
        assert!(
            lines.iter().any(|l| l == "libnvrtc: not found"),
            "{lines:?}"
        );
    }

    #[test]
    fn builtins_come_from_nvrtcs_own_folder_and_newest_minor() {
        let t = tmp();
        let a = t.path().join("a");
        let b = t.path().join("b");
        // Builtins elsewhere do not count: NVRTC needs its own.
        touch(&a, "libnvrtc-builtins.so.13.0");
        touch(&b, "libnvrtc.so.13");
        touch(&b, "libnvrtc-builtins.so.13.0");
        touch(&b, "libnvrtc-builtins.so.13.9");
        let newest = touch(&b, "libnvrtc-builtins.so.13.10");
        let got = locate(&[a, b], None);
        assert_eq!(got.get(CudaLib::NvrtcBuiltins).unwrap().path, newest);
    }

    #[test]
    fn missing_folders_are_skipped() {
        let got = locate(&[PathBuf::from("/nonexistent/memtune/cuda")], None);
        assert!(got.found.is_empty());
        assert!(got.searched.is_empty());
    }

    #[cfg(feature = "cuda")]
    #[test]
    fn preloading_a_file_that_is_not_a_library_names_it() {
        let t = tmp();
        let fake = touch(t.path(), "nvidia/cu13/lib/libnvrtc.so.13");
        let got = locate(&[t.path().to_path_buf()], None);
        let err = preload(&got).unwrap_err();
        assert!(err.contains(&fake.display().to_string()), "{err}");
    }
}
