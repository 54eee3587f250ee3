//! The production path (this machine's detected fingerprint → resolve) and the
//! tests use the same matcher: an entry built from `detect_cpu()` is honoured
//! by `resolve_for_this_machine`, and every single-field change is rejected by
//! `resolve_for_this_machine`, by `QualificationEntry::matches` and by the
//! registry report alike, with the same first differing field.

mod common;

use common::*;
use headroom_core::{BackendKind, Route};
use headroom_hardware::{detect_cpu, HardwareFingerprint};
use headroom_policy::{resolve_for_this_machine, Controls, Registry, ResolutionSource, RowStatus};

fn perturbations() -> Vec<(&'static str, HardwareFingerprint)> {
    let base = detect_cpu();
    let mut out = Vec::new();
    let mut f = base.clone();
    f.machine_model.push('!');
    out.push(("machine_model", f));
    let mut f = base.clone();
    f.cpu_brand.push('!');
    out.push(("cpu_brand", f));
    let mut f = base.clone();
    f.cpu_cores += 1;
    out.push(("cpu_cores", f));
    let mut f = base.clone();
    f.memory_gib += 1;
    out.push(("memory_gib", f));
    let mut f = base.clone();
    f.backend = BackendKind::Cuda;
    f.device_name = Some("NVIDIA H200".into());
    f.device_compute_units = Some(132);
    f.device_memory_gib = Some(139);
    out.push(("backend", f));
    out
}

#[test]
fn production_path_and_tests_call_the_same_matcher() {
    let kinds = [linear(), d256(), linear(), d64()];
    let controls = Controls::default();

    // The exact machine: qualified through the production entry point.
    let dir = tempfile::tempdir().unwrap();
    let entry = write_entry(
        dir.path(),
        "this-machine",
        &detect_cpu(),
        &d256(),
        composed(512),
    );
    let reg = Registry::from_dirs(&[dir.path().to_path_buf()]);
    let (fp, resolved) =
        resolve_for_this_machine(BackendKind::Cpu, &kinds, &controls, &reg).unwrap();
    assert_eq!(fp, detect_cpu());
    assert!(entry.matches(&fp, &d256()).is_ok());
    assert_eq!(resolved[1].query_block, Some(512));
    assert_eq!(resolved[1].source, ResolutionSource::Qualified);
    assert_eq!(
        resolved[3].query_block,
        Some(128),
        "head_dim 64 keeps the default"
    );
    assert_eq!(resolved[0].route, Route::None);
    assert_eq!(reg.rows(&fp, &kinds)[0].status, RowStatus::Matched);

    // One field off: production, matcher and report agree on the same field.
    for (field, entry_hw) in perturbations() {
        let dir = tempfile::tempdir().unwrap();
        let entry = write_entry(dir.path(), "near-miss", &entry_hw, &d256(), composed(512));
        let reg = Registry::from_dirs(&[dir.path().to_path_buf()]);
        assert!(
            reg.entries()[0].entry.is_ok(),
            "{field}: {:?}",
            reg.entries()[0].entry
        );
        let (fp, resolved) =
            resolve_for_this_machine(BackendKind::Cpu, &kinds, &controls, &reg).unwrap();
        assert_eq!(resolved[1].query_block, Some(128), "{field}");
        assert_eq!(resolved[1].source, ResolutionSource::Default, "{field}");
        let mismatch = entry.matches(&fp, &d256()).unwrap_err();
        assert_eq!(mismatch.field, field);
        let row = &reg.rows(&fp, &kinds)[0];
        assert_eq!(row.status, RowStatus::Rejected);
        assert_eq!(row.reason.as_deref(), Some(mismatch.to_string().as_str()));
    }
}

#[test]
fn production_path_reports_cuda_unavailability_instead_of_panicking() {
    let reg = Registry::default();
    match resolve_for_this_machine(BackendKind::Cuda, &[d256()], &Controls::default(), &reg) {
        Ok((fp, resolved)) => {
            assert_eq!(fp.backend, BackendKind::Cuda);
            assert_eq!(resolved.len(), 1);
        }
        Err(e) => {
            eprintln!("CUDA unavailable here (expected without a driver): {e}");
            assert!(e.to_string().contains("CUDA"));
        }
    }
}
