//! The sharding plan of tensor parallelism: a pure function of the model's
//! config and the number of ranks `N`, giving each rank the rows, heads and
//! experts it holds. Nothing here touches a device.
//!
//! * Full attention by query heads; each rank reads the KV heads its query
//!   heads map to (GQA), so KV heads are split when `N` divides them and
//!   replicated when `N` is a multiple of them.
//! * Gated DeltaNet by value heads, the key heads following the same way
//!   (`v_heads / k_heads` value heads share one key head).
//! * MoE by experts (router replicated); the shared expert whole on rank 0,
//!   which adds it (its output rounded where one GPU rounds it); a dense MLP
//!   by its intermediate dim.
//! * LM head by vocab rows when `N` divides the vocab (then gathered), else
//!   replicated. Embeddings and norms replicated.

use crate::config::{MlpConfig, ModelConfig};
use std::ops::Range;

/// Why a model cannot be split over `N` ranks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("tensor parallelism needs at least 1 rank, got 0")]
    ZeroRanks,
    #[error(
        "tensor parallelism over {world} ranks: {what} ({count}) is not divisible by {world}{hint}"
    )]
    NotDividing {
        what: &'static str,
        count: usize,
        world: usize,
        hint: String,
    },
    #[error(
        "tensor parallelism over {world} ranks, but only {visible} GPU(s) are visible \
         (check CUDA_VISIBLE_DEVICES or lower --tensor-parallel)"
    )]
    TooFewDevices { world: usize, visible: usize },
}

/// Heads of one kind of mixer a rank holds: its query (or value) heads and
/// the key/value (or key) heads they read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadSplit {
    pub heads: Range<usize>,
    pub kv_heads: Range<usize>,
}

/// The MLP part a rank holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MlpSplit {
    /// Routed experts `experts`, shared-expert intermediate rows `shared`;
    /// `adds_shared`: this rank adds the shared expert (rank 0, holding it
    /// whole; the others hold row 0 as a stand-in the op never reads).
    Moe {
        experts: Range<usize>,
        shared: Range<usize>,
        adds_shared: bool,
    },
    /// Intermediate rows of gate/up (columns of down).
    Dense { intermediate: Range<usize> },
}

/// What one rank holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankShard {
    pub rank: usize,
    pub world: usize,
    /// Full-attention query heads and the KV heads they read.
    pub attention: HeadSplit,
    /// GDN value heads and the key heads they read.
    pub linear: HeadSplit,
    pub mlp: MlpSplit,
    /// LM-head vocab rows this rank computes (gathered after); `None`: all
    /// of them on every rank (no gather).
    pub vocab: Option<Range<usize>>,
}

impl RankShard {
    /// The whole model on one rank.
    pub fn whole(cfg: &ModelConfig) -> RankShard {
        ShardPlan::new(cfg, 1)
            .map(|p| p.ranks[0].clone())
            .unwrap_or_else(|_| RankShard {
                rank: 0,
                world: 1,
                attention: HeadSplit {
                    heads: 0..cfg.num_attention_heads,
                    kv_heads: 0..cfg.num_key_value_heads,
                },
                linear: HeadSplit {
                    heads: 0..cfg.linear.num_value_heads,
                    kv_heads: 0..cfg.linear.num_key_heads,
                },
                mlp: whole_mlp(cfg),
                vocab: None,
            })
    }

    /// Whether this rank holds everything (world size 1).
    pub fn is_whole(&self) -> bool {
        self.world == 1
    }
}

fn whole_mlp(cfg: &ModelConfig) -> MlpSplit {
    match cfg.mlp {
        MlpConfig::Moe(m) => MlpSplit::Moe {
            experts: 0..m.num_experts,
            shared: 0..m.shared_expert_intermediate_size,
            adds_shared: true,
        },
        MlpConfig::Dense { intermediate_size } => MlpSplit::Dense {
            intermediate: 0..intermediate_size,
        },
    }
}

/// Every rank's shard, in rank order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardPlan {
    pub world: usize,
    pub ranks: Vec<RankShard>,
}

fn divides(what: &'static str, count: usize, world: usize) -> Result<usize, PlanError> {
    if count == 0 || !count.is_multiple_of(world) {
        return Err(PlanError::NotDividing {
            what,
            count,
            world,
            hint: String::new(),
        });
    }
    Ok(count / world)
}

