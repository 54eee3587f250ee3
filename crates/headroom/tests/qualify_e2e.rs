//! End to end on the CPU: `qualify` writes an entry that `doctor` accepts and
//! applies on this machine; one changed byte in the evidence gets it rejected
//! with the reason; `bench validate` accepts a fresh `bench prefill` file.

mod common;

use serde_json::Value;

fn headroom(args: &[&str]) -> std::process::Output {
    common::headroom_command().args(args).output().unwrap()
}

fn full_layer(doctor: &Value) -> Value {
    doctor["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["kind"]["attention"] == "full")
        .unwrap()["attention"]
        .clone()
}

#[test]
fn qualify_then_doctor_applies_the_entry_and_rejects_a_tampered_one() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let q = headroom(&[
        "qualify",
        "--backend",
        "cpu",
        "--synthetic",
        "tiny-d256",
        "--lengths",
        "48,96",
        "--iterations",
        "3",
        "--warmup",
        "0",
        "--out",
        out,
    ]);
    assert!(q.status.success(), "{}", String::from_utf8_lossy(&q.stderr));
    let tomls: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    assert_eq!(tomls.len(), 1, "{tomls:?}");
    let id = tomls[0].file_stem().unwrap().to_str().unwrap().to_string();
    let d = headroom(&[
        "doctor",
        "--backend",
        "cpu",
        "--synthetic",
        "tiny-d256",
        "--json",
        "--attn-execution",
        "auto",
        "--qualifications",
        out,
    ]);
    assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
    let doc: Value = serde_json::from_slice(&d.stdout).unwrap();
    let att = full_layer(&doc);
    assert_eq!(att["source"], "qualified", "{att}");
    assert_eq!(att["qualification_id"], id.as_str());
    let row = doc["registry"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .unwrap()
        .clone();
    assert_eq!(row["status"], "matched", "{row}");
    assert!(dir.path().join(format!("plots/{id}-ttft.svg")).is_file());
    assert!(dir.path().join(format!("{id}.md")).is_file());

    let ev = dir.path().join(format!("evidence/{id}.json"));
    let mut bytes = std::fs::read(&ev).unwrap();
    let i = bytes.len() / 3;
    bytes[i] ^= 0x01;
    std::fs::write(&ev, bytes).unwrap();
    let d = headroom(&[
        "doctor",
        "--backend",
        "cpu",
        "--synthetic",
        "tiny-d256",
        "--json",
        "--attn-execution",
        "auto",
        "--qualifications",
        out,
    ]);
    let doc: Value = serde_json::from_slice(&d.stdout).unwrap();
    let row = doc["registry"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .unwrap()
        .clone();
    assert_eq!(row["status"], "invalid", "{row}");
    assert!(row["reason"].as_str().unwrap().contains("sha256"), "{row}");
    assert_eq!(full_layer(&doc)["source"], "default");
}

#[test]
fn bench_prefill_output_validates_and_a_doctored_copy_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("p.json");
    let j = json.to_str().unwrap();
    let b = headroom(&[
        "bench",
        "prefill",
        "--backend",
        "cpu",
        "--synthetic",
        "tiny-d256",
        "--arms",
        "fallback:16,fallback:32,fused,auto",
        "--lengths",
        "40",
        "--warmup",
        "0",
        "--iterations",
        "3",
        "--json",
        j,
    ]);
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    let v = headroom(&["bench", "validate", j]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    doc["samples"][1]["arm"] = "fallback:16".into();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, serde_json::to_vec(&doc).unwrap()).unwrap();
    let v = headroom(&["bench", "validate", bad.to_str().unwrap()]);
    assert_eq!(v.status.code(), Some(1));
    let text = String::from_utf8_lossy(&v.stdout);
    assert!(text.contains("violation:"), "{text}");
}

#[test]
fn bench_validate_accepts_qualify_evidence_and_rejects_a_doctored_copy() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let q = headroom(&[
        "qualify",
        "--backend",
        "cpu",
        "--synthetic",
        "tiny-d256",
        "--lengths",
        "48",
        "--iterations",
        "3",
        "--warmup",
        "0",
        "--out",
        out,
    ]);
    assert!(q.status.success(), "{}", String::from_utf8_lossy(&q.stderr));
    let ev = std::fs::read_dir(dir.path().join("evidence"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let v = headroom(&["bench", "validate", ev.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&v.stdout).to_string();
    assert!(v.status.success(), "{text}");
    assert!(text.contains("valid: 1 file(s)"), "{text}");

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&ev).unwrap()).unwrap();
    type Edit = fn(&mut Value);
    let edits: [(&str, Edit, &str); 4] = [
        (
            "another winner",
            |d| {
                let fused = d["decision"]["route"] == "fused";
                d["decision"]["route"] = if fused { "composed" } else { "fused" }.into();
                d["decision"]["query_block"] = if fused { 512.into() } else { Value::Null };
            },
            "does not follow",
        ),
        (
            "a faster median",
            |d| d["prefill"]["samples"][0]["ttft_ms"]["median"] = 1e-9.into(),
            "prefill",
        ),
        ("another id", |d| d["id"] = "cuda-fake".into(), "id"),
        (
            "another attention shape",
            |d| d["attention"]["samples"][0]["head_dim"] = 64.into(),
            "attention.samples[0]",
        ),
    ];
    for (what, edit, says) in edits {
        let mut bad = doc.clone();
        edit(&mut bad);
        let path = dir.path().join("doctored.json");
        std::fs::write(&path, serde_json::to_vec(&bad).unwrap()).unwrap();
        let v = common::headroom_command()
            .args(["bench", "validate", path.to_str().unwrap()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&v.stdout);
        assert_eq!(v.status.code(), Some(1), "{what}: {text}");
        assert!(
            text.contains("violation:") && text.contains(says),
            "{what}: {text}"
        );
    }
}
