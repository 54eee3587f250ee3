//! The few NVML calls a clock sample needs (the SM clock, the power draw and
//! its enforced limit, the reasons the clocks are held down), loaded with
//! `dlopen` from the driver's `libnvidia-ml.so.1`, for the CUDA device the
//! engine runs on (device 0, found by its PCI bus id: NVML's indices ignore
//! `CUDA_VISIBLE_DEVICES`). A machine without NVML gets an `Err(reason)`.

use crate::gpu_clock::ClockSample;
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CString};

/// NVML library names tried, in order.
#[cfg(target_os = "linux")]
const NVML_LIBRARIES: &[&str] = &["libnvidia-ml.so.1", "libnvidia-ml.so"];
#[cfg(windows)]
const NVML_LIBRARIES: &[&str] = &["nvml.dll"];
#[cfg(not(any(target_os = "linux", windows)))]
const NVML_LIBRARIES: &[&str] = &[];

/// `NVML_CLOCK_SM` of `nvmlClockType_t`.
const NVML_CLOCK_SM: c_int = 1;

type Device = *mut c_void;
type InitFn = unsafe extern "C" fn() -> c_int;
type ByBusIdFn = unsafe extern "C" fn(*const c_char, *mut Device) -> c_int;
type ClockFn = unsafe extern "C" fn(Device, c_int, *mut c_uint) -> c_int;
type PowerFn = unsafe extern "C" fn(Device, *mut c_uint) -> c_int;
type ReasonsFn = unsafe extern "C" fn(Device, *mut c_ulonglong) -> c_int;
type EnergyFn = unsafe extern "C" fn(Device, *mut c_ulonglong) -> c_int;

/// NVML opened on one device; samples it with [`Nvml::sample`].
pub struct Nvml {
    device: Device,
    clock: ClockFn,
    power: PowerFn,
    limit: PowerFn,
    reasons: ReasonsFn,
    /// `nvmlDeviceGetTotalEnergyConsumption` (Volta on; absent from old drivers).
    energy: Option<EnergyFn>,
    shutdown: InitFn,
    /// Keeps the functions above loaded.
    _lib: libloading::Library,
}

// SAFETY: NVML is thread-safe (its documentation: every call may be made from
// any thread); the device handle is an opaque token NVML owns.
unsafe impl Send for Nvml {}
unsafe impl Sync for Nvml {}

impl Nvml {
    /// NVML on CUDA device 0, or why not (no NVML library, a missing symbol,
    /// CUDA itself unavailable, or NVML refusing the device).
    pub fn for_cuda_device0() -> Result<Nvml, String> {
        let bus_id = crate::cuda::pci_bus_id_of_device0()?;
        Self::open(NVML_LIBRARIES, &bus_id)
    }

    /// NVML from the first of `libraries` that loads, on the device at PCI
    /// bus id `bus_id` (`domain:bus:device.function`, hexadecimal).
    pub(crate) fn open(libraries: &[&str], bus_id: &str) -> Result<Nvml, String> {
        let (lib, _) = crate::dylib::load_first(libraries).map_err(|errors| {
            format!(
                "NVML (libnvidia-ml.so) cannot be loaded ({})",
                if errors.is_empty() {
                    "not supported on this operating system".to_string()
                } else {
                    errors.join("; ")
                }
            )
        })?;
        // SAFETY: each symbol is looked up with the signature NVML's header
        // gives it (nvml.h, NVML API version 12).
        unsafe {
            let init: InitFn = symbol(&lib, "nvmlInit_v2")?;
            let shutdown: InitFn = symbol(&lib, "nvmlShutdown")?;
            let by_bus: ByBusIdFn = symbol(&lib, "nvmlDeviceGetHandleByPciBusId_v2")?;
            let clock: ClockFn = symbol(&lib, "nvmlDeviceGetClockInfo")?;
            let power: PowerFn = symbol(&lib, "nvmlDeviceGetPowerUsage")?;
            let limit: PowerFn = symbol(&lib, "nvmlDeviceGetEnforcedPowerLimit")?;
            // The current name first; drivers before 535 have only the old one.
            let reasons: ReasonsFn = symbol(&lib, "nvmlDeviceGetCurrentClocksEventReasons")
                .or_else(|_| symbol(&lib, "nvmlDeviceGetCurrentClocksThrottleReasons"))?;
            let energy: Option<EnergyFn> = symbol(&lib, "nvmlDeviceGetTotalEnergyConsumption").ok();
            check("nvmlInit_v2", init())?;
            let c_bus = CString::new(bus_id).map_err(|_| format!("bad PCI bus id {bus_id:?}"))?;
            let mut device: Device = std::ptr::null_mut();
            if let Err(e) = check(
                "nvmlDeviceGetHandleByPciBusId_v2",
                by_bus(c_bus.as_ptr(), &mut device),
            ) {
                shutdown();
                return Err(format!("{e} (PCI bus id {bus_id})"));
            }
            Ok(Nvml {
                device,
                clock,
                power,
                limit,
                reasons,
                energy,
                shutdown,
                _lib: lib,
            })
        }
    }

