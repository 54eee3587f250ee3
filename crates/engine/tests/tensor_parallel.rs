//! The engine on a tensor-parallel group (CPU ranks = threads joined by the
//! in-process communicator, f32): several requests batched together — mixed
//! prefill chunks and decode rows in one step — generate exactly the greedy
//! tokens of the same engine on the unsplit model, with logits within 1e-5
//! (only the order of the partial sums differs), on the transformers
//! fixtures and the tiny synthetic models; the memory model counts one
//! rank's share of the KV and GDN state; the group's ranks report memory.

mod common;

use common::{collect_events, fixture_dir, ids, rel_err, Outcome};
use headroom_core::ops::Backend;
use headroom_cpu::{CpuBackend, Precision};
use headroom_engine::{EngineConfig, EngineCore, GenerateRequest, SchedulerSettings, SoloStripe};
use headroom_model::{ModelConfig, Qwen35Model, StepModel, TpGroup, TpWeights, Weights};
use std::collections::HashMap;

const TOLERANCE: f64 = 1e-5;

/// A CPU tensor-parallel group of `world` ranks computing in `precision`.
fn cpu_tp(
    cfg: &headroom_model::ModelConfig,
    world: usize,
    weights: TpWeights<'_>,
    precision: Precision,
) -> Result<TpGroup<CpuBackend>, headroom_model::ModelError> {
    let g = headroom_cpu::cpu_group(world, precision);
    TpGroup::build(g.backends, cfg, weights, Some(g.abort))
}

fn config() -> EngineConfig {
    EngineConfig {
        // Small chunks and a small step budget: prefill chunks and decode
        // rows of several sequences share steps.
        scheduler: SchedulerSettings {
            prefill_chunk: 24,
            step_tokens: 64,
            solo_stripe: SoloStripe::Tokens(2048),
            ..SchedulerSettings::default()
        },
        max_running: 4,
        max_context: 256,
        capture_logits: true,
        ..EngineConfig::default()
    }
}

fn requests(vocab: usize) -> Vec<GenerateRequest> {
    let lens = [5usize, 61, 17, 40, 1, 33];
    let max_tokens = [6usize, 3, 8, 5, 7, 4];
    lens.iter()
        .zip(max_tokens)
        .enumerate()
        .map(|(i, (&n, m))| GenerateRequest::greedy(ids(n, vocab, i as u32 + 3), m))
        .collect()
}

/// Runs `reqs` through an engine on `model`, all submitted at once.
fn run<M: StepModel<CpuBackend>>(model: M, reqs: &[GenerateRequest]) -> Vec<Outcome> {
    let mut core: EngineCore<CpuBackend, M> = EngineCore::new(model, config()).unwrap();
    let mut streams: Vec<_> = reqs
        .iter()
        .map(|r| core.submit(r.clone()).unwrap())
        .collect();
    let mut by_id: HashMap<u64, Outcome> = HashMap::new();
    let mut steps = 0;
    let mut packed = false;
    while let Some(rep) = core.step().unwrap() {
        packed |= rep.sampled.len() > 1;
        for s in rep.sampled {
            let o = by_id.entry(s.id).or_default();
            o.tokens.push(s.token);
            o.logits.extend(s.logits);
        }
        steps += 1;
        assert!(steps < 10_000, "the engine never went idle");
    }
    assert!(packed, "no step drew for several sequences");
    streams
        .iter_mut()
        .map(|st| {
            let mut o = by_id.remove(&st.id).unwrap_or_default();
            collect_events(st, &mut o);
            o
        })
        .collect()
}

