//! Prefix caching on the CPU backend (tiny synthetic model): a request that
//! shares full blocks and a snapshot point with an earlier one resumes from
//! the cache — its `cached_tokens`, the engine's hit counters and the rows
//! it computes say so — and its greedy tokens and logits equal a cold run
//! with caching off (≤ 1e-5 relative): a second request sharing a 2-block
//! prefix, a hit ending mid-way through the source's prompt, a hit followed
//! by a chunked prefill of a long remainder, a hit after the source was
//! cancelled and after it was preempted, and a follow-up turn resending the
//! first turn's prompt and output.

mod common;

use common::{alone, collect_events, core, drive, drive_with, ids, rel_err, tiny, Outcome};
use headroom_engine::{
    EngineConfig, FinishReason, GenerateRequest, PrefixCacheSettings, SchedulerSettings, SoloStripe,
};
use std::collections::HashMap;

fn cfg(prefix: PrefixCacheSettings, pool_blocks: Option<usize>) -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerSettings {
            prefill_chunk: 48,
            step_tokens: 160,
            solo_stripe: SoloStripe::Tokens(48),
            ..SchedulerSettings::default()
        },
        kv_pool_blocks: pool_blocks,
        max_running: 8,
        max_context: 1024,
        prefix_cache: prefix,
        ..EngineConfig::default()
    }
}

fn on(interval_tokens: usize) -> PrefixCacheSettings {
    PrefixCacheSettings {
        enabled: true,
        state_slots: 4,
        state_slots_from_memory: false,
        interval_tokens,
    }
}

fn cold(r: &GenerateRequest) -> Outcome {
    alone(
        &|| tiny("tiny-d64"),
        &cfg(PrefixCacheSettings::off(), None),
        r.clone(),
    )
}

fn concat(parts: &[&[u32]]) -> Vec<u32> {
    parts.concat()
}

/// `got` has `cold`'s tokens and logits (≤ 1e-5 relative), each token streamed.
fn assert_same(name: &str, got: &Outcome, cold: &Outcome) {
    assert!(got.error.is_none(), "{name}: {:?}", got.error);
    assert_eq!(got.tokens, cold.tokens, "{name}: tokens");
    assert_eq!(got.streamed, got.tokens, "{name}: streamed once");
    assert_eq!(got.logits.len(), cold.logits.len(), "{name}: logits rows");
    for (t, (a, b)) in got.logits.iter().zip(&cold.logits).enumerate() {
        let e = rel_err(a, b);
        assert!(e <= 1e-5, "{name} token {t}: {e:.2e}");
    }
}

/// Runs `first` to its end, then `second` in the same engine; returns
/// both outcomes and the prefill rows `second`'s steps computed.
fn one_after_another(
    c: &mut headroom_engine::EngineCore<headroom_cpu::CpuBackend>,
    first: &GenerateRequest,
    second: &GenerateRequest,
) -> (Outcome, Outcome, usize) {
    let s = c.submit(first.clone()).unwrap();
    let a = drive(c, vec![s]).remove(0);
    let s = c.submit(second.clone()).unwrap();
    let mut rows = 0;
    let b = drive_with(c, vec![s], &mut |rep| rows += rep.prefill_rows).remove(0);
    (a, b, rows)
}

#[test]
fn a_second_request_sharing_two_blocks_resumes_from_the_cache() {
    let prefix = ids(128, 512, 1);
    let a = GenerateRequest::greedy(concat(&[&prefix, &ids(40, 512, 2)]), 6);
    let b = GenerateRequest::greedy(concat(&[&prefix, &ids(30, 512, 3)]), 8);
    let mut c = core(tiny("tiny-d64"), cfg(on(0), None));
    assert_eq!(c.stats().prefix_snapshot_slots, 4);
    let (got_a, got_b, rows) = one_after_another(&mut c, &a, &b);
    assert_same("first", &got_a, &cold(&a));
    assert_same("second", &got_b, &cold(&b));
    assert_eq!(got_a.usage.unwrap().cached_tokens, 0);
    assert_eq!(got_b.usage.unwrap().cached_tokens, 128);
    assert_eq!(rows, 30, "only the unshared tokens are computed");
    let st = c.stats();
    assert_eq!(
        (st.prefix_cache_queried_tokens, st.prefix_cache_hit_tokens),
        (168 + 158, 128)
    );
    assert!(st.prefix_snapshot_slots_used >= 1);
    assert_eq!(st.kv_blocks_used, 0, "cached blocks are idle, not used");
    assert!(st.kv_blocks_cached >= 2);

    // The same pair with caching off: every prompt token computed.
    let mut off = core(tiny("tiny-d64"), cfg(PrefixCacheSettings::off(), None));
    let (_, got_off, rows) = one_after_another(&mut off, &a, &b);
    assert_eq!((rows, got_off.usage.unwrap().cached_tokens), (158, 0));
    let st = off.stats();
    assert_eq!(
        (
            st.prefix_cache_hit_tokens,
            st.prefix_snapshot_slots,
            st.kv_blocks_cached
        ),
        (0, 0, 0)
    );
}

