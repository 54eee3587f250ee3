//! Tensor parallelism on the CPU (ranks = threads joined by the in-process
//! communicator): a model split over 2 (and 4 where the heads allow) ranks
//! computes the same logits as the unsplit model within 1e-5 (f32; only the
//! order of the partial sums differs), greedy generation picks the same
//! tokens, chunked prefill and decode included, from a checkpoint (each rank
//! slicing its shard) and from synthetic weights (each rank drawing its window).

mod common;

use common::{cpu_tp, fixture, read_ids, rel_err};
use headroom_core::ops::Backend;
use headroom_core::RouteRequest;
use headroom_cpu::{CpuBackend, Precision};
use headroom_model::parallel::PlanError;
use headroom_model::{
    AttentionPlan, ForwardOptions, LogitsRows, ModelConfig, ModelError, Qwen35Model, TpGroup,
    TpWeights,
};

const TOLERANCE: f64 = 1e-5;

fn opts(chunk: Option<usize>, logits: LogitsRows) -> ForwardOptions {
    ForwardOptions {
        attention: AttentionPlan::Uniform(RouteRequest::Composed { query_block: 16 }),
        chunk,
        logits,
    }
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

/// `n` greedy tokens: the argmax of the prompt's `logits`, then of what
/// `decode` returns for each token picked.
fn greedy(mut logits: Vec<f32>, n: usize, mut decode: impl FnMut(u32) -> Vec<f32>) -> Vec<u32> {
    let mut out = Vec::new();
    for _ in 0..n {
        let next = argmax(&logits);
        out.push(next);
        logits = decode(next);
    }
    out
}

/// Greedy tokens after `prompt`, on the plain model.
fn greedy_plain(m: &Qwen35Model<CpuBackend>, prompt: &[u32], n: usize) -> Vec<u32> {
    let route = RouteRequest::Composed { query_block: 16 };
    let mut s = m.new_session_with_capacity(prompt.len() + n).unwrap();
    let logits = m
        .prefill(&mut s, prompt, &opts(Some(7), LogitsRows::Last))
        .unwrap()
        .logits;
    greedy(logits, n, |next| m.decode(&mut s, next, route).unwrap())
}

fn greedy_tp(g: &TpGroup<CpuBackend>, prompt: &[u32], n: usize) -> Vec<u32> {
    let route = RouteRequest::Composed { query_block: 16 };
    let mut s = g.new_session_with_capacity(prompt.len() + n).unwrap();
    let logits = g
        .prefill(&mut s, prompt, &opts(Some(7), LogitsRows::Last))
        .unwrap()
        .logits;
    let out = greedy(logits, n, |next| g.decode(&mut s, next, route).unwrap());
    assert_eq!(s.position(), prompt.len() + n);
    out
}

fn check_fixture(name: &str, worlds: &[usize]) {
    let (cfg, weights, dir) = fixture(name);
    let plain = Qwen35Model::load(CpuBackend::new(), &cfg, weights.clone()).unwrap();
    for n in [40usize, 300] {
        let ids = read_ids(&dir, n);
        let want = plain
            .forward_logits(&ids, &opts(None, LogitsRows::All))
            .unwrap();
        for &world in worlds {
            let g = cpu_tp(
                &cfg,
                world,
                TpWeights::Checkpoint(&weights),
                Precision::default(),
            )
            .unwrap();
            for chunk in [None, Some(37)] {
                let got = g
                    .forward_logits(&ids, &opts(chunk, LogitsRows::All))
                    .unwrap();
                assert_eq!(got.len(), want.len());
                let err = rel_err(&got, &want);
                assert!(
                    err < TOLERANCE,
                    "{name} TP={world} n={n} chunk={chunk:?}: rel err {err:.2e}"
                );
            }
        }
    }
    let prompt = read_ids(&dir, 40);
    let want = greedy_plain(&plain, &prompt, 12);
    for &world in worlds {
        let g = cpu_tp(
            &cfg,
            world,
            TpWeights::Checkpoint(&weights),
            Precision::default(),
        )
        .unwrap();
        assert_eq!(greedy_tp(&g, &prompt, 12), want, "{name} TP={world}");
    }
}

#[test]
fn dense_d64_tp2_and_tp4_equal_tp1() {
    // 4 heads / 1 KV head (replicated), GDN 2 key / 4 value heads (key heads
    // replicated at 4), dense MLP, tied embeddings.
    check_fixture("dense_d64", &[2, 4]);
}

#[test]
fn moe_d64_tp2_and_tp4_equal_tp1() {
    check_fixture("moe_d64", &[2, 4]);
}

#[test]
fn moe_d256_tp2_equals_tp1() {
    check_fixture("moe_d256", &[2]);
}

#[test]
fn next_d128_tp2_equals_tp1() {
    check_fixture("next_d128", &[2]);
}

#[test]
fn synthetic_device_draw_shards_are_the_same_model() {
    // Each rank draws its window of every matrix (init_matrix with a window,
    // host draws for the multi-range in_proj_qkv): the same model as TP=1.
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    let plain = Qwen35Model::synthetic(CpuBackend::new(), &cfg, 9).unwrap();
    let ids: Vec<u32> = (0..50).map(|i| (i * 37 % 512) as u32).collect();
    let want = plain
        .forward_logits(&ids, &opts(None, LogitsRows::All))
        .unwrap();
    for world in [2, 4] {
        let g = cpu_tp(
            &cfg,
            world,
            TpWeights::Synthetic { seed: 9 },
            Precision::default(),
        )
        .unwrap();
        let got = g
            .forward_logits(&ids, &opts(None, LogitsRows::All))
            .unwrap();
        let err = rel_err(&got, &want);
        assert!(err < TOLERANCE, "TP={world}: {err:.2e}");
        // Each rank holds a fraction of the weights.
        let whole = plain.backend().memory().0;
        for (active, _) in g.memory() {
            assert!(active < whole, "rank holds {active} of {whole} bytes");
        }
        assert_eq!(
            greedy_tp(&g, &ids[..20], 6),
            greedy_plain(&plain, &ids[..20], 6)
        );
    }
}

#[test]
fn bad_world_and_bad_input_are_errors_and_leave_the_group_usable() {
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    let e = cpu_tp(
        &cfg,
        3,
        TpWeights::Synthetic { seed: 1 },
        Precision::default(),
    )
    .err()
    .unwrap();
    assert!(
        matches!(e, ModelError::Plan(PlanError::NotDividing { .. })),
        "{e}"
    );
    assert!(matches!(
        cpu_tp(
            &cfg,
            0,
            TpWeights::Synthetic { seed: 1 },
            Precision::default()
        )
        .err()
        .unwrap(),
        ModelError::Plan(PlanError::ZeroRanks)
    ));
    let g = cpu_tp(
        &cfg,
        2,
        TpWeights::Synthetic { seed: 1 },
        Precision::default(),
    )
    .unwrap();
    let o = opts(None, LogitsRows::Last);
    assert!(matches!(
        g.forward_logits(&[1, 2, 100_000], &o).unwrap_err(),
        ModelError::TokenOutOfRange { id: 100_000, .. }
    ));
    assert!(matches!(
        g.forward_logits(&[], &o).unwrap_err(),
        ModelError::EmptyInput
    ));
    let mut s = g.new_session_with_capacity(4).unwrap();
    assert!(matches!(
        g.prefill(&mut s, &[1, 2, 3, 4, 5], &o).unwrap_err(),
        ModelError::ContextFull { .. }
    ));
    // Still usable after the refusals.
    let logits = g.forward_logits(&[1, 2, 3], &o).unwrap();
    assert_eq!(logits.len(), cfg.vocab_size);
    assert!(logits.iter().all(|x| x.is_finite()));
}

#[test]
fn packed_step_of_two_sequences_equals_the_unsplit_model() {
    // The engine's entry point: one packed batch of two sequences in two slots.
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    let plain = Qwen35Model::synthetic(CpuBackend::new(), &cfg, 4).unwrap();
    let g = cpu_tp(
        &cfg,
        2,
        TpWeights::Synthetic { seed: 4 },
        Precision::default(),
    )
    .unwrap();
    let ids: Vec<u32> = (0..30).map(|i| (i * 11 % 512) as u32).collect();
    let batch = headroom_core::ops::Batch::packed(&[(0, 0, 18), (1, 0, 12)]);
    let route = RouteRequest::Composed { query_block: 16 };
    let routes = plain.routes(&AttentionPlan::Uniform(route)).unwrap();
    let mut st = plain.new_state(2, 64).unwrap();
    let want = plain
        .step(&mut st, &ids, &batch, &routes, LogitsRows::Last)
        .unwrap()
        .logits
        .unwrap();
    let want = plain.backend().act_to_f32(&want).unwrap();
    let mut states = g.new_state(2, 64, None).unwrap();
    let out = g
        .step(&mut states, &ids, &batch, &routes, LogitsRows::Last)
        .unwrap();
    let got = g
        .rank(0)
        .unwrap()
        .backend()
        .act_to_f32(&out.logits.unwrap())
        .unwrap();
    assert_eq!(got.len(), 2 * cfg.vocab_size);
    assert!(rel_err(&got, &want) < TOLERANCE);
    // A state list of the wrong length is refused before any rank runs.
    assert!(g
        .step(&mut states[..1], &ids, &batch, &routes, LogitsRows::Last)
        .is_err());
}
