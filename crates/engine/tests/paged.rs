//! Paged KV in the engine on the CPU backend: blocks are taken as a
//! sequence grows and given back when it ends (finish or cancel); under a
//! pool too small for everyone the most recently admitted sequence is
//! preempted and recomputed, and every request's greedy tokens and logits
//! equal its run alone (paged and contiguous, ≤ 1e-5 relative) with each
//! token streamed once; admission stays first come, first served; a pool
//! far smaller than the requests' total still finishes them all; a request
//! larger than the whole pool is refused with the numbers.

mod common;

use common::{alone, core, drive, drive_with, ids, rel_err, tiny, Outcome};
use headroom_engine::{
    EngineConfig, FinishReason, GenerateRequest, KvBackendKind, SchedulerSettings, SoloStripe,
    SubmitError,
};

fn cfg(pool_blocks: Option<usize>, kv: KvBackendKind) -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerSettings {
            prefill_chunk: 48,
            step_tokens: 160,
            solo_stripe: SoloStripe::Tokens(2048),
            ..SchedulerSettings::default()
        },
        kv_backend: kv,
        kv_pool_blocks: pool_blocks,
        max_running: 16,
        max_context: 1024,
        ..EngineConfig::default()
    }
}

#[test]
fn blocks_are_taken_as_a_sequence_grows_and_given_back_at_finish_and_cancel() {
    let mut c = core(tiny("tiny-d64"), cfg(None, KvBackendKind::Paged));
    assert_eq!(c.stats().kv_blocks_free, 16 * 16, "16 slots at 1024 tokens");
    let one = c.submit(GenerateRequest::greedy(vec![7], 70)).unwrap();
    c.step().unwrap().unwrap();
    let st = c.stats();
    assert_eq!(
        (st.kv_blocks_used, st.gdn_slots_used, st.gdn_slots_free),
        (1, 1, 15),
        "a 1-token request holds one block, not its max_tokens"
    );
    // 1 prompt row + 63 decode rows fill the first block; the next needs a second.
    for _ in 0..63 {
        c.step().unwrap().unwrap();
    }
    assert_eq!(c.stats().kv_blocks_used, 1);
    c.step().unwrap().unwrap();
    assert_eq!(c.stats().kv_blocks_used, 2);
    let long = c
        .submit(GenerateRequest::greedy(ids(150, 512, 3), 50))
        .unwrap();
    c.step().unwrap().unwrap();
    assert_eq!(
        c.stats().kv_blocks_used,
        3,
        "its first 48-row chunk: one block"
    );
    long.cancel();
    c.step().unwrap().unwrap();
    let st = c.stats();
    assert_eq!(
        (st.kv_blocks_used, st.cancelled),
        (2, 1),
        "cancel gives blocks back"
    );
    let out = drive(&mut c, vec![one]);
    assert_eq!(out[0].reason, Some(FinishReason::Length));
    let st = c.stats();
    assert_eq!(
        (st.kv_blocks_used, st.kv_blocks_free, st.gdn_slots_used),
        (0, 256, 0),
        "finish gives every block and the slot back"
    );
    assert_eq!(st.preemptions, 0);
}

fn requests() -> Vec<GenerateRequest> {
    (0..16)
        .map(|i| {
            let prompt = [5usize, 130, 17, 64, 1, 90, 33, 63][i % 8] + i;
            GenerateRequest::greedy(ids(prompt, 512, i as u32 + 1), 40 + (i * 7) % 50)
        })
        .collect()
}

fn together(cfg: &EngineConfig, reqs: &[GenerateRequest]) -> (Vec<Outcome>, u64) {
    let mut c = core(tiny("tiny-d64"), cfg.clone());
    let streams: Vec<_> = reqs.iter().map(|r| c.submit(r.clone()).unwrap()).collect();
    let out = drive(&mut c, streams);
    let st = c.stats();
    assert_eq!(
        (st.finished, st.kv_blocks_used, st.gdn_slots_used),
        (16, 0, 0)
    );
    (out, st.preemptions)
}

