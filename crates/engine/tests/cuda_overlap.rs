//! The step overlap on the CUDA backend (`crates/engine/src/overlap.rs`):
//! each decode step queued before the last one's tokens are read, its
//! embedding taking them where the device drew them
//! (`ops::pointwise::embed_drawn`). A step's kernels are the same with the
//! overlap on or off, so requests that end by `max_tokens` (no extra row in
//! any step) get the same tokens to the bit of the logits behind them, on
//! the MoE fixture (near-tied routers: any difference in a step shows) and
//! the next fixture, greedy and seeded; a request alone that ends at a stop
//! token too. Every block and slot comes back. Needs a GPU: the binary is
//! run with `--ignored` by `bench/gpu/check_engine.sh` (build: `cargo test
//! --release -p headroom-engine --test cuda_overlap --no-run`).

mod common;

use common::ids;
use headroom_engine::{
    EngineConfig, EngineCore, FinishReason, GenerateRequest, StepOverlap, StreamEvent,
};

use common::{cuda_fixture as model, fixture_vocab as vocab};

/// Each request's streamed tokens and finish reason, and the engine's
/// steps queued ahead of the one in flight.
fn run(
    name: &str,
    overlap: StepOverlap,
    reqs: &[GenerateRequest],
) -> (Vec<(Vec<u32>, FinishReason)>, u64) {
    let cfg = EngineConfig {
        step_overlap: overlap,
        ..common::mixed_config()
    };
    let mut core = EngineCore::new(model(name), cfg).unwrap();
    assert_eq!(core.step_overlap().on, overlap == StepOverlap::On);
    let mut streams: Vec<_> = reqs
        .iter()
        .map(|r| core.submit(r.clone()).unwrap())
        .collect();
    while core.step().unwrap().is_some() {}
    let st = core.stats();
    assert_eq!(
        (st.running, st.kv_blocks_used, st.gdn_slots_used),
        (0, 0, 0)
    );
    let out = streams
        .iter_mut()
        .map(|s| {
            let (mut tokens, mut reason) = (Vec::new(), None);
            while let Some(e) = s.try_next() {
                match e {
                    StreamEvent::Token(t) => tokens.push(t),
                    StreamEvent::Finished { reason: r, .. } => reason = Some(r),
                    StreamEvent::Error(e) => panic!("request failed: {e}"),
                    StreamEvent::Logprobs(_) => {}
                }
            }
            (tokens, reason.expect("finished"))
        })
        .collect();
    (out, st.steps_queued_ahead)
}

fn requests(name: &str) -> Vec<GenerateRequest> {
    common::mixed_requests(vocab(name), 3, 40)
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_engine.sh"]
fn cuda_overlapped_steps_give_the_same_tokens() {
    for name in ["moe_d256", "next_d128"] {
        let reqs = requests(name);
        let (plain, ahead_off) = run(name, StepOverlap::Off, &reqs);
        let (over, ahead_on) = run(name, StepOverlap::On, &reqs);
        println!("{name}: steps queued ahead {ahead_off} off, {ahead_on} on");
        assert_eq!(ahead_off, 0);
        assert!(ahead_on > 20, "{name}: {ahead_on} steps ahead");
        for (k, ((a, ra), (b, rb))) in plain.iter().zip(&over).enumerate() {
            assert_eq!((ra, rb), (&FinishReason::Length, &FinishReason::Length));
            assert_eq!(a.len(), reqs[k].max_tokens);
            assert_eq!(a, b, "{name} request {k}: tokens with the overlap");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_engine.sh"]
fn cuda_a_stop_token_ends_an_overlapped_request_where_it_ends_a_plain_one() {
    let name = "next_d128";
    let mut r = GenerateRequest::greedy(ids(60, vocab(name), 9), 40);
    r.ignore_eos = true;
    let (free, _) = run(name, StepOverlap::Off, std::slice::from_ref(&r));
    r.stop_token_ids = vec![free[0].0[7]];
    let (plain, _) = run(name, StepOverlap::Off, std::slice::from_ref(&r));
    let (over, _) = run(name, StepOverlap::On, std::slice::from_ref(&r));
    assert_eq!(plain[0].1, FinishReason::Stop);
    assert!(plain[0].0.len() <= 7, "stopped early: {:?}", plain[0].0);
    assert_eq!(over, plain);
}
