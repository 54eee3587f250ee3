//! The MoE block for a few rows (decode) in three launches
//! (`kernels/moe_decode.cu`): router GEMV with the softmax / top-k / shared
//! gate in its last CTA, gate+up GEMV with SiLU·mul for each row's experts and
//! the shared expert, down GEMV with the weighted combine. The grouped-GEMM
//! path ([`super::moe`]) takes ~14 launches and 128-row tiles that hold one
//! valid row each at decode. Two kernel versions ([`MoeDecodeKernels`]):
//! `HEADROOM_MOE_DECODE=off` keeps the old path for every batch, `v1` the
//! first kernels, anything else (default) v2.

use super::launch::{alloc, grid_dim, int, launch, mul, Args, GRID_X, GRID_YZ};
use super::memory::new_act;
use super::types::{CudaAct, CudaWeight};
use crate::device::CudaDevice;
use headroom_core::ops::{MoeSpec, MoeWeights, OpError, OpResult};
use headroom_core::Dtype;
use std::sync::OnceLock;

/// Most rows the decode path takes (`MAX_ROWS` in the kernel).
pub(crate) const MAX_ROWS: usize = 8;
/// Largest rows × experts of the route kernel's softmax (`PROBS`).
const PROBS: usize = 4096;
/// Largest top-k (`MAX_TOP_K`).
const MAX_TOP_K: usize = 32;
/// Threads per CTA (`THREADS`) and columns per CTA (`COLS_PER_CTA`).
const THREADS: u32 = 256;
const COLS_PER_CTA: usize = 16;
/// Router rows per route CTA (`WARPS`).
const WARPS: usize = 8;
/// The device ticket counter the route kernel owns.
const ROUTE_TICKET: usize = 0;

/// The gate+up and down kernels of the decode path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeDecodeKernels {
    /// Two columns per warp, a column's K loop unrolled by 4; the down
    /// kernel one expert row after another (`moe_decode_{gate_up,down}`).
    V1,
    /// One column per warp with its whole K loop in flight; the down
    /// kernel's (expert, chunk) pairs flattened over the lanes (`*_v2`).
    V2,
}

impl MoeDecodeKernels {
    /// Entry points of gate+up and down, and the columns one CTA computes.
    fn entries(self) -> (&'static str, &'static str, usize) {
        match self {
            MoeDecodeKernels::V1 => ("moe_decode_gate_up", "moe_decode_down", COLS_PER_CTA),
            MoeDecodeKernels::V2 => ("moe_decode_gate_up_v2", "moe_decode_down_v2", WARPS),
        }
    }
}

/// `HEADROOM_MOE_DECODE`: `v2` (or `on`) the decode kernels, `v1` the first
/// ones; otherwise (default) the grouped-GEMM path for every batch. Opt-in:
/// the lead's final GPU call of 2026-12-01 (docs/perf/cuda-decode.md,
/// "decode2 on main") saw a whole-model decode on the moe_d256 fixture fail
/// with an illegal address with this path and the table cache on, cause not
/// yet isolated.
fn chosen() -> Option<MoeDecodeKernels> {
    static CHOSEN: OnceLock<Option<MoeDecodeKernels>> = OnceLock::new();
    *CHOSEN.get_or_init(|| match std::env::var("HEADROOM_MOE_DECODE").as_deref() {
        Ok("v2" | "on" | "1") => Some(MoeDecodeKernels::V2),
        Ok("v1") => Some(MoeDecodeKernels::V1),
        _ => None,
    })
}

/// The decode kernels that take this call (few rows, shapes they handle),
/// or `None` for the grouped-GEMM path.
pub(crate) fn takes(
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
) -> Option<MoeDecodeKernels> {
    chosen().filter(|_| supports(x, w, spec))
}

/// The shapes the kernels handle (the weights themselves are checked by
/// `moe::check` before any launch).
fn supports(x: &CudaAct, w: &MoeWeights<CudaWeight>, spec: &MoeSpec) -> bool {
    let si = w.shared_gate_proj.rows;
    spec.shared_expert
        && (1..=MAX_ROWS).contains(&x.rows)
        && x.cols.is_multiple_of(8)
        && x.cols > 0
        && spec.intermediate.is_multiple_of(8)
        && spec.intermediate > 0
        && si.is_multiple_of(8)
        && si > 0
        && spec.top_k >= 1
        && spec.top_k <= MAX_TOP_K
        && x.rows
            .checked_mul(spec.num_experts)
            .is_some_and(|n| n <= PROBS)
}

/// Byte offsets of the workspace's parts (each 16-byte aligned).
struct Workspace {
    logits: usize,
    topk_expert: usize,
    topk_weight: usize,
    gate: usize,
    act: usize,
    bytes: usize,
    act_stride: usize,
}

