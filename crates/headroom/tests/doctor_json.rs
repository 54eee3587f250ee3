//! `headroom doctor --json` through the built binary: one JSON object whose
//! hardware block, qualified layers, registry rows and warnings reflect the
//! registry folder and controls given through the environment.

mod common;

use common::TempDir;
use headroom_core::LayerKind;
use headroom_hardware::HardwareFingerprint;
use headroom_policy::{sha256_hex, Evidence, QualificationEntry, QualifiedResult};
use serde_json::Value;
use std::path::Path;

/// Runs `headroom doctor ... --json` with a clean attention environment.
fn doctor(args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut cmd = common::headroom_command();
    cmd.arg("doctor").args(args).arg("--json");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run headroom");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "doctor failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Exactly one JSON object: the whole of stdout parses as one value.
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(v.is_object());
    v
}

fn write_entry(dir: &Path, id: &str, hw: &HardwareFingerprint, layer: &LayerKind, qb: usize) {
    let body = format!("{{\"evidence_for\":\"{id}\"}}");
    std::fs::write(dir.join(format!("{id}.json")), &body).unwrap();
    let e = QualificationEntry {
        id: id.into(),
        date: "2026-11-29".into(),
        hardware: hw.clone(),
        layer: *layer,
        result: QualifiedResult::Composed { query_block: qb },
        evidence: Evidence {
            file: format!("{id}.json"),
            sha256: sha256_hex(body.as_bytes()),
        },
    };
    std::fs::write(dir.join(format!("{id}.toml")), e.to_toml().unwrap()).unwrap();
}

fn full_group(v: &Value) -> &Value {
    v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["kind"]["attention"] == "full")
        .expect("a full-attention group")
}

fn row<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["registry"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no row {id}: {v}"))
}

#[test]
fn doctor_json_reports_qualified_rejected_invalid_and_warnings() {
    let dir = TempDir::new("doctor");
    let first = doctor(&["--synthetic", "tiny-d256"], &[]);
    for key in ["hardware", "layers", "registry", "warnings"] {
        assert!(first.get(key).is_some(), "missing {key}: {first}");
    }
    assert_eq!(first["warnings"], Value::Array(vec![]));
    let hw: HardwareFingerprint = serde_json::from_value(first["hardware"].clone()).unwrap();
    let full: LayerKind = serde_json::from_value(full_group(&first)["kind"].clone()).unwrap();
    assert_eq!(full_group(&first)["attention"]["query_block"], 128);

    write_entry(&dir.0, "exact", &hw, &full, 512);
    let mut bigger = hw.clone();
    bigger.memory_gib += 1;
    write_entry(&dir.0, "other-host", &bigger, &full, 256);
    write_entry(&dir.0, "tampered", &hw, &full, 64);
    std::fs::write(dir.0.join("tampered.json"), "{\"edited\":1}").unwrap();

    let reg = dir.0.to_str().unwrap();
    let v = doctor(
        &["--synthetic", "tiny-d256"],
        &[
            ("HEADROOM_QUALIFICATIONS", reg),
            ("HEADROOM_ATTN_EXECUTION", "bogus"),
        ],
    );
    let g = full_group(&v);
    let a = &g["attention"];
    assert_eq!(a["route"], "composed");
    assert_eq!(a["query_block"], 512);
    assert_eq!(a["source"], "qualified");
    assert_eq!(a["qualification_id"], "exact");
    assert_eq!(a["control_requested"], "fallback");
    assert!(!g["layer_indices"].as_array().unwrap().is_empty());
    let linear = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["kind"]["attention"] == "linear")
        .unwrap();
    assert_eq!(linear["attention"]["route"], "none");

    assert_eq!(row(&v, "exact")["status"], "matched");
    assert_eq!(row(&v, "other-host")["status"], "rejected");
    assert_eq!(
        row(&v, "other-host")["reason"],
        format!("memory_gib {} != {}", hw.memory_gib, bigger.memory_gib)
    );
    assert_eq!(row(&v, "tampered")["status"], "invalid");
    assert!(row(&v, "tampered")["reason"]
        .as_str()
        .unwrap()
        .contains("sha256"));

    let warnings = v["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].as_str().unwrap().contains("bogus"));

    // A malformed query block fails closed to 128 even on the qualified machine.
    let v = doctor(
        &["--synthetic", "tiny-d256", "--attn-query-block", "-1"],
        &[("HEADROOM_QUALIFICATIONS", reg)],
    );
    assert_eq!(full_group(&v)["attention"]["query_block"], 128);
    assert_eq!(full_group(&v)["attention"]["source"], "default");
    assert_eq!(v["warnings"].as_array().unwrap().len(), 1);

    // Same family, head_dim 64: the d256 entry does not apply.
    let v = doctor(
        &["--synthetic", "tiny-d64"],
        &[("HEADROOM_QUALIFICATIONS", reg)],
    );
    assert_eq!(full_group(&v)["attention"]["query_block"], 128);
    assert_eq!(row(&v, "exact")["status"], "rejected");
    assert!(row(&v, "exact")["reason"]
        .as_str()
        .unwrap()
        .starts_with("head_dim 64 != 256"));

    // fused from the CLI: fused route, no query block.
    let v = doctor(
        &["--synthetic", "tiny-d256", "--attn-execution", "FUSED"],
        &[],
    );
    let a = &full_group(&v)["attention"];
    if a["route"] == "fused" {
        assert_eq!(a["query_block"], Value::Null);
        assert_eq!(a["source"], "cli");
    } else {
        // Only when the fused kernel does not support the layer on this backend.
        assert!(a["reason"].as_str().unwrap().contains("unsupported"), "{a}");
    }
}

#[test]
fn doctor_json_reports_backend_availability() {
    let v = doctor(&["--synthetic", "qwen3.6-35b-a3b"], &[]);
    assert_eq!(v["backends"]["cpu"]["available"], true);
    let cuda = &v["backends"]["cuda"];
    match cuda["available"].as_bool().unwrap() {
        true => assert_eq!(v["hardware"]["backend"], "cuda"),
        false => {
            eprintln!("no CUDA here: {}", cuda["reason"]);
            assert!(!cuda["reason"].as_str().unwrap().is_empty());
            assert_eq!(v["hardware"]["backend"], "cpu");
            // No device: NVML is not asked, the GPU's reading is null.
            assert!(v["backends"]["cuda_gpu_now"].is_null(), "{v}");
            assert!(v["backends"]["cuda_gpu_now_unavailable"].is_null(), "{v}");
        }
    }
    let full = full_group(&v);
    assert_eq!(full["kind"]["head_dim"], 256);
    assert_eq!(full["layer_indices"].as_array().unwrap().len(), 10);
}

#[test]
fn doctor_without_a_model_reports_the_default_synthetic_model() {
    let v = doctor(&["--backend", "cpu"], &[]);
    assert_eq!(v["model"]["source"], "synthetic:tiny-d256");
    let layers = v["layers"].as_array().unwrap();
    let full = layers
        .iter()
        .find(|l| l["kind"]["attention"] == "full")
        .expect("tiny-d256 has a full-attention layer");
    assert_eq!(full["kind"]["head_dim"], 256);
    assert_eq!(full["attention"]["route"], "composed");
    assert_eq!(full["attention"]["query_block"], 128);
}
