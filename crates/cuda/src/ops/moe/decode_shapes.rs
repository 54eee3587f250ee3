//! What the decode kernels take (`decode.rs` launches them): the weight
//! formats they read ([`Formats`]), the shapes within the kernels' limits
//! ([`supports`], and the reason when refused), the FP8 matrices' scales
//! checked against their buffers, and the layout of the launches'
//! workspace (routing logits, top-k, activations). Host logic only.

use super::{MAX_ACT, MAX_EXPERTS, MAX_HIDDEN, MAX_ROWS, MAX_TOP_K};
use crate::launch::mul;
use crate::ops::fp8::experts::Fp8Experts;
use crate::ops::fp8::weight::{experts_of, matrix_of};
use crate::ops::fp8::{need, Fp8Matrix};
use crate::tensor::{CudaAct, CudaWeight};
use headroom_core::ops::{MoeSpec, MoeWeights, OpError, OpResult};

/// Whether the decode kernels take this call (few rows, shapes they handle,
/// weight formats they read: [`formats`]).
pub(crate) fn takes(x: &CudaAct, w: &MoeWeights<CudaWeight>, spec: &MoeSpec) -> bool {
    formats(w, spec).is_some_and(|f| supports(x, w, spec, f.chunk()))
}

/// The weight formats of a block the kernels read.
#[derive(Clone, Copy)]
pub(crate) enum Formats<'a> {
    /// Every weight bf16.
    Bf16,
    /// The routed experts FP8 (a block grid per expert), the router and the
    /// shared gate bf16, the shared expert's three projections FP8 (one
    /// grid each: `shared` holds gate, up, down) or all bf16 (`None`).
    Fp8 {
        gate_up: Fp8Experts<'a>,
        down: Fp8Experts<'a>,
        shared: Option<[Fp8Matrix<'a>; 3]>,
    },
}

impl Formats<'_> {
    /// Elements of one weight chunk (one 16-byte load): the multiple the
    /// dot lengths (hidden, intermediates) must be.
    pub(super) fn chunk(&self) -> usize {
        match self {
            Formats::Bf16 => 8,
            Formats::Fp8 { .. } => 16,
        }
    }
}

/// The formats of `w` if the kernels read them, else `None` (e.g. an FP8
/// router, a shared expert of mixed formats, FP8 buffers not 16-byte aligned).
pub(crate) fn formats<'a>(w: &'a MoeWeights<CudaWeight>, spec: &MoeSpec) -> Option<Formats<'a>> {
    let shared = [&w.shared_gate_proj, &w.shared_up_proj, &w.shared_down_proj];
    if w.router.is_fp8() || w.shared_gate.is_fp8() {
        return None;
    }
    if !w.gate_up.is_fp8() && !w.down.is_fp8() {
        return shared.iter().all(|m| !m.is_fp8()).then_some(Formats::Bf16);
    }
    let gate_up = experts_of(&w.gate_up, spec.local_experts)?;
    let down = experts_of(&w.down, spec.local_experts)?;
    let shared = if shared.iter().all(|m| m.is_fp8()) {
        let [g, u, d] = shared.map(matrix_of);
        Some([g?, u?, d?])
    } else if shared.iter().all(|m| !m.is_fp8()) {
        None
    } else {
        return None;
    };
    let aligned = |b: &crate::alloc::DeviceBuffer| b.ptr().is_multiple_of(16);
    let mut bufs = vec![gate_up.w, down.w];
    bufs.extend(shared.iter().flatten().map(|m| m.w));
    bufs.iter().all(|b| aligned(b)).then_some(Formats::Fp8 {
        gate_up,
        down,
        shared,
    })
}

/// The shapes the kernels handle for weight chunks of `chunk` elements (the
/// weights themselves are checked by `check_weights` before any launch).
pub(super) fn supports(
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
    chunk: usize,
) -> bool {
    supports_shape(x.rows, x.cols, w, spec, chunk)
}

