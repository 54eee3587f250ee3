//! The routed experts of the sparse MoE on the device (`moe_route.cu`,
//! `moe_grouped_gemm.cu`): routing (softmax + top-k per token), tokens sorted
//! by expert with device-side offsets, the gate+up grouped GEMM with SiLU·mul
//! in its epilogue, the down grouped GEMM, and a deterministic weighted
//! combine back to token order. No host synchronisation, no per-expert host
//! loop: the launches are the same whatever the routing.
//!
//! Routing semantics are transformers' `Qwen3_5MoeTopKRouter` (the CPU
//! `route`): softmax over all experts in f32, top-k by probability (ties to
//! the lower expert index, NaN last), weights renormalised over the kept k
//! when `renormalise`. The router logits and the shared expert are the
//! caller's; [`routed_experts_shared_marked`] folds the shared expert's gated add
//! into the combine and writes the block's bf16 output in the same pass.

pub(crate) mod decode;
pub mod fp8;
mod gemm;
mod launch;
pub mod sources;
mod weights;

pub use gemm::{
    GemmImpl, GemmKernel, STREAM_ROWS_PER_EXPERT, STREAM_SMEM_BYTES, WS_BN, WS_MAX_EXPERTS,
    WS_PAIRS, WS_SMEM_DOWN, WS_SMEM_GATE_UP, WS_THREADS,
};

pub use launch::{routed_experts_marked, routed_experts_shared_marked, MoeStage};
pub(crate) use weights::check_weights;

use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::CudaError;

/// Rows (token copies) per grouped-GEMM tile (`BM` in `moe_grouped_gemm.cu`).
pub const GEMM_BM: usize = 128;
/// Weight rows per grouped-GEMM tile (`BN`): the down GEMM's output columns
/// per tile; gate+up tiles hold `GEMM_BN / 2` gate and as many up rows.
pub const GEMM_BN: usize = 128;
/// K per pipeline stage (`BK`): hidden and intermediate must be multiples.
pub const GEMM_BK: usize = 64;
/// Threads per grouped-GEMM CTA (`THREADS`).
pub const GEMM_THREADS: usize = 256;
/// Dynamic shared memory of a grouped-GEMM CTA (`SMEM_BYTES`: 3 stages of A and B tiles).
pub const GEMM_SMEM_BYTES: usize = 3 * (GEMM_BM + GEMM_BN) * GEMM_BK * 2;
/// Most experts the routing kernels handle (`MAX_EXPERTS` in `moe_route.cu`).
pub const MAX_EXPERTS: usize = 1024;
/// Most experts of the narrow routing kernel `moe_route` (`ROUTE_NARROW_EXPERTS`);
/// `moe_route_wide` takes up to [`MAX_EXPERTS`].
pub const ROUTE_NARROW_EXPERTS: usize = 256;
/// Most (token, k) pairs of a pass the routing kernel's last block scatters
/// itself (`FUSED_SCATTER_PAIRS`); larger passes launch `moe_scatter`.
pub const FUSED_SCATTER_PAIRS: usize = 4096;
/// Warps per routing block (`ROUTE_WARPS`: one warp per token at a time).
pub const ROUTE_WARPS: usize = 16;
/// Most routing blocks (`ROUTE_MAX_BLOCKS`): past `ROUTE_MAX_BLOCKS ·
/// ROUTE_WARPS` tokens a warp takes several, and a block adds its counts to
/// the global ones once for all of them.
pub const ROUTE_MAX_BLOCKS: usize = 512;
/// Ints from one expert's global count to the next (`COUNT_STRIDE`: one
/// 128-byte L2 line each, so the routing's and the scatter's atomics of
/// different experts do not queue on a shared line).
pub const COUNT_STRIDE: usize = 32;
/// Pairs a scatter thread takes (`SCATTER_PER_THREAD`).
pub const SCATTER_PER_THREAD: usize = 8;

/// The routing kernel for `experts` (at most [`MAX_EXPERTS`]): the narrow one
/// holds 8 logits a lane in registers, the wide one 32.
pub fn route_entry(experts: usize) -> &'static str {
    if experts <= ROUTE_NARROW_EXPERTS {
        "moe_route"
    } else {
        "moe_route_wide"
    }
}
/// Tokens routed and run per pass: bounds the transient memory (expert
/// outputs of `CHUNK_TOKENS · top_k` rows) whatever the prompt length.
pub const CHUNK_TOKENS: usize = 32_768;

