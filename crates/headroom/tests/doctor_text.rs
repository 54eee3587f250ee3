//! `headroom doctor`'s text explains, per layer kind, the route and why: the
//! qualification entry that decided, the flag or environment variable that
//! set it, or, by default, the first field in which each entry differs from
//! this machine and layer; the attention control is shown with its source.

mod common;

use common::TempDir;
use headroom_core::LayerKind;
use headroom_hardware::HardwareFingerprint;
use headroom_policy::{sha256_hex, Evidence, QualificationEntry, QualifiedResult};
use std::path::Path;

/// `headroom doctor --backend cpu --synthetic tiny-d256` plus `args` (text),
/// with `env` on top of the hermetic environment.
fn doctor_text(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = common::headroom_command();
    cmd.args(["doctor", "--backend", "cpu", "--synthetic", "tiny-d256"])
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// This machine's fingerprint and the model's full-attention layer kind.
fn machine_and_layer() -> (HardwareFingerprint, LayerKind) {
    let out = common::headroom(&[
        "doctor",
        "--backend",
        "cpu",
        "--synthetic",
        "tiny-d256",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let hw = serde_json::from_value(v["hardware"].clone()).unwrap();
    let kind = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["kind"]["attention"] == "full")
        .unwrap()["kind"]
        .clone();
    (hw, serde_json::from_value(kind).unwrap())
}

/// An entry with its evidence file, in `dir`.
fn write_entry(dir: &Path, id: &str, hw: &HardwareFingerprint, layer: &LayerKind) {
    let body = format!("{{\"evidence_for\":\"{id}\"}}");
    std::fs::write(dir.join(format!("{id}.json")), &body).unwrap();
    let e = QualificationEntry {
        id: id.into(),
        date: "2026-12-01".into(),
        hardware: hw.clone(),
        layer: *layer,
        result: QualifiedResult::Fused,
        evidence: Evidence {
            file: format!("{id}.json"),
            sha256: sha256_hex(body.as_bytes()),
        },
    };
    std::fs::write(dir.join(format!("{id}.toml")), e.to_toml().unwrap()).unwrap();
}

#[test]
fn each_route_says_why_in_words() {
    let (hw, layer) = machine_and_layer();
    let other = TempDir::new("doctor-other");
    let mut elsewhere = hw.clone();
    elsewhere.cpu_brand = "Another CPU".into();
    write_entry(&other.0, "another-cpu-fused", &elsewhere, &layer);
    let other_dir = other.0.to_str().unwrap();

    // Nothing matches: the default, with each entry's first differing field.
    let text = doctor_text(
        &["--attn-execution", "auto", "--qualifications", other_dir],
        &[],
    );
    assert!(
        text.contains("attention control: auto (source: flag --attn-execution)"),
        "{text}"
    );
    assert!(
        text.contains(
            "-> composed attention, query block 128: built-in default: no qualification entry \
             matches (another-cpu-fused: cpu_brand"
        ),
        "{text}"
    );

    // An entry for this machine decides, by its id.
    let here = TempDir::new("doctor-here");
    write_entry(&here.0, "this-machine-fused", &hw, &layer);
    let text = doctor_text(
        &[
            "--attn-execution",
            "auto",
            "--qualifications",
            here.0.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        text.contains("-> fused attention: qualified by entry this-machine-fused"),
        "{text}"
    );

    // The environment overrides, and says so.
    let text = doctor_text(&[], &[("HEADROOM_ATTN_EXECUTION", "fused")]);
    assert!(
        text.contains("attention control: fused (source: env HEADROOM_ATTN_EXECUTION)"),
        "{text}"
    );
    assert!(
        text.contains("-> fused attention: set by env HEADROOM_ATTN_EXECUTION"),
        "{text}"
    );
    let text = doctor_text(&[], &[("HEADROOM_ATTN_QUERY_BLOCK", "64")]);
    assert!(
        text.contains(
            "-> composed attention, query block 64: query block set by env HEADROOM_ATTN_QUERY_BLOCK"
        ),
        "{text}"
    );
    assert!(text.contains("attention control: "), "{text}");
    assert!(text.contains("(source: default)"), "{text}");
}

#[test]
fn linear_attention_layers_have_key_and_value_heads() {
    let text = doctor_text(&[], &[]);
    let line = text
        .lines()
        .find(|l| l.contains("linear attention"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("(Gated DeltaNet)")
            && line.contains("key heads / ")
            && line.contains("value heads"),
        "{line}"
    );
    assert!(
        !text.contains("q heads") && !text.contains("kv heads"),
        "{text}"
    );
    assert!(
        text.contains("-> no softmax attention (the Gated DeltaNet recurrence)"),
        "{text}"
    );
}
