//! The original system's qualification cases, translated, through `resolve()`.

mod common;

use common::*;
use headroom_core::{BackendKind, Dtype, Route, RouteRequest};
use headroom_hardware::HardwareFingerprint;
use headroom_policy::{
    resolve, AttentionControl, ControlSource, Controls, QualifiedResult, Registry,
    ResolutionSource, ENV_EXECUTION, ENV_QUERY_BLOCK,
};

fn controls(pairs: &[(&str, &str)]) -> (Controls, Vec<String>) {
    let owned: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Controls::from_sources(None, None, &move |k| {
        owned.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    })
}

fn qualified_h200() -> (tempfile::TempDir, Registry) {
    registry_with(&[("h200-d256-q512", h200(), d256(), composed(512))])
}

/// A change to a fingerprint (the field it changes, and how).
type Edit = fn(&mut HardwareFingerprint);

/// Each of `edits` to `base()` refuses the registry's one entry: the layer
/// gets the default (composed, query block 128, no qualification) and the
/// entry's mismatch names the changed field.
fn each_edit_refuses_the_entry(
    reg: &Registry,
    base: fn() -> HardwareFingerprint,
    edits: &[(&str, Edit)],
) {
    let entry = reg.valid().next().unwrap();
    for &(field, edit) in edits {
        let mut fp = base();
        edit(&mut fp);
        let r = resolve(&fp, &d256(), &Controls::default(), reg);
        assert_eq!(
            (r.route, r.query_block, r.source),
            (Route::Composed, Some(128), ResolutionSource::Default),
            "changed {field}"
        );
        assert!(r.qualification_id.is_none());
        assert_eq!(entry.matches(&fp, &d256()).unwrap_err().field, field);
    }
}

#[test]
fn exact_qualified_machine_gets_qualified_query_block() {
    let (_d, reg) = qualified_h200();
    let r = resolve(&h200(), &d256(), &Controls::default(), &reg);
    assert_eq!(r.route, Route::Composed);
    assert_eq!(r.query_block, Some(512));
    assert_eq!(r.source, ResolutionSource::Qualified);
    assert_eq!(r.qualification_id.as_deref(), Some("h200-d256-q512"));
    assert_eq!(r.control_requested, AttentionControl::Auto);
    assert_eq!(r.control_source, ControlSource::Default);
    assert_eq!(
        r.route_request(),
        Some(RouteRequest::Composed { query_block: 512 })
    );
}

/// A CUDA entry names the GPU: changing any GPU field (or the backend) refuses it.
#[test]
fn changing_any_gpu_identity_field_gets_default() {
    let (_d, reg) = qualified_h200();
    let edits: [(&str, Edit); 6] = [
        ("device_name", |f| {
            f.device_name = Some("NVIDIA H100".into())
        }),
        ("device_compute_units", |f| {
            f.device_compute_units = Some(40)
        }),
        ("device_memory_gib", |f| f.device_memory_gib = Some(79)),
        ("compute_capability", |f| {
            f.compute_capability = Some("8.0".into())
        }),
        ("driver_version", |f| f.driver_version = Some("12.8".into())),
        ("backend", |f| f.backend = BackendKind::Cpu),
    ];
    each_edit_refuses_the_entry(&reg, h200, &edits);
}

/// The same GPU behind another host (the 2-GPU machine's 32 cores, another CPU,
/// more memory) or a newer driver of the same major version keeps its entry:
/// a CUDA entry's host fields are information, not identity.
#[test]
fn cuda_entry_matches_the_same_gpu_behind_another_host() {
    let (_d, reg) = registry_with(&[("h200-fused", h200(), d256(), QualifiedResult::Fused)]);
    let edits: [(&str, Edit); 5] = [
        ("machine_model", |f| f.machine_model = "another box".into()),
        ("cpu_brand", |f| f.cpu_brand = "AMD EPYC 9654".into()),
        ("cpu_cores", |f| f.cpu_cores = 32),
        ("memory_gib", |f| f.memory_gib = 251),
        ("driver minor", |f| f.driver_version = Some("13.2".into())),
    ];
    for (what, edit) in edits {
        let mut fp = h200();
        edit(&mut fp);
        let r = resolve(&fp, &d256(), &Controls::default(), &reg);
        assert_eq!(
            (r.route, r.source, r.qualification_id.as_deref()),
            (
                Route::Fused,
                ResolutionSource::Qualified,
                Some("h200-fused")
            ),
            "changed {what}"
        );
    }
}

/// A CPU entry names the host: changing any host field refuses it.
#[test]
fn changing_any_cpu_identity_field_gets_default() {
    let (_d, reg) = registry_with(&[("box-q512", cpu_box(), d256(), composed(512))]);
    let entry = reg.valid().next().unwrap().clone();
    assert_eq!(entry.matches(&cpu_box(), &d256()), Ok(()));
    let edits: [(&str, Edit); 4] = [
        ("machine_model", |f| f.machine_model.push_str(" v2")),
        ("cpu_brand", |f| f.cpu_brand = "AMD EPYC 9654".into()),
        ("cpu_cores", |f| f.cpu_cores += 1),
        ("memory_gib", |f| f.memory_gib -= 1),
    ];
    each_edit_refuses_the_entry(&reg, cpu_box, &edits);
}

