//! How much host memory a run may still allocate: the smaller of
//! `MemAvailable` (`/proc/meminfo`) and the address-space limit of this
//! process (`/proc/self/limits`, `ulimit -v` / `prlimit --as`). Used to
//! refuse sizes taken from input before allocating them.

/// `MemAvailable` of `/proc/meminfo` text, in bytes.
fn meminfo_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line["MemAvailable:".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// The soft "Max address space" of `/proc/self/limits` text, in bytes (`None` when unlimited).
fn address_space_limit(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max address space"))?;
    line["Max address space".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Bytes this process may still allocate, when the OS says (Linux); `None` elsewhere.
pub fn available_memory_bytes() -> Option<u64> {
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let available = read("/proc/meminfo").and_then(|s| meminfo_available(&s));
    let limit = read("/proc/self/limits").and_then(|s| address_space_limit(&s));
    match (available, limit) {
        (Some(a), Some(l)) => Some(a.min(l)),
        (a, l) => a.or(l),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo_and_limits() {
        assert_eq!(
            meminfo_available("MemTotal: 10 kB\nMemAvailable:    2048 kB\n"),
            Some(2 << 20)
        );
        assert_eq!(meminfo_available("MemTotal: 10 kB\n"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max address space         4294967296           unlimited            bytes\n";
        assert_eq!(address_space_limit(limits), Some(4 << 30));
        let unlimited =
            "Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(address_space_limit(unlimited), None);
    }

    #[test]
    fn this_machine_reports_some_memory() {
        if cfg!(target_os = "linux") {
            assert!(available_memory_bytes().is_some_and(|b| b > 0));
        }
    }
}
