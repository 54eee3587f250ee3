//! Shape-general fallbacks (`ops_fallback.cu`) of the two ops whose
//! fast kernels serve the production shapes only: the gated delta rule
//! (chunked kernel: head dims 128) and the routed experts (grouped GEMM:
//! hidden a multiple of 128, intermediate of 64). Small models — the tiny
//! presets, the transformers fixtures — run through these: the recurrent
//! rule over each sequence's rows in one launch, and the experts as one
//! cuBLAS GEMM pair per expert over every token with a dense routing weight
//! (tokens not routed to an expert are skipped when accumulating). Correct,
//! not fast; no host synchronisation beyond the small sequence table upload.

use crate::blas::Linear;
use crate::device::CudaDevice;
use crate::launch::{
    alloc, dev_err, grid_dim, int, launch, stride_grid, upload, Args, GRID_X, GRID_YZ,
};
use crate::ops::gdn::GdnLaunch as GdnCall;
use crate::ops::moe::MoeLaunch as MoeCall;
use headroom_core::ops::{OpError, OpResult};
use headroom_core::Dtype;

pub mod sources;

/// Largest key head dim of the fallback rule (its shared-memory vectors).
pub(crate) const MAX_DK: usize = 256;
/// Largest value head dim (one thread per state column).
pub(crate) const MAX_DV: usize = 1024;
/// Most experts of the fallback router (its per-thread chosen mask).
pub(crate) const MAX_EXPERTS: usize = 1024;

/// The recurrent gated delta rule for any head dims within the bounds.
pub(crate) fn gated_delta_rule(dev: &CudaDevice, c: &GdnCall<'_>) -> OpResult<()> {
    let op = "gated_delta_rule";
    if c.k_dim == 0 || c.k_dim > MAX_DK || c.v_dim == 0 || c.v_dim > MAX_DV {
        return Err(OpError::Unsupported {
            op,
            reason: format!(
                "head dims {}/{}: the fallback rule takes k_dim <= {MAX_DK}, v_dim <= {MAX_DV}",
                c.k_dim, c.v_dim
            ),
        });
    }
    if c.k_heads == 0 || !c.v_heads.is_multiple_of(c.k_heads) {
        return Err(OpError::shape(op, "v_heads must be a multiple of k_heads"));
    }
    if c.seqs.is_empty() {
        return Ok(());
    }
    let table: Vec<i64> = c
        .seqs
        .iter()
        .flat_map(|&(slot, row0, rows)| [slot as i64, row0 as i64, rows as i64])
        .collect();
    let seqs = upload(dev, &table)?;
    let block = c.v_dim.next_multiple_of(32) as u32;
    let grid = (
        grid_dim(op, c.v_heads, GRID_YZ)?,
        grid_dim(op, c.seqs.len(), GRID_YZ)?,
        1,
    );
    let args = Args::new()
        .ptr(c.qkv.ptr())
        .ptr(c.g.ptr())
        .ptr(c.beta.ptr())
        .ptr(c.state.ptr())
        .ptr(c.out.ptr())
        .ptr(seqs.ptr())
        .i32(int(op, "k_heads", c.k_heads)?)
        .i32(int(op, "v_heads", c.v_heads)?)
        .i32(int(op, "k_dim", c.k_dim)?)
        .i32(int(op, "v_dim", c.v_dim)?);
    // SAFETY: the backend validated the buffers against the batch and spec
    // (qkv/out rows cover every sequence, state every slot); the table has 3 entries per sequence.
    unsafe { launch(dev, "gdn_recurrent_any_bf16", grid, block, args) }
}

