//! The step overlap on the CPU backend (`crates/engine/src/overlap.rs`,
//! `core/overlap.rs`): with `StepOverlap::On` every request gets the same
//! tokens, the same stream, the same end and the same usage as with the
//! overlap off — over chunked prefills, stop tokens that end a sequence
//! while its next row is in flight, `max_tokens`, seeded sampling,
//! requests drawn on the host (log probabilities), prefix-cache hits,
//! preemption in a small pool and a cancel while a step is in flight — and
//! every block and slot comes back.

mod common;

use common::{collect_events, drive_hooked, ids, tiny, BeforeStep, Outcome};
use headroom_core::ops::SamplingParams;
use headroom_cpu::CpuBackend;
use headroom_engine::{
    EngineConfig, EngineCore, FinishReason, GenerateRequest, KvBackendKind, RequestStream,
    SamplingExtras, SchedulerSettings, SoloStripe, StepOverlap, StreamEvent,
};

fn cfg(overlap: StepOverlap, pool_blocks: Option<usize>) -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerSettings {
            prefill_chunk: 48,
            step_tokens: 160,
            solo_stripe: SoloStripe::Tokens(2048),
            ..SchedulerSettings::default()
        },
        kv_backend: KvBackendKind::Paged,
        kv_pool_blocks: pool_blocks,
        max_running: 16,
        max_context: 1024,
        step_overlap: overlap,
        ..EngineConfig::default()
    }
}

fn engine(overlap: StepOverlap, pool_blocks: Option<usize>) -> EngineCore<CpuBackend> {
    let c = EngineCore::new(tiny("tiny-d64"), cfg(overlap, pool_blocks)).unwrap();
    assert_eq!(
        c.step_overlap().on,
        overlap == StepOverlap::On,
        "{}",
        c.step_overlap()
    );
    c
}

/// Steps `core` until idle (it must then be idle), `before_step` first
/// each time; every stream's outcome, in order.
fn run(
    core: &mut EngineCore<CpuBackend>,
    streams: Vec<RequestStream>,
    before_step: BeforeStep<'_>,
) -> Vec<Outcome> {
    let out = drive_hooked(core, streams, before_step, &mut |_| {});
    assert!(core.is_idle());
    out
}

fn same(a: &[Outcome], b: &[Outcome]) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.streamed, y.streamed, "request {i}: streamed tokens");
        assert_eq!(x.reason, y.reason, "request {i}: finish reason");
        assert_eq!(x.error, y.error, "request {i}: error");
        let (ux, uy) = (x.usage.as_ref(), y.usage.as_ref());
        assert_eq!(
            ux.map(|u| (u.prompt_tokens, u.completion_tokens, u.cached_tokens)),
            uy.map(|u| (u.prompt_tokens, u.completion_tokens, u.cached_tokens)),
            "request {i}: usage"
        );
    }
}

/// Every block and slot back, nothing running.
fn all_returned(c: &EngineCore<CpuBackend>) {
    let st = c.stats();
    assert_eq!((st.running, st.waiting, st.gdn_slots_used), (0, 0, 0));
    assert_eq!(st.kv_blocks_used, 0, "blocks held after the end");
}

fn requests(stop_at: Option<u32>) -> Vec<GenerateRequest> {
    let mut out = Vec::new();
    for (k, (len, max)) in [(1, 30), (37, 12), (100, 25), (150, 9), (64, 40), (200, 18)]
        .into_iter()
        .enumerate()
    {
        let mut r = GenerateRequest::greedy(ids(len, 512, k as u32 + 1), max);
        if k == 2 {
            r.stop_token_ids = stop_at.into_iter().collect();
        }
        if k == 4 {
            r.sampling = SamplingParams {
                temperature: 0.8,
                top_p: 0.9,
                top_k: 0,
                seed: 11,
            };
        }
        out.push(r);
    }
    out
}

fn submit_all(c: &mut EngineCore<CpuBackend>, rs: &[GenerateRequest]) -> Vec<RequestStream> {
    rs.iter().map(|r| c.submit(r.clone()).unwrap()).collect()
}

