//! Cancellation frees KV blocks and the GDN slot (mid-prefill and
//! mid-decode, by counts); paged and contiguous KV give the same logits and
//! differ only in when blocks are taken; the threaded handle streams tokens,
//! refuses what it must, and shuts down cleanly; `submit_each` queues an
//! offline batch in one command and refuses in place.

mod common;

use common::{collect_events, core, drive, ids, rel_err, tiny, Outcome};
use headroom_engine::{
    spawn, EngineConfig, FinishReason, GenerateRequest, KvBackendKind, KvStorage,
    SchedulerSettings, SoloStripe, StreamEvent, SubmitError, KV_BLOCK_ROWS,
};

fn small_chunks() -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerSettings {
            prefill_chunk: 64,
            step_tokens: 128,
            solo_stripe: SoloStripe::Tokens(64),
            ..SchedulerSettings::default()
        },
        max_running: 4,
        max_context: 1024,
        ..EngineConfig::default()
    }
}

#[test]
fn cancelling_mid_prefill_and_mid_decode_frees_blocks_and_slots() {
    for kv in [KvBackendKind::Contiguous, KvBackendKind::Paged] {
        let mut c = core(
            tiny("tiny-d64"),
            EngineConfig {
                kv_backend: kv,
                ..small_chunks()
            },
        );
        let total = c.stats().kv_blocks_free;
        let keep = c
            .submit(GenerateRequest::greedy(ids(10, 512, 1), 500))
            .unwrap();
        let prefilling = c
            .submit(GenerateRequest::greedy(ids(600, 512, 2), 10))
            .unwrap();
        let decoding = c
            .submit(GenerateRequest::greedy(ids(20, 512, 3), 500))
            .unwrap();
        for _ in 0..3 {
            c.step().unwrap();
        }
        let before = c.stats();
        assert_eq!((before.running, before.gdn_slots_free), (3, 1), "{kv}");
        assert!(before.kv_blocks_used > 0);
        // Mid-prefill: 600 prompt tokens in chunks of 64 are not done after 3 steps.
        let mut o = Outcome::default();
        prefilling.cancel();
        c.step().unwrap();
        let mid = c.stats();
        let freed = before.kv_blocks_used - mid.kv_blocks_used;
        let expect = match kv {
            KvBackendKind::Contiguous => (600 + 10usize).div_ceil(KV_BLOCK_ROWS),
            KvBackendKind::Paged => 3 * 64 / KV_BLOCK_ROWS, // the rows written
        };
        assert!(
            freed >= expect,
            "{kv}: freed {freed} blocks, expected >= {expect}"
        );
        assert_eq!((mid.running, mid.gdn_slots_free, mid.cancelled), (2, 2, 1));
        let mut p = prefilling;
        collect_events(&mut p, &mut o);
        assert_eq!(o.reason, Some(FinishReason::Cancelled));
        assert!(o.tokens.is_empty() && o.streamed.is_empty());
        // Mid-decode.
        for _ in 0..5 {
            c.step().unwrap();
        }
        drop(decoding);
        c.step().unwrap();
        let after = c.stats();
        assert_eq!(
            (after.running, after.gdn_slots_free, after.cancelled),
            (1, 3, 2)
        );
        keep.cancel();
        assert!(c.step().unwrap().is_none());
        let end = c.stats();
        assert_eq!((end.kv_blocks_used, end.kv_blocks_free), (0, total), "{kv}");
        assert_eq!((end.gdn_slots_free, end.cancelled, end.running), (4, 3, 0));
        // A freed slot is reset: a new request there gives the same tokens as
        // in a fresh engine.
        let r = GenerateRequest::greedy(ids(90, 512, 4), 5);
        let again = c.submit(r.clone()).unwrap();
        let got = drive(&mut c, vec![again]).remove(0);
        let fresh = common::alone(&|| tiny("tiny-d64"), &small_chunks(), r);
        assert_eq!(got.tokens, fresh.tokens);
        for (a, b) in got.logits.iter().zip(&fresh.logits) {
            assert!(rel_err(a, b) <= 1e-5);
        }
    }
}

#[test]
fn paged_and_contiguous_give_the_same_logits_and_report_their_storage() {
    let reqs: Vec<_> = [(300usize, 5usize), (70, 9), (130, 3)]
        .iter()
        .enumerate()
        .map(|(i, &(n, m))| GenerateRequest::greedy(ids(n, 512, 10 + i as u32), m))
        .collect();
    let mut runs = Vec::new();
    for kv in [KvBackendKind::Contiguous, KvBackendKind::Paged] {
        let mut c = core(
            tiny("tiny-d64"),
            EngineConfig {
                kv_backend: kv,
                // Both arms chunk alike (prefix caching would end prefill
                // chunks at snapshot points): bit-equal numbers.
                prefix_cache: headroom_engine::PrefixCacheSettings::off(),
                ..small_chunks()
            },
        );
        let res = c.kv().clone();
        let storage = match kv {
            KvBackendKind::Paged => KvStorage::Blocks,
            KvBackendKind::Contiguous => KvStorage::PerSlot,
        };
        assert_eq!(
            (res.requested, res.resolved, res.storage),
            (kv, kv, storage)
        );
        assert!(res.reason.is_none());
        let streams: Vec<_> = reqs.iter().map(|r| c.submit(r.clone()).unwrap()).collect();
        c.step().unwrap();
        let used = c.stats().kv_blocks_used;
        match kv {
            // Prompt + max tokens reserved at admission for the two
            // admitted (the 128-row step is full after their chunks).
            KvBackendKind::Contiguous => assert_eq!(used, 5 + 2),
            // Only the 128 rows of the first step (64 + 64).
            KvBackendKind::Paged => assert_eq!(used, 2),
        }
        runs.push(drive(&mut c, streams));
    }
    for (i, (a, b)) in runs[0].iter().zip(&runs[1]).enumerate() {
        assert_eq!(a.tokens, b.tokens, "request {i}");
        for (x, y) in a.logits.iter().zip(&b.logits) {
            assert_eq!(rel_err(x, y), 0.0, "same storage, same numbers");
        }
    }
}

