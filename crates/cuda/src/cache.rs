//! On-disk cache of compiled cubins, keyed by SHA-256 of the source, the
//! target architecture, the code options and the NVRTC version. Lives under
//! `$HEADROOM_KERNEL_CACHE`, else `$XDG_CACHE_HOME/headroom/kernels`, else
//! `~/.cache/headroom/kernels`. A cache that cannot be written is skipped
//! with a warning: compiling again is always correct.

use crate::kernels::KernelSource;
use crate::{nvrtc, CudaError};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The cache folder (not created here).
pub fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("HEADROOM_KERNEL_CACHE") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("headroom").join("kernels"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/headroom/kernels"))
}

/// SHA-256 (hex) of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The cache key of one compilation.
pub fn key(source: &str, arch: &str, nvrtc_version: &str) -> String {
    let mut h = Sha256::new();
    h.update(sha256_hex(source.as_bytes()));
    h.update([0]);
    h.update(arch);
    h.update([0]);
    for o in nvrtc::code_options(arch) {
        h.update(o);
        h.update([0]);
    }
    h.update(nvrtc_version);
    hex::encode(h.finalize())
}

/// The cubin for `src` on `arch`: from `dir` if cached, else compiled and stored.
pub fn cubin_in(dir: Option<&Path>, src: &KernelSource, arch: &str) -> Result<Vec<u8>, CudaError> {
    let version = nvrtc::version()?;
    let file = dir.map(|d| {
        d.join(format!(
            "{}-{}.cubin",
            src.name,
            key(src.source, arch, &version)
        ))
    });
    if let Some(f) = &file {
        if let Ok(bytes) = std::fs::read(f) {
            tracing::debug!(kernel = src.name, path = %f.display(), "kernel cache hit");
            return Ok(bytes);
        }
    }
    let compiled = nvrtc::compile(src.name, src.source, arch)?;
    tracing::debug!(kernel = src.name, arch, log = %compiled.log, "compiled kernel");
    if let Some(f) = &file {
        if let Err(e) = store(f, &compiled.cubin) {
            tracing::warn!(path = %f.display(), error = %e, "kernel cache not written");
        }
    }
    Ok(compiled.cubin)
}

/// [`cubin_in`] with the default cache folder.
pub fn cubin(src: &KernelSource, arch: &str) -> Result<Vec<u8>, CudaError> {
    cubin_in(cache_dir().as_deref(), src, arch)
}

fn store(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    // Write then rename, so a reader never sees half a cubin.
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_changes_with_source_arch_and_version() {
        let k = key("a", "sm_90a", "13.0");
        assert_ne!(k, key("b", "sm_90a", "13.0"));
        assert_ne!(k, key("a", "sm_80", "13.0"));
        assert_ne!(k, key("a", "sm_90a", "13.1"));
        assert_eq!(k, key("a", "sm_90a", "13.0"));
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn second_lookup_is_served_from_the_cache() {
        if let Err(e) = crate::libs::probe_nvrtc().and_then(|_| nvrtc::include_dir()) {
            panic!("this test needs NVRTC and the CUDA headers (run .ci/kernel-gate.sh): {e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let src = crate::kernels::MASKED_SOFTMAX;
        let first = cubin_in(Some(dir.path()), &src, "sm_90a").unwrap();
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(files.len(), 1);
        // Overwrite the cached file: a hit must return the cached bytes, not recompile.
        let path = files[0].as_ref().unwrap().path();
        std::fs::write(&path, b"cached").unwrap();
        assert_eq!(
            cubin_in(Some(dir.path()), &src, "sm_90a").unwrap(),
            b"cached"
        );
        assert!(first.starts_with(b"\x7fELF"));
    }
}
