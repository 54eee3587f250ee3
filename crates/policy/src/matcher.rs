//! The one qualification predicate. `resolve()`, the registry report that
//! `doctor` prints, and every test go through [`QualificationEntry::matches`];
//! no other code compares fingerprints or layer shapes to entries.

use crate::QualificationEntry;
use headroom_core::{BackendKind, LayerKind};
use headroom_hardware::HardwareFingerprint;
use std::fmt;

/// The first field where this machine/layer differs from an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The registry key (`device_compute_units`, `head_dim`, ...).
    pub field: &'static str,
    /// This machine's (or layer's) value.
    pub actual: String,
    /// The entry's value.
    pub expected: String,
}

impl fmt::Display for Mismatch {
    /// `field actual != expected`, e.g. `device_compute_units 132 != 40`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} != {}", self.field, self.actual, self.expected)
    }
}

/// `Ok` when equal, else the mismatch with both values as `show` writes them.
fn differs<T: PartialEq>(
    field: &'static str,
    actual: &T,
    expected: &T,
    show: impl Fn(&T) -> String,
) -> Result<(), Mismatch> {
    if actual == expected {
        return Ok(());
    }
    Err(Mismatch {
        field,
        actual: show(actual),
        expected: show(expected),
    })
}

/// Values written by [`show`].
fn same<T: PartialEq + fmt::Debug>(
    field: &'static str,
    actual: &T,
    expected: &T,
) -> Result<(), Mismatch> {
    differs(field, actual, expected, show)
}

/// Numbers bare, strings quoted, `Option`s unwrapped (`absent` for `None`).
fn show<T: fmt::Debug>(v: &T) -> String {
    let s = format!("{v:?}");
    if s == "None" {
        return "absent".into();
    }
    match s.strip_prefix("Some(").and_then(|r| r.strip_suffix(')')) {
        Some(inner) => inner.to_string(),
        None => s,
    }
}

/// Lowercase names for enums (`Cuda` → `cuda`, `Bf16` → `bf16`).
fn same_named<T: PartialEq + fmt::Display>(
    field: &'static str,
    actual: &T,
    expected: &T,
) -> Result<(), Mismatch> {
    differs(field, actual, expected, T::to_string)
}

/// The major part of a `major.minor` version (`13.0` -> `13`); the whole
/// string when it has no dot.
fn major(version: &Option<String>) -> Option<&str> {
    version.as_deref().map(|v| v.split('.').next().unwrap_or(v))
}

impl QualificationEntry {
    /// `Ok(())` iff `fp` and `kind` equal the entry on every identity field,
    /// else the first differing field, in this order:
    /// * `backend`;
    /// * a CPU entry: the host — machine_model, cpu_brand, cpu_cores, memory_gib;
    /// * a CUDA entry: the GPU — device_name, device_compute_units,
    ///   device_memory_gib, and compute_capability / the driver's major version
    ///   when the entry states them. The host fields of a CUDA entry are
    ///   recorded as information, not matched: the same GPU behind another host
    ///   is the same qualification;
    /// * the layer's attention, head_dim, q_heads, kv_heads, dtype.
    pub fn matches(&self, fp: &HardwareFingerprint, kind: &LayerKind) -> Result<(), Mismatch> {
        let hw = &self.hardware;
        same_named("backend", &fp.backend, &hw.backend)?;
        match hw.backend {
            BackendKind::Cpu => {
                same("machine_model", &fp.machine_model, &hw.machine_model)?;
                same("cpu_brand", &fp.cpu_brand, &hw.cpu_brand)?;
                same("cpu_cores", &fp.cpu_cores, &hw.cpu_cores)?;
                same("memory_gib", &fp.memory_gib, &hw.memory_gib)?;
            }
            BackendKind::Cuda => {
                same("device_name", &fp.device_name, &hw.device_name)?;
                same(
                    "device_compute_units",
                    &fp.device_compute_units,
                    &hw.device_compute_units,
                )?;
                same(
                    "device_memory_gib",
                    &fp.device_memory_gib,
                    &hw.device_memory_gib,
                )?;
                if hw.compute_capability.is_some() {
                    same(
                        "compute_capability",
                        &fp.compute_capability,
                        &hw.compute_capability,
                    )?;
                }
                if hw.driver_version.is_some()
                    && major(&fp.driver_version) != major(&hw.driver_version)
                {
                    return Err(Mismatch {
                        field: "driver_version",
                        actual: show(&fp.driver_version),
                        expected: show(&hw.driver_version),
                    });
                }
            }
        }
        let l = &self.layer;
        same_named("attention", &kind.attention, &l.attention)?;
        same("head_dim", &kind.head_dim, &l.head_dim)?;
        same("q_heads", &kind.q_heads, &l.q_heads)?;
        same("kv_heads", &kind.kv_heads, &l.kv_heads)?;
        same_named("dtype", &kind.dtype, &l.dtype)?;
        Ok(())
    }
}
