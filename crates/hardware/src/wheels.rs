//! Finding the NVIDIA libraries of pip-installed wheels (`pip install
//! nvidia-cuda-nvrtc nvidia-cublas`, CUDA 13: `site-packages/nvidia/cu13/lib`,
//! older layouts `site-packages/nvidia/*/lib`) so a newcomer needs no
//! `LD_LIBRARY_PATH`.
//!
//! For each library (by soname) that the system's search path cannot load,
//! the site-packages folders of `python3` are searched, and the file found is
//! `dlopen`ed by its full path with `RTLD_GLOBAL` and kept loaded: when
//! cudarc later loads the soname, the dynamic loader matches the library
//! already in the process. [`LibraryOrigin`] says where each came from
//! (`headroom doctor` prints it).

use std::path::{Path, PathBuf};

/// The libraries looked for, in load order (cuBLAS needs cuBLASLt first).
pub const WHEEL_LIBRARIES: &[&str] = &[
    "libnvrtc.so.13",
    "libnvrtc-builtins.so.13.0",
    "libcublasLt.so.13",
    "libcublas.so.13",
];

/// Where one library was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryOrigin {
    pub soname: String,
    pub source: LibrarySource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LibrarySource {
    /// The system's library search path (ldconfig, `LD_LIBRARY_PATH`).
    System,
    /// A pip wheel, loaded by this full path.
    Wheel(PathBuf),
    /// Nowhere (the reason from the loader).
    Missing(String),
}

impl std::fmt::Display for LibraryOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            LibrarySource::System => write!(f, "{}: system library path", self.soname),
            LibrarySource::Wheel(p) => write!(f, "{}: pip wheel {}", self.soname, p.display()),
            LibrarySource::Missing(why) => write!(f, "{}: not found ({why})", self.soname),
        }
    }
}

/// Extra site-packages folders searched first (`:`-separated), e.g. a
/// `pip install --target` folder.
pub const SITE_PACKAGES_ENV: &str = "HEADROOM_SITE_PACKAGES";

/// The folders of [`SITE_PACKAGES_ENV`], then the site-packages of `python3`
/// (none when it is absent).
pub fn python_site_packages() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::env::var_os(SITE_PACKAGES_ENV)
        .map(|v| std::env::split_paths(&v).collect())
        .unwrap_or_default();
    out.extend(python3_site_packages().iter().cloned());
    out
}

/// Asked of `python3` once per process.
fn python3_site_packages() -> &'static [PathBuf] {
    static SITES: std::sync::OnceLock<Vec<PathBuf>> = std::sync::OnceLock::new();
    SITES.get_or_init(ask_python3)
}

fn ask_python3() -> Vec<PathBuf> {
    let script = "import site,sys\n\
                  p=list(site.getsitepackages())+[site.getusersitepackages()]\n\
                  print('\\n'.join(p))";
    match std::process::Command::new("python3")
        .args(["-c", script])
        .stderr(std::process::Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(PathBuf::from)
            .collect(),
        _ => Vec::new(),
    }
}

/// `soname` in the wheel layouts under `site`: `nvidia/cu13/lib` first, then
/// `nvidia/*/lib` in name order.
pub fn find_in_site(site: &Path, soname: &str) -> Option<PathBuf> {
    let nvidia = site.join("nvidia");
    let first = nvidia.join("cu13").join("lib").join(soname);
    if first.is_file() {
        return Some(first);
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&nvidia)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("lib").join(soname)))
        .collect();
    dirs.sort();
    dirs.into_iter().find(|p| p.is_file())
}

/// The CUDA headers of the wheels (`nvidia/cu13/include` or
/// `nvidia/cuda_runtime/include` holding `cuda_fp16.h`), if any.
pub fn find_wheel_headers(sites: &[PathBuf]) -> Option<PathBuf> {
    sites.iter().find_map(|s| {
        ["cu13", "cuda_runtime", "cuda_nvrtc"]
            .iter()
            .map(|d| s.join("nvidia").join(d).join("include"))
            .find(|d| d.join("cuda_fp16.h").is_file())
    })
}