#[test]
fn overlapped_steps_give_every_request_the_tokens_of_plain_steps() {
    // The plain run first, to pick a stop token request 2 draws at its 6th token.
    let mut plain = engine(StepOverlap::Off, None);
    let streams = submit_all(&mut plain, &requests(None));
    let first = run(&mut plain, streams, &mut |_, _| {});
    let stop = first[2].streamed[5];
    let rs = requests(Some(stop));
    let mut plain = engine(StepOverlap::Off, None);
    let streams = submit_all(&mut plain, &rs);
    let want = run(&mut plain, streams, &mut |_, _| {});
    assert_eq!(want[2].reason, Some(FinishReason::Stop));
    let stopped_at = want[2].usage.as_ref().unwrap().completion_tokens;
    assert!(stopped_at <= 6, "the stop ends it early: {stopped_at}");
    let mut over = engine(StepOverlap::On, None);
    let streams = submit_all(&mut over, &rs);
    let got = run(&mut over, streams, &mut |_, _| {});
    same(&got, &want);
    let (st, sp) = (over.stats(), plain.stats());
    assert_eq!(sp.steps_queued_ahead, 0);
    assert!(
        st.steps_queued_ahead > st.steps / 2,
        "most steps queued ahead: {} of {}",
        st.steps_queued_ahead,
        st.steps
    );
    for (o, r) in got.iter().zip(&rs) {
        assert_eq!(o.tokens.len(), o.usage.as_ref().unwrap().completion_tokens);
        assert!(o.tokens.len() <= r.max_tokens);
    }
    assert_eq!(
        over.stats().generated_tokens,
        plain.stats().generated_tokens
    );
    all_returned(&over);
}

#[test]
fn a_request_drawn_on_the_host_runs_its_steps_without_the_overlap_and_the_same_tokens() {
    let mut rs = requests(None);
    rs[1].extras = SamplingExtras {
        logprobs: Some(2),
        ..SamplingExtras::default()
    };
    rs[3].extras = SamplingExtras {
        repetition_penalty: 1.3,
        ..SamplingExtras::default()
    };
    let mut plain = engine(StepOverlap::Off, None);
    let streams = submit_all(&mut plain, &rs);
    let want = run(&mut plain, streams, &mut |_, _| {});
    let mut over = engine(StepOverlap::On, None);
    let streams = submit_all(&mut over, &rs);
    let got = run(&mut over, streams, &mut |_, _| {});
    same(&got, &want);
    all_returned(&over);
}

#[test]
fn a_small_pool_preempts_the_same_way_with_the_overlap_on() {
    // 12 blocks of 64 rows for six requests of up to 218 tokens each: some
    // steps are planned ahead, the ones that could preempt are not.
    let rs = requests(None);
    let mut plain = engine(StepOverlap::Off, Some(POOL));
    let streams = submit_all(&mut plain, &rs);
    let want = run(&mut plain, streams, &mut |_, _| {});
    assert!(
        plain.stats().preemptions > 0,
        "the pool is small enough to preempt"
    );
    let mut over = engine(StepOverlap::On, Some(POOL));
    let streams = submit_all(&mut over, &rs);
    let got = run(&mut over, streams, &mut |_, _| {});
    same(&got, &want);
    let st = over.stats();
    assert_eq!(st.preemptions, plain.stats().preemptions);
    assert!(
        st.steps_queued_ahead > 0 && st.steps_queued_ahead < st.steps,
        "some steps ahead, not all: {} of {}",
        st.steps_queued_ahead,
        st.steps
    );
    all_returned(&over);
}

const POOL: usize = 12;

#[test]
fn a_follow_up_turn_hits_the_prefix_cache_as_without_the_overlap() {
    let first = GenerateRequest::greedy(ids(130, 512, 9), 20);
    let turns = |c: &mut EngineCore<CpuBackend>| {
        let s = c.submit(first.clone()).unwrap();
        let a = run(c, vec![s], &mut |_, _| {}).remove(0);
        let mut prompt = first.prompt_ids.clone();
        prompt.extend_from_slice(&a.streamed);
        prompt.extend(ids(40, 512, 10));
        let s = c.submit(GenerateRequest::greedy(prompt, 15)).unwrap();
        let b = run(c, vec![s], &mut |_, _| {}).remove(0);
        vec![a, b]
    };
    let want = turns(&mut engine(StepOverlap::Off, None));
    let mut over = engine(StepOverlap::On, None);
    let got = turns(&mut over);
    assert!(
        want[1].usage.as_ref().unwrap().cached_tokens >= 128,
        "the follow-up hits: {:?}",
        want[1].usage
    );
    same(&got, &want);
    let st = over.stats();
    assert!(st.prefix_cache_hit_tokens >= 128, "{st:?}");
    all_returned(&over);
}

#[test]
fn a_cancel_while_a_step_is_in_flight_ends_only_that_request() {
    let rs = requests(None);
    let mut plain = engine(StepOverlap::Off, None);
    let streams = submit_all(&mut plain, &rs);
    let want = run(&mut plain, streams, &mut |_, _| {});
    let mut over = engine(StepOverlap::On, None);
    let streams = submit_all(&mut over, &rs);
    let got = run(&mut over, streams, &mut |step, streams| {
        if step == 6 {
            streams[0].cancel();
        }
    });
    assert_eq!(got[0].reason, Some(FinishReason::Cancelled));
    let kept = got[0].streamed.len();
    assert!(kept < 30, "cancelled before its end: {kept} tokens");
    assert_eq!(got[0].streamed[..], want[0].streamed[..kept]);
    same(&got[1..], &want[1..]);
    all_returned(&over);
}