    /// The device's SM clock, power draw (NVML's figure: a moving average on
    /// recent GPUs), clock event reasons and energy counter now (the counter
    /// `None` where the device or driver has none).
    pub fn sample(&self) -> Result<ClockSample, String> {
        let (mut mhz, mut mw, mut reasons) = (0 as c_uint, 0 as c_uint, 0 as c_ulonglong);
        // SAFETY: the device handle is live until drop; the pointers are to
        // live locals.
        unsafe {
            check(
                "nvmlDeviceGetClockInfo",
                (self.clock)(self.device, NVML_CLOCK_SM, &mut mhz),
            )?;
            check(
                "nvmlDeviceGetPowerUsage",
                (self.power)(self.device, &mut mw),
            )?;
            check(
                "nvmlDeviceGetCurrentClocksEventReasons",
                (self.reasons)(self.device, &mut reasons),
            )?;
        }
        let energy_mj = self.energy.and_then(|f| {
            let mut mj: c_ulonglong = 0;
            // SAFETY: as above.
            (unsafe { f(self.device, &mut mj) } == 0).then_some(mj)
        });
        Ok(ClockSample {
            sm_mhz: mhz,
            power_mw: mw,
            reasons,
            energy_mj,
        })
    }

    /// The power limit the device enforces, in milliwatts.
    pub fn power_limit_mw(&self) -> Result<u32, String> {
        let mut mw: c_uint = 0;
        // SAFETY: as in `sample`.
        check("nvmlDeviceGetEnforcedPowerLimit", unsafe {
            (self.limit)(self.device, &mut mw)
        })?;
        Ok(mw)
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: balances the nvmlInit_v2 of `open`.
        unsafe {
            (self.shutdown)();
        }
    }
}

/// `name` from `lib` as a function of type `T`.
///
/// # Safety
/// `T` must be the symbol's true signature.
unsafe fn symbol<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
    // SAFETY: the caller vouches for `T`.
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("NVML has no {name}: {e}"))
}

/// `Err` naming `call` and NVML's return code unless it is `NVML_SUCCESS`.
fn check(call: &str, code: c_int) -> Result<(), String> {
    if code == 0 {
        Ok(())
    } else {
        Err(format!("{call} returned NVML error {code}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_error_naming_it() {
        let err = Nvml::open(&["libheadroom-no-such-nvml.so.3"], "00000000:01:00.0")
            .err()
            .unwrap();
        assert!(
            err.starts_with("NVML (libnvidia-ml.so) cannot be loaded ("),
            "{err}"
        );
        assert!(err.contains("libheadroom-no-such-nvml.so.3"), "{err}");
        let none = Nvml::open(&[], "00000000:01:00.0").err().unwrap();
        assert!(none.contains("not supported"), "{none}");
    }

    #[test]
    fn nonzero_codes_are_errors_naming_the_call() {
        assert_eq!(check("nvmlInit_v2", 0), Ok(()));
        let e = check("nvmlDeviceGetPowerUsage", 3).unwrap_err();
        assert_eq!(e, "nvmlDeviceGetPowerUsage returned NVML error 3");
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU with its driver's NVML (bench/gpu/check_clock.sh)"]
    fn samples_the_cuda_device_it_runs_on() {
        let nvml = Nvml::for_cuda_device0().unwrap();
        let limit = nvml.power_limit_mw().unwrap();
        let s = nvml.sample().unwrap();
        eprintln!("gpu_clock: {s:?}, limit {limit} mW");
        assert!(s.sm_mhz > 0 && s.sm_mhz < 5000, "{s:?}");
        assert!(s.power_mw > 0 && limit >= 50_000, "{s:?}, limit {limit}");
    }
}
