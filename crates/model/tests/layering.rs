//! The model's place in the layering (issue 21): written once against the
//! Backend trait, it depends on no backend crate (the CPU backend is a
//! dev-dependency of its tests).

use std::path::Path;

#[test]
fn no_backend_crate_is_a_dependency() {
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
    assert!(deps.iter().any(|d| d == "headroom-core"), "{deps:?}");
    for backend in ["headroom-cpu", "headroom-attention-cpu", "headroom-cuda"] {
        assert!(!deps.iter().any(|d| d == backend), "{backend} in {deps:?}");
    }
}
