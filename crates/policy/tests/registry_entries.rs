//! Loading the registry from folders: invalid entries are kept with a reason,
//! never match, and never crash the load.

mod common;

use common::*;
use headroom_core::Route;
use headroom_policy::{
    resolve, Controls, QualifiedResult, Registry, ResolutionSource, RowStatus, ENV_QUALIFICATIONS,
};

fn load(dir: &tempfile::TempDir) -> Registry {
    Registry::from_dirs(&[dir.path().to_path_buf()])
}

#[test]
fn wrong_evidence_hash_never_matches() {
    let dir = tempfile::tempdir().unwrap();
    let entry = write_entry(dir.path(), "h200-q512", &h200(), &d256(), composed(512));
    assert!(
        load(&dir).entries()[0].entry.is_ok(),
        "fixture must start valid"
    );
    // Tamper with the evidence after the entry was written.
    std::fs::write(dir.path().join(&entry.evidence.file), b"{\"edited\":true}").unwrap();
    let reg = load(&dir);
    let why = reg.entries()[0].entry.as_ref().unwrap_err();
    assert!(why.contains("sha256"), "{why}");
    assert_eq!(reg.valid().count(), 0);
    let r = resolve(&h200(), &d256(), &Controls::default(), &reg);
    assert_eq!(
        (r.query_block, r.source),
        (Some(128), ResolutionSource::Default)
    );
    let rows = reg.rows(&h200(), &[d256()]);
    assert_eq!(rows[0].status, RowStatus::Invalid);
    assert_eq!(rows[0].id.as_deref(), Some("h200-q512"));
}

#[test]
fn missing_evidence_file_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let entry = write_entry(dir.path(), "gone", &h200(), &d256(), composed(512));
    std::fs::remove_file(dir.path().join(&entry.evidence.file)).unwrap();
    let reg = load(&dir);
    let why = reg.entries()[0].entry.as_ref().unwrap_err();
    assert!(why.contains(&entry.evidence.file), "{why}");
    assert_eq!(reg.matching(&h200(), &d256()).count(), 0);
}

#[test]
fn malformed_files_are_kept_as_invalid_and_valid_ones_still_load() {
    let dir = tempfile::tempdir().unwrap();
    write_entry(dir.path(), "good", &h200(), &d256(), composed(512));
    let good_text = std::fs::read_to_string(dir.path().join("good.toml")).unwrap();
    let variants = [
        (
            "unknown-key",
            good_text.replace("id = \"good\"", "id = \"unknown-key\"\nspeedup = 2.4"),
        ),
        (
            "missing-field",
            good_text
                .replace("id = \"good\"", "id = \"missing-field\"")
                .replace("device_compute_units = 132\n", ""),
        ),
        ("garbage", "this is = = not toml [[[".to_string()),
    ];
    for (name, text) in &variants {
        std::fs::write(dir.path().join(format!("{name}.toml")), text).unwrap();
    }
    std::fs::write(dir.path().join("binary.toml"), [0xffu8, 0xfe, 0x00, 0x80]).unwrap();
    let reg = load(&dir);
    assert_eq!(reg.entries().len(), 5);
    let reason = |file: &str| -> String {
        reg.entries()
            .iter()
            .find(|e| e.file.ends_with(file))
            .unwrap()
            .entry
            .as_ref()
            .unwrap_err()
            .clone()
    };
    assert!(reason("unknown-key.toml").contains("speedup"));
    assert!(reason("missing-field.toml").contains("device_compute_units"));
    assert!(reason("garbage.toml").contains("TOML"));
    assert!(reason("binary.toml").contains("unreadable"));
    // The valid entry still decides.
    let r = resolve(&h200(), &d256(), &Controls::default(), &reg);
    assert_eq!(r.qualification_id.as_deref(), Some("good"));
    let statuses: Vec<RowStatus> = reg
        .rows(&h200(), &[d256()])
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == RowStatus::Invalid)
            .count(),
        4
    );
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == RowStatus::Matched)
            .count(),
        1
    );
}