/// The default control is `auto`; wherever no entry qualified fused, it
/// resolves to exactly what `fallback` resolves to (route, query block,
/// source, entry), over every machine, layer and registry of these cases.
#[test]
fn default_is_auto_and_equals_fallback_without_a_fused_entry() {
    assert_eq!(Controls::default().execution, AttentionControl::Auto);
    let (fallback, _) = controls(&[(ENV_EXECUTION, "fallback")]);
    let mut h100 = h200();
    h100.device_name = Some("NVIDIA H100".into());
    let fingerprints = [h200(), h100, cpu_box()];
    let f16 = headroom_core::LayerKind {
        dtype: Dtype::F16,
        ..d256()
    };
    let layers = [d256(), d64(), f16, linear()];
    let registries = [
        registry_with(&[]),
        qualified_h200(),
        registry_with(&[("box-q256", cpu_box(), d256(), composed(256))]),
        registry_with(&[
            ("a", h200(), d256(), composed(512)),
            ("b", h200(), d256(), composed(256)),
        ]),
        registry_with(&[("h200-fused", h200(), d256(), QualifiedResult::Fused)]),
    ];
    let mut compared = 0;
    for (_dir, reg) in &registries {
        for fp in &fingerprints {
            for layer in &layers {
                let by_default = resolve(fp, layer, &Controls::default(), reg);
                let by_fallback = resolve(fp, layer, &fallback, reg);
                let fused_qualified = reg
                    .matching(fp, layer)
                    .any(|e| e.result == QualifiedResult::Fused);
                if fused_qualified {
                    assert_eq!(by_default.route, Route::Fused);
                    continue;
                }
                assert_eq!(
                    (
                        by_default.route,
                        by_default.query_block,
                        by_default.source,
                        by_default.qualification_id.clone()
                    ),
                    (
                        by_fallback.route,
                        by_fallback.query_block,
                        by_fallback.source,
                        by_fallback.qualification_id.clone()
                    ),
                    "{fp:?} {layer:?}"
                );
                compared += 1;
            }
        }
    }
    assert!(compared >= 50, "only {compared} cases compared");
}

#[test]
fn compute_units_mismatch_is_reported_as_first_differing_field() {
    let mut m4 = h200();
    m4.device_compute_units = Some(40);
    let (_d, reg) = registry_with(&[("m4", m4, d256(), composed(512))]);
    let rows = reg.rows(&h200(), &[linear(), d256()]);
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].reason.as_deref(),
        Some("device_compute_units 132 != 40")
    );
}

#[test]
fn same_family_head_dim_64_keeps_default_on_qualified_machine() {
    let (_d, reg) = qualified_h200();
    let r = resolve(&h200(), &d64(), &Controls::default(), &reg);
    assert_eq!(
        (r.query_block, r.source),
        (Some(128), ResolutionSource::Default)
    );
    let other_dtype = headroom_core::LayerKind {
        dtype: Dtype::F16,
        ..d256()
    };
    let r = resolve(&h200(), &other_dtype, &Controls::default(), &reg);
    assert_eq!(r.query_block, Some(128));
}

#[test]
fn query_block_overrides_on_qualified_machine() {
    let (_d, reg) = qualified_h200();
    let cases = [
        ("0", 0, ResolutionSource::Env, 0),
        ("256", 256, ResolutionSource::Env, 0),
        ("invalid", 128, ResolutionSource::Default, 1),
        ("-1", 128, ResolutionSource::Default, 1),
    ];
    for (raw, want, source, warnings) in cases {
        let (c, w) = controls(&[(ENV_QUERY_BLOCK, raw)]);
        assert_eq!(w.len(), warnings, "{raw}: {w:?}");
        let r = resolve(&h200(), &d256(), &c, &reg);
        assert_eq!(r.route, Route::Composed, "{raw}");
        assert_eq!(r.query_block, Some(want), "{raw}");
        assert_eq!(r.source, source, "{raw}");
        assert!(r.qualification_id.is_none(), "{raw}");
    }
    // The CLI flag wins over the environment, with the same parsing.
    let (c, w) = Controls::from_sources(None, Some("64"), &|k| {
        (k == ENV_QUERY_BLOCK).then(|| "256".to_string())
    });
    assert!(w.is_empty());
    let r = resolve(&h200(), &d256(), &c, &reg);
    assert_eq!((r.query_block, r.source), (Some(64), ResolutionSource::Cli));
}

