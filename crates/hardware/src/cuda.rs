//! CUDA availability: the driver is probed with `dlopen` before `cudarc` touches
//! it (cudarc's dynamic loading panics when the library is missing), every driver
//! call is guarded, and the answer is computed once per process.

use cudarc::driver::{result, sys};
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// What the CUDA driver reports for device 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaDeviceInfo {
    /// The device the fingerprint describes (always 0: the first visible device).
    pub ordinal: usize,
    /// Visible CUDA devices.
    pub device_count: usize,
    pub name: String,
    /// Streaming multiprocessors.
    pub compute_units: u32,
    /// Device memory in GiB, rounded down.
    pub memory_gib: u64,
    /// `major.minor`.
    pub compute_capability: String,
    /// CUDA driver API version, `major.minor`.
    pub driver_version: String,
}

/// Driver library names tried, in order.
#[cfg(target_os = "linux")]
const DRIVER_LIBRARIES: &[&str] = &["libcuda.so.1", "libcuda.so"];
#[cfg(windows)]
const DRIVER_LIBRARIES: &[&str] = &["nvcuda.dll"];
#[cfg(not(any(target_os = "linux", windows)))]
const DRIVER_LIBRARIES: &[&str] = &[];

/// Device 0's description, or why CUDA cannot be used on this machine.
/// Never panics; the probe runs once per process.
pub fn cuda_availability() -> Result<CudaDeviceInfo, String> {
    static ANSWER: OnceLock<Result<CudaDeviceInfo, String>> = OnceLock::new();
    ANSWER
        .get_or_init(|| {
            let answer = probe_library(DRIVER_LIBRARIES).and_then(|lib| {
                tracing::debug!(library = %lib, "CUDA driver library found");
                guarded(query_device0)
            });
            if let Err(reason) = &answer {
                tracing::debug!(%reason, "CUDA unavailable");
            }
            answer
        })
        .clone()
}

/// Names the first of `names` that `dlopen` accepts, or the reason none did.
pub(crate) fn probe_library(names: &[&str]) -> Result<String, String> {
    if names.is_empty() {
        return Err("CUDA is not supported on this operating system".into());
    }
    let errors = match crate::dylib::load_first(names) {
        // The handle is dropped right away: cudarc loads the driver itself.
        Ok((_, name)) => return Ok(name.to_string()),
        Err(errors) => errors,
    };
    Err(format!(
        "the CUDA driver (libcuda.so) cannot be loaded ({NO_DRIVER_HINT}: {})",
        errors.join("; ")
    ))
}

/// Why the driver is missing, in the same words as `headroom_cuda::libs::probe_driver`
/// (its error reads "the CUDA driver (libcuda.so) cannot be loaded (HINT)").
pub(crate) const NO_DRIVER_HINT: &str =
    "no NVIDIA driver on this machine, or it is not on the library search path";

/// Runs `f`, turning a panic inside the driver bindings (e.g. a symbol an old
/// driver lacks) into an error.
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        Err(format!("CUDA driver binding failed: {msg}"))
    })
}

fn query_device0() -> Result<CudaDeviceInfo, String> {
    use sys::CUdevice_attribute as A;
    fn err(what: &'static str) -> impl Fn(result::DriverError) -> String {
        move |e| format!("{what} failed: {e}")
    }
    result::init().map_err(err("cuInit"))?;
    let count = result::device::get_count().map_err(err("cuDeviceGetCount"))?;
    if count <= 0 {
        return Err("the CUDA driver reports no devices".into());
    }
    let dev = result::device::get(0).map_err(err("cuDeviceGet"))?;
    let name = result::device::get_name(dev).map_err(err("cuDeviceGetName"))?;
    // SAFETY: `dev` was returned by cuDeviceGet above.
    let attr = |a: A| unsafe { result::device::get_attribute(dev, a) };
    let sms =
        attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).map_err(err("multiprocessor count"))?;
    let major =
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(err("compute capability"))?;
    let minor =
        attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).map_err(err("compute capability"))?;
    // SAFETY: `dev` was returned by cuDeviceGet above.
    let bytes = unsafe { result::device::total_mem(dev) }.map_err(err("cuDeviceTotalMem"))?;
    let mut version: std::ffi::c_int = 0;
    // SAFETY: the pointer is to a live local.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(err("cuDriverGetVersion"))?;
    Ok(CudaDeviceInfo {
        ordinal: 0,
        device_count: count as usize,
        name: name.trim().to_string(),
        compute_units: u32::try_from(sms).map_err(|_| format!("bad SM count {sms}"))?,
        memory_gib: (bytes as u64) >> 30,
        compute_capability: format!("{major}.{minor}"),
        driver_version: format_driver_version(version),
    })
}

/// Device 0's PCI bus id as NVML names devices (`domain:bus:device.0`,
/// hexadecimal), or why CUDA cannot say.
pub(crate) fn pci_bus_id_of_device0() -> Result<String, String> {
    use sys::CUdevice_attribute as A;
    cuda_availability()?;
    guarded(|| {
        let dev = result::device::get(0).map_err(|e| format!("cuDeviceGet failed: {e}"))?;
        // SAFETY: `dev` was returned by cuDeviceGet above (the driver is
        // initialised: cuda_availability ran cuInit).
        let attr = |a: A| {
            unsafe { result::device::get_attribute(dev, a) }
                .map_err(|e| format!("PCI attribute {a:?} failed: {e}"))
        };
        Ok(pci_bus_id(
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
        ))
    })
}

/// `domain:bus:device.0` in NVML's spelling (`00000000:3B:00.0`).
pub(crate) fn pci_bus_id(domain: i32, bus: i32, device: i32) -> String {
    format!("{domain:08X}:{bus:02X}:{device:02X}.0")
}

/// `13000` → `13.0`, `12080` → `12.8` (the driver API's `1000·major + 10·minor`).
pub(crate) fn format_driver_version(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_an_error_naming_it() {
        let err = probe_library(&["libheadroom-no-such-driver.so.7"]).unwrap_err();
        assert!(err.contains("libheadroom-no-such-driver.so.7"), "{err}");
        // One wording with headroom-cuda's LibraryMissing error for the driver.
        assert!(
            err.starts_with(&format!(
                "the CUDA driver (libcuda.so) cannot be loaded ({NO_DRIVER_HINT}: "
            )),
            "{err}"
        );
        assert!(probe_library(&[]).is_err());
    }

    #[test]
    fn panics_in_bindings_become_errors() {
        let r: Result<(), String> = guarded(|| panic!("Missing symbol cuFoo"));
        assert!(r.unwrap_err().contains("Missing symbol cuFoo"));
        assert_eq!(guarded(|| Ok::<_, String>(3)), Ok(3));
    }

    #[test]
    fn driver_versions_format_as_major_minor() {
        assert_eq!(format_driver_version(13000), "13.0");
        assert_eq!(format_driver_version(12080), "12.8");
        assert_eq!(format_driver_version(12090), "12.9");
    }

    #[test]
    fn pci_bus_ids_are_spelled_as_nvml_spells_them() {
        assert_eq!(pci_bus_id(0, 0x3b, 0), "00000000:3B:00.0");
        assert_eq!(pci_bus_id(1, 0xc1, 0x1f), "00000001:C1:1F.0");
    }

    #[test]
    fn availability_is_stable_across_calls() {
        let a = cuda_availability();
        let b = cuda_availability();
        assert_eq!(a, b);
        if let Err(reason) = a {
            eprintln!("skipping device checks: {reason}");
        }
    }
}