#[test]
fn a_step_is_in_flight_between_calls_and_the_engine_is_idle_only_after_it() {
    let mut over = engine(StepOverlap::On, None);
    let s = over
        .submit(GenerateRequest::greedy(vec![3, 4, 5], 3))
        .unwrap();
    // Call 1 queues the prompt's step and the first decode step, reads the
    // prompt's token; call 2 queues the last decode row (its end by
    // max_tokens is known) and reads the first decode step; call 3 reads it.
    let reps: Vec<usize> = (0..3)
        .map(|_| over.step().unwrap().expect("a step read").sampled.len())
        .collect();
    assert_eq!(reps, vec![1, 1, 1]);
    assert!(over.is_idle());
    assert!(over.step().unwrap().is_none());
    let out = run(&mut over, vec![s], &mut |_, _| {});
    assert_eq!(out[0].reason, Some(FinishReason::Length));
    assert_eq!(out[0].streamed.len(), 3);
    assert_eq!(over.stats().steps, 3);
    all_returned(&over);
}

#[test]
fn auto_is_off_on_the_cpu_off_is_off_and_the_stats_carry_what_ran() {
    for (o, on) in [
        (StepOverlap::Auto, false),
        (StepOverlap::Off, false),
        (StepOverlap::On, true),
    ] {
        let c = engine(o, None);
        assert_eq!(c.step_overlap().on, on, "{}", c.step_overlap());
        // What `serve` prints at start-up and a stats reader sees.
        let st = c.stats();
        assert_eq!(&st.step_overlap, c.step_overlap());
        assert_eq!(&st.cuda_graphs, c.cuda_graphs());
        assert!(
            !st.cuda_graphs.on && st.cuda_graphs.why.contains("cpu"),
            "{}",
            st.cuda_graphs
        );
    }
    let auto = engine(StepOverlap::Auto, None);
    assert!(
        auto.step_overlap().why.contains("cpu backend"),
        "{}",
        auto.step_overlap()
    );
}

#[test]
fn a_stop_token_leaves_a_step_in_flight_that_forgetting_reads_first() {
    let mut r = GenerateRequest::greedy(ids(20, 512, 4), 30);
    let mut plain = engine(StepOverlap::Off, None);
    let s = plain.submit(r.clone()).unwrap();
    let free = run(&mut plain, vec![s], &mut |_, _| {}).remove(0);
    r.stop_token_ids = vec![free.streamed[4]];
    let mut over = engine(StepOverlap::On, None);
    let mut s = over.submit(r).unwrap();
    let mut out = Outcome::default();
    while out.reason.is_none() {
        over.step().unwrap().expect("a step read");
        collect_events(&mut s, &mut out);
    }
    assert_eq!(out.reason, Some(FinishReason::Stop));
    assert!(
        !over.is_idle(),
        "the stopped request's next row is still in flight"
    );
    assert_eq!(over.stats().running, 0);
    over.forget_history().unwrap();
    assert!(over.is_idle());
    assert_eq!(over.stats().steps, 0, "forgotten");
    all_returned(&over);
}

#[test]
fn the_loop_thread_serves_overlapped_steps_and_forgets_after_a_stop() {
    let h = headroom_engine::spawn(tiny("tiny-d64"), cfg(StepOverlap::On, None)).unwrap();
    let mut plain = engine(StepOverlap::Off, None);
    let rs = requests(None);
    let streams = submit_all(&mut plain, &rs);
    let want = run(&mut plain, streams, &mut |_, _| {});
    let mut rs = requests(None);
    // Request 0 stops at its 4th token: its next row is still in flight
    // when its stream ends.
    rs[0].stop_token_ids = vec![want[0].streamed[3]];
    let mut got = Vec::new();
    for r in rs {
        let mut s = h.submit(r).unwrap();
        let mut o = Outcome::default();
        loop {
            match s.blocking_next() {
                Some(StreamEvent::Token(t)) => o.streamed.push(t),
                Some(StreamEvent::Finished { reason, .. }) => {
                    o.reason = Some(reason);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        got.push(o);
        // Forgetting right after a stream ends reads any step left in flight.
        h.forget_history().unwrap();
    }
    assert_eq!(got[0].reason, Some(FinishReason::Stop));
    assert!(got[0].streamed.len() <= 3);
    assert_eq!(
        got[0].streamed[..],
        want[0].streamed[..got[0].streamed.len()]
    );
    for k in 1..got.len() {
        assert_eq!(got[k].streamed, want[k].streamed, "request {k}");
    }
    h.shutdown();
}
