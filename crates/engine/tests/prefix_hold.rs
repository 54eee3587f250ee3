//! Held-back admission with prefix caching on the CPU backend (tiny
//! synthetic model): a burst of requests sharing a prefix, submitted
//! together, computes the shared prefix once — the first request takes a
//! snapshot at the branch point while the others wait, then each resumes
//! from it (`cached_tokens` = the shared full blocks) — and every output
//! equals a cold run (≤ 1e-5 relative); a request held on a source that is
//! cancelled is released and admitted cold; requests sharing nothing are
//! admitted at once, also past a held one.

mod common;

use common::{alone, core, drive, drive_with, ids, rel_err, tiny, Outcome};
use headroom_engine::{
    EngineConfig, FinishReason, GenerateRequest, PrefixCacheSettings, SchedulerSettings,
    SoloStripe, SNAPSHOT_MIN,
};

fn cfg(prefix: PrefixCacheSettings) -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerSettings {
            prefill_chunk: 48,
            step_tokens: 160,
            solo_stripe: SoloStripe::Tokens(48),
            ..SchedulerSettings::default()
        },
        max_running: 8,
        max_context: 1024,
        prefix_cache: prefix,
        ..EngineConfig::default()
    }
}

fn on() -> PrefixCacheSettings {
    PrefixCacheSettings {
        enabled: true,
        state_slots: 4,
        state_slots_from_memory: false,
        interval_tokens: 0,
    }
}

fn cold(r: &GenerateRequest) -> Outcome {
    alone(
        &|| tiny("tiny-d64"),
        &cfg(PrefixCacheSettings::off()),
        r.clone(),
    )
}

fn assert_same(name: &str, got: &Outcome, cold: &Outcome) {
    assert!(got.error.is_none(), "{name}: {:?}", got.error);
    assert_eq!(got.tokens, cold.tokens, "{name}: tokens");
    assert_eq!(got.logits.len(), cold.logits.len(), "{name}: logits rows");
    for (t, (a, b)) in got.logits.iter().zip(&cold.logits).enumerate() {
        let e = rel_err(a, b);
        assert!(e <= 1e-5, "{name} token {t}: {e:.2e}");
    }
}

/// `n` requests sharing `prefix`, each with its own tail.
fn burst(prefix: &[u32], n: usize, seed: u32) -> Vec<GenerateRequest> {
    (0..n)
        .map(|i| {
            let tail = ids(30 + 7 * i, 512, seed + i as u32);
            GenerateRequest::greedy([prefix, &tail[..]].concat(), 5)
        })
        .collect()
}

#[test]
fn a_burst_sharing_a_prefix_computes_it_once() {
    // Also with the fewest snapshot slots memory sizing leaves (one pinned
    // by the hold, one free).
    for (blocks, slots) in [(2usize, 4usize), (3, 4), (2, SNAPSHOT_MIN)] {
        let prefix = ids(64 * blocks, 512, 40 + blocks as u32);
        let reqs = burst(&prefix, 5, 50);
        let prefix_cache = PrefixCacheSettings {
            state_slots: slots,
            ..on()
        };
        let mut c = core(tiny("tiny-d64"), cfg(prefix_cache));
        let streams: Vec<_> = reqs.iter().map(|r| c.submit(r.clone()).unwrap()).collect();
        c.step().unwrap().unwrap();
        let st = c.stats();
        assert_eq!(
            (st.running, st.waiting),
            (1, 4),
            "the others wait for the first's snapshot"
        );
        let mut prefill = 0;
        let out = drive_with(&mut c, streams, &mut |rep| prefill += rep.prefill_rows);
        let cached: Vec<usize> = out.iter().map(|o| o.usage.unwrap().cached_tokens).collect();
        let shared = 64 * blocks;
        assert_eq!(
            cached,
            [vec![0], vec![shared; 4]].concat(),
            "{blocks} blocks"
        );
        let total: usize = reqs.iter().map(|r| r.prompt_ids.len()).sum();
        assert_eq!(
            prefill + 48,
            total - 4 * shared,
            "the shared prefix computed once (48 rows in the first step)"
        );
        for (r, o) in reqs.iter().zip(&out) {
            assert_same("burst", o, &cold(r));
        }
        let st = c.stats();
        assert_eq!(st.prefix_cache_hit_tokens, 4 * shared as u64);
        assert_eq!((st.kv_blocks_used, st.gdn_slots_used), (0, 0));
    }
}

