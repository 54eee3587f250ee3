//! The tests of the binary are hermetic with respect to committed
//! qualification entries: they run with the built-in entries switched off
//! (`common::hermetic`, `HEADROOM_BUILTIN_QUALIFICATIONS=off`), so an entry
//! committed under `qualifications/` for the machine they run on cannot change
//! what they resolve. An entry that matches this machine's fingerprint
//! changes resolution only for a run that opts into its folder; and with the
//! switch on (the default for users) every committed entry is loaded, valid,
//! and applied here when it matches this machine.

mod common;

use common::TempDir;
use headroom_core::LayerKind;
use headroom_hardware::HardwareFingerprint;
use headroom_policy::{sha256_hex, Evidence, QualificationEntry, QualifiedResult};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `headroom doctor --backend cpu --synthetic tiny-d256 --json` plus `args`,
/// in the hermetic environment, then `env` applied on top.
fn doctor(args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut cmd = common::headroom_command();
    cmd.args([
        "doctor",
        "--backend",
        "cpu",
        "--synthetic",
        "tiny-d256",
        "--json",
    ])
    .args(args);
    json_of(&mut cmd, env)
}

fn json_of(cmd: &mut Command, env: &[(&str, &str)]) -> Value {
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run headroom");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn full_attention(v: &Value) -> Value {
    v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["kind"]["attention"] == "full")
        .expect("a full-attention layer")["attention"]
        .clone()
}

fn rows(v: &Value) -> Vec<Value> {
    v["registry"].as_array().unwrap().clone()
}

fn assert_default_128(a: &Value) {
    assert_eq!(a["route"], "composed", "{a}");
    assert_eq!(a["query_block"], 128, "{a}");
    assert_eq!(a["source"], "default", "{a}");
    assert_eq!(a["qualification_id"], Value::Null, "{a}");
}

/// Every `*.toml` under the repository's `qualifications/`, as
/// `builtin:qualifications/<relative path>` labels.
fn committed_entries() -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else if p.extension().is_some_and(|x| x == "toml") {
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                out.push(format!("builtin:qualifications/{rel}"));
            }
        }
    }
    let root: PathBuf = [env!("CARGO_MANIFEST_DIR"), "..", "..", "qualifications"]
        .iter()
        .collect();
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out.sort();
    out
}

/// An entry for `hw` and `layer` with its evidence, in `dir`.
fn write_entry(
    dir: &Path,
    id: &str,
    hw: &HardwareFingerprint,
    layer: &LayerKind,
    r: QualifiedResult,
) {
    let body = format!("{{\"evidence_for\":\"{id}\"}}");
    std::fs::write(dir.join(format!("{id}.json")), &body).unwrap();
    let e = QualificationEntry {
        id: id.into(),
        date: "2026-12-01".into(),
        hardware: hw.clone(),
        layer: *layer,
        result: r,
        evidence: Evidence {
            file: format!("{id}.json"),
            sha256: sha256_hex(body.as_bytes()),
        },
    };
    std::fs::write(dir.join(format!("{id}.toml")), e.to_toml().unwrap()).unwrap();
}

#[test]
fn tests_run_without_builtin_entries_and_users_get_every_committed_one() {
    // Hermetic (what every test of the binary runs under): no built-in row at all.
    for control in ["fallback", "auto"] {
        let v = doctor(&["--attn-execution", control], &[]);
        assert_eq!(v["builtin_qualifications"], false, "{v}");
        assert!(rows(&v).is_empty(), "{v}");
        assert_eq!(v["warnings"], Value::Array(vec![]), "{v}");
        assert_default_128(&full_attention(&v));
    }

    // The user's default: every committed entry is built in and valid.
    let on = [("HEADROOM_BUILTIN_QUALIFICATIONS", "on")];
    let v = doctor(&["--attn-execution", "auto"], &on);
    assert_eq!(v["builtin_qualifications"], true, "{v}");
    let mut files: Vec<String> = rows(&v)
        .iter()
        .map(|r| r["file"].as_str().unwrap().to_string())
        .collect();
    files.sort();
    let committed = committed_entries();
    assert!(
        committed.iter().any(|f| f.contains("/h200/")),
        "{committed:?}"
    );
    assert_eq!(files, committed, "the binary embeds every committed entry");
    for r in rows(&v) {
        assert_ne!(r["status"], "invalid", "{r}");
    }
    // Where a committed entry matches this machine (the development machine
    // has one), the default registry applies it; elsewhere the default stands.
    let a = full_attention(&v);
    let matched: Vec<Value> = rows(&v)
        .into_iter()
        .filter(|r| r["status"] == "matched")
        .collect();
    if matched.is_empty() {
        assert_default_128(&a);
    } else {
        assert_eq!(a["source"], "qualified", "{a}");
        assert!(
            matched.iter().any(|m| m["id"] == a["qualification_id"]),
            "{a}"
        );
        // The same machine, hermetic: untouched.
        let off = doctor(&["--attn-execution", "auto"], &[]);
        assert_default_128(&full_attention(&off));
    }
    // A malformed switch keeps the built-in entries, with one warning naming it.
    let v = doctor(&[], &[("HEADROOM_BUILTIN_QUALIFICATIONS", "perhaps")]);
    assert_eq!(v["builtin_qualifications"], true, "{v}");
    let w = v["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].as_str()
            .unwrap()
            .contains("HEADROOM_BUILTIN_QUALIFICATIONS"),
        "{w:?}"
    );
}

