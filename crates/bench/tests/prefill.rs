//! The prefill runner records what the attention calls reported.

mod support;

use headroom_bench::prefill::{self, Arm, PrefillConfig};
use headroom_bench::prefill_model::ModelPrefill;
use headroom_bench::prefill_schema::PREFILL_SCHEMA;
use headroom_core::{Route, RouteRequest};
use headroom_policy::{AttentionControl, Registry, ResolutionSource};
use support::{bench, validation_messages, Fake};

#[test]
fn arms_parse_and_print() {
    let a: Arm = "fallback:512".parse().unwrap();
    assert_eq!(a.control, AttentionControl::Fallback);
    assert_eq!(a.query_block, Some(512));
    assert_eq!(a.to_string(), "fallback:512");
    assert_eq!("AUTO".parse::<Arm>().unwrap().to_string(), "auto");
    assert!("fused:128".parse::<Arm>().is_err());
    assert!("fast".parse::<Arm>().is_err());
    assert!("fallback:-1".parse::<Arm>().is_err());
}

#[test]
fn honest_run_records_reported_routes_per_shape() {
    let f = bench(
        &mut Fake::honest(),
        "fallback:128,fallback:512,fused,auto",
        &[256, 1024],
    );
    assert_eq!(f.schema, PREFILL_SCHEMA);
    assert_eq!(f.samples.len(), 8);
    let s = f
        .samples
        .iter()
        .find(|s| s.arm == "fallback:512" && s.length == 256)
        .unwrap();
    assert_eq!(
        s.attention.len(),
        1,
        "two full layers of one shape make one record"
    );
    let g = &s.attention[0];
    assert_eq!(g.layers, vec![1, 3]);
    assert_eq!(g.reported.route, Route::Composed);
    assert_eq!(
        g.reported.query_block,
        Some(256),
        "qL 512 over 256 rows runs one block of 256"
    );
    assert_eq!(g.reported.calls, 2);
    assert_eq!(g.resolved.source, ResolutionSource::Cli);
    let fused = f.samples.iter().find(|s| s.arm == "fused").unwrap();
    assert_eq!(fused.attention[0].reported.route, Route::Fused);
    let auto = f.samples.iter().find(|s| s.arm == "auto").unwrap();
    assert_eq!(auto.attention[0].resolved.source, ResolutionSource::Default);
    assert_eq!(auto.attention[0].reported.query_block, Some(128));
    assert_eq!(s.ttft_ms.runs.len(), 3);
    assert!(s.prefill_tokens_per_s > 0.0);
    let v = validation_messages(&f);
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn a_backend_that_runs_another_route_is_recorded_as_such_and_rejected() {
    let mut liar = Fake {
        lie: Some(RouteRequest::Composed { query_block: 128 }),
        ..Fake::honest()
    };
    let f = bench(&mut liar, "fallback:128,fallback:512", &[1024]);
    let s = f.samples.iter().find(|s| s.arm == "fallback:512").unwrap();
    assert_eq!(s.attention[0].reported.query_block, Some(128));
    assert_eq!(s.attention[0].resolved.query_block, Some(512));
    let v = validation_messages(&f);
    assert!(
        v.iter()
            .any(|m| m.contains("arm fallback:512") && m.contains("reported")),
        "{v:?}"
    );
}

#[test]
fn the_tiny_model_reports_the_routes_it_ran() {
    let cfg = headroom_model::ModelConfig::synthetic("tiny-d256").unwrap();
    let model =
        headroom_model::Qwen35Model::synthetic(headroom_cpu::CpuBackend::new(), &cfg, 3).unwrap();
    let mut target = ModelPrefill { model };
    let pc = PrefillConfig {
        arms: support::arms("fallback:16,fused"),
        lengths: vec![40],
        warmup: 0,
        iterations: 3,
        seed: 2,
        model_source: "synthetic:tiny-d256".into(),
    };
    let f = prefill::run(
        &pc,
        &mut target,
        headroom_hardware::detect_cpu(),
        &Registry::default(),
    )
    .unwrap();
    let c = f.samples.iter().find(|s| s.arm == "fallback:16").unwrap();
    assert!(!c.attention.is_empty());
    for g in &c.attention {
        assert_eq!(
            (g.reported.route, g.reported.query_block),
            (Route::Composed, Some(16))
        );
        assert!(g.reported.transient_peak_bytes > 0);
    }
    let fz = f.samples.iter().find(|s| s.arm == "fused").unwrap();
    for g in &fz.attention {
        assert_eq!(
            (g.reported.route, g.reported.query_block),
            (Route::Fused, None)
        );
    }
    assert_eq!(f.path, "model.prefill");
    assert!(c.memory.backend_peak_bytes >= c.memory.backend_before_bytes);
}
