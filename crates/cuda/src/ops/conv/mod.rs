//! Causal depthwise conv1d + SiLU over a varlen batch with per-slot conv
//! state (`ops_conv1d.cu`): each sequence reads its slot's last `kernel - 1`
//! rows, then the state advances to the last `kernel - 1` rows it has seen.

use crate::device::CudaDevice;
use crate::launch::{grid_dim, int, launch, seq_table, upload, Args, GRID_X, GRID_YZ};
use crate::tensor::new_act;
use crate::tensor::{CudaAct, CudaGdnState, CudaWeight};
use crate::validate::{batch_rows, bf16, row_tables};
use headroom_core::ops::{Batch, OpError, OpResult};
use headroom_core::Dtype;

pub mod sources;

/// Threads per CTA of the conv kernels.
pub const THREADS: u32 = 256;
/// Rows per thread of the width-4 kernel (`CONV_STRIP` in `ops_conv1d.cu`).
const CONV_STRIP: usize = 32;
/// Rows per thread of the 8-channel width-4 kernel (its `strip` argument)
/// when there are rows enough to fill the GPU.
pub const CONV8_STRIP: usize = 32;
/// Fewest rows per thread of that kernel (each strip reloads a 3-row window).
/// 32: shorter strips are off. At 256 rows they were to spread 32 CTAs over
/// 128, but the H200 run of 2026-12-02 showed no gain (conv + state advance
/// 14.3 µs against ncu's 13.8 + 3.4, host gaps included); 8 turns them on
/// once `tests/step256_timing.rs` (strip 32 against 8, back to back) shows one.
pub const CONV8_MIN_STRIP: usize = 32;

/// Rows per thread of the 8-channel kernel for `rows` rows over `cblocks`
/// channel blocks on `sm_count` SMs: [`CONV8_STRIP`], halved (down to
/// [`CONV8_MIN_STRIP`]) while the CTAs would not cover every SM — a
/// 256-row step's 32 CTAs of 32 rows each ran on a quarter of an H200.
pub fn conv8_strip(rows: usize, cblocks: usize, sm_count: usize) -> usize {
    let mut strip = CONV8_STRIP;
    while strip > CONV8_MIN_STRIP && cblocks * rows.div_ceil(strip) < sm_count {
        strip /= 2;
    }
    strip
}

pub(crate) fn conv1d_silu(
    dev: &CudaDevice,
    x: &CudaAct,
    weight: &CudaWeight,
    state: &mut CudaGdnState,
    batch: &Batch,
) -> OpResult<CudaAct> {
    let op = "conv1d_silu";
    bf16(op, x)?;
    let spec = state.spec;
    let (c, k) = (spec.conv_dim(), spec.kernel);
    if x.cols != c || weight.elems() != c * k {
        return Err(OpError::shape(
            op,
            format!(
                "{} columns / weight {} for conv_dim {c} kernel {k}",
                x.cols,
                weight.elems()
            ),
        ));
    }
    batch_rows(op, x, batch, spec.slots)?;
    let entry = match weight.dtype {
        Dtype::F32 => "conv1d_silu_f32w",
        Dtype::Bf16 => "conv1d_silu_bf16w",
        Dtype::F16 => return Err(OpError::shape(op, "f16 weights are not used on CUDA")),
    };
    let out = new_act(dev, op, x.rows, c, Dtype::Bf16)?;
    if k == 4 && weight.dtype == Dtype::F32 && c.is_multiple_of(8) {
        conv_k4x8(dev, x, weight, state, &out, batch)?;
        return Ok(out);
    }
    let (starts, slots) = row_tables(op, batch)?;
    let (starts, slots) = (upload(dev, &starts)?, upload(dev, &slots)?);
    let (ci, ki) = (int(op, "conv_dim", c)?, int(op, "kernel", k)?);
    let cblocks = grid_dim(op, c.div_ceil(THREADS as usize), GRID_YZ)?;
    let args = Args::new()
        .ptr(x.ptr())
        .ptr(weight.ptr())
        .ptr(state.conv.ptr())
        .ptr(out.ptr())
        .ptr(starts.ptr())
        .ptr(slots.ptr())
        .i32(ci)
        .i32(ki);
    if k == 4 && weight.dtype == Dtype::F32 {
        // The strip kernel: weights in registers, a sliding window of inputs.
        let args = Args::new()
            .ptr(x.ptr())
            .ptr(weight.ptr())
            .ptr(state.conv.ptr())
            .ptr(out.ptr())
            .ptr(starts.ptr())
            .ptr(slots.ptr())
            .i32(ci)
            .i32(int(op, "rows", x.rows)?);
        let strips = grid_dim(op, x.rows.div_ceil(CONV_STRIP), GRID_YZ)?;
        let grid = (
            grid_dim(op, c.div_ceil(THREADS as usize), GRID_X)?,
            strips,
            1,
        );
        // SAFETY: as below; the weight is C·4 f32 (16-byte aligned rows of the allocation).
        unsafe { launch(dev, "conv1d_silu_k4_f32w", grid, THREADS, args)? };
    } else {
        let grid = (grid_dim(op, x.rows, GRID_X)?, cblocks, 1);
        // SAFETY: x/out are [rows][C] bf16, weight C·K, state slots·(K-1)·C; tables one per row.
        unsafe { launch(dev, entry, grid, THREADS, args)? };
    }
    if k > 1 {
        let mut seqs = Vec::with_capacity(3 * batch.sequences());
        for i in 0..batch.sequences() {
            seqs.push(int(op, "slot", batch.slots[i])?);
            seqs.push(int(op, "row", batch.cu_seqlens[i])?);
            seqs.push(int(op, "rows", batch.seq_len(i))?);
        }
        let seqs = upload(dev, &seqs)?;
        let args = Args::new()
            .ptr(x.ptr())
            .ptr(state.conv.ptr())
            .ptr(seqs.ptr())
            .i32(ci)
            .i32(ki);
        let grid = (cblocks, grid_dim(op, batch.sequences(), GRID_YZ)?, 1);
        // SAFETY: as above; one (slot, first, rows) triple per sequence, slots distinct.
        unsafe { launch(dev, "conv_state_advance_bf16", grid, THREADS, args)? };
    }
    Ok(out)
}

