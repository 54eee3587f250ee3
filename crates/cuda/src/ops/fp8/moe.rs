//! The MoE block for a few rows (decode, up to [`MAX_DECODE_ROWS`]) on FP8
//! experts, from the router's f32 logits (the caller's): the routing (`fp8_moe_route`:
//! the softmax and top-k of `moe_route.cu` and the bf16 decode path,
//! writing each (row, slot) pair's local expert), the experts' gate/up on
//! the batched-experts FP8 GEMV ([`fp8_gemv_experts`], a row's slots
//! sharing its input), SwiGLU (`fp8_moe_swiglu`, bf16 activations), the
//! down projection on the same GEMV (one activation row a pair), and one
//! combine (`fp8_moe_combine`: the weighted sum of the pairs in slot order
//! plus the sigmoid-gated shared expert, rounded once to bf16). The
//! experts' products stay f32 until the SwiGLU and the combine.

use super::experts::{fp8_gemv_experts, ExpertsShape};
use super::weight::experts_of;
use crate::device::CudaDevice;
use crate::launch::{alloc, grid_dim, int, launch_programmatic, mul, stride_grid, Args, GRID_X};
use crate::tensor::{new_act, CudaAct, CudaWeight};
use crate::validate::bf16;
use headroom_core::ops::{MoeSpec, MoeWeights, OpError, OpResult};
use headroom_core::Dtype;

const OP: &str = "moe decode (fp8)";

/// Most experts the routing kernel takes (`MAX_EXPERTS` in `fp8_moe.cu`).
pub const MAX_EXPERTS: usize = 1024;

/// Most rows this path takes. Each (row, slot) pair reads its expert's
/// matrices (from L2 where pairs share an expert): at 35B-A3B, 32 rows read
/// at most 0.75 GiB a layer, about what dequantizing the layer's experts
/// for the grouped GEMMs moves (0.75 GiB read, 1.5 GiB written) before
/// those run; past that the grouped path wins. A guess from the bytes, to
/// be settled by `fp8_moe_timing` (`tests/fp8_backend.rs`).
pub const MAX_DECODE_ROWS: usize = 32;

/// Whether the FP8 decode takes this call: 1 ..= [`MAX_DECODE_ROWS`] rows,
/// both expert weights FP8 with a grid per expert, at most [`MAX_EXPERTS`]
/// experts.
pub(crate) fn takes(x: &CudaAct, w: &MoeWeights<CudaWeight>, spec: &MoeSpec) -> bool {
    (1..=MAX_DECODE_ROWS).contains(&x.rows)
        && (1..=spec.num_experts).contains(&spec.top_k)
        && spec.num_experts <= MAX_EXPERTS
        && experts_of(&w.gate_up, spec.local_experts).is_some()
        && experts_of(&w.down, spec.local_experts).is_some()
}

/// Device bytes of the bf16 scratch one MoE call takes for FP8 experts on
/// the grouped-GEMM path: the layer's gate_up and down dequantized (`local`
/// experts of `2 · intermediate × hidden` and `hidden × intermediate`).
pub fn fp8_expert_scratch_bytes(local: usize, hidden: usize, intermediate: usize) -> u64 {
    (local as u64) * 3 * (hidden as u64) * (intermediate as u64) * 2
}

/// The shared expert's part of the combine: its output before the gate
/// (bf16 `[rows][hidden]`) and the gate's logit (f32 `[rows][1]`).
pub(crate) struct SharedPart<'a> {
    pub out: &'a CudaAct,
    pub gate: &'a CudaAct,
}

