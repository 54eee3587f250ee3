//! The engine on the CUDA backend (bf16): 8 requests of mixed lengths run
//! concurrently give each request's alone logits to <= 2e-2 relative (and
//! the same greedy tokens while the logits agree), and chunked prefill mixed
//! with decode gives the one-request result; a request among 255 others
//! (paged with a roomy pool, paged under preemption, contiguous; and paged
//! on the dense and next fixtures, whose routers are not near-tied) gives its
//! alone first token and logits to <= 2e-2. By default a step of few rows
//! runs the MoE decode kernels, which round differently from the grouped
//! GEMMs of a larger step (the H200 measured 1.48e-2 on the MoE fixture,
//! whose routers are near-tied); with `CudaBackend::with_batch_invariant`
//! every row count takes the grouped GEMMs and both tests hold issue 22's
//! 1e-2 (`docs/perf/serving.md`, session 16). Needs a GPU.

mod common;

use common::{fixture_dir, ids, rel_err};
use headroom_core::RouteRequest;
use headroom_cuda::backend::CudaBackend;
use headroom_engine::{
    EngineConfig, EngineCore, GenerateRequest, KvBackendKind, SchedulerSettings, SoloStripe,
};
use headroom_model::{AttentionPlan, ModelConfig, Qwen35Model, Weights};

/// The fixture `name` on device 0, batch-invariant or not.
fn model(name: &str, invariant: bool) -> Qwen35Model<CudaBackend> {
    let dir = fixture_dir(name);
    let cfg = ModelConfig::from_dir(&dir).unwrap();
    let w = Weights::load(&dir, &cfg).unwrap();
    let be = CudaBackend::open(0)
        .unwrap()
        .with_batch_invariant(invariant);
    Qwen35Model::load(be, &cfg, w).unwrap()
}

type Run = Vec<(Vec<u32>, Vec<Vec<f32>>)>;

fn run(name: &str, invariant: bool, cfg: &EngineConfig, reqs: &[GenerateRequest]) -> Run {
    run_counting(name, invariant, cfg, reqs).0
}

