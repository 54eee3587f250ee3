//! The CPU state pools: per-layer KV block pools ([`CpuKvCache`], in
//! [`crate::kv_cache`]) and Gated DeltaNet states with one slot per running
//! sequence.

pub use crate::kv_cache::CpuKvCache;
use headroom_core::ops::GdnSpec;

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

    /// Copies slot `from`'s conv and recurrent state over slot `to`'s;
    /// `None` when either is outside the pool.
    pub fn copy_slot(&mut self, from: usize, to: usize) -> Option<()> {
        if from >= self.spec.slots || to >= self.spec.slots {
            return None;
        }
        if from != to {
            let (conv, rec) = (self.conv[from].clone(), self.recurrent[from].clone());
            self.conv[to] = conv;
            self.recurrent[to] = rec;
        }
        Some(())
    }

    /// Bytes held by all slots.
    pub fn bytes(&self) -> usize {
        self.spec.slots * (self.spec.conv_len() + self.spec.recurrent_len()) * 4
    }
}
