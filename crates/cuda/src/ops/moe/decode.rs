//! The MoE block for a few rows (decode) in three launches
//! (`moe_decode.cu`), each programmatic on sm_90+: the router GEMV,
//! the routed and shared experts' gate+up (each routed CTA takes its row's
//! softmax and top-k from the logits itself; the shared expert's weights load
//! while the router runs), and the down GEMV with the weighted combine (the
//! weight loads marked evict-first). The routed experts may be block-scaled
//! FP8 (`crate::ops::fp8`; the router and the shared gate bf16, as Qwen's
//! FP8 checkpoints keep them, the shared expert FP8 or bf16): the same
//! kernels instantiated for e4m3 chunks with their block scales. gate_up and
//! down run on the tensor cores (bf16 or e4m3 weights as mma.sync's A) where
//! the rows are whole rounds: `gate_up_mma_takes`, `down_mma_takes`. The
//! grouped-GEMM path
//! ([`super::routed_experts`]) takes ~14 launches and 128-row tiles that hold
//! one valid row each at decode.
//!
//! The entry each launch runs is `decode_select.rs`'s choice; the formats,
//! shapes and workspace the kernels take are `decode_shapes.rs`'s.

#[path = "decode_select.rs"]
mod select;
#[path = "decode_shapes.rs"]
mod shapes;

pub(crate) use shapes::{formats, takes, Formats};

use super::check_weights;
use crate::device::CudaDevice;
use crate::launch::{alloc, grid_dim, int, launch_programmatic, Args, GRID_X, GRID_YZ};
use crate::ops::fp8::experts::Fp8Experts;
use crate::ops::fp8::Fp8Matrix;
use crate::tensor::new_act;
use crate::tensor::{CudaAct, CudaWeight};
use crate::validate::bf16;
use headroom_core::ops::{MoeSpec, MoeWeights, OpError, OpResult};
use headroom_core::Dtype;
// The entry choice and what the kernels take, also as the tests name them.
use select::*;
use shapes::*;

/// Most rows the decode path takes (`MAX_ROWS` in the kernel).
pub(crate) const MAX_ROWS: usize = 8;
/// Most experts (`MAX_EXPERTS`), largest top-k (`MAX_TOP_K`), largest hidden
/// (`MAX_HIDDEN`, staged in shared memory) and largest `(top_k + 1) · stride`
/// of a row's activations (`MAX_ACT`, staged by the down kernel).
const MAX_EXPERTS: usize = 1024;
const MAX_TOP_K: usize = 32;
const MAX_HIDDEN: usize = 8192;
const MAX_ACT: usize = 11264;
/// Elements of x the router stages in shared memory at once (`ROUTE_XS`).
const ROUTE_XS: usize = 16384;
/// Threads per CTA (`THREADS`); each warp computes one row (route) or
/// column (down), or [`GATE_UP_COLS`] columns (gate_up).
const THREADS: u32 = 256;
const WARPS: usize = 8;
/// Columns a gate_up warp computes one after the other: `GATE_UP_COLS` at
/// one row, `GATE_UP_COLS_ROWS` from two (the `*_rows` entries); the grid is
/// `ceil(max(inter, shared) / (8 · cols))` × (rows · (1 + k)).
const GATE_UP_COLS: usize = 3;
const GATE_UP_COLS_ROWS: usize = 5;

/// The MoE block of `x` (1 ..= [`MAX_ROWS`] rows) on the decode kernels,
/// bf16 `[rows][hidden]`: the same result as the grouped-GEMM path up to
/// rounding (its gate/up products and per-expert outputs are rounded to bf16,
/// these stay f32 until the output).
pub(crate) fn moe_decode(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
) -> OpResult<CudaAct> {
    moe_decode_marked(dev, x, w, spec, &mut |_| {})
}

/// [`moe_decode`], calling `mark` with `route`, `gate_up`, `down` before each
/// launch and `end` after the last (a bench or test records events there).
pub(crate) fn moe_decode_marked(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
    mark: &mut dyn FnMut(&'static str),
) -> OpResult<CudaAct> {
    run(dev, x, None, w, spec, mark)
}

/// The post-attention norm folded into the router
/// ([`moe_decode_after_norm`]): the f32 residual stream, the delta added to
/// it, the norm's weight and eps.
struct FoldedNorm<'a> {
    residual: &'a CudaAct,
    delta: &'a CudaAct,
    weight: &'a CudaWeight,
    eps: f32,
    residual_out: &'a CudaAct,
}

