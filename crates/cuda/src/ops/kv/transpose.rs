//! Rows of `heads × d` between token-major (`[t][heads][d]`, the layout of
//! the ops) and head-major (`[heads][t][d]`, the layout of the prefill
//! attention kernels), optionally gated on the way back.

use crate::device::CudaDevice;
use crate::launch::{grid_dim, int, launch, Args, GRID_X, GRID_YZ};
use crate::ops::pointwise::mul_sigmoid_raw;
use headroom_core::ops::{OpError, OpResult};

/// Which way a transpose goes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    TokensToHeads,
    HeadsToTokens,
}

/// Transposes `t` rows of `heads × d` between token-major and head-major;
/// with `gate` (head-major to token-major only) the output is also
/// multiplied by `sigmoid(gate)` (`gate` token-major like the output).
///
/// # Safety
/// `src` and `dst` (and `gate`) must address `t · heads · d` bf16 elements
/// of live device memory, row starts of rows of `d` elements.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn transpose(
    dev: &CudaDevice,
    way: Way,
    src: u64,
    dst: u64,
    gate: Option<u64>,
    t: usize,
    heads: usize,
    d: usize,
) -> OpResult<()> {
    let op = "attention";
    let ints = |args: Args| -> OpResult<Args> {
        Ok(args
            .i32(int(op, "rows", t)?)
            .i32(int(op, "heads", heads)?)
            .i32(int(op, "head_dim", d)?))
    };
    if d.is_multiple_of(8) {
        // 16 bytes per thread (every row of d bf16 is 16-byte aligned).
        let entry = match (way, gate.is_some()) {
            (Way::TokensToHeads, _) => "tokens_to_heads_v8_bf16",
            (Way::HeadsToTokens, false) => "heads_to_tokens_v8_bf16",
            (Way::HeadsToTokens, true) => "heads_to_tokens_gated_v8_bf16",
        };
        let args = match gate {
            Some(g) => Args::new().ptr(src).ptr(g).ptr(dst),
            None => Args::new().ptr(src).ptr(dst),
        };
        let chunks = t
            .checked_mul(d / 8)
            .ok_or_else(|| OpError::shape(op, "rows overflow"))?;
        let grid = (
            grid_dim(op, chunks.div_ceil(256), GRID_X)?,
            grid_dim(op, heads, GRID_YZ)?,
            1,
        );
        // SAFETY: the caller passes t·heads·d-element ranges of live buffers
        // (and of the gate), 16-byte aligned: d % 8 == 0 and the bases are row starts.
        return unsafe { launch(dev, entry, grid, 256, ints(args)?) };
    }
    let entry = match way {
        Way::TokensToHeads => "tokens_to_heads_bf16",
        Way::HeadsToTokens => "heads_to_tokens_bf16",
    };
    let args = ints(Args::new().ptr(src).ptr(dst))?;
    let grid = (grid_dim(op, t, GRID_X)?, grid_dim(op, heads, GRID_YZ)?, 1);
    // SAFETY: the caller passes t·heads·d-element ranges of live buffers.
    unsafe { launch(dev, entry, grid, d.clamp(32, 256) as u32, args)? };
    if let Some(g) = gate {
        // SAFETY: dst and the gate hold these t·heads·d elements.
        unsafe { mul_sigmoid_raw(dev, dst, g, t * heads * d)? };
    }
    Ok(())
}
