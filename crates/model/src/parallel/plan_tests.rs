use super::*;
use crate::config::MlpConfig;

fn a3b() -> ModelConfig {
    ModelConfig::synthetic("qwen3.6-35b-a3b").unwrap()
}

/// Every rank's ranges together cover `0..count` exactly once, in order.
fn tiles(ranges: &[Range<usize>], count: usize) -> bool {
    let mut next = 0;
    for r in ranges {
        if r.start != next || r.end <= r.start {
            return false;
        }
        next = r.end;
    }
    next == count
}

#[test]
fn one_rank_holds_everything() {
    let cfg = a3b();
    let p = ShardPlan::new(&cfg, 1).unwrap();
    assert_eq!(p.ranks.len(), 1);
    let r = &p.ranks[0];
    assert!(r.is_whole());
    assert_eq!(r.attention.heads, 0..16);
    assert_eq!(r.attention.kv_heads, 0..2);
    assert_eq!(r.linear.heads, 0..32);
    assert_eq!(r.linear.kv_heads, 0..16);
    assert_eq!(
        r.mlp,
        MlpSplit::Moe {
            experts: 0..256,
            shared: 0..512,
            adds_shared: true,
        }
    );
    assert_eq!(r.vocab, None, "one rank: no vocab split, no gather");
    assert_eq!(RankShard::whole(&cfg), *r);
}

#[test]
fn ranks_tile_heads_experts_and_vocab_for_2_4_8() {
    let cfg = a3b();
    for world in [2, 4, 8] {
        let p = ShardPlan::new(&cfg, world).unwrap();
        assert_eq!(p.world, world);
        assert_eq!(p.ranks.len(), world);
        let heads: Vec<_> = p.ranks.iter().map(|r| r.attention.heads.clone()).collect();
        assert!(tiles(&heads, 16), "{world}: {heads:?}");
        let v: Vec<_> = p.ranks.iter().map(|r| r.linear.heads.clone()).collect();
        assert!(tiles(&v, 32), "{world}: {v:?}");
        let k: Vec<_> = p.ranks.iter().map(|r| r.linear.kv_heads.clone()).collect();
        assert!(
            tiles(&k, 16),
            "GDN key heads split (16 divisible by {world}): {k:?}"
        );
        let vocab: Vec<_> = p.ranks.iter().map(|r| r.vocab.clone().unwrap()).collect();
        assert!(tiles(&vocab, 248_320), "{world}: {vocab:?}");
        let (experts, shared): (Vec<_>, Vec<_>) = p
            .ranks
            .iter()
            .map(|r| match &r.mlp {
                MlpSplit::Moe {
                    experts,
                    shared,
                    adds_shared,
                } => (experts.clone(), (shared.clone(), *adds_shared)),
                MlpSplit::Dense { .. } => panic!("a MoE model"),
            })
            .unzip();
        assert!(tiles(&experts, 256));
        // The shared expert whole on rank 0 (which adds it), a one-row
        // stand-in on the others.
        for (r, s) in shared.iter().enumerate() {
            let want = if r == 0 {
                (0..512, true)
            } else {
                (0..1, false)
            };
            assert_eq!(*s, want, "rank {r} of {world}");
        }
        for (i, r) in p.ranks.iter().enumerate() {
            assert_eq!((r.rank, r.world), (i, world));
        }
    }
}

#[test]
fn kv_heads_split_then_replicate_and_match_the_query_heads() {
    let cfg = a3b(); // 16 q heads, 2 KV heads: GQA 8
    let kv = |world: usize| -> Vec<Range<usize>> {
        ShardPlan::new(&cfg, world)
            .unwrap()
            .ranks
            .iter()
            .map(|r| r.attention.kv_heads.clone())
            .collect()
    };
    assert_eq!(kv(2), vec![0..1, 1..2], "2 ranks: one KV head each");
    assert_eq!(kv(4), vec![0..1, 0..1, 1..2, 1..2], "4 ranks: replicated");
    assert_eq!(kv(8), vec![0..1, 0..1, 0..1, 0..1, 1..2, 1..2, 1..2, 1..2]);
    // Every query head of a rank reads a KV head that rank holds.
    for world in [1, 2, 4, 8] {
        for r in ShardPlan::new(&cfg, world).unwrap().ranks {
            for h in r.attention.heads.clone() {
                assert!(r.attention.kv_heads.contains(&(h / 8)), "{world} {h}");
            }
            for h in r.linear.heads.clone() {
                assert!(r.linear.kv_heads.contains(&(h / 2)), "{world} {h}");
            }
        }
    }
}

#[test]
fn bad_world_sizes_are_clear_errors() {
    let cfg = a3b();
    assert_eq!(ShardPlan::new(&cfg, 0), Err(PlanError::ZeroRanks));
    let e = ShardPlan::new(&cfg, 3).unwrap_err();
    assert!(
        e.to_string()
            .contains("attention heads (16) is not divisible by 3"),
        "{e}"
    );
    let e = ShardPlan::new(&cfg, 32).unwrap_err();
    assert!(e.to_string().contains("not divisible by 32"), "{e}");
    // 3 KV heads over 2 ranks: neither split nor replicated.
    let mut odd = cfg.clone();
    odd.num_attention_heads = 24;
    odd.num_key_value_heads = 3;
    let e = ShardPlan::new(&odd, 2).unwrap_err();
    assert!(e.to_string().contains("KV heads (3)"), "{e}");
    assert!(ShardPlan::check_devices(2, 2).is_ok());
    let e = ShardPlan::check_devices(4, 2).unwrap_err();
    assert!(e.to_string().contains("only 2 GPU(s)"), "{e}");
    assert_eq!(ShardPlan::check_devices(0, 2), Err(PlanError::ZeroRanks));
}

#[test]
fn dense_mlp_and_odd_vocab() {
    let mut cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    cfg.mlp = MlpConfig::Dense {
        intermediate_size: 96,
    };
    cfg.vocab_size = 321;
    let p = ShardPlan::new(&cfg, 2).unwrap();
    let inter: Vec<_> = p
        .ranks
        .iter()
        .map(|r| match &r.mlp {
            MlpSplit::Dense { intermediate } => intermediate.clone(),
            MlpSplit::Moe { .. } => panic!("dense"),
        })
        .collect();
    assert_eq!(inter, vec![0..48, 48..96]);
    assert!(
        p.ranks.iter().all(|r| r.vocab.is_none()),
        "321 rows: LM head replicated"
    );
    cfg.mlp = MlpConfig::Dense {
        intermediate_size: 95,
    };
    let e = ShardPlan::new(&cfg, 2).unwrap_err();
    assert!(e.to_string().contains("MLP intermediate size (95)"), "{e}");
}

#[test]
fn the_122b_preset_is_about_244_gb_and_splits_over_2_4_8() {
    let cfg = ModelConfig::synthetic("qwen3.5-122b-a10b").unwrap();
    cfg.validate().unwrap();
    let bytes = crate::weights::expected_storage_bytes(&cfg) as f64;
    assert!((235e9..255e9).contains(&bytes), "{bytes}");
    for world in [2, 4, 8] {
        let p = ShardPlan::new(&cfg, world).unwrap();
        assert_eq!(p.ranks[0].attention.heads, 0..32 / world);
        assert_eq!(p.ranks[0].linear.heads, 0..64 / world);
    }
}