/// The MoE block of `x` (1 ..= [`MAX_DECODE_ROWS`] rows) over FP8 experts, bf16
/// `[rows][hidden]`, from the router's f32 `logits` `[rows][experts]`;
/// `shared` adds the gated shared expert. The caller has checked the
/// weights' shapes (`crate::ops::moe::check_weights`).
pub(crate) fn moe_decode_fp8(
    dev: &CudaDevice,
    x: &CudaAct,
    logits: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
    shared: Option<SharedPart<'_>>,
) -> OpResult<CudaAct> {
    bf16(OP, x)?;
    let unsupported = || OpError::Unsupported {
        op: "moe decode (fp8)",
        reason: format!(
            "{} rows (1..={MAX_DECODE_ROWS}), top-k {} of {} experts (<= {MAX_EXPERTS}), expert \
             weights {} / {} with a block grid per expert",
            x.rows,
            spec.top_k,
            spec.num_experts,
            w.gate_up.format(),
            w.down.format()
        ),
    };
    if !takes(x, w, spec) {
        return Err(unsupported());
    }
    let (rows, hidden) = (x.rows, x.cols);
    let (k, inter, local) = (spec.top_k, spec.intermediate, spec.local_experts);
    let gate_up = experts_of(&w.gate_up, local).ok_or_else(unsupported)?;
    let down = experts_of(&w.down, local).ok_or_else(unsupported)?;
    if gate_up.n != 2 * inter || gate_up.k != hidden || down.n != hidden || down.k != inter {
        return Err(OpError::shape(
            OP,
            format!(
                "experts gate_up [{}][{}] and down [{}][{}] for hidden {hidden}, intermediate {inter}",
                gate_up.n, gate_up.k, down.n, down.k
            ),
        ));
    }
    if let Some(s) = &shared {
        if (s.out.rows, s.out.cols, s.out.dtype) != (rows, hidden, Dtype::Bf16)
            || (s.gate.rows, s.gate.cols, s.gate.dtype) != (rows, 1, Dtype::F32)
        {
            return Err(OpError::shape(
                OP,
                "shared expert output or gate of another shape",
            ));
        }
    }
    if (logits.rows, logits.cols, logits.dtype) != (rows, spec.num_experts, Dtype::F32) {
        return Err(OpError::shape(
            OP,
            "router of another width than the experts",
        ));
    }
    let pairs = mul(OP, rows, k)?;
    let ids = alloc(dev, mul(OP, pairs, 4)?)?;
    let weights = alloc(dev, mul(OP, pairs, 4)?)?;
    let args = Args::new()
        .ptr(logits.ptr())
        .i32(int(OP, "experts", spec.num_experts)?)
        .i32(int(OP, "top_k", k)?)
        .i32(i32::from(spec.renormalise))
        .i32(int(OP, "first expert", spec.first_expert)?)
        .i32(int(OP, "local experts", local)?)
        .ptr(ids.ptr())
        .ptr(weights.ptr());
    let grid = (grid_dim(OP, rows, GRID_X)?, 1, 1);
    // SAFETY: logits hold rows · experts f32 (checked), ids and weights
    // rows · k; one warp per row, experts <= MAX_EXPERTS (its shared
    // probabilities); the kernel waits for the previous one before it reads.
    unsafe { launch_programmatic(dev, "fp8_moe_route", grid, 32, args)? };

    let gu = alloc(dev, mul(OP, mul(OP, pairs, 2 * inter)?, 4)?)?;
    let s = ExpertsShape { pairs, x_group: k };
    fp8_gemv_experts(dev, x.buffer(), &ids, s, gate_up, &gu, Dtype::F32)?;
    let act = alloc(dev, mul(OP, mul(OP, pairs, inter)?, 2)?)?;
    let n = mul(OP, pairs, inter)?;
    let args = Args::new()
        .ptr(gu.ptr())
        .ptr(act.ptr())
        .i64(pairs as i64)
        .i32(int(OP, "intermediate", inter)?);
    // SAFETY: gu holds pairs · 2I f32, act pairs · I bf16; grid-stride over
    // the pairs · I outputs; the kernel waits before it reads.
    unsafe { launch_programmatic(dev, "fp8_moe_swiglu", stride_grid(n, 256), 256, args)? };
    let y = alloc(dev, mul(OP, mul(OP, pairs, hidden)?, 4)?)?;
    let s = ExpertsShape { pairs, x_group: 1 };
    fp8_gemv_experts(dev, &act, &ids, s, down, &y, Dtype::F32)?;

    let out = new_act(dev, OP, rows, hidden, Dtype::Bf16)?;
    let (shared_ptr, gate_ptr) = shared
        .as_ref()
        .map_or((0, 0), |s| (s.out.ptr(), s.gate.ptr()));
    let args = Args::new()
        .ptr(y.ptr())
        .ptr(ids.ptr())
        .ptr(weights.ptr())
        .ptr(shared_ptr)
        .ptr(gate_ptr)
        .ptr(out.ptr())
        .i64(rows as i64)
        .i32(int(OP, "top_k", k)?)
        .i32(int(OP, "hidden", hidden)?)
        .i32(i32::from(shared.is_some()));
    let n = mul(OP, rows, hidden)?;
    // SAFETY: y holds pairs · hidden f32, ids and weights pairs, the shared
    // output rows · hidden bf16 and its gate rows f32 (checked above; not
    // read without them), out rows · hidden bf16; the kernel waits first.
    unsafe { launch_programmatic(dev, "fp8_moe_combine", stride_grid(n, 256), 256, args)? };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::sources::FP8_MOE;
    use super::*;
    use crate::kernels::{source_constant, source_of};

    #[test]
    fn the_35b_scratch_is_one_layers_experts_in_bf16() {
        // 256 experts, hidden 2048, intermediate 512: 1.5 GiB.
        assert_eq!(fp8_expert_scratch_bytes(256, 2048, 512), 3 << 29);
        assert_eq!(fp8_expert_scratch_bytes(8, 192, 256), 8 * 3 * 192 * 256 * 2);
    }

    #[test]
    fn constants_and_entries_match_the_kernel_source() {
        assert_eq!(source_constant(FP8_MOE.source, "MAX_EXPERTS"), MAX_EXPERTS);
        for e in FP8_MOE.entry_points {
            assert_eq!(source_of(e), Some(&FP8_MOE), "{e}");
        }
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn every_entry_compiles_for_sm_90a_without_spills() {
        crate::nvrtc::compile_sm90a_without_spills(&FP8_MOE);
    }
}
