//! Fixtures for the policy tests: fingerprints, layer kinds, and registry
//! folders (temp dirs) holding entries with real evidence files.

#![allow(dead_code)]

use headroom_core::{AttentionKind, BackendKind, Dtype, LayerKind};
use headroom_hardware::HardwareFingerprint;
use headroom_policy::{sha256_hex, Evidence, QualificationEntry, QualifiedResult, Registry};
use std::path::Path;

/// An H200 host (the shape of the lent GPU machine).
pub fn h200() -> HardwareFingerprint {
    HardwareFingerprint {
        backend: BackendKind::Cuda,
        machine_model: "PowerEdge XE9680".into(),
        cpu_brand: "Intel(R) Xeon(R) Platinum 8480+".into(),
        cpu_cores: 16,
        memory_gib: 125,
        device_name: Some("NVIDIA H200".into()),
        device_compute_units: Some(132),
        device_memory_gib: Some(139),
        compute_capability: Some("9.0".into()),
        driver_version: Some("13.0".into()),
    }
}

/// A CPU-only host.
pub fn cpu_box() -> HardwareFingerprint {
    HardwareFingerprint {
        backend: BackendKind::Cpu,
        machine_model: "Standard PC".into(),
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

/// The Qwen3.6 full-attention layer: head_dim 256, 16 q / 2 kv heads, bf16.
pub fn d256() -> LayerKind {
    LayerKind {
        attention: AttentionKind::Full,
        head_dim: 256,
        q_heads: 16,
        kv_heads: 2,
        dtype: Dtype::Bf16,
    }
}

/// Same family, head_dim 64.
pub fn d64() -> LayerKind {
    LayerKind {
        head_dim: 64,
        ..d256()
    }
}

pub fn linear() -> LayerKind {
    LayerKind {
        attention: AttentionKind::Linear,
        head_dim: 128,
        q_heads: 16,
        kv_heads: 32,
        dtype: Dtype::Bf16,
    }
}

/// Writes an evidence file with fresh content and an entry citing it; returns the entry.
pub fn write_entry(
    dir: &Path,
    id: &str,
    hardware: &HardwareFingerprint,
    layer: &LayerKind,
    result: QualifiedResult,
) -> QualificationEntry {
    let evidence_name = format!("evidence/{id}.json");
    let body = format!(
        "{{\"id\":\"{id}\",\"nonce\":{}}}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    std::fs::create_dir_all(dir.join("evidence")).unwrap();
    std::fs::write(dir.join(&evidence_name), &body).unwrap();
    let entry = QualificationEntry {
        id: id.into(),
        date: "2026-11-29".into(),
        hardware: hardware.clone(),
        layer: *layer,
        result,
        evidence: Evidence {
            file: evidence_name,
            sha256: sha256_hex(body.as_bytes()),
        },
    };
    std::fs::write(dir.join(format!("{id}.toml")), entry.to_toml().unwrap()).unwrap();
    entry
}

pub fn composed(query_block: usize) -> QualifiedResult {
    QualifiedResult::Composed { query_block }
}

/// A temp registry folder holding the given entries, and the registry loaded from it.
pub fn registry_with(
    entries: &[(&str, HardwareFingerprint, LayerKind, QualifiedResult)],
) -> (tempfile::TempDir, Registry) {
    let dir = tempfile::tempdir().unwrap();
    for (id, hw, layer, result) in entries {
        write_entry(dir.path(), id, hw, layer, *result);
    }
    let registry = Registry::from_dirs(&[dir.path().to_path_buf()]);
    (dir, registry)
}