/// One routed-experts call. Buffers are the caller's; `out` is overwritten.
pub struct MoeLaunch<'a> {
    /// bf16 `[tokens][hidden]`.
    pub x: &'a DeviceBuffer,
    /// f32 `[tokens][experts]`.
    pub router_logits: &'a DeviceBuffer,
    /// bf16 `[experts·2·intermediate][hidden]`: expert e's gate rows
    /// `e·2i .. e·2i+i`, up rows `e·2i+i .. (e+1)·2i`.
    pub gate_up: &'a DeviceBuffer,
    /// bf16 `[experts·hidden][intermediate]`: expert e's rows `e·h .. (e+1)·h`.
    pub down: &'a DeviceBuffer,
    /// f32 `[tokens][hidden]`: `Σ_k w_tk · down_e(silu(gate_e·x_t) ⊙ up_e·x_t)`.
    pub out: &'a DeviceBuffer,
    pub tokens: usize,
    pub hidden: usize,
    pub experts: usize,
    pub top_k: usize,
    pub intermediate: usize,
    pub renormalise: bool,
}

/// The shared expert's gated add, folded into the combine of
/// [`routed_experts_shared_marked`]: `out[t] = bf16(routed[t] + sigmoid(x[t] · shared_gate)
/// · shared[t])`; the launch's f32 `out` is not touched.
pub struct SharedEpilogue<'a> {
    /// bf16 `[hidden]`: the shared expert's gate row.
    pub shared_gate: &'a DeviceBuffer,
    /// bf16 `[tokens][hidden]`: the shared expert's output before its gate.
    pub shared: &'a DeviceBuffer,
    /// bf16 `[tokens][hidden]`: the MoE block's output, overwritten (with
    /// `norm`, the normed rows instead).
    pub out: &'a DeviceBuffer,
    /// The next layer's input norm folded into the combine, if any.
    pub norm: Option<NormEpilogue<'a>>,
}

/// The residual add and the zero-centred RMSNorm that follow the MoE block,
/// folded into its combine (`moe_combine_shared_norm`): `residual[t] +=`
/// the block's output row (as bf16, the bits `out` would have held) and
/// `out[t]` = the norm of the new residual row — `add_rms_norm_quad_f32res`'s
/// row, bit for bit, without the block's output written to or read from
/// global memory.
#[derive(Clone, Copy)]
pub struct NormEpilogue<'a> {
    /// f32 `[tokens][hidden]`: the residual stream, updated in place.
    pub residual: &'a DeviceBuffer,
    /// f32 `[hidden]`: the norm's weight.
    pub weight: &'a DeviceBuffer,
    pub eps: f32,
    /// e4m3 `[tokens][hidden]` and f32 `[tokens][hidden / 128]`: the normed
    /// rows' codes and scales (`add_rms_norm_quad_f32res_fp8`'s), where the
    /// FP8 GEMMs read them.
    pub codes: Option<(&'a DeviceBuffer, &'a DeviceBuffer)>,
}

/// Widest row the folded norm takes (`COMBINE_NORM_MAX_COLS` in
/// `moe_route.cu`: the norm's quads of a 256-thread block).
pub const NORM_EPILOGUE_MAX_COLS: usize = 4096;

/// Sizes of one call, validated: every count fits the kernels' `int`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoePlan {
    /// Tokens per pass (the last pass may have fewer).
    pub chunk_tokens: usize,
    /// `(token, k)` pairs per full pass.
    pub chunk_pairs: usize,
    /// Upper bound of the row tiles of one pass (the grids are sized on it).
    pub max_row_tiles: usize,
    /// Device bytes the call allocates for itself.
    pub workspace_bytes: usize,
}

/// The op of the routed experts' errors.
const OP: &str = "moe routed experts";

fn shape_err(detail: String) -> CudaError {
    CudaError::Shape { op: OP, detail }
}

fn product(parts: &[usize], what: &str) -> Result<usize, CudaError> {
    parts
        .iter()
        .try_fold(1usize, |a, &b| a.checked_mul(b))
        .ok_or_else(|| shape_err(format!("{what} overflows")))
}

fn check_len(buf: &DeviceBuffer, name: &str, bytes: usize) -> Result<(), CudaError> {
    check_len_of(OP, buf, name, bytes)
}

