//! Probes for the CUDA shared libraries before cudarc touches them.
//!
//! cudarc's dynamic loading panics when a library is missing; every entry
//! point of this crate calls one of these probes first, so a machine without
//! a driver, NVRTC or cuBLAS gets an ordinary error naming what is missing.

use crate::CudaError;

/// The driver as missing-library errors name it (worded as `headroom-hardware` does).
const DRIVER_LIBRARY: &str = "the CUDA driver (libcuda.so)";
/// Why it is missing (the same text as `NO_DRIVER_HINT` in crates/hardware/src/cuda.rs).
const NO_DRIVER_HINT: &str =
    "no NVIDIA driver on this machine, or it is not on the library search path";

/// The CUDA driver (`libcuda.so`), needed to run anything on a GPU.
pub fn probe_driver() -> Result<(), CudaError> {
    // SAFETY: only tries to dlopen candidate library names.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::LibraryMissing {
            library: DRIVER_LIBRARY,
            hint: NO_DRIVER_HINT,
        })
    }
}

/// NVRTC (`libnvrtc.so.13`), needed to compile kernels (no GPU required).
pub fn probe_nvrtc() -> Result<(), CudaError> {
    // SAFETY: only tries to dlopen candidate library names.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::LibraryMissing {
            library: "NVRTC (libnvrtc.so.13)",
            hint: "it comes with a CUDA 13 toolkit or the PyPI package nvidia-cuda-nvrtc \
                   (`pip install nvidia-cuda-nvrtc==13.0.88`); put its lib folder \
                   (site-packages/nvidia/cu13/lib) on LD_LIBRARY_PATH, or run \
                   `bash .ci/kernel-gate.sh`, which does both (see README)",
        })
    }
}

/// cuBLAS (`libcublas.so.13`), needed by the composed attention route.
pub fn probe_cublas() -> Result<(), CudaError> {
    // SAFETY: only tries to dlopen candidate library names.
    if unsafe { cudarc::cublas::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::LibraryMissing {
            library: "cuBLAS (libcublas.so.13)",
            hint: "it comes with a CUDA 13 toolkit or the PyPI package nvidia-cublas \
                   (`pip install nvidia-cublas`); put its lib folder on LD_LIBRARY_PATH",
        })
    }
}

/// cuBLAS's version as `major.minor.patch` (from `cublasGetProperty`, which
/// needs no handle and no GPU), or why it cannot be read.
pub fn cublas_version() -> Result<String, CudaError> {
    use cudarc::cublas::sys::{cublasGetProperty, libraryPropertyType};
    probe_cublas()?;
    let mut parts = [0i32; 3];
    for (part, kind) in parts.iter_mut().zip([
        libraryPropertyType::MAJOR_VERSION,
        libraryPropertyType::MINOR_VERSION,
        libraryPropertyType::PATCH_LEVEL,
    ]) {
        // SAFETY: cuBLAS is loadable (probed); the out-pointer is valid.
        unsafe { cublasGetProperty(kind, part) }
            .result()
            .map_err(|e| CudaError::Blas(format!("cublasGetProperty: {e:?}")))?;
    }
    Ok(format!("{}.{}.{}", parts[0], parts[1], parts[2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_answer_without_panicking() {
        // Whatever this machine has, each probe returns Ok or a typed error naming the library.
        for (probe, needle) in [
            (probe_driver as fn() -> Result<(), CudaError>, "libcuda"),
            (probe_nvrtc, "libnvrtc"),
            (probe_cublas, "libcublas"),
        ] {
            match probe() {
                Ok(()) => {}
                Err(e) => assert!(e.to_string().contains(needle), "{e}"),
            }
        }
    }

    #[test]
    fn the_missing_driver_is_worded_as_headroom_hardware_words_it() {
        let e = CudaError::LibraryMissing {
            library: DRIVER_LIBRARY,
            hint: NO_DRIVER_HINT,
        };
        // crates/hardware/src/cuda.rs: probe_library's error starts with this.
        assert_eq!(
            e.to_string(),
            "the CUDA driver (libcuda.so) cannot be loaded \
             (no NVIDIA driver on this machine, or it is not on the library search path)"
        );
    }

    #[test]
    fn cublas_version_is_read_when_the_library_loads() {
        match (probe_cublas(), cublas_version()) {
            (Ok(()), Ok(v)) => {
                let parts: Vec<&str> = v.split('.').collect();
                assert_eq!(parts.len(), 3, "{v}");
                assert!(parts.iter().all(|p| p.parse::<u32>().is_ok()), "{v}");
                assert!(parts[0].parse::<u32>().unwrap() >= 11, "{v}");
            }
            (Err(_), Err(e)) => assert!(e.to_string().contains("libcublas"), "{e}"),
            (p, v) => panic!("probe {p:?} but version {v:?}"),
        }
    }
}
