//! The CUDA backend's settings: [`CudaOptions`], read once when a device or
//! backend opens. [`CudaOptions::from_env`] is the one place in this crate
//! that reads the process environment; everything else takes the options it
//! needs as a value. docs/configuration.md ("CUDA backend", "Toolchain
//! discovery") documents every setting.

use crate::error::CudaError;
use std::path::{Path, PathBuf};

/// Environment variable naming the folder that holds `cuda_fp16.h`.
pub const INCLUDE_ENV: &str = "HEADROOM_CUDA_INCLUDE";
/// Environment variable naming the kernel cache folder.
pub const KERNEL_CACHE_ENV: &str = "HEADROOM_KERNEL_CACHE";
/// Environment variable overriding the NVRTC target architecture.
pub const ARCH_ENV: &str = "HEADROOM_CUDA_ARCH";
/// Environment variable turning the decode statistics on (`1`).
pub const DECODE_STATS_ENV: &str = "HEADROOM_DECODE_STATS";
/// Environment variable naming the step whose kernels the profiler window spans.
pub const PROFILE_STEP_ENV: &str = "HEADROOM_PROFILE_STEP";

/// Settings of the CUDA backend. `Default` is a plain run: kernels cached
/// nowhere (compiled on each open), headers from a toolkit under
/// `/usr/local/cuda`, the device's own architecture, no diagnostics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaOptions {
    /// Folder of the compiled-kernel cache; `None` compiles on every open.
    /// From `HEADROOM_KERNEL_CACHE`, else `$XDG_CACHE_HOME/headroom/kernels`,
    /// else `$HOME/.cache/headroom/kernels`.
    pub kernel_cache: Option<PathBuf>,
    /// Folder holding `cuda_fp16.h` and `cuda_bf16.h` (`HEADROOM_CUDA_INCLUDE`);
    /// when set it is the only folder tried.
    pub cuda_include: Option<PathBuf>,
    /// Toolkit roots whose `include` folders are tried when [`Self::cuda_include`]
    /// is unset, in order: `$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`.
    pub toolkit_roots: Vec<PathBuf>,
    /// NVRTC target instead of the device's own (`HEADROOM_CUDA_ARCH`, e.g. `sm_90a`).
    pub arch: Option<String>,
    /// Per-window decode statistics on stderr (`HEADROOM_DECODE_STATS=1`).
    pub decode_stats: bool,
    /// Open the CUDA profiler's window after this sampled step and close it
    /// after the next (`HEADROOM_PROFILE_STEP=N`).
    pub profile_step: Option<u64>,
    /// Whether the user set `NCCL_NVLS_ENABLE` (else a group turns NVLink SHARP off).
    pub nccl_nvls_from_user: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            kernel_cache: None,
            cuda_include: None,
            toolkit_roots: vec![PathBuf::from("/usr/local/cuda")],
            arch: None,
            decode_stats: false,
            profile_step: None,
            nccl_nvls_from_user: false,
        }
    }
}

impl CudaOptions {
    /// The options from the process environment (the one place this crate reads it).
    pub fn from_env() -> CudaOptions {
        CudaOptions::from_vars(|name| std::env::var_os(name).and_then(|v| v.into_string().ok()))
    }