fn workspace(rows: usize, spec: &MoeSpec, shared_inter: usize) -> OpResult<Workspace> {
    let op = "moe decode";
    let up16 = |b: usize| b.div_ceil(16) * 16;
    let act_stride = spec.intermediate.max(shared_inter).div_ceil(4) * 4;
    let logits = 0;
    let topk_expert = up16(mul(op, mul(op, rows, spec.num_experts + 1)?, 4)?);
    let pairs = mul(op, rows, spec.top_k)?;
    let topk_weight = topk_expert + up16(pairs * 4);
    let gate = topk_weight + up16(pairs * 4);
    let act = gate + up16(rows * 4);
    let act_bytes = mul(op, mul(op, mul(op, rows, spec.top_k + 1)?, act_stride)?, 4)?;
    Ok(Workspace {
        logits,
        topk_expert,
        topk_weight,
        gate,
        act,
        bytes: act + act_bytes,
        act_stride,
    })
}

/// The MoE block of `x` (1 ..= [`MAX_ROWS`] rows) on the decode kernels,
/// bf16 `[rows][hidden]`: the same result as the grouped-GEMM path up to
/// rounding (its gate/up products and per-expert outputs are rounded to bf16,
/// these stay f32 until the output).
pub(crate) fn moe_decode(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
    kernels: MoeDecodeKernels,
) -> OpResult<CudaAct> {
    moe_decode_marked(dev, x, w, spec, kernels, &mut |_| {})
}