/// [`run`], and the preemptions the engine made.
fn run_counting(
    name: &str,
    invariant: bool,
    cfg: &EngineConfig,
    reqs: &[GenerateRequest],
) -> (Run, u64) {
    let mut core = EngineCore::new(
        model(name, invariant),
        EngineConfig {
            capture_logits: true,
            ..cfg.clone()
        },
    )
    .unwrap();
    let streams: Vec<_> = reqs
        .iter()
        .map(|r| core.submit(r.clone()).unwrap())
        .collect();
    let mut out = vec![(Vec::new(), Vec::new()); reqs.len()];
    while let Some(rep) = core.step().unwrap() {
        for s in rep.sampled {
            let i = streams.iter().position(|st| st.id == s.id).unwrap();
            out[i].0.push(s.token);
            out[i].1.push(s.logits.unwrap());
        }
    }
    (out, core.stats().preemptions)
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_engine.sh"]
fn cuda_batch_and_chunk_invariance_bf16() {
    batch_and_chunk(false, 2e-2);
}

/// The same with batch invariance on: within issue 22's 1e-2, every greedy
/// token the same.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_engine.sh"]
fn cuda_batch_and_chunk_invariance_bf16_batch_invariant() {
    let agreeing = batch_and_chunk(true, 1e-2);
    assert!(
        agreeing.iter().all(|&a| a == 48),
        "greedy tokens agreeing: {agreeing:?}"
    );
}

/// 8 requests together against each alone, chunked by 37 with decode rows
/// in the same steps, on the two MoE fixtures: every step's logits within
/// `bar` while the tokens agree; returns each fixture's agreeing tokens (of 48).
fn batch_and_chunk(invariant: bool, bar: f64) -> Vec<usize> {
    let mut agreeing_per_fixture = Vec::new();
    for (name, route) in [
        ("moe_d64", RouteRequest::Composed { query_block: 64 }),
        ("moe_d256", RouteRequest::Fused),
    ] {
        let cfg = EngineConfig {
            scheduler: SchedulerSettings {
                prefill_chunk: 37,
                step_tokens: 160,
                solo_stripe: SoloStripe::Tokens(2048),
                ..SchedulerSettings::default()
            },
            attention: AttentionPlan::Uniform(route),
            max_running: 8,
            max_context: 1024,
            ..EngineConfig::default()
        };
        let vocab = ModelConfig::from_dir(&fixture_dir(name))
            .unwrap()
            .vocab_size;
        let lens = [5usize, 130, 17, 64, 1, 300, 33, 90];
        let reqs: Vec<_> = lens
            .iter()
            .enumerate()
            .map(|(i, &n)| GenerateRequest::greedy(ids(n, vocab, i as u32 + 1), 6))
            .collect();
        let together = run(name, invariant, &cfg, &reqs);
        let mut worst = 0f64;
        let mut agreeing = 0;
        for (i, r) in reqs.iter().enumerate() {
            let alone = run(name, invariant, &cfg, std::slice::from_ref(r)).remove(0);
            assert_eq!(
                together[i].0[0], alone.0[0],
                "{name} request {i}: first token"
            );
            for s in 0..alone.0.len() {
                let e = rel_err(&together[i].1[s], &alone.1[s]);
                worst = worst.max(e);
                assert!(e <= bar, "{name} {route} request {i} step {s}: {e:.2e}");
                if together[i].0[s] != alone.0[s] {
                    break;
                }
                agreeing += 1;
            }
        }
        println!(
            "{name} {route}: worst logits rel err {worst:.2e}; {agreeing}/48 greedy tokens agree"
        );
        agreeing_per_fixture.push(agreeing);
    }
    agreeing_per_fixture
}

/// The 255-others arms on the MoE fixture: paged with a roomy pool, paged
/// with a pool small enough to preempt, contiguous.
const ALL_ARMS: [(&str, KvBackendKind, Option<usize>); 3] = [
    ("paged", KvBackendKind::Paged, None),
    ("paged, 96 blocks", KvBackendKind::Paged, Some(96)),
    ("contiguous", KvBackendKind::Contiguous, None),
];

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_engine.sh"]
fn cuda_request_among_255_others_paged_preempted_and_contiguous() {
    for (arm, worst) in among_255_others("moe_d256", false, &ALL_ARMS) {
        assert!(
            worst <= 2e-2,
            "{arm}: worst probe logits rel err {worst:.2e}"
        );
    }
}

/// Issue 22's bar with batch invariance on: each arm on the MoE fixture,
/// and the dense and next fixtures paged, within 1e-2.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_engine.sh"]
fn cuda_request_among_255_others_batch_invariant() {
    for name in ["moe_d256", "next_d128", "dense_d64"] {
        let arms = if name == "moe_d256" {
            &ALL_ARMS[..]
        } else {
            &ALL_ARMS[..1]
        };
        for (arm, worst) in among_255_others(name, true, arms) {
            assert!(
                worst <= 1e-2,
                "{name} {arm} (batch-invariant): worst probe logits rel err {worst:.2e}"
            );
        }
    }
}

/// The same on the fixtures without near-tied routers (dense_d64: no MoE;
/// next_d128), paged: whether the spread of the MoE fixture comes from its
/// routing or from the other kernels' row-count-dependent rounding.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_engine.sh"]
fn cuda_request_among_255_others_on_the_dense_and_next_fixtures() {
    let arms = [("paged", KvBackendKind::Paged, None)];
    for name in ["dense_d64", "next_d128"] {
        for (arm, worst) in among_255_others(name, false, &arms) {
            assert!(
                worst <= 2e-2,
                "{name} {arm}: worst probe logits rel err {worst:.2e}"
            );
        }
    }
}

/// Requests 0, 77 and 255 of 256 (prompts of 1..300 tokens, 4 greedy
/// tokens each) run alone and among the others on each arm (KV backend,
/// pool blocks: a small pool must preempt): the first token must be the
/// same; returns each arm's worst logits rel err over the steps whose
/// tokens still agree (printed).
fn among_255_others(
    name: &str,
    invariant: bool,
    arms: &[(&'static str, KvBackendKind, Option<usize>)],
) -> Vec<(&'static str, f64)> {
    let vocab = ModelConfig::from_dir(&fixture_dir(name))
        .unwrap()
        .vocab_size;
    let reqs: Vec<_> = (0..256u32)
        .map(|i| GenerateRequest::greedy(ids(1 + (i as usize * 37) % 300, vocab, i + 1), 4))
        .collect();
    let base = EngineConfig {
        attention: AttentionPlan::Uniform(RouteRequest::Fused),
        max_running: 256,
        max_context: 1024,
        ..EngineConfig::default()
    };
    let probes = [0usize, 77, 255];
    let mut worsts = Vec::new();
    let alone: Vec<_> = probes
        .iter()
        .map(|&i| run(name, invariant, &base, std::slice::from_ref(&reqs[i])).remove(0))
        .collect();
    for &(arm, kv, blocks) in arms {
        let cfg = EngineConfig {
            kv_backend: kv,
            kv_pool_blocks: blocks,
            ..base.clone()
        };
        let (all, preempted) = run_counting(name, invariant, &cfg, &reqs);
        assert!(
            all.iter().all(|r| r.0.len() == 4),
            "{name} {arm}: every request finished"
        );
        if blocks.is_some() {
            assert!(preempted > 0, "{name} {arm}: the small pool must preempt");
        }
        let (mut worst, mut at) = (0f64, (0, 0));
        for (p, &i) in probes.iter().enumerate() {
            assert_eq!(
                all[i].0[0], alone[p].0[0],
                "{name} {arm} request {i}: first token"
            );
            for s in 0..alone[p].0.len() {
                let e = rel_err(&all[i].1[s], &alone[p].1[s]);
                if e > worst {
                    (worst, at) = (e, (i, s));
                }
                if all[i].0[s] != alone[p].0[s] {
                    break;
                }
            }
        }
        println!(
            "{name} {arm}: {preempted} preemptions; worst probe logits rel err {worst:.2e} \
             (request {}, step {})",
            at.0, at.1
        );
        worsts.push((arm, worst));
    }
    worsts
}