#[test]
fn a_hit_resumes_over_a_slot_another_sequence_left_dirty() {
    // One running slot: the unrelated first request, the source and the hit
    // all run in slot 0, so the hit's resume (no reset first) must overwrite
    // everything the earlier sequences left there.
    let prefix = ids(128, 512, 11);
    let other = GenerateRequest::greedy(ids(150, 512, 12), 5);
    let source = GenerateRequest::greedy(concat(&[&prefix, &ids(20, 512, 13)]), 5);
    let hit = GenerateRequest::greedy(concat(&[&prefix, &ids(36, 512, 14)]), 7);
    let mut c = core(
        tiny("tiny-d64"),
        EngineConfig {
            max_running: 1,
            ..cfg(on(0), None)
        },
    );
    let (got_other, got_source, _) = one_after_another(&mut c, &other, &source);
    assert_same("other", &got_other, &cold(&other));
    assert_same("source", &got_source, &cold(&source));
    let s = c.submit(hit.clone()).unwrap();
    let mut rows = 0;
    let got = drive_with(&mut c, vec![s], &mut |rep| rows += rep.prefill_rows).remove(0);
    assert_eq!(got.usage.unwrap().cached_tokens, 128);
    assert_eq!(rows, 36, "only the unshared tokens are computed");
    assert_same("hit in a dirty slot", &got, &cold(&hit));
}

#[test]
fn a_hit_can_end_mid_way_through_the_source_prompt() {
    // The source's interval snapshots (every 128 tokens) are at 128 and 256;
    // the second request shares its first 200 tokens.
    let a = GenerateRequest::greedy(ids(300, 512, 4), 4);
    let b = GenerateRequest::greedy(concat(&[&a.prompt_ids[..200], &ids(60, 512, 5)]), 6);
    let mut c = core(tiny("tiny-d64"), cfg(on(128), None));
    let (got_a, got_b, rows) = one_after_another(&mut c, &a, &b);
    assert_same("source", &got_a, &cold(&a));
    assert_same("mid-prompt hit", &got_b, &cold(&b));
    assert_eq!(got_b.usage.unwrap().cached_tokens, 128);
    assert_eq!(rows, 260 - 128);
}

#[test]
fn a_hit_is_followed_by_a_chunked_prefill_of_a_long_remainder() {
    let prefix = ids(192, 512, 6);
    let a = GenerateRequest::greedy(concat(&[&prefix, &ids(5, 512, 7)]), 3);
    let b = GenerateRequest::greedy(concat(&[&prefix, &ids(333, 512, 8)]), 10);
    let mut c = core(tiny("tiny-d64"), cfg(on(0), None));
    let s = c.submit(a.clone()).unwrap();
    drive(&mut c, vec![s]);
    let s = c.submit(b.clone()).unwrap();
    let mut chunks = Vec::new();
    let got = drive_with(&mut c, vec![s], &mut |rep| {
        if rep.prefill_rows > 0 {
            chunks.push(rep.prefill_rows);
        }
    })
    .remove(0);
    assert_same("long remainder", &got, &cold(&b));
    assert_eq!(got.usage.unwrap().cached_tokens, 192);
    assert_eq!(chunks.iter().sum::<usize>(), 333);
    assert!(
        chunks.len() >= 7 && chunks.iter().all(|&n| n <= 48),
        "{chunks:?}"
    );
}

#[test]
fn a_hit_outlives_its_cancelled_source() {
    let a = GenerateRequest::greedy(ids(200, 512, 9), 50);
    let b = GenerateRequest::greedy(concat(&[&a.prompt_ids[..192], &ids(20, 512, 10)]), 6);
    let mut c = core(tiny("tiny-d64"), cfg(on(0), None));
    let sa = c.submit(a).unwrap();
    // 48-row chunks up to the snapshot at 192 (4 steps), then 8 rows and decode.
    for _ in 0..7 {
        c.step().unwrap().unwrap();
    }
    sa.cancel();
    let out = drive(&mut c, vec![sa]).remove(0);
    assert_eq!(out.reason, Some(FinishReason::Cancelled));
    let (_, got, rows) = {
        let s = c.submit(b.clone()).unwrap();
        let mut rows = 0;
        let o = drive_with(&mut c, vec![s], &mut |rep| rows += rep.prefill_rows).remove(0);
        ((), o, rows)
    };
    assert_same("after a cancel", &got, &cold(&b));
    assert_eq!((got.usage.unwrap().cached_tokens, rows), (192, 20));
}

