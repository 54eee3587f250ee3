//! One tensor-parallel rank's MoE partial in f32 (`Backend::moe_partial`
//! inside a group): the routed sum of its local experts (f32, from the
//! grouped-GEMM or fallback kernels of [`super::external`]) and, on the rank
//! whose spec says so (`MoeSpec::shared_expert`: it holds the shared expert
//! whole), the shared expert's bf16 output — rounded exactly where one GPU
//! rounds it — gated by `sigmoid(shared_gate · x)`, combined in f32
//! (`moe_combine_partial_f32`, `ops/tp/ops_tp.cu`) and left for the
//! all-reduce to sum and round once ([`super::comm`]): the group's sum is
//! the one-GPU block up to f32 summation order. Outside a group
//! `moe_partial` is the ordinary bf16 [`super::moe::moe`]; this file adds no
//! work there.

use super::dense::linear;
use super::external::routed_experts;
use super::memory::new_act;
use super::types::{CudaAct, CudaWeight};
use super::validate::bf16;
use crate::device::CudaDevice;
use headroom_core::ops::{MoeSpec, MoeWeights, OpResult};
use headroom_core::Dtype;

/// The MoE block's output over this backend's experts and shared-expert
/// shard, f32 `[t][hidden]`, not rounded.
pub(crate) fn moe_f32(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
) -> OpResult<CudaAct> {
    bf16("moe", x)?;
    let hidden = x.cols;
    crate::ops::moe::check_weights(w, spec, hidden)?;
    let logits = linear(dev, x, &w.router, Dtype::F32)?;
    // Overwritten by the routed-experts kernel, then by the combine (in place).
    let out = new_act(dev, "moe", x.rows, hidden, Dtype::F32)?;
    // FP8 experts: this layer's bf16 copies (`crate::ops::fp8::weight`).
    let gate_up = crate::ops::fp8::weight::as_bf16(dev, &w.gate_up)?;
    let down = crate::ops::fp8::weight::as_bf16(dev, &w.down)?;
    let call = super::moe::call(x, &logits, (&gate_up, &down), spec, &out.buf);
    routed_experts(dev, &call, (spec.first_expert, spec.local_experts))?;
    if !spec.shared_expert {
        return Ok(out);
    }
    let shared = super::moe::shared_expert(dev, x, w)?;
    let gate = linear(dev, x, &w.shared_gate, Dtype::F32)?;
    super::moe::combine(
        dev,
        crate::ops::tp::MOE_COMBINE_PARTIAL,
        x,
        &out.buf,
        &shared,
        &gate,
        out.ptr(),
    )?;
    Ok(out)
}

impl super::CudaBackend {
    /// The MoE block's f32 partial over the experts these weights hold, plus
    /// the shared expert when `spec.shared_expert`: what `moe_partial`
    /// returns inside a group (on one GPU, for the tests that split a block
    /// by hand).
    pub fn moe_f32(
        &self,
        x: &CudaAct,
        w: &MoeWeights<CudaWeight>,
        spec: &MoeSpec,
    ) -> OpResult<CudaAct> {
        moe_f32(&self.dev, x, w, spec)
    }
}