#[test]
fn preempted_and_unpressured_runs_give_each_request_its_tokens_alone() {
    let make = || tiny("tiny-d64");
    let reqs = requests();
    // The largest request needs 3 blocks alone; 16 running need ~45.
    let tight = cfg(Some(12), KvBackendKind::Paged);
    let (pressured, preemptions) = together(&tight, &reqs);
    assert!(preemptions >= 4, "the tight pool preempted ({preemptions})");
    let (roomy, none) = together(&cfg(None, KvBackendKind::Paged), &reqs);
    assert_eq!(none, 0);
    let (contiguous, _) = together(&cfg(None, KvBackendKind::Contiguous), &reqs);
    for (i, r) in reqs.iter().enumerate() {
        let solo = alone(&make, &cfg(None, KvBackendKind::Paged), r.clone());
        let solo_contiguous = alone(&make, &cfg(None, KvBackendKind::Contiguous), r.clone());
        assert_eq!(solo.tokens.len(), r.max_tokens);
        for (name, got) in [
            ("pressured", &pressured[i]),
            ("roomy", &roomy[i]),
            ("contiguous", &contiguous[i]),
            ("alone contiguous", &solo_contiguous),
        ] {
            assert_eq!(got.tokens, solo.tokens, "{name} request {i}: tokens");
            assert_eq!(
                got.streamed, got.tokens,
                "{name} request {i}: every token streamed once"
            );
            assert_eq!(got.reason, Some(FinishReason::Length), "{name} {i}");
            assert_eq!(got.logits.len(), solo.logits.len(), "{name} {i}");
            for (s, (a, b)) in got.logits.iter().zip(&solo.logits).enumerate() {
                let e = rel_err(a, b);
                assert!(e <= 1e-5, "{name} request {i} token {s}: {e:.2e}");
            }
            let u = got.usage.unwrap();
            assert_eq!(
                (u.prompt_tokens, u.completion_tokens),
                (r.prompt_ids.len(), r.max_tokens)
            );
        }
    }
}

#[test]
fn under_pressure_requests_start_and_finish_first_come_first_served() {
    // Eight equal requests, each 2 blocks at its end, in a pool of 5 blocks.
    let mut c = core(tiny("tiny-d64"), cfg(Some(5), KvBackendKind::Paged));
    let streams: Vec<_> = (0..8)
        .map(|i| {
            c.submit(GenerateRequest::greedy(ids(60, 512, i), 30))
                .unwrap()
        })
        .collect();
    let order: Vec<u64> = streams.iter().map(|s| s.id).collect();
    let (mut first_seen, mut finished) = (Vec::new(), Vec::new());
    let mut last_tokens: std::collections::HashMap<u64, usize> = Default::default();
    let out = drive_with(&mut c, streams, &mut |rep| {
        for &(id, _) in &rep.sequences {
            if !first_seen.contains(&id) {
                first_seen.push(id);
            }
        }
        for s in &rep.sampled {
            let n = last_tokens.entry(s.id).or_default();
            *n += 1;
            if *n == 30 {
                finished.push(s.id);
            }
        }
    });
    assert!(c.stats().preemptions > 0, "the pool was short");
    assert_eq!(first_seen, order, "admitted in submission order");
    assert_eq!(finished, order, "finished in submission order");
    assert!(out
        .iter()
        .all(|o| o.tokens.len() == 30 && o.error.is_none()));
}

#[test]
fn max_tokens_far_beyond_the_pool_finish_without_deadlock() {
    // Each request alone fills the 4-block pool (10 + 240 rows); six of them.
    let mut c = core(tiny("tiny-d64"), cfg(Some(4), KvBackendKind::Paged));
    let streams: Vec<_> = (0..6)
        .map(|i| {
            c.submit(GenerateRequest::greedy(ids(10, 512, i), 246))
                .unwrap()
        })
        .collect();
    let out = drive(&mut c, streams);
    for o in &out {
        assert_eq!(
            (o.reason, o.tokens.len(), o.error.as_deref()),
            (Some(FinishReason::Length), 246, None)
        );
    }
    let st = c.stats();
    assert_eq!((st.finished, st.kv_blocks_free), (6, 4));
}

#[test]
fn a_request_larger_than_the_whole_pool_is_refused_with_the_numbers() {
    let mut c = core(tiny("tiny-d64"), cfg(Some(4), KvBackendKind::Paged));
    let err = c
        .submit(GenerateRequest::greedy(ids(200, 512, 1), 57))
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, SubmitError::NeverFits { .. }), "{err:?}");
    for want in ["257 tokens need 5 KV blocks", "pool holds 4 blocks"] {
        assert!(msg.contains(want), "{want}: {msg}");
    }
    // One that fits exactly runs.
    let s = c
        .submit(GenerateRequest::greedy(ids(200, 512, 1), 56))
        .unwrap();
    let out = drive(&mut c, vec![s]);
    assert_eq!(out[0].tokens.len(), 56);
    assert_eq!(c.stats().refused, 1);
}
