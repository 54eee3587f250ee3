//! The build identity every evidence file records: the crate version, the git
//! commit it was built from (`build.rs`), the SHA-256 of the CUDA kernel
//! sources embedded in the binary (the artifact NVRTC compiles at run time),
//! and, on CUDA, the NVRTC, driver and cuBLAS versions (each `null` with
//! the reason in `cuda_versions_reason` when it cannot be read).

use headroom_core::BackendKind;
use headroom_hardware::HardwareFingerprint;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Who built the binary that measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildInfo {
    pub version: String,
    /// `git rev-parse HEAD` at build time (`unknown` outside a git checkout),
    /// suffixed `-dirty` when the tree had uncommitted changes.
    pub git_commit: String,
    /// SHA-256 over every embedded kernel source (name, then text), in order.
    pub kernel_artifact_sha256: String,
    /// `null` on the CPU backend or where the library is absent.
    pub nvrtc_version: Option<String>,
    pub driver_version: Option<String>,
    /// `major.minor.patch` from `cublasGetProperty`.
    pub cublas_version: Option<String>,
    /// Why any of the three versions is `null` (`null` when all were read).
    pub cuda_versions_reason: Option<String>,
}

/// The SHA-256 of the kernel sources compiled into this binary.
pub fn kernel_artifact_sha256() -> String {
    let mut h = Sha256::new();
    for s in headroom_cuda::kernels::SOURCES {
        h.update(s.name.as_bytes());
        h.update([0u8]);
        h.update(s.source.as_bytes());
        h.update([0u8]);
    }
    hex(&h.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl BuildInfo {
    /// This binary's identity, with the CUDA library versions when measuring on `backend` cuda.
    pub fn current(backend: BackendKind, hardware: &HardwareFingerprint) -> BuildInfo {
        let (nvrtc, driver, cublas, reason) = if backend == BackendKind::Cuda {
            let mut why = Vec::new();
            let nvrtc = headroom_cuda::nvrtc::version()
                .map_err(|e| why.push(format!("nvrtc: {e}")))
                .ok();
            let driver = hardware.driver_version.clone();
            if driver.is_none() {
                why.push("driver: the hardware fingerprint has no driver version".into());
            }
            let cublas = headroom_cuda::libs::cublas_version()
                .map_err(|e| why.push(format!("cublas: {e}")))
                .ok();
            let reason = (!why.is_empty()).then(|| why.join("; "));
            (nvrtc, driver, cublas, reason)
        } else {
            let why = format!("backend {backend}: no CUDA library is used");
            (None, None, None, Some(why))
        };
        BuildInfo {
            version: env!("CARGO_PKG_VERSION").to_string(),
            git_commit: env!("HEADROOM_GIT_COMMIT").to_string(),
            kernel_artifact_sha256: kernel_artifact_sha256(),
            nvrtc_version: nvrtc,
            driver_version: driver,
            cublas_version: cublas,
            cuda_versions_reason: reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_hash_is_stable_hex() {
        let a = kernel_artifact_sha256();
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(a, kernel_artifact_sha256());
    }

    #[test]
    fn cpu_build_has_no_cuda_versions() {
        let hw = headroom_hardware::detect_cpu();
        let b = BuildInfo::current(BackendKind::Cpu, &hw);
        assert_eq!(b.version, env!("CARGO_PKG_VERSION"));
        assert!(!b.git_commit.is_empty());
        assert_eq!(b.nvrtc_version, None);
        assert_eq!(b.driver_version, None);
        assert_eq!(b.cublas_version, None);
        assert!(b.cuda_versions_reason.unwrap().contains("backend cpu"));
    }

    #[test]
    fn a_cuda_build_reads_cublas_or_says_why_not() {
        let hw = headroom_hardware::detect_cpu();
        let b = BuildInfo::current(BackendKind::Cuda, &hw);
        match (&b.cublas_version, headroom_cuda::libs::cublas_version()) {
            (Some(v), Ok(w)) => assert_eq!(v, &w),
            (None, Err(_)) => {
                let why = b.cuda_versions_reason.unwrap();
                assert!(
                    why.contains("cublas: ") && why.contains("libcublas"),
                    "{why}"
                );
            }
            (v, w) => panic!("recorded {v:?}, library says {w:?}"),
        }
    }
}
