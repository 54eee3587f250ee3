//! Host identity: machine model, CPU brand, logical cores, memory.
//!
//! Reading never fails; an unreadable field becomes `"unknown"` (strings) or
//! the best available fallback (cores: the parallelism the OS grants; memory: 0).

use crate::HardwareFingerprint;
use headroom_core::BackendKind;

const UNKNOWN: &str = "unknown";

/// The host fingerprint (backend `cpu`, no device fields).
pub fn detect_cpu() -> HardwareFingerprint {
    HardwareFingerprint {
        backend: BackendKind::Cpu,
        machine_model: machine_model(),
        cpu_brand: cpu_brand(),
        cpu_cores: cpu_cores(),
        memory_gib: memory_gib(),
        device_name: None,
        device_compute_units: None,
        device_memory_gib: None,
        compute_capability: None,
        driver_version: None,
    }
}

/// Trims a firmware string; `None` when nothing printable is left.
fn clean(s: &str) -> Option<String> {
    let t = s.trim_matches(|c: char| c.is_whitespace() || c == '\0');
    (!t.is_empty()).then(|| t.to_string())
}

/// The value of the first `key : value` line of `/proc/cpuinfo` text.
pub(crate) fn cpuinfo_field(cpuinfo: &str, key: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| clean(v)).flatten()
    })
}

/// Logical processors listed in `/proc/cpuinfo` text.
pub(crate) fn cpuinfo_processors(cpuinfo: &str) -> usize {
    cpuinfo
        .lines()
        .filter(|l| {
            l.split_once(':')
                .is_some_and(|(k, _)| k.trim() == "processor")
        })
        .count()
}

/// `MemTotal` of `/proc/meminfo` text in GiB, rounded down.
pub(crate) fn meminfo_total_gib(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut parts = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    let bytes = match parts.next().map(str::to_ascii_lowercase).as_deref() {
        Some("kb") => value.checked_mul(1024)?,
        Some("mb") => value.checked_mul(1024 * 1024)?,
        None | Some("b") => value,
        Some(_) => return None,
    };
    Some(bytes >> 30)
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[cfg(target_os = "macos")]
fn sysctl(name: &str) -> Option<String> {
    let out = std::process::Command::new("sysctl")
        .args(["-n", name])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| clean(&String::from_utf8_lossy(&out.stdout)))
        .flatten()
}

fn machine_model() -> String {
    #[cfg(target_os = "macos")]
    let found = sysctl("hw.model");
    #[cfg(not(target_os = "macos"))]
    let found = ["/sys/class/dmi/id/product_name", "/proc/device-tree/model"]
        .iter()
        .find_map(|p| read(p).and_then(|s| clean(&s)));
    found.unwrap_or_else(|| UNKNOWN.to_string())
}

fn cpu_brand() -> String {
    #[cfg(target_os = "macos")]
    let found = sysctl("machdep.cpu.brand_string");
    #[cfg(not(target_os = "macos"))]
    let found = read("/proc/cpuinfo").and_then(|s| cpuinfo_field(&s, "model name"));
    found.unwrap_or_else(|| UNKNOWN.to_string())
}

fn cpu_cores() -> usize {
    let listed = read("/proc/cpuinfo")
        .map(|s| cpuinfo_processors(&s))
        .unwrap_or(0);
    if listed > 0 {
        return listed;
    }
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn memory_gib() -> u64 {
    #[cfg(target_os = "macos")]
    let found = sysctl("hw.memsize")
        .and_then(|s| s.parse::<u64>().ok())
        .map(|b| b >> 30);
    #[cfg(not(target_os = "macos"))]
    let found = read("/proc/meminfo").and_then(|s| meminfo_total_gib(&s));
    found.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor  \n\nprocessor\t: 1\nmodel name\t: AMD EPYC 9654 96-Core Processor\n";

    #[test]
    fn parses_cpuinfo_brand_and_processors() {
        assert_eq!(
            cpuinfo_field(CPUINFO, "model name").as_deref(),
            Some("AMD EPYC 9654 96-Core Processor")
        );
        assert_eq!(cpuinfo_field(CPUINFO, "Hardware"), None);
        assert_eq!(cpuinfo_processors(CPUINFO), 2);
        assert_eq!(cpuinfo_processors("model name: x\n"), 0);
    }

    #[test]
    fn meminfo_rounds_down_to_gib() {
        // 24684096 kB = 23.54 GiB -> 23.
        assert_eq!(
            meminfo_total_gib("MemTotal:       24684096 kB\nMemFree: 1 kB\n"),
            Some(23)
        );
        // Exactly 16 GiB minus one kB -> 15.
        assert_eq!(
            meminfo_total_gib(&format!("MemTotal: {} kB\n", 16 * 1024 * 1024 - 1)),
            Some(15)
        );
        assert_eq!(meminfo_total_gib("MemFree: 5 kB\n"), None);
        assert_eq!(meminfo_total_gib("MemTotal: lots kB\n"), None);
    }

    #[test]
    fn clean_drops_nul_and_blank() {
        assert_eq!(clean("  Model X\0\n").as_deref(), Some("Model X"));
        assert_eq!(clean(" \0\n"), None);
    }

    #[test]
    fn detected_host_fields_are_sane() {
        let fp = detect_cpu();
        assert_eq!(fp.backend, BackendKind::Cpu);
        assert!(fp.cpu_cores >= 1);
        assert!(!fp.machine_model.is_empty() && !fp.cpu_brand.is_empty());
        assert_eq!(fp, detect_cpu(), "detection must be deterministic");
        #[cfg(target_os = "linux")]
        {
            let mem = read("/proc/meminfo").and_then(|s| meminfo_total_gib(&s));
            assert_eq!(Some(fp.memory_gib), mem);
        }
    }
}
