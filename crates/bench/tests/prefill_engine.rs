//! `bench prefill` through the engine's scheduler: the tiny model, a prompt
//! longer than one scheduler step so the engine chunks it; the routes come
//! back from the attention reports and the file validates strictly.

mod support;

use headroom_bench::prefill::{self, PrefillConfig};
use headroom_bench::prefill_engine::{context_for, EngineBenchSettings, EnginePrefill};
use headroom_core::Route;
use headroom_engine::{KvBackendKind, SchedulerSettings, SoloStripe};
use headroom_policy::Registry;
use support::validation_messages;

fn tiny_engine(solo: usize) -> EnginePrefill<headroom_cpu::CpuBackend> {
    let cfg = headroom_model::ModelConfig::synthetic("tiny-d256").unwrap();
    let model =
        headroom_model::Qwen35Model::synthetic(headroom_cpu::CpuBackend::new(), &cfg, 3).unwrap();
    let settings = EngineBenchSettings {
        scheduler: SchedulerSettings {
            prefill_chunk: solo,
            step_tokens: solo,
            solo_stripe: SoloStripe::Tokens(solo),
            ..SchedulerSettings::default()
        },
        kv_backend: KvBackendKind::Contiguous,
        max_context: context_for(40),
    };
    EnginePrefill::new(model, settings).unwrap()
}

fn config() -> PrefillConfig {
    PrefillConfig {
        arms: support::arms("fallback:16,fused"),
        lengths: vec![40],
        warmup: 0,
        iterations: 3,
        seed: 2,
        model_source: "synthetic:tiny-d256".into(),
    }
}

#[test]
fn the_engine_target_records_chunked_routes_and_validates() {
    let mut target = tiny_engine(32);
    let f = prefill::run(
        &config(),
        &mut target,
        headroom_hardware::detect_cpu(),
        &Registry::default(),
    )
    .unwrap();
    assert_eq!(f.path, "engine");
    let c = f.samples.iter().find(|s| s.arm == "fallback:16").unwrap();
    assert_eq!(c.scheduler.path, "engine");
    assert_eq!(c.scheduler.solo_chunk, Some(32));
    let why = c
        .scheduler
        .solo_stripe_reason
        .as_deref()
        .unwrap_or_default();
    assert!(why.contains("explicit"), "{why}");
    // 40 prompt tokens in chunks of 32: two steps to the first token.
    assert_eq!(c.scheduler.steps_to_first_token, 2);
    assert_eq!(c.kv.requested, "contiguous");
    assert!(!c.kv.resolved.is_empty());
    assert!(!c.attention.is_empty());
    for g in &c.attention {
        assert_eq!(
            (g.reported.route, g.reported.query_block),
            (Route::Composed, Some(16))
        );
        assert_eq!(g.reported.calls, g.layers.len() * 2);
    }
    let fz = f.samples.iter().find(|s| s.arm == "fused").unwrap();
    for g in &fz.attention {
        assert_eq!(
            (g.reported.route, g.reported.query_block),
            (Route::Fused, None)
        );
    }
    assert!(c.ttft_ms.median > 0.0);
    let v = validation_messages(&f);
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn a_relabelled_engine_sample_is_rejected() {
    let mut target = tiny_engine(64);
    let mut f = prefill::run(
        &config(),
        &mut target,
        headroom_hardware::detect_cpu(),
        &Registry::default(),
    )
    .unwrap();
    // The composed sample claims to be the fused arm: its reported route says otherwise.
    for s in f.samples.iter_mut() {
        s.arm = if s.arm == "fused" {
            "fallback:16".into()
        } else {
            "fused".into()
        };
    }
    let v = validation_messages(&f);
    assert!(
        v.iter().any(|m| m.contains("arm fused reported route")),
        "{v:?}"
    );
}
