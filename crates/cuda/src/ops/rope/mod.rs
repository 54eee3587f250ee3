//! Partial RoPE with per-row positions from the batch (`ops_rope.cu`).
//! `inv_freq[i] = theta^(-2i / rotary_dim)` is computed on the host in f32,
//! exactly as the CPU backend does; angles `pos · inv_freq` in f32 on the device.
//! Each row's position comes from the batch's sequence table (`seq_table`).

pub mod sources;

use crate::device::CudaDevice;
use crate::launch::{grid_dim, int, launch, seq_table, upload, Args, GRID_X};
use crate::tensor::CudaAct;
use crate::validate::{batch_rows, bf16};
use headroom_core::ops::{Batch, OpError, OpResult, RopeSpec};

/// The rotary inverse frequencies (f32 math, as transformers).
pub(crate) fn inv_freq(rotary_dim: usize, theta: f64) -> Vec<f32> {
    let base = theta as f32;
    (0..rotary_dim / 2)
        .map(|i| 1.0 / base.powf((2 * i) as f32 / rotary_dim as f32))
        .collect()
}

pub(crate) fn rope(
    dev: &CudaDevice,
    x: &mut CudaAct,
    heads: usize,
    head_dim: usize,
    spec: &RopeSpec,
    batch: &Batch,
) -> OpResult<()> {
    bf16("rope", x)?;
    if heads.checked_mul(head_dim) != Some(x.cols)
        || spec.rotary_dim > head_dim
        || !spec.rotary_dim.is_multiple_of(2)
        || !(spec.theta.is_finite() && spec.theta > 0.0)
    {
        return Err(OpError::shape(
            "rope",
            format!(
                "{} columns, {heads} heads × {head_dim}, rotary_dim {}, theta {}",
                x.cols, spec.rotary_dim, spec.theta
            ),
        ));
    }
    batch_rows("rope", x, batch, usize::MAX)?;
    if spec.rotary_dim == 0 || x.rows == 0 {
        return Ok(());
    }
    let table = seq_table(dev, "rope", batch)?;
    let freq_dev = upload(dev, &inv_freq(spec.rotary_dim, spec.theta))?;
    let args = Args::new()
        .ptr(x.ptr())
        .ptr(table.ptr())
        .i32(int("rope", "sequences", batch.sequences())?)
        .ptr(freq_dev.ptr())
        .i32(int("rope", "heads", heads)?)
        .i32(int("rope", "head_dim", head_dim)?)
        .i32(int("rope", "rotary_dim", spec.rotary_dim)?);
    let grid = (grid_dim("rope", x.rows, GRID_X)?, 1, 1);
    // SAFETY: x is [rows][heads·head_dim]; the sequence table covers every
    // row (validated batch, positions fit i32); rotary_dim/2 frequencies.
    unsafe { launch(dev, "rope_seq_bf16", grid, 256, args) }
}