/// [`supports`] for `rows` rows of `hidden`.
pub(super) fn supports_shape(
    rows: usize,
    hidden: usize,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
    chunk: usize,
) -> bool {
    let si = w.shared_gate_proj.rows;
    let dims_ok = |n: usize| n > 0 && n.is_multiple_of(chunk);
    spec.shared_expert
        && (1..=MAX_ROWS).contains(&rows)
        && dims_ok(hidden)
        && hidden <= MAX_HIDDEN
        && dims_ok(spec.intermediate)
        && dims_ok(si)
        && (1..=MAX_TOP_K).contains(&spec.top_k)
        && spec.num_experts <= MAX_EXPERTS
        && (spec.top_k + 1) * act_stride(spec.intermediate, si) <= MAX_ACT
}

/// Floats per (row, slot) of the activations: the longer intermediate, a
/// multiple of 4 (float4 loads).
pub(super) fn act_stride(inter: usize, shared_inter: usize) -> usize {
    inter.max(shared_inter).div_ceil(4) * 4
}

/// Why [`supports`] refuses a call: the shape against every limit.
pub(super) fn unsupported(x: &CudaAct, w: &MoeWeights<CudaWeight>, spec: &MoeSpec) -> OpError {
    let formats = formats(w, spec);
    OpError::Unsupported {
        op: "moe decode",
        reason: format!(
            "{} rows (1..={MAX_ROWS}), hidden {} (<= {MAX_HIDDEN}), intermediate {}, shared {} \
             (multiples of 8; of 16 for FP8 experts), top-k {} (<= {MAX_TOP_K}), {} experts \
             (<= {MAX_EXPERTS}), (top-k + 1) x stride <= {MAX_ACT}, shared expert held: {}, \
             weight formats {} (bf16; or FP8 experts with a grid each, a bf16 router and \
             shared gate, a shared expert all FP8 or all bf16)",
            x.rows,
            x.cols,
            spec.intermediate,
            w.shared_gate_proj.rows,
            spec.top_k,
            spec.num_experts,
            spec.shared_expert,
            match formats {
                Some(Formats::Bf16) => "read",
                Some(Formats::Fp8 { .. }) => "read (FP8)",
                None => "not read",
            }
        ),
    }
}

/// Checks that every FP8 matrix's buffers hold its bytes and its scales.
pub(super) fn check_scales(f: &Formats) -> OpResult<()> {
    let op = "moe decode";
    let Formats::Fp8 {
        gate_up,
        down,
        shared,
    } = f
    else {
        return Ok(());
    };
    for e in [gate_up, down] {
        let m = Fp8Matrix {
            w: e.w,
            scale_inv: e.scale_inv,
            n: e.n,
            k: e.k,
        };
        let (nb, kb) = m.scale_dims();
        need(op, "experts", e.w, mul(op, e.experts, mul(op, e.n, e.k)?)?)?;
        let scales = mul(op, mul(op, e.experts, mul(op, nb, kb)?)?, 4)?;
        need(op, "experts' scale_inv", e.scale_inv, scales)?;
    }
    shared.iter().flatten().try_for_each(|m| m.check(op))
}

/// Byte offsets of the workspace's parts (each 16-byte aligned).
pub(super) struct Workspace {
    pub(super) logits: usize,
    pub(super) topk_expert: usize,
    pub(super) topk_weight: usize,
    pub(super) act: usize,
    pub(super) bytes: usize,
    pub(super) act_stride: usize,
}

pub(super) fn workspace(rows: usize, spec: &MoeSpec, shared_inter: usize) -> OpResult<Workspace> {
    let op = "moe decode";
    let up16 = |b: usize| b.div_ceil(16) * 16;
    let act_stride = act_stride(spec.intermediate, shared_inter);
    let logits = 0;
    let topk_expert = up16(mul(op, mul(op, rows, spec.num_experts + 1)?, 4)?);
    let pairs = mul(op, rows, spec.top_k)?;
    let topk_weight = topk_expert + up16(pairs * 4);
    let act = topk_weight + up16(pairs * 4);
    let act_bytes = mul(op, mul(op, mul(op, rows, spec.top_k + 1)?, act_stride)?, 4)?;
    Ok(Workspace {
        logits,
        topk_expert,
        topk_weight,
        act,
        bytes: act + act_bytes,
        act_stride,
    })
}