#[test]
fn a_request_held_on_a_cancelled_source_is_admitted_cold() {
    let prefix = ids(128, 512, 60);
    let reqs = burst(&prefix, 2, 61);
    let mut c = core(tiny("tiny-d64"), cfg(on()));
    let sa = c.submit(reqs[0].clone()).unwrap();
    let sb = c.submit(reqs[1].clone()).unwrap();
    c.step().unwrap().unwrap();
    assert_eq!((c.stats().running, c.stats().waiting), (1, 1), "held");
    sa.cancel();
    let out = drive(&mut c, vec![sa, sb]);
    assert_eq!(out[0].reason, Some(FinishReason::Cancelled));
    assert_eq!(out[1].reason, Some(FinishReason::Length));
    assert_eq!(out[1].usage.unwrap().cached_tokens, 0, "released cold");
    assert_same("released", &out[1], &cold(&reqs[1]));
    assert_eq!(c.stats().prefix_snapshot_slots_used, 1, "its own snapshot");
}

#[test]
fn requests_sharing_nothing_are_not_held_and_pass_a_held_one() {
    // Distinct prompts: all admitted in the first step while rows are left
    // (48 + 48 + 48 + 16 of the step's 160).
    let reqs: Vec<GenerateRequest> = (0..5)
        .map(|i| GenerateRequest::greedy(ids(150, 512, 70 + i), 3))
        .collect();
    let mut c = core(tiny("tiny-d64"), cfg(on()));
    let streams: Vec<_> = reqs.iter().map(|r| c.submit(r.clone()).unwrap()).collect();
    c.step().unwrap().unwrap();
    assert_eq!((c.stats().running, c.stats().waiting), (4, 1));
    let out = drive(&mut c, streams);
    for (r, o) in reqs.iter().zip(&out) {
        assert_eq!(o.usage.unwrap().cached_tokens, 0);
        assert_same("distinct", o, &cold(r));
    }

    // A shared pair with an unrelated request behind it: the second of the
    // pair is held, the unrelated one is admitted past it.
    let prefix = ids(128, 512, 80);
    let mut reqs = burst(&prefix, 2, 81);
    reqs.push(GenerateRequest::greedy(ids(100, 512, 90), 3));
    let mut c = core(tiny("tiny-d64"), cfg(on()));
    let streams: Vec<_> = reqs.iter().map(|r| c.submit(r.clone()).unwrap()).collect();
    c.step().unwrap().unwrap();
    assert_eq!((c.stats().running, c.stats().waiting), (2, 1));
    let out = drive(&mut c, streams);
    let cached: Vec<usize> = out.iter().map(|o| o.usage.unwrap().cached_tokens).collect();
    assert_eq!(cached, vec![0, 128, 0]);
    for (r, o) in reqs.iter().zip(&out) {
        assert_same("passed", o, &cold(r));
    }
}

#[test]
fn no_hold_without_prefix_caching() {
    let prefix = ids(128, 512, 95);
    let reqs = burst(&prefix, 3, 96);
    let mut c = core(tiny("tiny-d64"), cfg(PrefixCacheSettings::off()));
    let streams: Vec<_> = reqs.iter().map(|r| c.submit(r.clone()).unwrap()).collect();
    c.step().unwrap().unwrap();
    assert_eq!(c.stats().running, 3, "admitted together, as before");
    let out = drive(&mut c, streams);
    assert!(out.iter().all(|o| o.usage.unwrap().cached_tokens == 0));
}

#[test]
fn a_planned_chunk_of_the_source_stops_at_the_branch_point() {
    // The source's first chunk (160 rows) would pass the shared 128 tokens
    // and its own snapshot point (192); the request held on it cuts it at 128.
    let prefix = ids(128, 512, 100);
    let a = GenerateRequest::greedy([&prefix[..], &ids(100, 512, 101)].concat(), 4);
    let b = GenerateRequest::greedy([&prefix[..], &ids(50, 512, 102)].concat(), 4);
    let wide = EngineConfig {
        scheduler: SchedulerSettings {
            prefill_chunk: 160,
            step_tokens: 400,
            solo_stripe: SoloStripe::Tokens(160),
            ..SchedulerSettings::default()
        },
        ..cfg(on())
    };
    let mut c = core(tiny("tiny-d64"), wide);
    let streams = vec![c.submit(a.clone()).unwrap(), c.submit(b.clone()).unwrap()];
    let first = c.step().unwrap().unwrap();
    assert_eq!((first.prefill_rows, first.sequences.len()), (128, 1));
    let out = drive(&mut c, streams);
    assert_eq!(out[1].usage.unwrap().cached_tokens, 128);
    assert_same("source", &out[0], &cold(&a));
    assert_same("held", &out[1], &cold(&b));
}