fn check(cfg: &ModelConfig, weights: &Weights, worlds: &[usize], what: &str) {
    let reqs = requests(cfg.vocab_size);
    let want = run(
        Qwen35Model::load(CpuBackend::new(), cfg, weights.clone()).unwrap(),
        &reqs,
    );
    for &world in worlds {
        let g = cpu_tp(
            cfg,
            world,
            TpWeights::Checkpoint(weights),
            Precision::default(),
        )
        .unwrap();
        let got = run(g, &reqs);
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert!(a.error.is_none() && b.error.is_none(), "{what} request {i}");
            assert_eq!(b.tokens.len(), reqs[i].max_tokens, "{what} request {i}");
            assert_eq!(a.tokens, b.tokens, "{what} TP={world} request {i}: tokens");
            assert_eq!(
                a.streamed, a.tokens,
                "{what} TP={world} request {i}: stream"
            );
            assert_eq!(a.logits.len(), b.logits.len());
            for (s, (x, y)) in a.logits.iter().zip(&b.logits).enumerate() {
                let e = rel_err(x, y);
                assert!(
                    e <= TOLERANCE,
                    "{what} TP={world} request {i} step {s}: {e:.2e}"
                );
            }
        }
    }
}

fn fixture(name: &str) -> (ModelConfig, Weights) {
    let dir = fixture_dir(name);
    let cfg = ModelConfig::from_dir(&dir).unwrap();
    let w = Weights::load(&dir, &cfg).unwrap();
    (cfg, w)
}

#[test]
fn engine_on_tp2_equals_tp1_on_the_dense_fixture() {
    let (cfg, w) = fixture("dense_d64");
    check(&cfg, &w, &[2], "dense_d64");
}

#[test]
fn engine_on_tp2_equals_tp1_on_the_moe_fixture() {
    let (cfg, w) = fixture("moe_d64");
    check(&cfg, &w, &[2], "moe_d64");
}

#[test]
fn engine_on_tp2_equals_tp1_on_the_next_fixture() {
    let (cfg, w) = fixture("next_d128");
    check(&cfg, &w, &[2], "next_d128");
}

#[test]
fn engine_on_tp2_and_tp4_equals_tp1_on_tiny_synthetic_models() {
    for name in ["tiny-d64", "tiny-d256"] {
        let cfg = ModelConfig::synthetic(name).unwrap();
        let w = Weights::synthetic(&cfg, 7);
        let worlds: Vec<usize> = [2usize, 4]
            .into_iter()
            .filter(|&n| headroom_model::ShardPlan::new(&cfg, n).is_ok())
            .collect();
        assert!(worlds.contains(&2), "{name} splits over 2 ranks");
        check(&cfg, &w, &worlds, name);
    }
}

#[test]
fn memory_model_counts_one_ranks_share() {
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    let w = Weights::synthetic(&cfg, 7);
    let plain = Qwen35Model::load(CpuBackend::new(), &cfg, w.clone()).unwrap();
    let whole_weights = plain.backend().memory().0;
    let one: EngineCore<CpuBackend> = EngineCore::new(plain, config()).unwrap();
    let g = cpu_tp(&cfg, 2, TpWeights::Checkpoint(&w), Precision::default()).unwrap();
    let shard = g.plan().ranks[0].clone();
    let two: EngineCore<CpuBackend, TpGroup<CpuBackend>> = EngineCore::new(g, config()).unwrap();
    let (m1, m2) = (&one.limits().memory, &two.limits().memory);
    // KV: the rank's KV heads of each full-attention layer.
    let kv_share = shard.attention.kv_heads.len() as u64;
    assert_eq!(
        m2.kv_bytes_per_token * cfg.num_key_value_heads as u64,
        m1.kv_bytes_per_token * kv_share
    );
    // GDN: the rank's value heads (recurrent state) and conv channels.
    assert!(m2.gdn_bytes_per_slot < m1.gdn_bytes_per_slot);
    assert!(m2.gdn_bytes_per_slot > 0);
    // Each rank holds its shard: less than the whole model, the state pools included.
    let ranks = two.rank_memory();
    assert_eq!(ranks.len(), 2);
    assert_eq!(one.rank_memory().len(), 1);
    for (r, (active, _)) in ranks.iter().enumerate() {
        assert!(
            *active > 0 && *active < one.rank_memory()[0].0,
            "rank {r}: {active}"
        );
    }
    assert!(whole_weights > 0);
}
