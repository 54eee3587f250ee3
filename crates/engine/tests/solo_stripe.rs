//! The solo stripe on the CPU engine: an explicit large stripe prefills a
//! lone request in one step (past `step_tokens`), a second arrival sends the
//! next step back to the shared budget (and the stripe comes back when the
//! request is alone again), and `auto` resolves to the CPU's fixed 2048 and
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
fn a_second_arrival_shrinks_the_next_step_and_the_stripe_returns_alone() {
    let mut c = core(tiny("tiny-d64"), cfg(SoloStripe::Tokens(256)));
    let a = c
        .submit(GenerateRequest::greedy(ids(1000, 512, 1), 1))
        .unwrap();
    let r1 = c.step().unwrap().unwrap();
    assert_eq!(r1.sequences.len(), 1);
    assert_eq!(r1.prefill_rows, 256, "alone: the solo stripe");
    let b = c
        .submit(GenerateRequest::greedy(ids(40, 512, 2), 1))
        .unwrap();
    let r2 = c.step().unwrap().unwrap();
    assert_eq!(
        r2.sequences.iter().map(|s| s.1).collect::<Vec<_>>(),
        vec![32, 32],
        "shared: prefill chunks of 32 within 64 rows"
    );
    let r3 = c.step().unwrap().unwrap();
    assert_eq!(r3.rows(), 40, "b's last 8 rows and a's next chunk of 32");
    // b drew its only token and finished: a is alone again.
    assert_eq!(c.stats().running, 1);
    let r4 = c.step().unwrap().unwrap();
    assert_eq!(r4.prefill_rows, 256, "alone again: the stripe again");
    let out = drive(&mut c, vec![a, b]);
    assert_eq!((out[0].streamed.len(), out[1].streamed.len()), (1, 1));
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
