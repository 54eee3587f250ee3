//! How much of the machine the engine sizes itself to, shared by `serve` and
//! `generate`: `--max-running`, `--memory-fraction`, `--memory-budget-mib`,
//! checked once here (the context flag stays with each command: its default
//! differs).

use anyhow::bail;

/// `--max-running --memory-fraction --memory-budget-mib`.
#[derive(clap::Args, Debug, Clone)]
pub struct CapacityArgs {
    /// Most sequences running at once (state slots; default: what memory
    /// allows, at most 1024, and for `generate` at most its number of
    /// requests).
    #[arg(long, value_name = "N")]
    pub max_running: Option<usize>,
    /// Share of the device's memory (weights included) the engine sizes its
    /// KV pool and state slots to, on cuda.
    #[arg(long, default_value_t = headroom_engine::DEFAULT_MEMORY_FRACTION, value_name = "F")]
    pub memory_fraction: f64,
    /// Memory budget of the engine's KV, GDN state and transients, MiB
    /// (default: 90% of the available memory on cpu; on cuda
    /// `--memory-fraction` of the device, which this caps when given).
    #[arg(long, value_name = "MIB")]
    pub memory_budget_mib: Option<u64>,
}

/// Most state slots `--max-running` resolves to when sized from memory.
pub use headroom_engine::pool::AUTO_RUNNING_CAP;

/// The checked capacity: what `EngineConfig` takes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    /// `--max-running` (at least 1) where given.
    pub max_running: Option<usize>,
    pub memory_fraction: f64,
    pub memory_budget_bytes: Option<u64>,
}

impl Capacity {
    /// The running count the engine is given: `--max-running`, or
    /// `default` (a cap it sizes from memory under) where it was not given.
    pub fn max_running_or(&self, default: usize) -> usize {
        self.max_running.unwrap_or(default)
    }

    /// Whether the engine sizes the running count from memory (no
    /// `--max-running`).
    pub fn max_running_from_memory(&self) -> bool {
        self.max_running.is_none()
    }
}

impl CapacityArgs {
    /// The flags checked (exit 1 naming the flag and its limit).
    pub fn capacity(&self) -> anyhow::Result<Capacity> {
        if self.max_running == Some(0) {
            bail!("--max-running must be at least 1");
        }
        let f = self.memory_fraction;
        if !(f > 0.0 && f <= 1.0) {
            bail!("--memory-fraction {f} must be in (0, 1]");
        }
        let memory_budget_bytes = match self.memory_budget_mib {
            None => None,
            Some(0) => bail!("--memory-budget-mib must be at least 1"),
            Some(mib) => match mib.checked_mul(1 << 20) {
                Some(bytes) => Some(bytes),
                None => bail!(
                    "--memory-budget-mib {mib} is more bytes than 64 bits hold (at most {})",
                    u64::MAX >> 20
                ),
            },
        };
        Ok(Capacity {
            max_running: self.max_running,
            memory_fraction: f,
            memory_budget_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(max_running: Option<usize>, fraction: f64, mib: Option<u64>) -> CapacityArgs {
        CapacityArgs {
            max_running,
            memory_fraction: fraction,
            memory_budget_mib: mib,
        }
    }

    #[test]
    fn absent_flags_size_from_memory_and_given_ones_are_kept() {
        let c = args(None, 0.9, None).capacity().unwrap();
        assert_eq!(
            c,
            Capacity {
                max_running: None,
                memory_fraction: 0.9,
                memory_budget_bytes: None,
            }
        );
        assert_eq!(
            (c.max_running_or(7), c.max_running_from_memory()),
            (7, true)
        );
        let c = args(Some(3), 0.5, Some(2)).capacity().unwrap();
        assert_eq!(
            (c.max_running_or(7), c.max_running_from_memory()),
            (3, false),
            "{c:?}"
        );
        assert_eq!(c.memory_budget_bytes, Some(2 << 20));
    }

    #[test]
    fn each_bad_flag_is_refused_by_name() {
        for (a, flag) in [
            (args(Some(0), 0.9, None), "--max-running"),
            (args(None, 0.0, None), "--memory-fraction"),
            (args(None, -0.1, None), "--memory-fraction"),
            (args(None, 1.01, None), "--memory-fraction"),
            (args(None, f64::NAN, None), "--memory-fraction"),
            (args(None, 0.9, Some(0)), "--memory-budget-mib"),
            (args(None, 0.9, Some(u64::MAX)), "--memory-budget-mib"),
        ] {
            let e = a.capacity().unwrap_err().to_string();
            assert!(e.starts_with(flag), "{e}");
        }
        // The largest budget that 64 bits hold is kept.
        let top = args(None, 1.0, Some(u64::MAX >> 20)).capacity().unwrap();
        assert_eq!(top.memory_budget_bytes, Some((u64::MAX >> 20) << 20));
    }
}
