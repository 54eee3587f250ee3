//! The fingerprint type. Its serde field names are the registry's `[hardware]` keys.

use crate::CudaDeviceInfo;
use headroom_core::BackendKind;
use serde::{Deserialize, Serialize};

/// The identity of a machine for one backend.
///
/// Serialized with the same field names a qualification entry's `[hardware]`
/// table uses; device fields are absent (not `null`) for the CPU backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HardwareFingerprint {
    /// `cpu` or `cuda`.
    pub backend: BackendKind,
    /// Linux: DMI product name (or device-tree model); macOS: `hw.model`; else `unknown`.
    pub machine_model: String,
    /// The CPU's marketing name (`/proc/cpuinfo` "model name"), else `unknown`.
    pub cpu_brand: String,
    /// Logical CPU cores.
    pub cpu_cores: usize,
    /// Physical memory in GiB, rounded down.
    pub memory_gib: u64,
    /// CUDA device name (device 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// Streaming multiprocessors of the CUDA device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_compute_units: Option<u32>,
    /// Device memory in GiB, rounded down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_memory_gib: Option<u64>,
    /// Compute capability, `major.minor` (e.g. `9.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
    /// CUDA driver API version, `major.minor` (e.g. `13.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
}

impl HardwareFingerprint {
    /// This host's fingerprint turned into the CUDA backend's, with `dev`'s fields.
    pub fn with_cuda_device(mut self, dev: &CudaDeviceInfo) -> Self {
        self.backend = BackendKind::Cuda;
        self.device_name = Some(dev.name.clone());
        self.device_compute_units = Some(dev.compute_units);
        self.device_memory_gib = Some(dev.memory_gib);
        self.compute_capability = Some(dev.compute_capability.clone());
        self.driver_version = Some(dev.driver_version.clone());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> HardwareFingerprint {
        HardwareFingerprint {
            backend: BackendKind::Cpu,
            machine_model: "Box".into(),
            cpu_brand: "AMD EPYC".into(),
            cpu_cores: 2,
            memory_gib: 23,
            device_name: None,
            device_compute_units: None,
            device_memory_gib: None,
            compute_capability: None,
            driver_version: None,
        }
    }

    #[test]
    fn cpu_json_has_only_host_fields() {
        let v = serde_json::to_value(host()).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys.len(),
            5,
            "unexpected keys {keys:?} (absent device fields must not serialize)"
        );
        assert_eq!(v["backend"], "cpu");
        assert_eq!(v["memory_gib"], 23);
    }

    #[test]
    fn cuda_device_fields_round_trip() {
        let dev = CudaDeviceInfo {
            ordinal: 0,
            device_count: 1,
            name: "NVIDIA H200".into(),
            compute_units: 132,
            memory_gib: 139,
            compute_capability: "9.0".into(),
            driver_version: "13.0".into(),
        };
        let fp = host().with_cuda_device(&dev);
        assert_eq!(fp.backend, BackendKind::Cuda);
        let json = serde_json::to_string(&fp).unwrap();
        assert!(json.contains("\"backend\":\"cuda\""), "{json}");
        assert!(json.contains("\"device_compute_units\":132"), "{json}");
        let back: HardwareFingerprint = serde_json::from_str(&json).unwrap();
        assert_eq!(back, fp);
    }
}