/// Whether [`moe_decode_after_norm`] takes this call: the decode kernels take
/// the block at these rows, the residual is f32 and the delta bf16 of its
/// shape, the norm an f32 vector of hidden, the rows are the 16-byte norm
/// kernel's (`norm::quad_takes`: the kernel it replaces, whose block the
/// router's matches) and fit the router's staging (rows · hidden <= 16,384).
pub(crate) fn takes_after_norm(
    residual: &CudaAct,
    delta: &CudaAct,
    norm: &CudaWeight,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
) -> bool {
    let (rows, hidden) = (residual.rows, residual.cols);
    residual.dtype == Dtype::F32
        && delta.dtype == Dtype::Bf16
        && (delta.rows, delta.cols) == (rows, hidden)
        && norm.dtype == Dtype::F32
        && norm.elems() == hidden
        && crate::ops::norm::quad_takes(hidden)
        && rows * hidden <= ROUTE_XS
        && formats(w, spec).is_some_and(|f| supports_shape(rows, hidden, w, spec, f.chunk()))
}

/// `residual += delta`, then the MoE block of the residual's zero-centred
/// RMSNorm (`Backend::add_rms_norm` then the decode kernels), in the same
/// three launches as [`moe_decode`]: the router computes the norm itself
/// (`moe_decode_route_norm`) and writes the new residual (a fresh buffer
/// that replaces `residual`'s: the router's other CTAs read the old one) and
/// the normed rows the expert kernels read. The same bits as the two calls.
/// `Err` (nothing launched) unless [`takes_after_norm`].
pub(crate) fn moe_decode_after_norm(
    dev: &CudaDevice,
    residual: &mut CudaAct,
    delta: &CudaAct,
    norm: &CudaWeight,
    eps: f32,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
) -> OpResult<CudaAct> {
    let op = "moe decode";
    if !takes_after_norm(residual, delta, norm, w, spec) {
        return Err(OpError::Unsupported {
            op,
            reason: format!(
                "the router folds the norm in for an f32 residual, a bf16 delta of its shape, an \
                 f32 norm of hidden, hidden % 4 == 0 and <= {}, rows x hidden <= {ROUTE_XS}, and \
                 a block the decode kernels take (here {} x {})",
                crate::ops::norm::QUAD_MAX_COLS,
                residual.rows,
                residual.cols
            ),
        });
    }
    let x = new_act(dev, op, residual.rows, residual.cols, Dtype::Bf16)?;
    let residual_out = new_act(dev, op, residual.rows, residual.cols, Dtype::F32)?;
    let folded = FoldedNorm {
        residual,
        delta,
        weight: norm,
        eps,
        residual_out: &residual_out,
    };
    let out = run(dev, &x, Some(folded), w, spec, &mut |_| {})?;
    *residual = residual_out;
    Ok(out)
}