/// [`moe_decode`], calling `mark` with `route`, `gate_up`, `down` before each
/// launch and `end` after the last (a bench or test records events there).
fn moe_decode_marked(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
    kernels: MoeDecodeKernels,
    mark: &mut dyn FnMut(&'static str),
) -> OpResult<CudaAct> {
    let op = "moe decode";
    let (gate_up_entry, down_entry, cols_per_cta) = kernels.entries();
    super::validate::bf16(op, x)?;
    super::moe::check(w, spec, x.cols)?;
    if !supports(x, w, spec) {
        return Err(OpError::Unsupported {
            op,
            reason: format!(
                "{} rows (1..={MAX_ROWS}), hidden {}, intermediate {}, shared {} (multiples of 8), \
                 top-k {} (<= {MAX_TOP_K}), rows x experts <= {PROBS}, shared expert held: {}",
                x.rows,
                x.cols,
                spec.intermediate,
                w.shared_gate_proj.rows,
                spec.top_k,
                spec.shared_expert
            ),
        });
    }
    let (rows, hidden) = (x.rows, x.cols);
    let (e, k, inter) = (spec.num_experts, spec.top_k, spec.intermediate);
    let si = w.shared_gate_proj.rows;
    let ws = workspace(rows, spec, si)?;
    let scratch = alloc(dev, ws.bytes)?;
    let at = |off: usize| scratch.ptr() + off as u64;
    let out = new_act(dev, op, rows, hidden, Dtype::Bf16)?;
    let ticket = dev.ticket(ROUTE_TICKET).map_err(super::launch::dev_err)?;
    let h32 = int(op, "hidden", hidden)?;
    let k32 = int(op, "top_k", k)?;
    let (i32_, si32) = (int(op, "intermediate", inter)?, int(op, "shared", si)?);
    let stride = int(op, "act stride", ws.act_stride)?;

    let route_grid = grid_dim(op, (e + 1).div_ceil(WARPS), GRID_X)?;
    let args = Args::new()
        .ptr(x.ptr())
        .ptr(w.router.ptr())
        .ptr(w.shared_gate.ptr())
        .i32(int(op, "rows", rows)?)
        .i32(h32)
        .i32(int(op, "experts", e)?)
        .i32(k32)
        .i32(spec.renormalise as i32)
        .i32(int(op, "first expert", spec.first_expert)?)
        .i32(int(op, "local experts", spec.local_experts)?)
        .ptr(at(ws.logits))
        .ptr(ticket)
        .ptr(at(ws.topk_expert))
        .ptr(at(ws.topk_weight))
        .ptr(at(ws.gate));
    mark("route");
    // SAFETY: x is [rows][hidden], router [e][hidden], shared_gate [1][hidden]
    // (moe::check); the workspace holds rows·(e+1) logits, rows·k experts and
    // weights and rows gates; the ticket is this kernel's, zero between launches.
    unsafe { launch(dev, "moe_decode_route", (route_grid, 1, 1), THREADS, args)? };

    let pairs = grid_dim(op, rows * (k + 1), GRID_YZ)?;
    let gu_grid = grid_dim(op, inter.max(si).div_ceil(cols_per_cta), GRID_X)?;
    let args = Args::new()
        .ptr(x.ptr())
        .ptr(w.gate_up.ptr())
        .ptr(w.shared_gate_proj.ptr())
        .ptr(w.shared_up_proj.ptr())
        .ptr(at(ws.topk_expert))
        .i32(h32)
        .i32(k32)
        .i32(i32_)
        .i32(si32)
        .i32(stride)
        .ptr(at(ws.act));
    mark("gate_up");
    // SAFETY: gate_up is [local·2·inter][hidden] and topk_expert holds local
    // indices or -1 (the route kernel); the shared projections are [si][hidden];
    // act holds rows·(k+1)·stride f32 with stride ≥ max(inter, si).
    unsafe { launch(dev, gate_up_entry, (gu_grid, pairs, 1), THREADS, args)? };

    let down_grid = grid_dim(op, hidden.div_ceil(cols_per_cta), GRID_X)?;
    let args = Args::new()
        .ptr(at(ws.act))
        .ptr(w.down.ptr())
        .ptr(w.shared_down_proj.ptr())
        .ptr(at(ws.topk_expert))
        .ptr(at(ws.topk_weight))
        .ptr(at(ws.gate))
        .i32(h32)
        .i32(k32)
        .i32(i32_)
        .i32(si32)
        .i32(stride)
        .ptr(out.ptr());
    let rows_grid = grid_dim(op, rows, GRID_YZ)?;
    mark("down");
    // SAFETY: down is [local·hidden][inter], shared_down [hidden][si]; act and
    // the routing as written above; out is [rows][hidden] bf16.
    unsafe { launch(dev, down_entry, (down_grid, rows_grid, 1), THREADS, args)? };
    mark("end");
    Ok(out)
}

impl super::CudaBackend {
    /// The MoE block on the decode kernels `kernels`, whatever
    /// `HEADROOM_MOE_DECODE` says (tests and benches compare it with
    /// [`Self::moe_marked`]).
    pub fn moe_decode(
        &self,
        x: &CudaAct,
        w: &MoeWeights<CudaWeight>,
        spec: &MoeSpec,
        kernels: MoeDecodeKernels,
    ) -> OpResult<CudaAct> {
        moe_decode(&self.dev, x, w, spec, kernels)
    }

    /// [`Self::moe_decode`] calling `mark` with `route`, `gate_up`, `down`
    /// before each launch and `end` after the last.
    pub fn moe_decode_marked(
        &self,
        x: &CudaAct,
        w: &MoeWeights<CudaWeight>,
        spec: &MoeSpec,
        kernels: MoeDecodeKernels,
        mark: &mut dyn FnMut(&'static str),
    ) -> OpResult<CudaAct> {
        moe_decode_marked(&self.dev, x, w, spec, kernels, mark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{source_constant, MOE_DECODE};

    #[test]
    fn launch_constants_match_the_kernel() {
        let src = MOE_DECODE.source;
        assert_eq!(source_constant(src, "MAX_ROWS"), MAX_ROWS);
        assert_eq!(source_constant(src, "PROBS"), PROBS);
        assert_eq!(source_constant(src, "MAX_TOP_K"), MAX_TOP_K);
        assert_eq!(source_constant(src, "THREADS") as u32, THREADS);
        let warps = THREADS as usize / 32;
        assert_eq!(warps, WARPS);
        assert_eq!(source_constant(src, "COLS_PER_WARP") * warps, COLS_PER_CTA);
    }

    #[test]
    fn workspace_parts_are_aligned_and_disjoint() {
        let spec = MoeSpec::all_experts(256, 8, 512, true);
        for rows in 1..=MAX_ROWS {
            let ws = workspace(rows, &spec, 200).unwrap();
            assert_eq!(ws.act_stride, 512);
            let parts = [ws.logits, ws.topk_expert, ws.topk_weight, ws.gate, ws.act];
            assert!(parts.iter().all(|p| p % 16 == 0), "{rows}: {parts:?}");
            assert!(ws.topk_expert >= rows * 257 * 4);
            assert!(ws.topk_weight >= ws.topk_expert + rows * 8 * 4);
            assert!(ws.gate >= ws.topk_weight + rows * 8 * 4);
            assert!(ws.act >= ws.gate + rows * 4);
            assert_eq!(ws.bytes, ws.act + rows * 9 * 512 * 4);
        }
        let odd = MoeSpec::all_experts(6, 2, 24, false);
        assert_eq!(workspace(3, &odd, 40).unwrap().act_stride, 40);
        assert_eq!(workspace(3, &odd, 8).unwrap().act_stride, 24);
    }
}