    /// The options from a lookup of variables by name (`from_env` with the
    /// process environment; tests pass a table).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> CudaOptions {
        let kernel_cache = var(KERNEL_CACHE_ENV)
            .map(PathBuf::from)
            .or_else(|| var("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("headroom/kernels")))
            .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".cache/headroom/kernels")));
        let mut toolkit_roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
            .iter()
            .filter_map(|n| var(n))
            .map(PathBuf::from)
            .collect();
        toolkit_roots.extend(CudaOptions::default().toolkit_roots);
        CudaOptions {
            kernel_cache,
            cuda_include: var(INCLUDE_ENV).map(PathBuf::from),
            toolkit_roots,
            arch: var(ARCH_ENV).filter(|a| !a.is_empty()),
            decode_stats: var(DECODE_STATS_ENV).is_some_and(|v| v == "1"),
            profile_step: var(PROFILE_STEP_ENV).and_then(|v| v.trim().parse().ok()),
            nccl_nvls_from_user: var("NCCL_NVLS_ENABLE").is_some(),
        }
    }

    /// The folder holding the CUDA headers the kernels include.
    pub fn include_dir(&self) -> Result<PathBuf, CudaError> {
        if let Some(dir) = &self.cuda_include {
            if dir.join("cuda_fp16.h").is_file() {
                return Ok(dir.clone());
            }
            return Err(CudaError::HeadersMissing(format!(
                "{INCLUDE_ENV}={} has no cuda_fp16.h",
                dir.display()
            )));
        }
        let mut tried = Vec::new();
        for root in &self.toolkit_roots {
            let dir = root.join("include");
            if dir.join("cuda_fp16.h").is_file() {
                return Ok(dir);
            }
            tried.push(dir.display().to_string());
        }
        Err(CudaError::HeadersMissing(format!(
            "set {INCLUDE_ENV} to a folder with cuda_fp16.h and cuda_bf16.h: a CUDA 13 toolkit's \
             include folder, or site-packages/nvidia/cu13/include of the PyPI package \
             nvidia-cuda-runtime (`pip install nvidia-cuda-runtime==13.0.96`); \
             `bash .ci/kernel-gate.sh` does this (see README) (tried {})",
            tried.join(", ")
        )))
    }

    /// The NVRTC target for a device of compute capability `(major, minor)`:
    /// [`Self::arch`] if set, else the arch-specific `a` target on Hopper
    /// (wgmma/setmaxnreg), plain `sm_XY` elsewhere.
    pub fn arch_for(&self, major: i32, minor: i32) -> String {
        if let Some(a) = &self.arch {
            return a.clone();
        }
        if (major, minor) == (9, 0) {
            "sm_90a".into()
        } else {
            format!("sm_{major}{minor}")
        }
    }

    /// The kernel cache folder, if any.
    pub fn kernel_cache(&self) -> Option<&Path> {
        self.kernel_cache.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn from(pairs: &[(&str, &str)]) -> CudaOptions {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        CudaOptions::from_vars(|n| m.get(n).cloned())
    }

    #[test]
    fn an_empty_environment_is_the_default() {
        assert_eq!(from(&[]), CudaOptions::default());
    }

    #[test]
    fn the_kernel_cache_falls_back_from_its_variable_to_xdg_to_home() {
        assert_eq!(
            from(&[("HOME", "/h")]).kernel_cache,
            Some(PathBuf::from("/h/.cache/headroom/kernels"))
        );
        assert_eq!(
            from(&[("HOME", "/h"), ("XDG_CACHE_HOME", "/x")]).kernel_cache,
            Some(PathBuf::from("/x/headroom/kernels"))
        );
        assert_eq!(
            from(&[("XDG_CACHE_HOME", "/x"), (KERNEL_CACHE_ENV, "/k")]).kernel_cache,
            Some(PathBuf::from("/k"))
        );
    }

    #[test]
    fn diagnostics_and_arch_are_read_from_their_variables() {
        let o = from(&[
            (DECODE_STATS_ENV, "1"),
            (PROFILE_STEP_ENV, " 5 "),
            (ARCH_ENV, "sm_80"),
            ("NCCL_NVLS_ENABLE", "1"),
        ]);
        assert!(o.decode_stats);
        assert_eq!(o.profile_step, Some(5));
        assert_eq!(o.arch_for(9, 0), "sm_80");
        assert!(o.nccl_nvls_from_user);
        let off = from(&[(DECODE_STATS_ENV, "0"), (PROFILE_STEP_ENV, "x")]);
        assert!(!off.decode_stats);
        assert_eq!(off.profile_step, None);
        assert_eq!(off.arch_for(9, 0), "sm_90a");
        assert_eq!(off.arch_for(8, 6), "sm_86");
    }

    /// The crate's Rust files with their code before any `#[cfg(test)]`.
    fn crate_code() -> Vec<(PathBuf, String)> {
        fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&p).unwrap();
                    let code = text.split("#[cfg(test)]").next().unwrap_or("").to_string();
                    out.push((p, code));
                }
            }
        }
        let mut out = Vec::new();
        walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut out);
        assert!(out.len() > 20, "the crate's sources were found");
        out
    }

    #[test]
    fn only_this_module_reads_the_environment() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        for (path, code) in crate_code() {
            if path == src.join("config.rs") {
                continue;
            }
            for read in ["env::var", "var_os(", "env::vars"] {
                assert!(
                    !code.contains(read),
                    "{} reads the environment (`{read}`): take it from CudaOptions",
                    path.display()
                );
            }
        }
    }

    #[test]
    fn the_options_are_read_only_where_a_device_or_the_gate_starts() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let start_ups = [
            "device.rs",
            "backend/open.rs",
            "backend/group.rs",
            "artifact.rs",
        ]
        .map(|f| src.join(f));
        for (path, code) in crate_code() {
            if code.contains("CudaOptions::from_env()") {
                assert!(
                    start_ups.contains(&path),
                    "{} reads the options after start-up",
                    path.display()
                );
            }
        }
    }

    #[test]
    fn headers_come_from_the_named_folder_or_the_toolkit_roots_in_order() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::create_dir(b.path().join("include")).unwrap();
        std::fs::write(b.path().join("include/cuda_fp16.h"), "").unwrap();
        let roots = CudaOptions {
            toolkit_roots: vec![a.path().into(), b.path().into()],
            ..CudaOptions::default()
        };
        assert_eq!(roots.include_dir().unwrap(), b.path().join("include"));
        let named = CudaOptions {
            cuda_include: Some(a.path().into()),
            ..roots.clone()
        };
        let err = named.include_dir().unwrap_err().to_string();
        assert!(err.contains(INCLUDE_ENV), "{err}");
        let toolkit = from(&[("CUDA_HOME", "/c")]).toolkit_roots;
        assert_eq!(toolkit[0], PathBuf::from("/c"));
        assert_eq!(toolkit.last(), Some(&PathBuf::from("/usr/local/cuda")));
    }
}