/// Where each library came from, loading the wheels on the first call
/// ([`load_wheel_libraries`], once per process).
pub fn origins() -> &'static [LibraryOrigin] {
    static ORIGINS: std::sync::OnceLock<Vec<LibraryOrigin>> = std::sync::OnceLock::new();
    ORIGINS.get_or_init(load_wheel_libraries)
}

/// Loads every [`WHEEL_LIBRARIES`] entry the system cannot load from the
/// wheels of `python3`, and says where each came from. Never fails.
pub fn load_wheel_libraries() -> Vec<LibraryOrigin> {
    let mut sites: Option<Vec<PathBuf>> = None;
    WHEEL_LIBRARIES
        .iter()
        .map(|soname| {
            // SAFETY: loading a library runs its initialisers only.
            let system = unsafe { libloading::Library::new(*soname) };
            let source = match system {
                Ok(_) => LibrarySource::System,
                Err(e) => {
                    let sites = sites.get_or_insert_with(python_site_packages);
                    match sites.iter().find_map(|s| find_in_site(s, soname)) {
                        Some(path) => load_global(&path)
                            .map(|()| LibrarySource::Wheel(path.clone()))
                            .unwrap_or_else(LibrarySource::Missing),
                        None => LibrarySource::Missing(format!(
                            "{e}; no python3 site-packages has nvidia/*/lib/{soname}"
                        )),
                    }
                }
            };
            LibraryOrigin {
                soname: (*soname).to_string(),
                source,
            }
        })
        .collect()
}

/// `dlopen(path, RTLD_NOW | RTLD_GLOBAL)`, kept loaded for the process.
#[cfg(unix)]
fn load_global(path: &Path) -> Result<(), String> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading a library runs its initialisers only.
    let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
        // The Debug form carries dlerror()'s text.
        .map_err(|e| format!("{}: {e:?}", path.display()))?;
    // Kept for the life of the process: cudarc resolves the soname to it.
    std::mem::forget(lib);
    Ok(())
}

#[cfg(not(unix))]
fn load_global(_: &Path) -> Result<(), String> {
    Err("pip wheels are only searched on Unix".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cu13_layout_is_preferred_then_per_package_folders() {
        let site = std::env::temp_dir().join(format!("headroom-wheels-{}", std::process::id()));
        let per_pkg = site.join("nvidia/cuda_nvrtc/lib");
        std::fs::create_dir_all(&per_pkg).unwrap();
        std::fs::write(per_pkg.join("libnvrtc.so.13"), b"").unwrap();
        assert_eq!(
            find_in_site(&site, "libnvrtc.so.13"),
            Some(per_pkg.join("libnvrtc.so.13"))
        );
        let cu13 = site.join("nvidia/cu13/lib");
        std::fs::create_dir_all(&cu13).unwrap();
        std::fs::write(cu13.join("libnvrtc.so.13"), b"").unwrap();
        assert_eq!(
            find_in_site(&site, "libnvrtc.so.13"),
            Some(cu13.join("libnvrtc.so.13"))
        );
        assert_eq!(find_in_site(&site, "libcublas.so.13"), None);
        let inc = site.join("nvidia/cu13/include");
        std::fs::create_dir_all(&inc).unwrap();
        assert_eq!(find_wheel_headers(std::slice::from_ref(&site)), None);
        std::fs::write(inc.join("cuda_fp16.h"), b"").unwrap();
        assert_eq!(find_wheel_headers(std::slice::from_ref(&site)), Some(inc));
        std::fs::remove_dir_all(&site).unwrap();
    }

    #[test]
    fn a_file_that_is_not_a_library_is_reported_not_loaded() {
        let dir = std::env::temp_dir().join(format!("headroom-notlib-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("libheadroom-fake.so.13");
        std::fs::write(&fake, b"not an ELF file").unwrap();
        let why = load_global(&fake).unwrap_err();
        assert!(why.contains("libheadroom-fake.so.13"), "{why}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_library_gets_an_origin() {
        let origins = load_wheel_libraries();
        assert_eq!(origins.len(), WHEEL_LIBRARIES.len());
        for o in &origins {
            let line = o.to_string();
            assert!(line.starts_with(&o.soname), "{line}");
            if let LibrarySource::Wheel(p) = &o.source {
                assert!(p.ends_with(&o.soname), "{line}");
            }
        }
    }
}
