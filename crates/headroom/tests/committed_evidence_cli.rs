//! Every committed qualification (`qualifications/*/`) and the documented
//! example (`docs/qualify-example/`) passes `headroom bench validate`: each
//! entry's evidence file validates, and the folder loads with the strict
//! registry loader (`doctor --qualifications DIR` exits 0, so every entry's
//! SHA-256 matches its evidence).

mod common;

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "..", ".."].iter().collect()
}

/// The folders holding entries: each `qualifications/<name>/` and the example.
fn folders() -> Vec<PathBuf> {
    let root = repo().join("qualifications");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    out.sort();
    out.push(repo().join("docs").join("qualify-example"));
    out
}

/// The evidence files of `dir` (`evidence/*.json`).
fn evidence(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir.join("evidence"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    out.sort();
    out
}

#[test]
fn every_committed_qualification_and_the_example_validate() {
    let dirs = folders();
    assert!(dirs.len() >= 3, "folders: {dirs:?}");
    let mut files = 0;
    for dir in &dirs {
        let ev = evidence(dir);
        assert!(!ev.is_empty(), "{}: no evidence", dir.display());
        for f in ev {
            let out = common::headroom_command()
                .args(["bench", "validate", f.to_str().unwrap()])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{}: {text}", f.display());
            assert!(text.contains("valid: 1 file(s)"), "{}: {text}", f.display());
            files += 1;
        }
        let out = common::headroom_command()
            .args([
                "doctor",
                "--synthetic",
                "tiny-d256",
                "--qualifications",
                dir.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(files >= 3, "{files} evidence files");
}
