//! Admission by memory under contiguous KV (which reserves each request's
//! prompt + max tokens at admission; paged admission is by free blocks,
//! `tests/paged.rs`): a request that could never fit the budget is refused
//! naming its predicted bytes; one that cannot fit beside the running ones
//! waits and then completes; the predicted attention transient matches the
//! measured one (the kernels' workspace reports) within 10%.

mod common;

use common::{core, drive, ids, tiny};
use headroom_core::RouteRequest;
use headroom_engine::{
    EngineConfig, FinishReason, GenerateRequest, KvBackendKind, SchedulerSettings, SoloStripe,
    SubmitError,
};
use headroom_model::AttentionPlan;

fn cfg(route: RouteRequest, budget: Option<u64>) -> EngineConfig {
    EngineConfig {
        attention: AttentionPlan::Uniform(route),
        memory_budget_bytes: budget,
        max_context: 4096,
        kv_backend: KvBackendKind::Contiguous,
        ..EngineConfig::default()
    }
}

#[test]
fn a_request_that_never_fits_is_refused_and_the_rest_complete() {
    let route = RouteRequest::Composed { query_block: 128 };
    let probe = core(tiny("tiny-d64"), cfg(route, None));
    let long = GenerateRequest::greedy(ids(3000, 512, 1), 8);
    let need = probe.limits().predict(&long).total();
    let budget = need - 1;
    let mut c = core(tiny("tiny-d64"), cfg(route, Some(budget)));
    let err = c.submit(long).unwrap_err();
    match &err {
        SubmitError::NeverFits {
            predicted_bytes,
            budget_bytes,
            ..
        } => assert_eq!((*predicted_bytes, *budget_bytes), (need, budget)),
        other => panic!("expected NeverFits, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains(&need.to_string()) && msg.contains(&budget.to_string()),
        "{msg}"
    );
    let short: Vec<_> = (0..3)
        .map(|i| {
            c.submit(GenerateRequest::greedy(ids(50 + i * 10, 512, i as u32), 4))
                .unwrap()
        })
        .collect();
    let out = drive(&mut c, short);
    for o in &out {
        assert_eq!(o.reason, Some(FinishReason::Length));
        assert_eq!(o.tokens.len(), 4);
    }
    let st = c.stats();
    assert_eq!((st.refused, st.finished, st.admitted), (1, 3, 3));
}

#[test]
fn a_request_that_does_not_fit_beside_others_waits_then_completes() {
    let route = RouteRequest::Composed { query_block: 128 };
    let probe = core(tiny("tiny-d64"), cfg(route, None));
    let long = GenerateRequest::greedy(ids(1500, 512, 3), 4);
    let small = GenerateRequest::greedy(ids(400, 512, 4), 30);
    let (pl, ps) = (
        probe.limits().predict(&long),
        probe.limits().predict(&small),
    );
    // Each fits alone; together they do not.
    let budget = pl.total().max(ps.total()) + 1;
    assert!(pl.kv_bytes + pl.gdn_bytes + ps.kv_bytes + ps.gdn_bytes + pl.transient_bytes > budget);
    let mut c = core(tiny("tiny-d64"), cfg(route, Some(budget)));
    let a = c.submit(small).unwrap();
    c.step().unwrap();
    let b = c.submit(long).unwrap();
    c.step().unwrap();
    let st = c.stats();
    assert_eq!((st.running, st.waiting), (1, 1), "the long request waits");
    assert!(st.memory_committed_bytes <= budget);
    let out = drive(&mut c, vec![a, b]);
    assert_eq!(out[0].reason, Some(FinishReason::Length));
    assert_eq!(
        out[1].reason,
        Some(FinishReason::Length),
        "it ran once the first finished"
    );
    assert_eq!(c.stats().admitted, 2);
}

/// Predicted transient vs the largest one the attention reports measured.
/// `exact`: the calls have at least as many query blocks as worker threads,
/// so the CPU backend's two call shapes (slot read whole or per KV head)
/// use the same number of workers and the bound is tight; otherwise the
/// prediction is only checked to be an upper bound.
fn measured_vs_predicted(
    model: &str,
    route: RouteRequest,
    settings: SchedulerSettings,
    prompt: usize,
    exact: bool,
) {
    // The CPU kernels use one scratch set per rayon worker: pin the pool.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    pool.install(|| {
        let mut c = core(
            tiny(model),
            EngineConfig {
                scheduler: settings,
                ..cfg(route, None)
            },
        );
        let r = GenerateRequest::greedy(ids(prompt, 512, 7), 3);
        let predicted = c.limits().predict(&r).transient_bytes;
        let s = c.submit(r).unwrap();
        let mut measured = 0u64;
        let mut stream = vec![s];
        let out = common::drive_with(&mut c, std::mem::take(&mut stream), &mut |rep| {
            measured = measured.max(rep.transient_bytes);
        });
        assert_eq!(out[0].tokens.len(), 3);
        let ratio = measured as f64 / predicted as f64;
        let lowest = if exact { 0.9 } else { 0.0 };
        assert!(
            measured > 0 && (lowest..=1.0).contains(&ratio),
            "{model} {route} {settings}: measured {measured} predicted {predicted} ({ratio:.3})"
        );
    });
}

#[test]
fn predicted_transient_matches_the_measured_peak_across_routes() {
    let s = |chunk, step, solo| SchedulerSettings {
        prefill_chunk: chunk,
        step_tokens: step,
        solo_stripe: SoloStripe::Tokens(solo),
        ..SchedulerSettings::default()
    };
    for model in ["tiny-d64", "tiny-d256"] {
        measured_vs_predicted(
            model,
            RouteRequest::Composed { query_block: 128 },
            s(512, 2048, 512),
            1280,
            true,
        );
        measured_vs_predicted(
            model,
            RouteRequest::Composed { query_block: 64 },
            s(512, 2048, 2048),
            2000,
            true,
        );
        measured_vs_predicted(
            model,
            RouteRequest::Composed { query_block: 0 },
            s(256, 2048, 256),
            768,
            false,
        );
        measured_vs_predicted(model, RouteRequest::Fused, s(512, 2048, 512), 1500, true);
    }
}

/// The engine asks the backend: a request's predicted transient is the
/// CPU backend's own answer for the request's largest attention call (its
/// last prefill chunk over the prompt, or its last decode step).
#[test]
fn the_predicted_transient_is_the_backends_answer() {
    use headroom_core::ops::{AttentionCall, Backend};
    for route in [
        RouteRequest::Composed { query_block: 128 },
        RouteRequest::Fused,
    ] {
        let c = core(tiny("tiny-d64"), cfg(route, None));
        let (prompt, max_tokens) = (1500, 9);
        let r = GenerateRequest::greedy(ids(prompt, 512, 3), max_tokens);
        let chunk = c
            .limits()
            .settings
            .max_chunk(true, c.limits().solo_tokens)
            .min(prompt);
        let ws = c.model().backend().workspace_model();
        let answer = c
            .model()
            .attention_kinds()
            .into_iter()
            .flat_map(|(_, layer)| {
                [(chunk, prompt), (1, prompt + max_tokens - 1)].map(|(q_len, kv_len)| {
                    ws.attention_bytes(&AttentionCall {
                        layer,
                        route,
                        q_len,
                        kv_len,
                        total_kv_len: kv_len,
                    })
                })
            })
            .max()
            .unwrap();
        assert!(answer > 0);
        assert_eq!(c.limits().predict(&r).transient_bytes, answer, "{route}");
    }
}