/// The routed experts of any shape: dense routing weights, then per expert
/// gate|up GEMM → SiLU·mul → down GEMM → weighted accumulate into `out`.
/// `(first, local)`: the experts `c.gate_up` / `c.down` hold (all of them
/// outside expert parallelism); the others' rows are left to their rank.
pub(crate) fn routed_experts(
    dev: &CudaDevice,
    c: &MoeCall<'_>,
    (first, local): (usize, usize),
) -> OpResult<()> {
    let op = "moe";
    let (t, h, e, i) = (c.tokens, c.hidden, c.experts, c.intermediate);
    if e == 0 || e > MAX_EXPERTS || c.top_k == 0 || c.top_k > e {
        return Err(OpError::Unsupported {
            op,
            reason: format!(
                "{e} experts top-{}: the fallback takes 1..={MAX_EXPERTS} experts",
                c.top_k
            ),
        });
    }
    if t == 0 {
        return Ok(());
    }
    let bytes = |n: usize, es: usize| {
        n.checked_mul(es)
            .ok_or_else(|| OpError::shape(op, "size overflows"))
    };
    let weights = alloc(dev, bytes(t * e, 4)?)?;
    let gu = alloc(dev, bytes(t * 2 * i, 2)?)?;
    let act = alloc(dev, bytes(t * i, 2)?)?;
    let y = alloc(dev, bytes(t * h, 4)?)?;
    dev.fill_bytes(c.out, 0).map_err(dev_err)?;
    let (ti, hi, ei, ii) = (
        t as i64,
        int(op, "hidden", h)?,
        int(op, "experts", e)?,
        int(op, "intermediate", i)?,
    );
    let route = Args::new()
        .ptr(c.router_logits.ptr())
        .ptr(weights.ptr())
        .i64(ti)
        .i32(ei)
        .i32(int(op, "top_k", c.top_k)?)
        .i32(c.renormalise as i32);
    let blocks = grid_dim(op, t.div_ceil(128), GRID_X)?;
    // SAFETY: logits and weights hold t·e f32.
    unsafe { launch(dev, "moe_dense_route", (blocks, 1, 1), 128, route)? };
    let blas = dev.blas().map_err(dev_err)?;
    if first.checked_add(local).is_none_or(|end| end > e) {
        return Err(OpError::shape(op, "local experts outside the block"));
    }
    for ex in first..first + local {
        let lx = ex - first;
        let gate_up = Linear {
            x: c.x.ptr(),
            x_dtype: Dtype::Bf16,
            w: c.gate_up.ptr() + (lx * 2 * i * h * 2) as u64,
            w_dtype: Dtype::Bf16,
            y: gu.ptr(),
            y_dtype: Dtype::Bf16,
            rows: t,
            in_features: h,
            out_features: 2 * i,
            accumulate: false,
        };
        // SAFETY: local expert lx's [2i][h] block lies inside gate_up ([local·2i][h]); gu holds t·2i.
        dev.capture().library_call(&gate_up.call_class());
        unsafe { blas.linear(&gate_up) }.map_err(dev_err)?;
        let sw = Args::new().ptr(gu.ptr()).ptr(act.ptr()).i64(ti).i32(ii);
        // SAFETY: gu holds t·2i, act t·i bf16.
        unsafe { launch(dev, "swiglu_halves_bf16", stride_grid(t * i, 256), 256, sw)? };
        let down = Linear {
            x: act.ptr(),
            x_dtype: Dtype::Bf16,
            w: c.down.ptr() + (lx * h * i * 2) as u64,
            w_dtype: Dtype::Bf16,
            y: y.ptr(),
            y_dtype: Dtype::F32,
            rows: t,
            in_features: i,
            out_features: h,
            accumulate: false,
        };
        // SAFETY: local expert lx's [h][i] block lies inside down ([local·h][i]); y holds t·h f32.
        dev.capture().library_call(&down.call_class());
        unsafe { blas.linear(&down) }.map_err(dev_err)?;
        let acc = Args::new()
            .ptr(c.out.ptr())
            .ptr(y.ptr())
            .ptr(weights.ptr())
            .i64(ti)
            .i32(hi)
            .i32(ei)
            .i32(ex as i32);
        // SAFETY: out and y hold t·h f32, weights t·e.
        unsafe {
            launch(
                dev,
                "moe_dense_accumulate",
                stride_grid(t * h, 256),
                256,
                acc,
            )?
        };
    }
    Ok(())
}
