//! The sparse MoE op of [`crate::CpuBackend`] (`Qwen3_5MoeSparseMoeBlock`):
//! router softmax → top-k → SwiGLU experts weighted by their routing weight,
//! plus the shared expert scaled by `sigmoid(shared_expert_gate · x)`.
//! Tokens are grouped by expert so each expert runs one GEMM per projection;
//! experts run in parallel (each GEMM on one thread).
//!
//! Under bf16 emulation it rounds where the CUDA backend's shape-general
//! experts (`crates/cuda/src/backend/fallback.rs`) store bf16: the gate and
//! up products and `silu · up` ([`ActRounding::MLP`]), the shared expert's
//! products (its `linear`s and SwiGLU), and the block's output
//! ([`ActRounding::MOE_OUT`]); router and shared-gate logits, the down
//! products and the weighted sum stay f32, as there.

use super::{CpuAct, CpuBackend, CpuWeight};
use crate::ops::activation::{sigmoid, swiglu};
use crate::ops::linear_seq;
use crate::ops::moe::route as route_tokens;
use crate::ops::WeightView;
use crate::precision::ActRounding;
use headroom_core::ops::{Backend, MoeSpec, MoeWeights, OpError, OpResult};
use rayon::prelude::*;

fn matrix<'a>(w: &'a CpuWeight, name: &str) -> OpResult<WeightView<'a>> {
    match w {
        CpuWeight::Matrix(t) => Ok(WeightView::matrix(t)),
        CpuWeight::Vector(_) => Err(OpError::shape("moe", format!("{name} is not a matrix"))),
    }
}

pub(crate) fn moe(
    be: &CpuBackend,
    x: &CpuAct,
    w: &MoeWeights<CpuWeight>,
    spec: &MoeSpec,
) -> OpResult<CpuAct> {
    let mut out = moe_unrounded(be, x, w, spec)?;
    be.round(ActRounding::MOE_OUT, &mut out.data);
    Ok(out)
}

/// The block's output before its bf16 rounding (under emulation, a
/// tensor-parallel rank's partial: the group's sum is rounded once).
pub(crate) fn moe_unrounded(
    be: &CpuBackend,
    x: &CpuAct,
    w: &MoeWeights<CpuWeight>,
    spec: &MoeSpec,
) -> OpResult<CpuAct> {
    let (t, hidden) = (x.rows, x.cols);
    let (e, inter) = (spec.num_experts, spec.intermediate);
    spec.check_local()
        .map_err(|detail| OpError::shape("moe", detail))?;
    // The experts this backend holds (all of them outside tensor parallelism).
    let (first, local) = (spec.first_expert, spec.local_experts);
    let gate_up = matrix(&w.gate_up, "gate_up")?;
    let down = matrix(&w.down, "down")?;
    if gate_up.rows != local * 2 * inter || gate_up.cols != hidden {
        return Err(OpError::shape(
            "moe",
            format!(
                "gate_up [{}][{}] for {local} experts × 2·{inter} × {hidden}",
                gate_up.rows, gate_up.cols
            ),
        ));
    }
    if down.rows != local * hidden || down.cols != inter {
        return Err(OpError::shape(
            "moe",
            format!(
                "down [{}][{}] for {local} experts × {hidden} × {inter}",
                down.rows, down.cols
            ),
        ));
    }
    // Shared expert, gated (added by one rank of a tensor-parallel group).
    let mut out = if spec.shared_expert {
        let g = be.linear(x, &w.shared_gate_proj)?;
        let u = be.linear(x, &w.shared_up_proj)?;
        let mut out = be.linear(&be.swiglu(&g, &u)?, &w.shared_down_proj)?;
        let sg = be.linear_f32(x, &w.shared_gate)?;
        if out.cols != hidden || sg.cols != 1 {
            return Err(OpError::shape("moe", "shared expert shapes"));
        }
        for (row, gv) in out.data.chunks_exact_mut(hidden).zip(&sg.data) {
            let s = sigmoid(*gv);
            row.iter_mut().for_each(|v| *v *= s);
        }
        out
    } else {
        CpuAct::zeros(t, hidden)
    };
    // Routed experts.
    let logits = be.linear_f32(&be.router_input(x), &w.router)?;
    if logits.cols != e {
        return Err(OpError::shape("moe", "router rows != experts"));
    }
    let routing = route_tokens(&logits.data, e, spec.top_k, spec.renormalise);
    let groups = routing.by_expert(e);
    let results: Vec<(usize, Vec<f32>)> = groups
        .par_iter()
        .enumerate()
        .filter(|(ex, g)| !g.is_empty() && (first..first + local).contains(ex))
        .map(|(ex, group)| {
            let lx = ex - first;
            let n = group.len();
            let mut xe = Vec::with_capacity(n * hidden);
            for &(tok, _) in group {
                xe.extend_from_slice(&x.data[tok * hidden..(tok + 1) * hidden]);
            }
            let mut gt = linear_one_thread(&xe, n, gate_up.sub_rows(lx * 2 * inter, inter));
            let mut up = linear_one_thread(&xe, n, gate_up.sub_rows(lx * 2 * inter + inter, inter));
            be.round(ActRounding::MLP, &mut gt);
            be.round(ActRounding::MLP, &mut up);
            swiglu(&mut gt, &up);
            be.round(ActRounding::MLP, &mut gt);
            let mut y = linear_one_thread(&gt, n, down.sub_rows(lx * hidden, hidden));
            for (row, &(_, wt)) in y.chunks_exact_mut(hidden).zip(group) {
                row.iter_mut().for_each(|v| *v *= wt);
            }
            (ex, y)
        })
        .collect();
    let mut experts_sum = vec![0.0f32; t * hidden];
    for (ex, y) in results {
        for (row, &(tok, _)) in y.chunks_exact(hidden).zip(&groups[ex]) {
            for (o, v) in experts_sum[tok * hidden..(tok + 1) * hidden]
                .iter_mut()
                .zip(row)
            {
                *o += v;
            }
        }
    }
    for (o, v) in out.data.iter_mut().zip(&experts_sum) {
        *o += v;
    }
    Ok(out)
}

/// `x · Wᵀ` on the calling thread (inside a parallel loop over experts).
pub(crate) fn linear_one_thread(x: &[f32], m: usize, w: WeightView<'_>) -> Vec<f32> {
    let mut out = vec![0.0f32; m * w.rows];
    linear_seq(x, m, w, &mut out);
    out
}