/// A [`CudaError::Shape`] of `op` unless `buf` (the buffer `name`) holds at
/// least `bytes` bytes.
fn check_len_of(
    op: &'static str,
    buf: &DeviceBuffer,
    name: &str,
    bytes: usize,
) -> Result<(), CudaError> {
    if buf.len_bytes() < bytes {
        return Err(CudaError::Shape {
            op,
            detail: format!(
                "buffer `{name}` has {} bytes, the shape needs {bytes}",
                buf.len_bytes()
            ),
        });
    }
    Ok(())
}

/// Upper bound of the row tiles of a pass of `pairs` (token, k) pairs over
/// `local` experts: each expert's rows start a new tile, so each of the at
/// most `min(local, pairs)` experts with rows adds at most one partial tile
/// to the full ones.
fn max_row_tiles(pairs: usize, local: usize) -> usize {
    pairs.div_ceil(GEMM_BM) + local.min(pairs)
}

/// Checks a launch without touching the device: sizes, tile multiples,
/// buffer lengths and `int` ranges. Every error is a [`CudaError::Shape`].
pub fn validate(l: &MoeLaunch<'_>) -> Result<MoePlan, CudaError> {
    validate_local(l, 0, l.experts)
}

/// [`validate`] for a launch whose `gate_up` / `down` hold only the experts
/// `first .. first + local` of the `l.experts` routed over (expert parallelism).
pub fn validate_local(l: &MoeLaunch<'_>, first: usize, local: usize) -> Result<MoePlan, CudaError> {
    validate_inner(l, first, local, None, 2)
}

/// [`validate_local`] for [`routed_experts_shared_marked`]: the epilogue's buffers are
/// checked, `l.out` is not (it is not touched).
pub fn validate_shared(
    l: &MoeLaunch<'_>,
    first: usize,
    local: usize,
    s: &SharedEpilogue<'_>,
) -> Result<MoePlan, CudaError> {
    validate_inner(l, first, local, Some(s), 2)
}

/// The folded norm's buffers and row width ([`NormEpilogue`]).
fn check_norm_epilogue(
    n: &NormEpilogue<'_>,
    tokens: usize,
    hidden: usize,
) -> Result<(), CudaError> {
    if !hidden.is_multiple_of(8) || hidden > NORM_EPILOGUE_MAX_COLS {
        return Err(shape_err(format!(
            "hidden {hidden}: the folded norm takes multiples of 8 up to {NORM_EPILOGUE_MAX_COLS}"
        )));
    }
    check_len(
        n.residual,
        "residual",
        product(&[tokens, hidden, 4], "residual")?,
    )?;
    check_len(n.weight, "norm weight", hidden * 4)?;
    if let Some((q, sc)) = n.codes {
        if !hidden.is_multiple_of(128) {
            return Err(shape_err(format!(
                "hidden {hidden}: the folded norm's codes need whole 128-column groups"
            )));
        }
        check_len(q, "codes", product(&[tokens, hidden], "codes")?)?;
        check_len(sc, "scales", product(&[tokens, hidden / 128, 4], "scales")?)?;
    }
    Ok(())
}

