//! The solo stripe on the CPU engine: an explicit large stripe prefills a
//! lone request in one step (past `step_tokens`), the oldest prefill keeps
//! the stripe while no row decodes (a burst of long prompts answers its first
//! as fast as a lone one), a decoding row sends the step back to the shared
//! budget, and `auto` resolves to the CPU's fixed 2048 and
//! says so in the stats.

mod common;

use common::{core, drive, ids, tiny};
use headroom_engine::{EngineConfig, GenerateRequest, SchedulerSettings, SoloStripe, StripeBound};

fn cfg(solo: SoloStripe) -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerSettings {
            prefill_chunk: 32,
            step_tokens: 64,
            solo_stripe: solo,
            ..SchedulerSettings::default()
        },
        max_running: 4,
        max_context: 4096,
        // Step shapes as the stripe alone makes them (prefix caching would
        // end a prefill at its snapshot point first).
        prefix_cache: headroom_engine::PrefixCacheSettings::off(),
        ..EngineConfig::default()
    }
}

#[test]
fn an_explicit_large_stripe_prefills_a_lone_request_in_one_step() {
    let mut c = core(tiny("tiny-d64"), cfg(SoloStripe::Tokens(4096)));
    let st = c.stats();
    assert_eq!(st.solo_stripe.bound, StripeBound::Explicit);
    assert_eq!(
        (st.solo_stripe.tokens, st.settings.solo_stripe),
        (4096, SoloStripe::Tokens(4096))
    );
    let s = c
        .submit(GenerateRequest::greedy(ids(300, 512, 3), 2))
        .unwrap();
    let first = c.step().unwrap().unwrap();
    assert_eq!(first.prefill_rows, 300, "the whole prompt in one step");
    assert_eq!(first.sampled.len(), 1, "the first token after one step");
    let out = drive(&mut c, vec![s]);
    assert_eq!(out[0].streamed.len(), 2);
    assert_eq!(c.stats().steps, 2, "one prefill step, one decode step");
}

#[test]
fn the_oldest_prefill_keeps_the_stripe_while_nothing_decodes() {
    let mut c = core(tiny("tiny-d64"), cfg(SoloStripe::Tokens(256)));
    let a = c
        .submit(GenerateRequest::greedy(ids(1000, 512, 1), 2))
        .unwrap();
    let r1 = c.step().unwrap().unwrap();
    assert_eq!(r1.sequences.len(), 1);
    assert_eq!(r1.prefill_rows, 256, "alone: the solo stripe");
    let b = c
        .submit(GenerateRequest::greedy(ids(40, 512, 2), 2))
        .unwrap();
    // No row decodes yet: a, the oldest, takes the stripe again (FCFS) and
    // b waits, until a's prompt is done.
    for rows in [256, 256, 232] {
        let r = c.step().unwrap().unwrap();
        assert_eq!(
            r.sequences.iter().map(|s| s.1).collect::<Vec<_>>(),
            vec![rows]
        );
    }
    // a decodes now: the shared budget, a's row and b's chunks of 32.
    let r5 = c.step().unwrap().unwrap();
    assert_eq!(
        r5.sequences.iter().map(|s| s.1).collect::<Vec<_>>(),
        vec![1, 32],
        "shared: a decode row, then a prefill chunk of 32 within 64 rows"
    );
    let out = drive(&mut c, vec![a, b]);
    assert_eq!((out[0].streamed.len(), out[1].streamed.len()), (2, 2));
}

#[test]
fn a_burst_of_long_prompts_answers_the_first_in_one_step() {
    let mut c = core(tiny("tiny-d64"), cfg(SoloStripe::Tokens(4096)));
    let reqs: Vec<_> = (0..3)
        .map(|i| {
            c.submit(GenerateRequest::greedy(ids(300, 512, 10 + i), 2))
                .unwrap()
        })
        .collect();
    let first = c.step().unwrap().unwrap();
    assert_eq!(first.prefill_rows, 300, "the first prompt whole, alone");
    assert_eq!(first.sampled.len(), 1, "its first token after one step");
    let second = c.step().unwrap().unwrap();
    assert_eq!(
        second.sequences.iter().map(|s| s.1).collect::<Vec<_>>(),
        vec![1, 32, 31],
        "then the shared budget: its decode row and chunks of the others"
    );
    let out = drive(&mut c, reqs);
    assert!(out.iter().all(|o| o.streamed.len() == 2));
}

#[test]
fn auto_on_the_cpu_resolves_to_2048_and_says_why() {
    let mut c = core(tiny("tiny-d64"), cfg(SoloStripe::Auto));
    let st = c.stats();
    assert_eq!(st.solo_stripe.requested, SoloStripe::Auto);
    assert_eq!(
        (st.solo_stripe.tokens, st.solo_stripe.bound),
        (2048, StripeBound::CpuFixed)
    );
    assert!(
        st.solo_stripe.reason.contains("CPU"),
        "{}",
        st.solo_stripe.reason
    );
    assert_eq!(st.settings.solo_stripe, SoloStripe::Tokens(2048));
    let json = serde_json::to_value(&st).unwrap();
    assert_eq!(json["solo_stripe"]["requested"], "auto");
    assert_eq!(json["solo_stripe"]["bound"], "cpu_fixed");
    assert_eq!(json["settings"]["solo_stripe"], 2048);
    let s = c
        .submit(GenerateRequest::greedy(ids(2100, 512, 5), 1))
        .unwrap();
    assert_eq!(c.step().unwrap().unwrap().prefill_rows, 2048);
    assert_eq!(c.step().unwrap().unwrap().prefill_rows, 52);
    assert_eq!(drive(&mut c, vec![s])[0].streamed.len(), 1);
}
