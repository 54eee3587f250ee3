//! The engine's place in the layering (issue 21): it builds on the core
//! vocabulary, the Backend trait and the model — no backend crate outside
//! its dev-dependencies — and reads no environment (its settings are typed
//! and filled by the CLI).

use std::path::Path;

/// The names under `[dependencies]` of this crate's manifest.
fn dependencies() -> Vec<String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let text = std::fs::read_to_string(manifest).unwrap();
    let mut in_deps = false;
    let mut deps = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
        } else if in_deps {
            if let Some((name, _)) = line.split_once(['.', '=']) {
                deps.push(name.trim().to_string());
            }
        }
    }
    deps
}

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn no_backend_crate_is_a_dependency() {
    let deps = dependencies();
    assert!(deps.iter().any(|d| d == "headroom-core"), "{deps:?}");
    for backend in ["headroom-cpu", "headroom-attention-cpu", "headroom-cuda"] {
        assert!(!deps.iter().any(|d| d == backend), "{backend} in {deps:?}");
    }
}

#[test]
fn the_engine_reads_no_environment() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 5);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for needle in ["std::env::var", "env::var_os", "HEADROOM_"] {
            assert!(!text.contains(needle), "{} reads {needle}", f.display());
        }
    }
}