#[test]
fn an_entry_for_this_machine_applies_only_where_a_test_opts_in() {
    let first = doctor(&[], &[]);
    let hw: HardwareFingerprint = serde_json::from_value(first["hardware"].clone()).unwrap();
    let layer: LayerKind = serde_json::from_value(
        first["layers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["kind"]["attention"] == "full")
            .unwrap()["kind"]
            .clone(),
    )
    .unwrap();
    let dir = TempDir::new("hermetic-registry");
    write_entry(
        &dir.0,
        "this-machine-q512",
        &hw,
        &layer,
        QualifiedResult::Composed { query_block: 512 },
    );
    write_entry(
        &dir.0,
        "this-machine-fused",
        &hw,
        &layer,
        QualifiedResult::Fused,
    );
    let reg = dir.0.to_str().unwrap();

    // Not opted in: the default, whatever the folder holds.
    for control in ["fallback", "auto"] {
        assert_default_128(&full_attention(&doctor(
            &["--attn-execution", control],
            &[],
        )));
    }
    // Opted in, by flag or by environment: `source: qualified` with the entry's id.
    // The default control is `auto`: it takes the fused entry.
    let v = doctor(&["--qualifications", reg], &[]);
    let a = full_attention(&v);
    assert_eq!(
        (a["route"].clone(), a["source"].clone()),
        ("fused".into(), "qualified".into()),
        "{a}"
    );
    assert_eq!(a["control_requested"], "auto", "{a}");
    assert_eq!(a["control_source"], "default", "{a}");
    assert_eq!(a["qualification_id"], "this-machine-fused", "{a}");
    // `fallback` takes the composed one.
    let v = doctor(
        &["--qualifications", reg, "--attn-execution", "fallback"],
        &[],
    );
    let a = full_attention(&v);
    assert_eq!(
        (a["route"].clone(), a["query_block"].clone()),
        ("composed".into(), 512.into()),
        "{a}"
    );
    assert_eq!(a["source"], "qualified", "{a}");
    assert_eq!(a["qualification_id"], "this-machine-q512", "{a}");
    let v = doctor(
        &["--attn-execution", "auto"],
        &[("HEADROOM_QUALIFICATIONS", reg)],
    );
    let a = full_attention(&v);
    assert_eq!(a["route"], "fused", "{a}");
    assert_eq!(a["source"], "qualified", "{a}");
    assert_eq!(a["qualification_id"], "this-machine-fused", "{a}");

    // The same through `bench prefill` (its own registry load): the `auto`
    // arm resolves to the default unless the folder is named.
    let bench = |extra: &[&str]| -> Value {
        let json = dir.0.join("prefill.json");
        let _ = std::fs::remove_file(&json);
        let mut cmd = common::headroom_command();
        cmd.args([
            "bench",
            "prefill",
            "--backend",
            "cpu",
            "--synthetic",
            "tiny-d256",
        ])
        .args(["--arms", "auto", "--lengths", "16", "--warmup", "0"])
        .args(["--iterations", "3", "--json", json.to_str().unwrap()])
        .args(extra);
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
    };
    let resolved = |v: &Value| -> Value {
        v["samples"][0]["attention"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["kind"]["attention"] == "full")
            .unwrap()["resolved"]
            .clone()
    };
    let r = resolved(&bench(&[]));
    assert_eq!(r["source"], "default", "{r}");
    assert_eq!(r["route"], "composed", "{r}");
    let r = resolved(&bench(&["--qualifications", reg]));
    assert_eq!(r["source"], "qualified", "{r}");
    assert_eq!(r["qualification_id"], "this-machine-fused", "{r}");
    assert_eq!(r["route"], "fused", "{r}");
}
