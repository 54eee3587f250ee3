//! The start-up warm-up (`headroom_engine::warmup`) on a tiny synthetic
//! model: its prefill phase is one step of the whole step budget, each
//! decode phase batches its requests (one prefill step, then one decode step
//! per further token), and afterwards the engine has forgotten it — prefix
//! cache empty, every KV block and state slot free, counters and request ids
//! at zero — and answers a greedy request as a fresh engine does.

mod common;

use common::{ids, tiny};
use headroom_engine::warmup::{self, WarmupError, WarmupPhase};
use headroom_engine::{
    spawn, EngineConfig, EngineHandle, EngineStats, GenerateRequest, SchedulerSettings, StreamEvent,
};

fn config() -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerSettings {
            prefill_chunk: 256,
            step_tokens: 1024,
            ..SchedulerSettings::default()
        },
        max_running: 16,
        max_context: 512,
        ..EngineConfig::default()
    }
}

/// Asserts `st` is an engine that has run nothing: no counter, no cached
/// block or snapshot, every block and slot free.
fn assert_fresh(st: &EngineStats) {
    let counters = [
        st.admitted,
        st.refused,
        st.finished,
        st.cancelled,
        st.prompt_tokens,
        st.generated_tokens,
        st.preemptions,
        st.steps,
        st.prefix_cache_queried_tokens,
        st.prefix_cache_hit_tokens,
    ];
    assert_eq!(counters, [0; 10], "{st:?}");
    assert_eq!((st.running, st.waiting), (0, 0));
    assert_eq!((st.kv_blocks_used, st.kv_blocks_cached), (0, 0));
    assert_eq!(st.kv_blocks_free, st.pool.blocks);
    assert_eq!((st.gdn_slots_used, st.gdn_slots_free), (0, st.pool.slots));
    assert_eq!(st.prefix_snapshot_slots_used, 0);
}

/// A greedy request's tokens, its stream's id and its cached tokens.
fn greedy(h: &EngineHandle) -> (Vec<u32>, u64, usize) {
    let prompt = ids(300, 256, 3);
    let mut s = h.submit(GenerateRequest::greedy(prompt, 6)).unwrap();
    let mut tokens = Vec::new();
    while let Some(e) = s.blocking_next() {
        match e {
            StreamEvent::Token(t) => tokens.push(t),
            StreamEvent::Finished { usage, .. } => return (tokens, s.id, usage.cached_tokens),
            StreamEvent::Error(e) => panic!("{e}"),
            StreamEvent::Logprobs(_) => {}
        }
    }
    panic!("the stream ended without finishing")
}

#[test]
fn the_plan_fills_one_step_and_batches_decodes_within_the_engine() {
    let h = spawn(tiny("tiny-d64"), config()).unwrap();
    let phases = warmup::plan(h.limits(), h.stats().pool.slots);
    let shape: Vec<(&str, Vec<usize>, usize)> = phases
        .iter()
        .map(|p| (p.name.as_str(), p.prompts.clone(), p.max_tokens))
        .collect();
    assert_eq!(
        shape,
        vec![
            ("prefill", vec![256; 4], 1),
            ("decode x1", vec![8], 4),
            ("decode x8", vec![8; 8], 4),
            ("decode x16", vec![8; 16], 4),
        ]
    );
    // A small context, queue and pool bound the prefill step.
    let mut limits = h.limits().clone();
    limits.max_context = 100;
    limits.max_waiting = 3;
    let p = warmup::plan(&limits, 16);
    assert_eq!(p[0].prompts, vec![64; 3], "whole blocks, three waiting");
    assert_eq!(p.last().unwrap().prompts.len(), 3);
    let mut limits = h.limits().clone();
    limits.pool_blocks = Some(6);
    assert_eq!(warmup::plan(&limits, 16)[0].prompts, vec![256, 64]);
    // A request's generated token needs a block too: 64-token prompts in 2 blocks.
    limits.pool_blocks = Some(2);
    assert_eq!(warmup::plan(&limits, 16)[0].prompts, vec![64]);
    limits.max_context = 1;
    assert!(warmup::plan(&limits, 16).is_empty());
    // A memory budget no request fits: nothing to run (rather than a refusal).
    let mut limits = h.limits().clone();
    limits.budget = Some(1);
    assert!(warmup::plan(&limits, 16).is_empty());
    h.shutdown_and_wait();
}

#[test]
fn the_warm_up_runs_its_steps_then_the_engine_forgets_it() {
    let h = spawn(tiny("tiny-d64"), config()).unwrap();
    let phases = warmup::plan(h.limits(), h.stats().pool.slots);
    let report = warmup::run(&h, &phases).unwrap();
    for p in &report.phases {
        assert_eq!(
            p.steps,
            p.phase.expected_steps(),
            "{}: batched",
            p.phase.name
        );
        assert_eq!(p.prompt_tokens, p.phase.first_step_rows() as u64);
        let n = p.phase.prompts.len() as u64;
        assert_eq!(p.generated_tokens, n * p.phase.max_tokens as u64);
    }
    assert_eq!(report.phases[0].steps, 1, "1024 prefill rows in one step");
    assert_eq!((report.requests(), report.steps()), (29, 13));
    let line = report.to_string();
    assert!(
        line.starts_with("warm-up: 29 requests, 13 steps, "),
        "{line}"
    );
    // The warm-up left cached blocks and snapshots and counters...
    let st = h.current_stats().unwrap();
    assert!(
        st.kv_blocks_cached > 0 && st.prefix_snapshot_slots_used > 0,
        "{st:?}"
    );
    assert_eq!((st.steps, st.admitted), (13, 29));
    // ...which the engine forgets.
    let before = h.forget_history().unwrap();
    assert_eq!(before.steps, 13);
    assert_fresh(&h.stats());
    assert_fresh(&h.current_stats().unwrap());
    h.shutdown_and_wait();
}

#[test]
fn after_warm_up_a_request_is_answered_as_by_a_fresh_engine() {
    let warm = spawn(tiny("tiny-d64"), config()).unwrap();
    let report = warmup::warm_up(&warm).unwrap();
    assert_eq!(report.steps(), 13);
    assert_fresh(&warm.stats());
    let cold = spawn(tiny("tiny-d64"), config()).unwrap();
    let (a, b) = (greedy(&warm), greedy(&cold));
    assert_eq!(a.0, b.0, "same greedy tokens");
    assert_eq!((a.1, a.2), (1, 0), "request id 1, nothing from the cache");
    assert_eq!(b.1, 1);
    let st = warm.stats();
    assert_eq!((st.admitted, st.prompt_tokens), (1, 300));
    for h in [warm, cold] {
        h.shutdown_and_wait();
    }
}

#[test]
fn a_refused_warm_up_request_names_its_phase() {
    let h = spawn(tiny("tiny-d64"), config()).unwrap();
    let too_long = WarmupPhase {
        name: "prefill".into(),
        prompts: vec![600],
        max_tokens: 1,
    };
    let e = warmup::run(&h, &[too_long]).unwrap_err();
    assert!(matches!(e, WarmupError::Refused { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("warm-up prefill") && msg.contains("512"),
        "{msg}"
    );
    // The engine refuses to forget while requests run.
    let mut s = h
        .submit(GenerateRequest::greedy(ids(8, 256, 1), 400))
        .unwrap();
    let _ = s.blocking_next();
    assert!(h.forget_history().is_err());
    s.cancel();
    h.shutdown_and_wait();
}