#[test]
fn rows_report_matched_rejected_invalid_with_reasons() {
    let mut smaller = h200();
    smaller.device_memory_gib = Some(80);
    let (_d, reg) = registry_with(&[
        ("exact", h200(), d256(), composed(512)),
        ("other-gpu", smaller, d256(), composed(256)),
        ("d64", h200(), d64(), composed(256)),
    ]);
    let rows = reg.rows(&h200(), &[linear(), d256()]);
    let by_id = |id: &str| rows.iter().find(|r| r.id.as_deref() == Some(id)).unwrap();
    assert_eq!(by_id("exact").status, RowStatus::Matched);
    assert_eq!(by_id("exact").reason, None);
    assert_eq!(by_id("other-gpu").status, RowStatus::Rejected);
    assert_eq!(
        by_id("other-gpu").reason.as_deref(),
        Some("device_memory_gib 139 != 80")
    );
    assert_eq!(by_id("d64").reason.as_deref(), Some("head_dim 256 != 64"));
    // For a machine with a different GPU the string field is quoted.
    let mut h100 = h200();
    h100.device_name = Some("NVIDIA H100".into());
    let rows = reg.rows(&h100, &[d256()]);
    assert_eq!(
        rows[0].reason.as_deref(),
        Some("device_name \"NVIDIA H100\" != \"NVIDIA H200\"")
    );
}

#[test]
fn nested_folders_and_relative_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("cuda/h200");
    std::fs::create_dir_all(&nested).unwrap();
    write_entry(&nested, "nested", &h200(), &d256(), composed(512));
    std::fs::write(dir.path().join("README.md"), "not an entry").unwrap();
    let reg = load(&dir);
    assert_eq!(reg.entries().len(), 1);
    assert!(
        reg.entries()[0].entry.is_ok(),
        "{:?}",
        reg.entries()[0].entry
    );
}

#[test]
fn duplicate_ids_invalidate_the_second() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    write_entry(a.path(), "same", &h200(), &d256(), composed(512));
    write_entry(b.path(), "same", &h200(), &d256(), composed(64));
    let reg = Registry::from_dirs(&[a.path().to_path_buf(), b.path().to_path_buf()]);
    assert!(reg.entries()[0].entry.is_ok());
    assert!(reg.entries()[1]
        .entry
        .as_ref()
        .unwrap_err()
        .contains("duplicate id"));
    let r = resolve(&h200(), &d256(), &Controls::default(), &reg);
    assert_eq!(r.query_block, Some(512));
}

#[test]
fn env_folders_and_missing_folders() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    write_entry(a.path(), "from-arg", &h200(), &d256(), composed(512));
    write_entry(
        b.path(),
        "from-env",
        &h200(),
        &d64(),
        QualifiedResult::Fused,
    );
    let missing = a.path().join("does-not-exist");
    let list = std::env::join_paths([b.path().to_path_buf(), missing.clone()]).unwrap();
    let list = list.to_string_lossy().to_string();
    let reg = Registry::load_with_env(&[a.path().to_path_buf()], &|k| {
        (k == ENV_QUALIFICATIONS).then(|| list.clone())
    });
    let ids: Vec<&str> = reg.valid().map(|e| e.id.as_str()).collect();
    assert!(
        ids.contains(&"from-arg") && ids.contains(&"from-env"),
        "{ids:?}"
    );
    assert_eq!(reg.problems().len(), 1);
    assert!(reg.problems()[0].contains("does-not-exist"));
    // Without the env var only the argument folder (and built-ins) load.
    let reg = Registry::load_with_env(&[a.path().to_path_buf()], &|_| None);
    assert!(reg.valid().all(|e| e.id != "from-env"));
}

#[test]
fn fused_entry_on_cpu_machine_resolves_under_auto() {
    let (_d, reg) = registry_with(&[("cpu-fused", cpu_box(), d256(), QualifiedResult::Fused)]);
    let (c, _) = Controls::from_sources(Some("auto"), None, &|_| None);
    let r = resolve(&cpu_box(), &d256(), &c, &reg);
    assert_eq!(r.route, Route::Fused);
    assert_eq!(r.source, ResolutionSource::Qualified);
}
