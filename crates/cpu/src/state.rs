//! The CPU state pools: per-layer KV caches and Gated DeltaNet states with
//! one slot per running sequence.

use crate::kv_cache::KvCache;
use headroom_core::ops::{GdnSpec, KvSpec};

/// One full-attention layer's KV caches, one per slot.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuKvCache {
    pub spec: KvSpec,
    pub slots: Vec<KvCache>,
}

impl CpuKvCache {
    pub fn new(spec: KvSpec) -> CpuKvCache {
        CpuKvCache {
            spec,
            slots: vec![KvCache::default(); spec.slots],
        }
    }
}

/// One Gated DeltaNet layer's conv state `[kernel-1][conv_dim]` and recurrent
/// state `[v_heads][k_dim][v_dim]`, one of each per slot.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuGdnState {
    pub spec: GdnSpec,
    pub conv: Vec<Vec<f32>>,
    pub recurrent: Vec<Vec<f32>>,
}

impl CpuGdnState {
    pub fn new(spec: GdnSpec) -> CpuGdnState {
        CpuGdnState {
            spec,
            conv: vec![vec![0.0; spec.conv_len()]; spec.slots],
            recurrent: vec![vec![0.0; spec.recurrent_len()]; spec.slots],
        }
    }

    /// Bytes held by all slots.
    pub fn bytes(&self) -> usize {
        self.spec.slots * (self.spec.conv_len() + self.spec.recurrent_len()) * 4
    }
}
