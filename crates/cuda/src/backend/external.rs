//! The two kernels other work streams provide: the chunked gated delta rule
//! (`crate::ops::gdn::gated_delta_rule`) and the grouped-GEMM routed experts
//! (`crate::ops::moe::routed_experts`). Until they are merged, each call
//! answers `Unsupported` ("not merged yet"); wiring one in is replacing its
//! body with the agreed launch (the structs below mirror the agreed fields).

use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use headroom_core::ops::{OpError, OpResult};

pub(crate) const NOT_MERGED: &str = "not merged yet";

/// Whether the gated delta rule kernel is built in.
pub(crate) const GDN_AVAILABLE: bool = false;
/// Whether the routed-experts kernel is built in.
pub(crate) const MOE_AVAILABLE: bool = false;

/// Mirrors `crate::ops::gdn::GdnLaunch`.
#[allow(dead_code)]
pub(crate) struct GdnCall<'a> {
    /// bf16 `[t][2·hk·dk + hv·dv]` (the conv output).
    pub qkv: &'a DeviceBuffer,
    /// f32 `[t][hv]`.
    pub g: &'a DeviceBuffer,
    /// f32 `[t][hv]`.
    pub beta: &'a DeviceBuffer,
    /// f32 `[slots][hv][dk][dv]`.
    pub state: &'a DeviceBuffer,
    /// bf16 `[t][hv·dv]`.
    pub out: &'a DeviceBuffer,
    /// `(slot, first row, rows)` per sequence.
    pub seqs: &'a [(usize, usize, usize)],
    pub k_heads: usize,
    pub v_heads: usize,
    pub k_dim: usize,
    pub v_dim: usize,
}

pub(crate) fn gated_delta_rule(_dev: &CudaDevice, _call: &GdnCall<'_>) -> OpResult<()> {
    // Wiring: crate::ops::gdn::gated_delta_rule(dev, &GdnLaunch { ..fields of call }).map_err(dev_err)
    Err(OpError::Unsupported {
        op: "gated_delta_rule",
        reason: NOT_MERGED.into(),
    })
}

/// Mirrors `crate::ops::moe::MoeLaunch`.
#[allow(dead_code)]
pub(crate) struct MoeCall<'a> {
    /// bf16 `[t][h]`.
    pub x: &'a DeviceBuffer,
    /// f32 `[t][e]`.
    pub router_logits: &'a DeviceBuffer,
    /// bf16 `[e·2i][h]`.
    pub gate_up: &'a DeviceBuffer,
    /// bf16 `[e·h][i]`.
    pub down: &'a DeviceBuffer,
    /// f32 `[t][h]`, overwritten with the weighted sum of the routed experts.
    pub out: &'a DeviceBuffer,
    pub tokens: usize,
    pub hidden: usize,
    pub experts: usize,
    pub top_k: usize,
    pub intermediate: usize,
    pub renormalise: bool,
}

pub(crate) fn routed_experts(_dev: &CudaDevice, _call: &MoeCall<'_>) -> OpResult<()> {
    // Wiring: crate::ops::moe::routed_experts(dev, &MoeLaunch { ..fields of call }).map_err(dev_err)
    Err(OpError::Unsupported {
        op: "moe",
        reason: NOT_MERGED.into(),
    })
}
