//! Hostile registry folders: symlink cycles, FIFOs and devices named `*.toml`
//! or cited as evidence, oversized entries, evidence escaping the entry's
//! folder. Each load must finish (bounded by a watchdog), keep the bad entry
//! as invalid with a reason naming the problem, and never duplicate entries.

#![cfg(unix)]

mod common;

use common::*;
use headroom_policy::{Registry, RegistryEntry};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// Loads `dir` on a thread and fails the test if that takes more than 30 s (a hang).
fn load_with_watchdog(dir: &Path) -> Registry {
    let dir = dir.to_path_buf();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(Registry::from_dirs(&[dir]));
    });
    rx.recv_timeout(Duration::from_secs(30))
        .expect("loading the registry hung (no result within 30 s)")
}

fn mkfifo(path: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs")
        .success();
    assert!(ok, "mkfifo {}", path.display());
}

fn entry_for<'a>(reg: &'a Registry, file_suffix: &str) -> &'a RegistryEntry {
    reg.entries()
        .iter()
        .find(|e| e.file.ends_with(file_suffix))
        .unwrap_or_else(|| panic!("no entry {file_suffix} in {:?}", reg.entries()))
}

#[test]
fn symlink_cycles_neither_hang_nor_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    write_entry(dir.path(), "one", &h200(), &d256(), composed(512));
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    symlink(dir.path(), dir.path().join("sub/loop")).unwrap();
    symlink(dir.path(), dir.path().join("self")).unwrap();
    let reg = load_with_watchdog(dir.path());
    assert_eq!(reg.entries().len(), 1, "{:?}", reg.entries());
    assert!(reg.entries()[0].entry.is_ok());
}

#[test]
fn a_fifo_named_toml_is_invalid_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    write_entry(dir.path(), "good", &h200(), &d256(), composed(512));
    mkfifo(&dir.path().join("pipe.toml"));
    let reg = load_with_watchdog(dir.path());
    let why = entry_for(&reg, "pipe.toml").entry.as_ref().unwrap_err();
    assert!(why.contains("not a regular file"), "{why}");
    assert!(entry_for(&reg, "good.toml").entry.is_ok());
}

#[test]
fn oversized_entries_are_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let big = "#".repeat((headroom_policy::MAX_ENTRY_BYTES + 10) as usize);
    std::fs::write(dir.path().join("big.toml"), big).unwrap();
    let reg = load_with_watchdog(dir.path());
    let why = entry_for(&reg, "big.toml").entry.as_ref().unwrap_err();
    assert!(why.contains("above the limit"), "{why}");
}

/// Rewrites the entry `id` in `dir` to cite `evidence` instead of its own file.
fn cite(dir: &Path, id: &str, evidence: &str) -> PathBuf {
    let path = dir.join(format!("{id}.toml"));
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replace(&format!("evidence/{id}.json"), evidence);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn evidence_that_is_a_device_or_fifo_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_entry(dir.path(), "zero", &h200(), &d256(), composed(512));
    symlink("/dev/zero", dir.path().join("zero.json")).unwrap();
    cite(dir.path(), "zero", "zero.json");
    write_entry(dir.path(), "fifo", &h200(), &d256(), composed(256));
    mkfifo(&dir.path().join("fifo.json"));
    cite(dir.path(), "fifo", "fifo.json");
    let reg = load_with_watchdog(dir.path());
    let why = entry_for(&reg, "zero.toml").entry.as_ref().unwrap_err();
    assert!(why.contains("zero.json"), "{why}");
    let why = entry_for(&reg, "fifo.toml").entry.as_ref().unwrap_err();
    assert!(
        why.contains("fifo.json") && why.contains("not a regular file"),
        "{why}"
    );
}

#[test]
fn evidence_escaping_the_folder_is_refused() {
    let outer = tempfile::tempdir().unwrap();
    let dir = outer.path().join("registry");
    std::fs::create_dir(&dir).unwrap();
    let secret = outer.path().join("secret.json");
    std::fs::write(&secret, b"{}").unwrap();

    // `..` in the path.
    write_entry(&dir, "dots", &h200(), &d256(), composed(512));
    cite(&dir, "dots", "../secret.json");
    // A symlink inside the folder pointing outside it.
    write_entry(&dir, "link", &h200(), &d256(), composed(256));
    symlink(&secret, dir.join("link.json")).unwrap();
    cite(&dir, "link", "link.json");
    // Make both hashes right, so only the location can fail them.
    let hash = headroom_policy::sha256_hex(b"{}");
    for id in ["dots", "link"] {
        let path = dir.join(format!("{id}.toml"));
        let text = std::fs::read_to_string(&path).unwrap();
        let start = text.find("sha256 = \"").unwrap() + 10;
        let text = format!("{}{}{}", &text[..start], hash, &text[start + 64..]);
        std::fs::write(&path, text).unwrap();
    }
    let reg = load_with_watchdog(&dir);
    let why = entry_for(&reg, "dots.toml").entry.as_ref().unwrap_err();
    assert!(why.contains("inside the entry's folder"), "{why}");
    let why = entry_for(&reg, "link.toml").entry.as_ref().unwrap_err();
    assert!(why.contains("outside the entry's folder"), "{why}");
    assert_eq!(reg.valid().count(), 0);
}

#[test]
fn control_characters_in_ids_and_names_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("evil\x1b[31m.toml"),
        "id = \"red\\u001b[31mid\"\n",
    )
    .unwrap();
    let reg = load_with_watchdog(dir.path());
    let e = &reg.entries()[0];
    for text in [
        &e.file,
        e.id.as_ref().unwrap(),
        e.entry.as_ref().unwrap_err(),
    ] {
        assert!(!text.contains('\x1b'), "raw escape in {text:?}");
    }
    assert!(e.id.as_ref().unwrap().contains("\\u{1b}"), "{:?}", e.id);
}
