//! The gated delta rule on the device: the chunked (WY / UT-transform) form
//! for prefill rows and the recurrent step for decode rows
//! (`kernels/gdn_chunked.cu`, `kernels/gdn_recurrent.cu`).
//!
//! Semantics are transformers' `torch_recurrent_gated_delta_rule` with
//! `use_qk_l2norm_in_kernel=True` (see `headroom_model::ops::gated_delta`):
//! q, k L2-normalised per head, q scaled by `1/sqrt(k_dim)`, value head `h`
//! reads key head `h / (v_heads / k_heads)`; per token `S *= exp(g)`,
//! `delta = (v - Sᵀk)·β`, `S += k ⊗ delta`, `o = Sᵀq`; f32 state.
//!
//! Every launch is validated on the host first ([`validate`]): a bad
//! sequence range, slot or buffer size is a [`CudaError::InvalidLaunch`],
//! never an out-of-bounds access. Nothing here synchronises with the host.

mod launch;
mod plan;

use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::CudaError;

pub use plan::{validate, Plan, SeqRun, SUPPORTED_DIM};

/// One gated-delta-rule call over a varlen batch.
pub struct GdnLaunch<'a> {
    /// bf16 `[t][2·hk·dk + hv·dv]`: q (hk heads), k (hk heads), v (hv heads) of each row.
    pub qkv: &'a DeviceBuffer,
    /// f32 `[t][hv]`: log decay `g = -exp(A_log)·softplus(a + dt_bias)`.
    pub g: &'a DeviceBuffer,
    /// f32 `[t][hv]`.
    pub beta: &'a DeviceBuffer,
    /// f32 `[slots][hv][dk][dv]`, read and advanced per sequence slot.
    pub state: &'a DeviceBuffer,
    /// bf16 `[t][hv·dv]`; rows outside every sequence are not written.
    pub out: &'a DeviceBuffer,
    /// `(slot, first row, rows)` per sequence.
    pub seqs: &'a [(usize, usize, usize)],
    pub k_heads: usize,
    pub v_heads: usize,
    pub k_dim: usize,
    pub v_dim: usize,
}

/// Runs the gated delta rule: sequences of one row through the recurrent
/// step (one launch per [`launch::MAX_DECODE_SEQS`] of them), longer ones
/// through the chunked form (prep + scan per [`launch::MAX_SCAN_SEQS`]).
pub fn gated_delta_rule(dev: &CudaDevice, l: &GdnLaunch<'_>) -> Result<(), CudaError> {
    let plan = validate(l)?;
    let (decode, prefill): (Vec<SeqRun>, Vec<SeqRun>) =
        plan.seqs.iter().partition(|s| s.rows == 1);
    for group in decode.chunks(launch::MAX_DECODE_SEQS) {
        launch::recurrent(dev, l, &plan, group)?;
    }
    for group in prefill.chunks(launch::MAX_SCAN_SEQS) {
        launch::chunked(dev, l, &plan, group)?;
    }
    Ok(())
}
