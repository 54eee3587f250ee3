//! `bench/gpu/source_manifest.py` (run by `pack_bins.sh` before and after its
//! build): `touch` names and touches exactly the sources whose content differs
//! from what `record` saw, every source where there is no record or a release
//! build wrote a fingerprint since, and nothing when nothing changed. Needs
//! `python3` and `git` (CI has them).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

fn manifest(command: &str, tree: &Path, release: &Path) -> Vec<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/gpu/source_manifest.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(command)
        .arg(tree)
        .arg(release)
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn write(tree: &Path, rel: &str, text: &str) {
    let path = tree.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn modified(path: &Path) -> SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

/// A git tree with two crates' sources, a lock file and an ignored file;
/// every file's time set an hour back.
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let git = Command::new("git")
        .arg("init")
        .arg("-q")
        .arg(dir.path())
        .status()
        .expect("git runs");
    assert!(git.success());
    write(dir.path(), "crates/a/src/lib.rs", "pub fn a() {}\n");
    write(dir.path(), "crates/b/src/op.cu", "__global__ void k() {}\n");
    write(dir.path(), "Cargo.lock", "# lock\n");
    write(dir.path(), "docs/notes.md", "not a source\n");
    write(dir.path(), ".gitignore", "/crates/a/scratch.rs\n");
    write(dir.path(), "crates/a/scratch.rs", "ignored\n");
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    for rel in ["crates/a/src/lib.rs", "crates/b/src/op.cu", "Cargo.lock"] {
        let f = std::fs::File::options()
            .write(true)
            .open(dir.path().join(rel))
            .unwrap();
        f.set_modified(hour_ago).unwrap();
    }
    dir
}

#[test]
fn without_a_record_every_source_is_touched() {
    let tree = tree();
    let release = tempfile::tempdir().unwrap();
    let before = modified(&tree.path().join("crates/b/src/op.cu"));
    let touched = manifest("touch", tree.path(), release.path());
    assert_eq!(
        touched,
        ["Cargo.lock", "crates/a/src/lib.rs", "crates/b/src/op.cu"]
    );
    assert!(modified(&tree.path().join("crates/b/src/op.cu")) > before);
}

#[test]
fn after_a_record_only_what_changed_is_touched() {
    let tree = tree();
    let release = tempfile::tempdir().unwrap();
    assert!(manifest("record", tree.path(), release.path()).is_empty());
    assert!(manifest("touch", tree.path(), release.path()).is_empty());
    // Another tree's content, written before the record: older than the build.
    write(
        tree.path(),
        "crates/b/src/op.cu",
        "__global__ void k2() {}\n",
    );
    write(tree.path(), "crates/b/src/new.rs", "pub fn n() {}\n");
    write(
        tree.path(),
        "docs/notes.md",
        "changed, still not a source\n",
    );
    write(
        tree.path(),
        "crates/a/scratch.rs",
        "changed, still ignored\n",
    );
    let lib = tree.path().join("crates/a/src/lib.rs");
    let lib_before = modified(&lib);
    assert_eq!(
        manifest("touch", tree.path(), release.path()),
        ["crates/b/src/new.rs", "crates/b/src/op.cu"]
    );
    assert_eq!(modified(&lib), lib_before);
}

#[test]
fn a_release_build_after_the_record_touches_every_source() {
    let tree = tree();
    let release = tempfile::tempdir().unwrap();
    manifest("record", tree.path(), release.path());
    let record = release.path().join(".headroom_source_manifest.json");
    let fingerprint = release
        .path()
        .join(".fingerprint/headroom-a-0123/lib-headroom_a");
    write(
        release.path(),
        ".fingerprint/headroom-a-0123/lib-headroom_a",
        "0",
    );
    let f = std::fs::File::options()
        .write(true)
        .open(&fingerprint)
        .unwrap();
    f.set_modified(modified(&record) + Duration::from_secs(5))
        .unwrap();
    assert_eq!(manifest("touch", tree.path(), release.path()).len(), 3);
}

#[test]
fn bad_arguments_exit_2() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/gpu/source_manifest.py");
    let out = Command::new("python3")
        .arg(script)
        .arg("bake")
        .arg(".")
        .arg(".")
        .output()
        .expect("python3 runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage"));
}