/// Per-rank head splits: `heads` split evenly; `kv` split when the world
/// divides it, replicated (each rank the one its heads read) when the world
/// is a multiple of it.
fn head_splits(
    what: &'static str,
    kv_what: &'static str,
    heads: usize,
    kv: usize,
    world: usize,
) -> Result<Vec<HeadSplit>, PlanError> {
    let per = divides(what, heads, world)?;
    if kv == 0
        || !heads.is_multiple_of(kv)
        || !(kv.is_multiple_of(world) || world.is_multiple_of(kv))
    {
        return Err(PlanError::NotDividing {
            what: kv_what,
            count: kv,
            world,
            hint: format!(
                " (nor is {world} a multiple of it: {kv_what} can only be split or replicated)"
            ),
        });
    }
    let group = heads / kv;
    Ok((0..world)
        .map(|r| {
            let first = r * per;
            let kv_first = first / group;
            let kv_count = (per / group).max(1);
            HeadSplit {
                heads: first..first + per,
                kv_heads: kv_first..kv_first + kv_count,
            }
        })
        .collect())
}

fn even(count: usize, world: usize, r: usize) -> Range<usize> {
    let per = count / world;
    r * per..(r + 1) * per
}

impl ShardPlan {
    /// The plan of `cfg` over `world` ranks (the config is assumed validated).
    pub fn new(cfg: &ModelConfig, world: usize) -> Result<ShardPlan, PlanError> {
        if world == 0 {
            return Err(PlanError::ZeroRanks);
        }
        let has_full = cfg
            .layer_types
            .contains(&headroom_core::AttentionKind::Full);
        let has_linear = cfg
            .layer_types
            .contains(&headroom_core::AttentionKind::Linear);
        let (nq, nkv) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        let attention = if has_full {
            head_splits("attention heads", "KV heads", nq, nkv, world)?
        } else {
            vec![
                HeadSplit {
                    heads: 0..nq,
                    kv_heads: 0..nkv
                };
                world
            ]
        };
        let l = &cfg.linear;
        let linear = if has_linear {
            head_splits(
                "linear-attention value heads",
                "linear-attention key heads",
                l.num_value_heads,
                l.num_key_heads,
                world,
            )?
        } else {
            vec![
                HeadSplit {
                    heads: 0..l.num_value_heads,
                    kv_heads: 0..l.num_key_heads,
                };
                world
            ]
        };
        let mlp: Vec<MlpSplit> = match cfg.mlp {
            MlpConfig::Moe(m) => {
                divides("experts", m.num_experts, world)?;
                // The shared expert is not split: split, no rank would hold
                // its whole output, which one GPU rounds to bf16 before the
                // gate; rank 0 adds it, the others hold a one-row stand-in.
                (0..world)
                    .map(|r| MlpSplit::Moe {
                        experts: even(m.num_experts, world, r),
                        shared: if r == 0 {
                            0..m.shared_expert_intermediate_size
                        } else {
                            0..m.shared_expert_intermediate_size.min(1)
                        },
                        adds_shared: r == 0,
                    })
                    .collect()
            }
            MlpConfig::Dense { intermediate_size } => {
                divides("MLP intermediate size", intermediate_size, world)?;
                (0..world)
                    .map(|r| MlpSplit::Dense {
                        intermediate: even(intermediate_size, world, r),
                    })
                    .collect()
            }
        };
        let vocab_parallel = world > 1 && cfg.vocab_size.is_multiple_of(world);
        let ranks = (0..world)
            .map(|r| RankShard {
                rank: r,
                world,
                attention: attention[r].clone(),
                linear: linear[r].clone(),
                mlp: mlp[r].clone(),
                vocab: vocab_parallel.then(|| even(cfg.vocab_size, world, r)),
            })
            .collect();
        Ok(ShardPlan { world, ranks })
    }

    /// `Err` unless `visible` devices can hold `world` ranks (one each).
    pub fn check_devices(world: usize, visible: usize) -> Result<(), PlanError> {
        if world == 0 {
            return Err(PlanError::ZeroRanks);
        }
        if world > visible {
            return Err(PlanError::TooFewDevices { world, visible });
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
