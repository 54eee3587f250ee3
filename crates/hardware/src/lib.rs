//! Machine identity: the [`HardwareFingerprint`] that qualification entries bind to.
//!
//! * [`detect_cpu`] reads the host (DMI product name, CPU brand, logical cores,
//!   memory rounded down to GiB) and never fails: unreadable fields become
//!   `"unknown"` / `0`.
//! * [`cuda_availability`] probes the CUDA driver through `cudarc` with dynamic
//!   loading. The driver library is dlopen'ed first, so a machine without a
//!   driver gets an ordinary `Err(reason)`, never a panic.
//! * [`detect`] combines both for one backend.
//! * [`wheels`] finds the NVIDIA libraries of pip wheels (NVRTC, cuBLAS).
//! * [`Nvml`] reads the CUDA device's SM clock and power through NVML, and
//!   [`gpu_clock`] samples them beside a measurement ([`ClockSampler`],
//!   [`ClockStats`]).

mod cpu;
mod cuda;
mod dylib;
mod fingerprint;
pub mod gpu_clock;
mod memory;
mod nvml;
pub mod wheels;

pub use cpu::detect_cpu;
pub use cuda::{cuda_availability, CudaDeviceInfo};
pub use fingerprint::HardwareFingerprint;
pub use gpu_clock::{ClockSample, ClockSampler, ClockStats, ClockWindow};
pub use memory::available_memory_bytes;
pub use nvml::Nvml;

use headroom_core::BackendKind;
use thiserror::Error;

/// Why a backend's fingerprint could not be taken.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HardwareError {
    #[error("CUDA backend unavailable: {0}")]
    CudaUnavailable(String),
}

/// The fingerprint of this machine for `backend`: the host fields always, the
/// device fields too for CUDA (an error with the reason when CUDA is unavailable).
pub fn detect(backend: BackendKind) -> Result<HardwareFingerprint, HardwareError> {
    let host = detect_cpu();
    match backend {
        BackendKind::Cpu => Ok(host),
        BackendKind::Cuda => cuda_availability()
            .map(|dev| host.with_cuda_device(&dev))
            .map_err(HardwareError::CudaUnavailable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_backend_always_detects() {
        let fp = detect(BackendKind::Cpu).unwrap();
        assert_eq!(fp.backend, BackendKind::Cpu);
        assert!(fp.device_name.is_none());
        assert_eq!(fp, detect_cpu());
    }

    #[test]
    fn cuda_detect_agrees_with_availability_and_never_panics() {
        match (cuda_availability(), detect(BackendKind::Cuda)) {
            (Ok(dev), Ok(fp)) => {
                assert_eq!(fp.backend, BackendKind::Cuda);
                assert_eq!(fp.device_name.as_deref(), Some(dev.name.as_str()));
                assert_eq!(fp.device_compute_units, Some(dev.compute_units));
                assert!(dev.compute_units > 0 && dev.memory_gib > 0);
            }
            (Err(reason), Err(HardwareError::CudaUnavailable(r))) => {
                eprintln!("no CUDA here: {reason}");
                assert!(!reason.is_empty());
                assert_eq!(reason, r);
            }
            (a, b) => panic!("availability {a:?} disagrees with detect {b:?}"),
        }
    }
}