/// The three launches: the router reads `x`, or (`norm`) computes it into
/// `x` from the residual stream.
fn run(
    dev: &CudaDevice,
    x: &CudaAct,
    norm: Option<FoldedNorm<'_>>,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
    mark: &mut dyn FnMut(&'static str),
) -> OpResult<CudaAct> {
    let op = "moe decode";
    bf16(op, x)?;
    check_weights(w, spec, x.cols)?;
    let Some(f) = formats(w, spec).filter(|f| supports(x, w, spec, f.chunk())) else {
        return Err(unsupported(x, w, spec));
    };
    check_scales(&f)?;
    // The entry points' suffix and the scales each FP8 matrix passes beside it.
    let (suffix, [gu_s, sg_s, su_s, sd_s, d_s]) = match f {
        Formats::Bf16 => ("", [None; 5]),
        Formats::Fp8 {
            gate_up,
            down,
            shared,
        } => {
            let s = |m: Option<Fp8Matrix>| Some(m.map_or(0, |m| m.scale_inv.ptr()));
            let [g, u, d] = shared.map_or([None; 3], |m| m.map(Some));
            let suffix = if shared.is_some() {
                "_fp8"
            } else {
                "_fp8_sbf16"
            };
            let routed = |e: Fp8Experts| Some(e.scale_inv.ptr());
            (suffix, [routed(gate_up), s(g), s(u), s(d), routed(down)])
        }
    };
    // A weight's pointer, then its scales' where the entry takes them.
    let with = |a: Args, m: &CudaWeight, scales: Option<u64>| match scales {
        Some(p) => a.ptr(m.ptr()).ptr(p),
        None => a.ptr(m.ptr()),
    };
    let (rows, hidden) = (x.rows, x.cols);
    let (e, k, inter) = (spec.num_experts, spec.top_k, spec.intermediate);
    let si = w.shared_gate_proj.rows;
    let ws = workspace(rows, spec, si)?;
    let scratch = alloc(dev, ws.bytes)?;
    let at = |off: usize| scratch.ptr() + off as u64;
    let out = new_act(dev, op, rows, hidden, Dtype::Bf16)?;
    let h32 = int(op, "hidden", hidden)?;
    let e32 = int(op, "experts", e)?;
    let k32 = int(op, "top_k", k)?;
    let (i32_, si32) = (int(op, "intermediate", inter)?, int(op, "shared", si)?);
    let stride = int(op, "act stride", ws.act_stride)?;

    // One warp a router row (the shared gate's last), every row.
    let route_grid = grid_dim(op, (e + 1).div_ceil(WARPS), GRID_X)?;
    let (route_entry, args) = match &norm {
        None => ("moe_decode_route", Args::new().ptr(x.ptr())),
        Some(n) => (
            "moe_decode_route_norm",
            Args::new()
                .ptr(n.residual.ptr())
                .ptr(n.delta.ptr())
                .ptr(n.weight.ptr())
                .f32(n.eps)
                .ptr(n.residual_out.ptr())
                .ptr(x.ptr()),
        ),
    };
    let args = args
        .ptr(w.router.ptr())
        .ptr(w.shared_gate.ptr())
        .i32(int(op, "rows", rows)?)
        .i32(h32)
        .i32(e32)
        .ptr(at(ws.logits))
        .i32(k32)
        .ptr(at(ws.topk_expert));
    mark("route");
    // Each kernel launches programmatically (it may start while the previous
    // kernel finishes) and reads only weights before its griddepcontrol.wait
    // (the down kernel also the experts gate_up publishes: moe_decode.cu).
    // SAFETY: x is [rows][hidden], router [e][hidden], shared_gate [1][hidden]
    // (check_weights); the workspace holds rows·(e+1) logits. With the norm
    // folded in (takes_after_norm): residual and residual_out f32 and delta
    // bf16 [rows][hidden], the norm f32 [hidden], hidden % 4 == 0 within the
    // kernel's quads, rows·hidden within its staging; x is written, not read.
    // topk_expert holds rows·k entries (marked unwritten for the down kernel).
    unsafe { launch_programmatic(dev, route_entry, (route_grid, 1, 1), THREADS, args)? };

    // Each row's shared expert, then the (row, slot) pairs of the routed experts.
    let pairs = grid_dim(op, rows * (k + 1), GRID_YZ)?;
    let (gate_up_entry, cols) = gate_up_for(suffix, rows, dev.capability, hidden);
    let gu_grid = grid_dim(op, inter.max(si).div_ceil(WARPS * cols), GRID_X)?;
    let args = with(Args::new().ptr(x.ptr()), &w.gate_up, gu_s);
    let args = with(args, &w.shared_gate_proj, sg_s);
    let args = with(args, &w.shared_up_proj, su_s)
        .ptr(at(ws.logits))
        .i32(int(op, "rows", rows)?)
        .i32(h32)
        .i32(e32)
        .i32(k32)
        .i32(spec.renormalise as i32)
        .i32(int(op, "first expert", spec.first_expert)?)
        .i32(int(op, "local experts", spec.local_experts)?)
        .i32(i32_)
        .i32(si32)
        .i32(stride)
        .ptr(at(ws.topk_expert))
        .ptr(at(ws.topk_weight))
        .ptr(at(ws.act));
    mark("gate_up");
    // SAFETY: gate_up is [local·2·inter][hidden], the shared projections
    // [si][hidden], FP8 scales their grids (check_scales); the kernel reads
    // only local experts (first ..< first + local of the top-k); topk_* hold
    // rows·k entries, act rows·(k+1)·stride with stride ≥ max(inter, si).
    unsafe { launch_programmatic(dev, gate_up_entry, (gu_grid, pairs, 1), THREADS, args)? };

    let (down_entry, down_cols, down_threads) = down_for(suffix, dev.capability, hidden, inter, si);
    let down_grid = grid_dim(op, hidden.div_ceil(down_cols), GRID_X)?;
    let args = with(Args::new().ptr(at(ws.act)), &w.down, d_s);
    let args = with(args, &w.shared_down_proj, sd_s)
        .ptr(at(ws.topk_expert))
        .ptr(at(ws.topk_weight))
        .ptr(at(ws.logits))
        .i32(h32)
        .i32(e32)
        .i32(k32)
        .i32(i32_)
        .i32(si32)
        .i32(stride)
        .ptr(out.ptr());
    let rows_grid = grid_dim(op, rows, GRID_YZ)?;
    mark("down");
    // SAFETY: down is [local·hidden][inter], shared_down [hidden][si]; the
    // routing and activations as written above, (k+1)·stride <= MAX_ACT
    // (supports); out is [rows][hidden] bf16. The one read before its
    // griddepcontrol.wait of what an earlier kernel wrote, topk_expert, goes
    // through the mark / publish / await protocol of moe_decode_common.cuh
    // (the route kernel's marks complete before this grid launches; gate_up's
    // publishing CTAs running by then: PDL launches it only after every
    // gate_up CTA has called launch_next, after its own wait).
    unsafe {
        launch_programmatic(
            dev,
            down_entry,
            (down_grid, rows_grid, 1),
            down_threads,
            args,
        )?
    };
    mark("end");
    Ok(out)
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;

/// The kernels under NVRTC (here: the options are read only in a file's
/// `#[cfg(test)]` part).
#[cfg(test)]
#[path = "decode_sass_tests.rs"]
mod nvrtc;
