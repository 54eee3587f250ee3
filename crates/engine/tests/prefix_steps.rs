//! A prefix hit whose remainder fits one step's budget draws its first
//! token after exactly one engine step (CPU backend, tiny synthetic model):
//! a follow-up adding 64, 200 or 256 tokens to a cached prompt, and one
//! resending the first turn's answer too (its cached chain ends a block past
//! the hit's snapshot), each equal to a cold run (≤ 1e-5 relative). A chunk
//! that does not finish the prefill still stops at the prompt's last full
//! block, so that snapshot is taken.

mod common;

use common::{alone, core, drive, ids, rel_err, tiny, Outcome};
use headroom_engine::{
    EngineConfig, GenerateRequest, PrefixCacheSettings, SchedulerSettings, SoloStripe,
};

fn cfg(prefix: PrefixCacheSettings) -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerSettings {
            prefill_chunk: 512,
            step_tokens: 1024,
            solo_stripe: SoloStripe::Tokens(512),
            ..SchedulerSettings::default()
        },
        max_running: 4,
        max_context: 2048,
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

fn assert_same(name: &str, got: &Outcome, cold: &Outcome) {
    assert!(got.error.is_none(), "{name}: {:?}", got.error);
    assert_eq!(got.tokens, cold.tokens, "{name}: tokens");
    for (t, (a, b)) in got.logits.iter().zip(&cold.logits).enumerate() {
        let e = rel_err(a, b);
        assert!(e <= 1e-5, "{name} token {t}: {e:.2e}");
    }
}

/// Runs `first`, then the follow-up `make(first's tokens)`; returns the
/// follow-up's outcome, its steps up to and including the one drawing its
/// first token, and the prefill rows of that step.
fn follow_up(
    first: &GenerateRequest,
    make: &dyn Fn(&[u32]) -> GenerateRequest,
) -> (GenerateRequest, Outcome, usize, usize) {
    let mut c = core(tiny("tiny-d64"), cfg(on()));
    let s = c.submit(first.clone()).unwrap();
    let turn1 = drive(&mut c, vec![s]).remove(0);
    let next = make(&turn1.tokens);
    let mut s = c.submit(next.clone()).unwrap();
    let (mut steps, mut rows) = (0, 0);
    let mut out = Outcome::default();
    while let Some(rep) = c.step().unwrap() {
        if out.tokens.is_empty() {
            steps += 1;
            rows = rep.prefill_rows;
        }
        for r in rep.sampled {
            out.tokens.push(r.token);
            out.logits.extend(r.logits);
        }
    }
    common::collect_events(&mut s, &mut out);
    (next, out, steps, rows)
}

#[test]
fn a_hit_with_a_small_remainder_draws_its_first_token_in_one_step() {
    let first = GenerateRequest::greedy(ids(640, 512, 200), 4);
    let off = cfg(PrefixCacheSettings::off());
    for new in [64usize, 200, 256] {
        let (next, got, steps, rows) = follow_up(&first, &|_| {
            GenerateRequest::greedy([&first.prompt_ids[..], &ids(new, 512, 201)].concat(), 3)
        });
        assert_eq!((steps, rows), (1, new), "+{new} tokens");
        assert_eq!(got.usage.unwrap().cached_tokens, 640);
        assert_same("follow-up", &got, &alone(&|| tiny("tiny-d64"), &off, next));
    }
    // Resending the answer (100 tokens: the cached chain ends at 704, a
    // block past the snapshot at 640) plus 200 new ones: still one step.
    let first = GenerateRequest::greedy(ids(640, 512, 202), 100);
    let (next, got, steps, rows) = follow_up(&first, &|answer| {
        GenerateRequest::greedy(
            [&first.prompt_ids[..], answer, &ids(200, 512, 203)].concat(),
            3,
        )
    });
    assert_eq!((steps, rows), (1, 300));
    assert_eq!(got.usage.unwrap().cached_tokens, 640);
    assert_same(
        "with the answer",
        &got,
        &alone(&|| tiny("tiny-d64"), &off, next),
    );
}

#[test]
fn a_cold_prompt_still_stops_at_its_last_full_block() {
    // 1,100 tokens in chunks of 512: the third chunk would finish the
    // prompt but stops at 1,088 (its last full block) for the snapshot the
    // next turn resumes from; only a hit's remainder skips it.
    let r = GenerateRequest::greedy(ids(1100, 512, 204), 2);
    let mut c = core(tiny("tiny-d64"), cfg(on()));
    let s1 = c.submit(r.clone()).unwrap();
    let s2 = c
        .submit(GenerateRequest::greedy(ids(10, 512, 205), 2))
        .unwrap();
    let mut chunks = Vec::new();
    while let Some(rep) = c.step().unwrap() {
        if let Some(&(_, n)) = rep.sequences.iter().find(|(id, _)| *id == s1.id) {
            chunks.push(n);
        }
    }
    assert_eq!(&chunks[..4], &[512, 512, 64, 12], "{chunks:?}");
    assert_eq!(c.stats().prefix_snapshot_slots_used, 1, "at 1,088");
    drop(s2);
}