#[test]
fn a_hit_after_its_source_was_preempted_and_the_source_itself_match_cold_runs() {
    // A pool of 8 blocks: `x` (7 blocks at its end) and `a` (8 at its end)
    // cannot both finish; `a`, the newer, is preempted, its blocks cached.
    let x = GenerateRequest::greedy(ids(10, 512, 11), 400);
    let a = GenerateRequest::greedy(ids(200, 512, 12), 300);
    let b = GenerateRequest::greedy(concat(&[&a.prompt_ids[..192], &ids(9, 512, 13)]), 5);
    let mut c = core(tiny("tiny-d64"), cfg(on(64), Some(8)));
    let mut streams = vec![c.submit(x.clone()).unwrap(), c.submit(a.clone()).unwrap()];
    // Drive by hand, submitting `b` once `a` was preempted.
    let mut by_id: HashMap<u64, Outcome> = HashMap::new();
    let mut steps = 0;
    while let Some(rep) = c.step().unwrap() {
        for s in rep.sampled {
            let o = by_id.entry(s.id).or_default();
            o.tokens.push(s.token);
            o.logits.extend(s.logits);
        }
        if streams.len() == 2 && c.stats().preemptions > 0 {
            streams.push(c.submit(b.clone()).unwrap());
        }
        steps += 1;
        assert!(steps < 5000, "never idle");
    }
    assert_eq!(streams.len(), 3, "never preempted");
    let out: Vec<Outcome> = streams
        .iter_mut()
        .map(|st| {
            let mut o = by_id.remove(&st.id).unwrap_or_default();
            collect_events(st, &mut o);
            o
        })
        .collect();
    assert_same("pressing", &out[0], &cold(&x));
    assert_same("preempted source", &out[1], &cold(&a));
    assert_same("after a preemption", &out[2], &cold(&b));
    // `x` evicted all but the source's first cached block before `a` and
    // `b` were admitted again (both resume from it); `b`, preempted in
    // turn, resumes from the blocks and snapshots it and `a` made.
    assert!(out[2].usage.unwrap().cached_tokens >= 64);
    let st = c.stats();
    assert!(
        st.prefix_cache_hit_tokens >= 192,
        "{}",
        st.prefix_cache_hit_tokens
    );
    assert!(st.preemptions >= 2);
    assert_eq!((st.kv_blocks_used, st.gdn_slots_used), (0, 0));
}

#[test]
fn a_follow_up_turn_resumes_from_the_finished_turn() {
    // 100 prompt tokens + 29 drawn: 128 rows in the state at the end (the
    // last drawn token is not fed), a block end: a snapshot there.
    let first = GenerateRequest::greedy(ids(100, 512, 14), 29);
    let mut c = core(tiny("tiny-d64"), cfg(on(0), None));
    let s = c.submit(first.clone()).unwrap();
    let turn1 = drive(&mut c, vec![s]).remove(0);
    assert_eq!(turn1.tokens.len(), 29);
    let follow = GenerateRequest::greedy(
        concat(&[&first.prompt_ids, &turn1.tokens, &ids(20, 512, 15)]),
        7,
    );
    let s = c.submit(follow.clone()).unwrap();
    let mut rows = 0;
    let turn2 = drive_with(&mut c, vec![s], &mut |rep| rows += rep.prefill_rows).remove(0);
    assert_same("follow-up", &turn2, &cold(&follow));
    assert_eq!((turn2.usage.unwrap().cached_tokens, rows), (128, 149 - 128));
}

#[test]
fn a_whole_prompt_hit_still_computes_its_last_token() {
    // The same 128-token prompt twice: the hit stops one block short, so
    // the last token's row draws the first token.
    let r = GenerateRequest::greedy(ids(128, 512, 16), 4);
    let mut c = core(tiny("tiny-d64"), cfg(on(64), None));
    let (_, again, rows) = one_after_another(&mut c, &r, &r);
    assert_same("repeat", &again, &cold(&r));
    assert_eq!((again.usage.unwrap().cached_tokens, rows), (64, 64));
}

#[test]
fn a_shared_prefix_is_snapshotted_where_the_second_request_branches_off() {
    // Each prompt's last full block ends inside its own tail, so the first
    // request leaves no snapshot at the end of the shared 128 tokens; the
    // second finds those blocks cached and takes one there; the third hits.
    let prefix = ids(128, 512, 17);
    let reqs: Vec<GenerateRequest> = (0..3)
        .map(|i| {
            let tail = ids(100 + 10 * i, 512, 18 + i as u32);
            GenerateRequest::greedy(concat(&[&prefix, &tail]), 4)
        })
        .collect();
    let mut c = core(tiny("tiny-d64"), cfg(on(0), None));
    let mut cached = Vec::new();
    for r in &reqs {
        let s = c.submit(r.clone()).unwrap();
        let got = drive(&mut c, vec![s]).remove(0);
        assert_same("shared prefix", &got, &cold(r));
        cached.push(got.usage.unwrap().cached_tokens);
    }
    assert_eq!(cached, vec![0, 0, 128]);
}