/// The checks of [`validate_local`] / [`validate_shared`] with experts'
/// weights of `weight_bytes` bytes an element (2: bf16, 1: e4m3).
fn validate_inner(
    l: &MoeLaunch<'_>,
    first: usize,
    local: usize,
    shared: Option<&SharedEpilogue<'_>>,
    weight_bytes: usize,
) -> Result<MoePlan, CudaError> {
    let dims = [
        ("tokens", l.tokens),
        ("hidden", l.hidden),
        ("experts", l.experts),
        ("top_k", l.top_k),
        ("intermediate", l.intermediate),
    ];
    if let Some((name, _)) = dims.iter().find(|(_, v)| *v == 0) {
        return Err(shape_err(format!("{name} must be > 0")));
    }
    if l.top_k > l.experts {
        return Err(shape_err(format!(
            "top_k {} > experts {}",
            l.top_k, l.experts
        )));
    }
    if l.experts > MAX_EXPERTS {
        return Err(shape_err(format!(
            "{} experts > {MAX_EXPERTS} (the routing kernels' limit)",
            l.experts
        )));
    }
    if local == 0 || first.checked_add(local).is_none_or(|end| end > l.experts) {
        return Err(shape_err(format!(
            "local experts {first}+{local} outside 0..{}",
            l.experts
        )));
    }
    if !l.hidden.is_multiple_of(GEMM_BN) || !l.hidden.is_multiple_of(GEMM_BK) {
        return Err(shape_err(format!(
            "hidden {} is not a multiple of {GEMM_BN}",
            l.hidden
        )));
    }
    if !l.intermediate.is_multiple_of(GEMM_BN / 2) || !l.intermediate.is_multiple_of(GEMM_BK) {
        return Err(shape_err(format!(
            "intermediate {} is not a multiple of {}",
            l.intermediate,
            GEMM_BN / 2
        )));
    }
    let int_max = i32::MAX as usize;
    let e2i = product(&[local, 2, l.intermediate], "experts·2·intermediate")?;
    let eh = product(&[local, l.hidden], "experts·hidden")?;
    if e2i > int_max || eh > int_max || l.tokens > int_max {
        return Err(shape_err(
            "a row count exceeds the kernels' int range".into(),
        ));
    }
    check_len(l.x, "x", product(&[l.tokens, l.hidden, 2], "x")?)?;
    check_len(
        l.router_logits,
        "router_logits",
        product(&[l.tokens, l.experts, 4], "router_logits")?,
    )?;
    check_len(
        l.gate_up,
        "gate_up",
        product(&[e2i, l.hidden, weight_bytes], "gate_up")?,
    )?;
    check_len(
        l.down,
        "down",
        product(&[eh, l.intermediate, weight_bytes], "down")?,
    )?;
    match shared {
        None => check_len(l.out, "out", product(&[l.tokens, l.hidden, 4], "out")?)?,
        Some(s) => {
            let th2 = product(&[l.tokens, l.hidden, 2], "out")?;
            check_len(s.shared_gate, "shared_gate", l.hidden * 2)?;
            check_len(s.shared, "shared", th2)?;
            check_len(s.out, "out", th2)?;
            if let Some(n) = &s.norm {
                check_norm_epilogue(n, l.tokens, l.hidden)?;
            }
        }
    }

    let chunk_tokens = l.tokens.min(CHUNK_TOKENS);
    let chunk_pairs = product(&[chunk_tokens, l.top_k], "pairs")?;
    let max_row_tiles = max_row_tiles(chunk_pairs, local);
    let n_tiles = (l.intermediate / (GEMM_BN / 2)).max(l.hidden / GEMM_BN);
    let grid = product(&[max_row_tiles, n_tiles], "grid")?;
    let act = product(&[chunk_pairs, l.intermediate, 2], "act")?;
    let y = product(&[chunk_pairs, l.hidden, 2], "y")?;
    if grid > int_max || chunk_pairs > int_max {
        return Err(shape_err("the grid exceeds the kernels' int range".into()));
    }
    // topk_expert, topk_weight, slot_token, pair_slot: 4 bytes per pair each;
    // counts and two offset arrays: experts + 1 ints each; the GEMMs' unit
    // counters after the counts.
    let small = product(&[chunk_pairs, 16], "index arrays")?
        + 3 * 4 * (l.experts + 1)
        + 4 * launch::SCHED_INTS;
    let workspace_bytes = small
        .checked_add(act)
        .and_then(|b| b.checked_add(y))
        .ok_or_else(|| shape_err("workspace overflows".into()))?;
    Ok(MoePlan {
        chunk_tokens,
        chunk_pairs,
        max_row_tiles,
        workspace_bytes,
    })
}

/// Runs the routed experts of `l` on `dev`'s stream (asynchronous: no host
/// synchronisation). Bad arguments are a [`CudaError::Shape`] before any launch.
pub fn routed_experts(dev: &CudaDevice, l: &MoeLaunch<'_>) -> Result<(), CudaError> {
    routed_experts_marked(dev, l, None, &mut |_| Ok(()))
}

/// [`routed_experts`] of a rank holding experts `first .. first + local`
/// (its `gate_up` / `down`): routing over all `l.experts`, only the rank's
/// pairs computed; `out` gets their weighted sum.
pub fn routed_experts_local(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    first: usize,
    local: usize,
) -> Result<(), CudaError> {
    launch::routed_experts_range(dev, l, (first, local), None, None, &mut |_| Ok(()))
}

/// Floating-point operations of the two grouped GEMMs for `tokens` tokens:
/// `2·t·k·h·2i` (gate+up) + `2·t·k·i·h` (down) = `6·t·k·h·i`.
pub fn grouped_gemm_flops(tokens: usize, hidden: usize, top_k: usize, intermediate: usize) -> f64 {
    6.0 * tokens as f64 * top_k as f64 * hidden as f64 * intermediate as f64
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod ws_tests;