/// The width-4 conv over 8 channels per thread (`conv1d_silu_k4x8_f32w`),
/// then the state advance, both from the batch's sequence table
/// ([`seq_table`]: row offsets, then slots).
fn conv_k4x8(
    dev: &CudaDevice,
    x: &CudaAct,
    weight: &CudaWeight,
    state: &mut CudaGdnState,
    out: &CudaAct,
    batch: &Batch,
) -> OpResult<()> {
    let op = "conv1d_silu";
    let c = x.cols;
    let n = batch.sequences();
    let table = seq_table(dev, op, batch)?;
    let cu = table.ptr();
    let slots = cu + 4 * (n as u64 + 1);
    let (ci, ni) = (int(op, "conv_dim", c)?, int(op, "sequences", n)?);
    if x.rows > 0 {
        let args = Args::new()
            .ptr(x.ptr())
            .ptr(weight.ptr())
            .ptr(state.conv.ptr())
            .ptr(out.ptr())
            .ptr(cu)
            .ptr(slots)
            .i32(ni)
            .i32(ci)
            .i32(int(op, "rows", x.rows)?);
        let cblocks = (c / 8).div_ceil(THREADS as usize);
        let strip = conv8_strip(x.rows, cblocks, dev.sm_count);
        let args = args.i32(int(op, "strip", strip)?);
        let grid = (
            grid_dim(op, cblocks, GRID_X)?,
            grid_dim(op, x.rows.div_ceil(strip), GRID_YZ)?,
            1,
        );
        // SAFETY: x/out are [rows][C] bf16 with C % 8 == 0 (16-byte rows),
        // weight C·4 f32, state slots·3·C bf16; the table holds n + 1 row
        // offsets ending at rows and n distinct slots (the batch was validated).
        unsafe { launch(dev, "conv1d_silu_k4x8_f32w", grid, THREADS, args)? };
    }
    let args = Args::new()
        .ptr(x.ptr())
        .ptr(state.conv.ptr())
        .ptr(cu)
        .ptr(slots)
        .i32(ci);
    let grid = (
        grid_dim(op, (c / 8).div_ceil(THREADS as usize), GRID_YZ)?,
        grid_dim(op, n, GRID_YZ)?,
        1,
    );
    // SAFETY: as above (C % 8 == 0: 16-byte rows); each sequence's rows lie
    // in x, its slot in the state.
    unsafe { launch(dev, "conv_state_advance_cu_k4x8_bf16", grid, THREADS, args) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strip_is_32_rows_unless_the_rows_would_leave_sms_idle() {
        // The 35B-A3B GDN conv (8192 channels: 4 channel blocks) on 132 SMs.
        assert_eq!(conv8_strip(32_768, 4, 132), CONV8_STRIP);
        assert_eq!(
            conv8_strip(1025, 4, 132),
            CONV8_STRIP,
            "33 strips x 4 = 132"
        );
        assert_eq!(
            conv8_strip(1024, 4, 132),
            16.max(CONV8_MIN_STRIP),
            "32 strips x 4 = 128"
        );
        // The 256-row follow-up step: 32 CTAs of 32 rows, or 128 of 8 with the strips on.
        assert_eq!(conv8_strip(256, 4, 132), CONV8_MIN_STRIP);
        assert_eq!(conv8_strip(1, 4, 132), CONV8_MIN_STRIP);
        assert_eq!(conv8_strip(600, 1, 132), CONV8_MIN_STRIP);
    }
}