#[test]
fn fused_control_gives_fused_without_qualification() {
    let (c, w) = controls(&[(ENV_EXECUTION, "fused")]);
    assert!(w.is_empty());
    let empty = Registry::default();
    for fp in [h200(), cpu_box()] {
        let r = resolve(&fp, &d256(), &c, &empty);
        assert_eq!(r.route, Route::Fused);
        assert_eq!(r.query_block, None, "query blocking is bypassed when fused");
        assert_eq!(r.source, ResolutionSource::Env);
        assert_eq!(r.route_request(), Some(RouteRequest::Fused));
    }
}

#[test]
fn fused_control_on_unsupported_layer_stays_composed_with_reason() {
    let (c, _) = controls(&[(ENV_EXECUTION, "fused"), (ENV_QUERY_BLOCK, "256")]);
    let f32_layer = headroom_core::LayerKind {
        dtype: Dtype::F32,
        ..d256()
    };
    // CUDA's fused kernel has no f32; CPU's does.
    let r = resolve(&h200(), &f32_layer, &c, &Registry::default());
    assert_eq!((r.route, r.query_block), (Route::Composed, Some(256)));
    assert!(r.reason.unwrap().contains("f32"));
    let r = resolve(&cpu_box(), &f32_layer, &c, &Registry::default());
    assert_eq!(r.route, Route::Fused);
    let odd = headroom_core::LayerKind {
        head_dim: 96,
        ..d256()
    };
    let r = resolve(&cpu_box(), &odd, &c, &Registry::default());
    assert_eq!(r.route, Route::Composed);
    assert!(r.reason.unwrap().contains("96"));
}

#[test]
fn auto_without_fused_entry_stays_composed() {
    let (_d, reg) = qualified_h200();
    let (c, _) = controls(&[(ENV_EXECUTION, "auto")]);
    let r = resolve(&h200(), &d256(), &c, &reg);
    assert_eq!(r.control_requested, AttentionControl::Auto);
    assert_eq!(r.route, Route::Composed);
    // ... and still takes the qualified composed block.
    assert_eq!(
        (r.query_block, r.source),
        (Some(512), ResolutionSource::Qualified)
    );
    let r = resolve(&h200(), &d256(), &c, &Registry::default());
    assert_eq!((r.route, r.query_block), (Route::Composed, Some(128)));
}

#[test]
fn auto_with_exact_fused_entry_gives_fused() {
    let (_d, reg) = registry_with(&[
        ("h200-q512", h200(), d256(), composed(512)),
        ("h200-fused", h200(), d256(), QualifiedResult::Fused),
    ]);
    let (auto, _) = controls(&[(ENV_EXECUTION, "auto")]);
    let r = resolve(&h200(), &d256(), &auto, &reg);
    assert_eq!((r.route, r.query_block), (Route::Fused, None));
    assert_eq!(r.source, ResolutionSource::Qualified);
    assert_eq!(r.qualification_id.as_deref(), Some("h200-fused"));
    // fallback ignores the fused entry and takes the composed one.
    let (fallback, _) = controls(&[(ENV_EXECUTION, "fallback")]);
    let r = resolve(&h200(), &d256(), &fallback, &reg);
    assert_eq!((r.route, r.query_block), (Route::Composed, Some(512)));
    // A different machine does not inherit the fused qualification.
    let mut other = h200();
    other.device_memory_gib = Some(80);
    let r = resolve(&other, &d256(), &auto, &reg);
    assert_eq!((r.route, r.query_block), (Route::Composed, Some(128)));
}

#[test]
fn linear_layers_get_no_route() {
    let (_d, reg) = qualified_h200();
    for exec in ["fallback", "fused", "auto"] {
        let (c, _) = controls(&[(ENV_EXECUTION, exec)]);
        let r = resolve(&h200(), &linear(), &c, &reg);
        assert_eq!((r.route, r.query_block), (Route::None, None), "{exec}");
        assert_eq!(r.route_request(), None);
    }
}

#[test]
fn conflicting_composed_entries_fail_closed() {
    let (_d, reg) = registry_with(&[
        ("a", h200(), d256(), composed(512)),
        ("b", h200(), d256(), composed(256)),
    ]);
    let r = resolve(&h200(), &d256(), &Controls::default(), &reg);
    assert_eq!(
        (r.query_block, r.source),
        (Some(128), ResolutionSource::Default)
    );
    assert!(r.reason.unwrap().contains("conflicting"));
}

#[test]
fn invalid_execution_value_falls_back_with_one_warning() {
    let (_d, reg) = registry_with(&[("f", h200(), d256(), QualifiedResult::Fused)]);
    let (c, w) = controls(&[(ENV_EXECUTION, "  sometimes ")]);
    assert_eq!(w.len(), 1);
    let r = resolve(&h200(), &d256(), &c, &reg);
    assert_eq!(r.control_requested, AttentionControl::Fallback);
    assert_eq!((r.route, r.query_block), (Route::Composed, Some(128)));
}
