//! Batch and chunking invariance on the CPU backend in f32: a request's
//! greedy tokens and logits do not depend on what it is batched with or how
//! its prompt is chunked (≤ 1e-5 relative on logits).

mod common;

use common::{alone, core, drive, fixture, ids, rel_err, tiny};
use headroom_core::RouteRequest;
use headroom_engine::{EngineConfig, FinishReason, GenerateRequest, SchedulerSettings, SoloStripe};
use headroom_model::{AttentionPlan, ForwardOptions, LogitsRows};

fn settings(chunk: usize, step: usize, solo: usize) -> SchedulerSettings {
    SchedulerSettings {
        prefill_chunk: chunk,
        step_tokens: step,
        solo_stripe: SoloStripe::Tokens(solo),
        ..SchedulerSettings::default()
    }
}

#[test]
fn eight_concurrent_requests_equal_each_alone() {
    let make = || tiny("tiny-d64");
    let cfg = EngineConfig {
        scheduler: settings(48, 160, 2048),
        max_running: 8,
        ..EngineConfig::default()
    };
    let lens = [5usize, 130, 17, 64, 1, 200, 33, 90];
    let max_tokens = [6usize, 3, 9, 5, 7, 4, 8, 2];
    let reqs: Vec<GenerateRequest> = lens
        .iter()
        .zip(max_tokens)
        .enumerate()
        .map(|(i, (&n, m))| GenerateRequest::greedy(ids(n, 512, i as u32 + 1), m))
        .collect();
    let mut c = core(make(), cfg.clone());
    let streams: Vec<_> = reqs.iter().map(|r| c.submit(r.clone()).unwrap()).collect();
    // The first step packs several sequences' prefill rows into one batch.
    let together = drive(&mut c, streams);
    for (i, r) in reqs.iter().enumerate() {
        let solo = alone(&make, &cfg, r.clone());
        let got = &together[i];
        assert_eq!(got.tokens, solo.tokens, "request {i} tokens");
        assert_eq!(
            got.tokens.len(),
            max_tokens[i],
            "request {i} ran to its length"
        );
        assert_eq!(got.reason, Some(FinishReason::Length));
        assert_eq!(got.streamed, got.tokens, "request {i} streamed every token");
        for (s, (a, b)) in got.logits.iter().zip(&solo.logits).enumerate() {
            let e = rel_err(a, b);
            assert!(e <= 1e-5, "request {i} step {s}: {e:.2e}");
        }
        let u = got.usage.unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens),
            (lens[i], max_tokens[i])
        );
    }
    let st = c.stats();
    assert_eq!((st.running, st.waiting, st.finished), (0, 0, 8));
    assert_eq!(st.kv_blocks_used, 0);
    assert_eq!(st.gdn_slots_free, 8);
}

#[test]
fn several_prefills_share_one_step() {
    // Without prefix caching: it would end the 70-token prefill at its
    // snapshot point (64) first.
    let cfg = EngineConfig {
        prefix_cache: headroom_engine::PrefixCacheSettings::off(),
        ..EngineConfig::default()
    };
    let mut c = core(tiny("tiny-d64"), cfg);
    let a = c
        .submit(GenerateRequest::greedy(ids(40, 512, 1), 2))
        .unwrap();
    let b = c
        .submit(GenerateRequest::greedy(ids(70, 512, 2), 2))
        .unwrap();
    let rep = c.step().unwrap().unwrap();
    assert_eq!(rep.sequences, vec![(a.id, 40), (b.id, 70)]);
    assert_eq!((rep.prefill_rows, rep.decode_rows), (110, 0));
    let rep = c.step().unwrap().unwrap();
    assert_eq!(
        (rep.prefill_rows, rep.decode_rows),
        (0, 2),
        "then both decode together"
    );
}

/// The logits every drawn token came from, recomputed in one pass over
/// prompt + generated tokens.
fn one_pass(
    model: &headroom_model::Qwen35Model<headroom_cpu::CpuBackend>,
    prompt: &[u32],
    tokens: &[u32],
    route: RouteRequest,
) -> Vec<Vec<f32>> {
    let mut all = prompt.to_vec();
    all.extend(&tokens[..tokens.len() - 1]);
    let opts = ForwardOptions {
        attention: AttentionPlan::Uniform(route),
        chunk: None,
        logits: LogitsRows::All,
    };
    let v = model.vocab_size();
    let logits = model.forward_logits(&all, &opts).unwrap();
    (prompt.len() - 1..all.len())
        .map(|r| logits[r * v..(r + 1) * v].to_vec())
        .collect()
}

fn check_chunking(
    make: &dyn Fn() -> headroom_model::Qwen35Model<headroom_cpu::CpuBackend>,
    prompt_len: usize,
    route: RouteRequest,
) {
    let reference_model = make();
    let vocab = reference_model.vocab_size();
    let prompt = ids(prompt_len, vocab, 5);
    for chunk in [512usize, 37, 1] {
        let cfg = EngineConfig {
            scheduler: settings(chunk, 2048, chunk),
            attention: AttentionPlan::Uniform(route),
            max_context: 2048,
            ..EngineConfig::default()
        };
        // Alone: every chunk is `chunk` rows.
        let solo = alone(make, &cfg, GenerateRequest::greedy(prompt.clone(), 4));
        let want = one_pass(&reference_model, &prompt, &solo.tokens, route);
        for (s, (a, b)) in solo.logits.iter().zip(&want).enumerate() {
            let e = rel_err(a, b);
            assert!(e <= 1e-5, "chunk {chunk} {route} step {s}: {e:.2e}");
        }
        // Mixed with another request's decode rows in the same steps.
        let mut c = core(make(), cfg.clone());
        let other = c
            .submit(GenerateRequest::greedy(ids(3, vocab, 9), 400))
            .unwrap();
        while c.step().unwrap().unwrap().sampled.is_empty() {}
        let s = c
            .submit(GenerateRequest::greedy(prompt.clone(), 4))
            .unwrap();
        let (sid, oid) = (s.id, other.id);
        let mut mixed_steps = 0;
        let out = common::drive_with(&mut c, vec![s, other], &mut |rep| {
            let ids: Vec<u64> = rep.sequences.iter().map(|x| x.0).collect();
            if ids.contains(&sid) && ids.contains(&oid) && rep.prefill_rows > 0 {
                assert_eq!(
                    rep.decode_rows, 1,
                    "the other request decodes beside the prefill"
                );
                mixed_steps += 1;
            }
        });
        assert!(
            mixed_steps >= 1,
            "chunk {chunk}: no step mixed prefill and decode"
        );
        assert_eq!(out[0].tokens, solo.tokens, "chunk {chunk}: mixed tokens");
        for (st, (a, b)) in out[0].logits.iter().zip(&want).enumerate() {
            let e = rel_err(a, b);
            assert!(e <= 1e-5, "chunk {chunk} mixed step {st}: {e:.2e}");
        }
    }
}

#[test]
fn chunks_of_512_37_and_1_equal_one_pass_on_a_synthetic_model() {
    check_chunking(
        &|| tiny("tiny-d64"),
        1100,
        RouteRequest::Composed { query_block: 128 },
    );
    check_chunking(&|| tiny("tiny-d256"), 600, RouteRequest::Fused);
}

#[test]
fn chunks_equal_one_pass_on_the_transformers_fixtures() {
    for name in ["moe_d64", "dense_d64", "next_d128", "moe_d256"] {
        let route = RouteRequest::Composed { query_block: 64 };
        check_chunking(&|| fixture(name), 300, route);
    }
}
