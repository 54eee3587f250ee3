//! What a backend's ops allocate for themselves, asked before they run: the
//! engine predicts a request's memory (admission) and sizes a solo step
//! from the backend's own answer rather than re-deriving its kernels'
//! buffers. The answer is a [`WorkspaceModel`] detached from the backend, so
//! a request can be checked on any thread while the backend runs a step.

use crate::{LayerKind, RouteRequest};

/// One attention call as a memory prediction sees it: `q_len` query rows
/// (one sequence's, or a packed step's), the last rows of `kv_len` cached
/// keys (the longest sequence's), of a layer of shape `layer` (its heads and
/// head dim), running `route`; `total_kv_len` counts the keys of every
/// sequence of the call together (`kv_len` for one sequence): a backend
/// that gathers the sequences' K/V into a workspace holds up to that many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionCall {
    pub layer: LayerKind,
    pub route: RouteRequest,
    pub q_len: usize,
    pub kv_len: usize,
    pub total_kv_len: usize,
}

/// A backend's account of its ops' transient memory.
pub trait WorkspaceModel: Send + Sync + std::fmt::Debug {
    /// Bytes of workspace one [`crate::Backend::attention`] call of `call`'s
    /// shape allocates beyond its inputs (q, the cache) and its output; all
    /// of it lives until the call returns, so this is also its peak. Where
    /// the backend splits a call in more than one way, the largest.
    fn attention_bytes(&self, call: &AttentionCall) -> u64;

    /// Bytes of scratch one MoE call takes for `local_experts` routed
    /// experts of `hidden` columns and `intermediate` per expert held as
    /// block-scaled FP8 on the device, where this backend dequantizes them
    /// into bf16 for its grouped GEMMs; 0 where it multiplies them natively
    /// or never keeps them FP8 (the default: dequantized at load).
    fn fp8_expert_scratch_bytes(
        &self,
        _local_experts: usize,
        _hidden: usize,
        _intermediate: usize,
    ) -> u64 {
        0
    }
}