#[test]
fn the_handle_streams_refuses_and_shuts_down() {
    let h = spawn(tiny("tiny-d64"), small_chunks()).unwrap();
    let h2 = h.clone();
    assert_eq!(h.max_context(), 1024);
    let too_long = h.submit(GenerateRequest::greedy(ids(1000, 512, 1), 100));
    assert_eq!(
        too_long.unwrap_err(),
        SubmitError::TooLong {
            tokens: 1100,
            limit: 1024
        }
    );
    // Bad ids are answered on the stream.
    let mut bad = h
        .submit(GenerateRequest::greedy(vec![1, 99_999], 3))
        .unwrap();
    assert!(
        matches!(bad.blocking_next(), Some(StreamEvent::Error(e)) if e.contains("out of range"))
    );
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let h = h2.clone();
            std::thread::spawn(move || {
                let mut s = h
                    .submit(GenerateRequest::greedy(ids(30 + 20 * i, 512, i as u32), 6))
                    .unwrap();
                let mut tokens = Vec::new();
                loop {
                    match s.blocking_next() {
                        Some(StreamEvent::Token(t)) => tokens.push(t),
                        Some(StreamEvent::Finished {
                            reason,
                            usage,
                            attention,
                        }) => {
                            assert_eq!(reason, FinishReason::Length);
                            assert_eq!(usage.completion_tokens, 6);
                            assert!(usage.ttft_ms > 0.0);
                            // One entry per (layer, route, block) that ran: the
                            // tiny model's one full layer, prefill and decode rows.
                            assert!(!attention.is_empty());
                            assert!(
                                attention.iter().all(|a| a.layer == attention[0].layer),
                                "tiny models have one full layer: {attention:?}"
                            );
                            assert!(attention.iter().all(|a| a.calls > 0));
                            assert!(attention.iter().any(|a| a.transient_bytes > 0));
                            return tokens;
                        }
                        other => panic!("{other:?}"),
                    }
                }
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap().len(), 6);
    }
    // A dropped stream is cancelled.
    let s = h
        .submit(GenerateRequest::greedy(ids(500, 512, 9), 400))
        .unwrap();
    drop(s);
    let mut waited = 0;
    while h.stats().cancelled < 1 {
        std::thread::sleep(std::time::Duration::from_millis(10));
        waited += 1;
        assert!(waited < 2000, "the dropped stream was never cancelled");
    }
    let st = h.stats();
    assert_eq!((st.finished, st.refused, st.gdn_slots_free), (4, 1, 4));
    assert_eq!(st.settings, small_chunks().scheduler);
    h.shutdown();
    assert_eq!(
        h2.submit(GenerateRequest::greedy(vec![1], 1)).unwrap_err(),
        SubmitError::ShuttingDown
    );
}

#[test]
fn submit_each_plans_the_batch_from_one_step_and_refuses_in_place() {
    let h = spawn(tiny("tiny-d64"), small_chunks()).unwrap();
    // Three prompts of 30 tokens fit one step (128 tokens, chunks of 64);
    // the second request is too long for the 1,024-token context.
    let rs = vec![
        GenerateRequest::greedy(ids(30, 512, 1), 3),
        GenerateRequest::greedy(ids(1000, 512, 2), 100),
        GenerateRequest::greedy(ids(30, 512, 3), 3),
        GenerateRequest::greedy(ids(30, 512, 4), 3),
    ];
    let mut out = h.submit_each(rs);
    assert_eq!(out.len(), 4);
    assert_eq!(
        out[1].as_ref().map(|_| ()).unwrap_err(),
        &SubmitError::TooLong {
            tokens: 1100,
            limit: 1024
        }
    );
    for (i, s) in out.iter_mut().enumerate().filter(|(i, _)| *i != 1) {
        let s = s.as_mut().unwrap();
        let mut tokens = 0;
        loop {
            match s.blocking_next() {
                Some(StreamEvent::Token(_)) => tokens += 1,
                Some(StreamEvent::Finished { reason, .. }) => {
                    assert_eq!(reason, FinishReason::Length);
                    break;
                }
                other => panic!("request {i}: {other:?}"),
            }
        }
        assert_eq!(tokens, 3, "request {i}");
    }
    // One command: the first step prefilled all three (a prefill step gives
    // each its first token, then two decode steps); queued one by one, the
    // engine could start stepping on the first alone.
    let st = h.current_stats().unwrap();
    assert_eq!((st.finished, st.steps), (3, 3));
    assert_eq!(h.stats().refused, 1, "the refusal is counted once");
    h.shutdown();
    let after = h.submit_each(vec![GenerateRequest::greedy(vec![1], 1)]);
    assert_eq!(
        after[0].as_ref().map(|_| ()).unwrap_err(),
        &SubmitError::ShuttingDown
    );
}
