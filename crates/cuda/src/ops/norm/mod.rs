//! The RMSNorms: add + zero-centred `(1 + w)` norm of the residual stream,
//! the same norm per head group (q/k norm), and the gated norm of the GDN
//! output. f32 math on bf16 storage (`ops_norm.cu`); the residual stream
//! itself is f32 (`embed` starts it so): `add_rms_norm` adds the bf16 delta
//! to it in f32 and emits bf16 normed rows. A bf16 residual is taken too
//! (rounded to bf16 after each add).

pub mod sources;

use crate::device::CudaDevice;
use crate::launch::{grid_dim, int, launch, launch_programmatic, Args, GRID_X};
use crate::ops::fp8::gemm::QuantizedX;
use crate::tensor::{new_act, CudaAct, CudaWeight};
use crate::validate::{bf16, groups_of, same_shape};
use headroom_core::ops::{OpError, OpResult};
use headroom_core::Dtype;

/// Threads of the per-row norm (`NORM_THREADS` in the kernel).
pub(crate) const NORM_THREADS: u32 = 512;
/// Threads and bf16 pairs per thread of the register-cached add + norm
/// (`CACHED_PAIRS` in the kernel).
const CACHED_THREADS: u32 = 256;
const CACHED_PAIRS: usize = 8;
/// Column quads per thread of the 16-byte f32-residual kernel (`NORM_ROW_QUADS`
/// in `norm_row.cuh`, the header the MoE decode router shares).
pub(crate) const RES_QUADS: usize = 4;
/// Threads of the 16-byte f32-residual kernel's block (a row's sums depend
/// on it: the MoE decode router that folds this norm in has as many).
pub(crate) const QUAD_THREADS: u32 = CACHED_THREADS;
/// Widest row of the 16-byte f32-residual kernel.
pub(crate) const QUAD_MAX_COLS: usize = 4 * RES_QUADS * QUAD_THREADS as usize;

/// Whether an f32 residual of `cols` columns takes the 16-byte kernel
/// (`add_rms_norm_quad_f32res`).
pub(crate) fn quad_takes(cols: usize) -> bool {
    cols.is_multiple_of(4) && cols <= QUAD_MAX_COLS
}
/// Groups (one warp each) per CTA of the group norms.
const GROUPS_PER_CTA: usize = 8;
/// Largest group of the 4-values-per-lane group norms (`128 · GROUP_CHUNKS`).
const V4_MAX_GROUP: usize = 128 * 8;
/// Lanes per group of the 16-lane group norms (8 values per access).
const G16_LANES: usize = 16;

/// A group norm's kernel (names: 16-lane ×1, 16-lane ×2, 4-wide, scalar)
/// and its grid and block for `groups` groups of `d`: 16 lanes of 16-byte
/// accesses per group for `d % 8 == 0` up to 256 (the model's 128 and 256),
/// a warp of 8-byte accesses for other `d % 4 == 0` up to 1024, else a warp
/// of scalar accesses.
fn group_launch(
    op: &'static str,
    groups: usize,
    d: usize,
    names: [&'static str; 4],
) -> OpResult<(&'static str, (u32, u32, u32), u32)> {
    if d.is_multiple_of(8) && d <= 2 * 8 * G16_LANES {
        let entry = if d <= 8 * G16_LANES {
            names[0]
        } else {
            names[1]
        };
        let per_cta = 256 / G16_LANES;
        let grid = (grid_dim(op, groups.div_ceil(per_cta), GRID_X)?, 1, 1);
        return Ok((entry, grid, 256));
    }
    let entry = if d.is_multiple_of(4) && d <= V4_MAX_GROUP {
        names[2]
    } else {
        names[3]
    };
    let grid = (grid_dim(op, groups.div_ceil(GROUPS_PER_CTA), GRID_X)?, 1, 1);
    Ok((entry, grid, 32 * GROUPS_PER_CTA as u32))
}

/// `residual += delta` (f32 or bf16 residual), then the bf16 normed rows;
/// with `fp8_codes`, on the f32-residual 16-byte kernel and rows of whole
/// 128-column groups, the normed rows' e4m3 codes and scales too, attached
/// to the output ([`CudaAct::quantized`]: the FP8 GEMMs that read it take
/// them, the same codes their quantization makes).
pub(crate) fn add_rms_norm(
    dev: &CudaDevice,
    residual: &mut CudaAct,
    delta: Option<&CudaAct>,
    weight: &CudaWeight,
    eps: f32,
    fp8_codes: bool,
) -> OpResult<CudaAct> {
    let w = weight.vector("add_rms_norm")?;
    if w.elems() != residual.cols {
        return Err(OpError::shape("add_rms_norm", "weight length != columns"));
    }
    let f32_residual = match residual.dtype {
        Dtype::F32 => true,
        Dtype::Bf16 => false,
        other => {
            return Err(OpError::shape(
                "add_rms_norm",
                format!("the residual must be f32 or bf16, got {other}"),
            ))
        }
    };
    if let Some(d) = delta {
        bf16("add_rms_norm", d)?;
        if (d.rows, d.cols) != (residual.rows, residual.cols) {
            return Err(OpError::shape(
                "add_rms_norm",
                format!(
                    "delta [{}][{}] vs residual [{}][{}]",
                    d.rows, d.cols, residual.rows, residual.cols
                ),
            ));
        }
    }
    let mut out = new_act(
        dev,
        "add_rms_norm",
        residual.rows,
        residual.cols,
        Dtype::Bf16,
    )?;
    if residual.elems() == 0 {
        return Ok(out);
    }
    let grid = (grid_dim("add_rms_norm", residual.rows, GRID_X)?, 1, 1);
    let cached = residual.cols.is_multiple_of(2)
        && residual.cols <= 2 * CACHED_PAIRS * CACHED_THREADS as usize;
    let quad = f32_residual && cached && quad_takes(residual.cols);
    // The quad kernel's _fp8 form writes the codes: rows of whole groups.
    let codes = (fp8_codes && quad && residual.cols.is_multiple_of(crate::ops::fp8::BLOCK))
        .then(|| QuantizedX::alloc(dev, residual.rows, residual.cols))
        .transpose()?;
    let mut args = Args::new()
        .ptr(residual.ptr())
        .ptr(delta.map_or(0, |d| d.ptr()))
        .ptr(w.ptr())
        .ptr(out.ptr());
    if let Some(c) = &codes {
        args = args.ptr(c.q.ptr()).ptr(c.s.ptr());
    }
    let args = args
        .i32(int("add_rms_norm", "columns", residual.cols)?)
        .f32(eps);
    let (entry, threads) = match (f32_residual, cached) {
        (true, true) if codes.is_some() => ("add_rms_norm_quad_f32res_fp8", QUAD_THREADS),
        (true, true) if quad => ("add_rms_norm_quad_f32res", QUAD_THREADS),
        (true, true) => ("add_rms_norm_cached_f32res", CACHED_THREADS),
        (true, false) => ("add_rms_norm_f32res", NORM_THREADS),
        (false, true) => ("add_rms_norm_cached_bf16", CACHED_THREADS),
        (false, false) => ("add_rms_norm_bf16", NORM_THREADS),
    };
    // SAFETY: residual (f32 or bf16, as the entry), delta and out (bf16) are
    // [rows][cols], w `cols` f32 (even cols keep every row 8-byte aligned for
    // the float2 and 4-byte for the bf16x2 accesses; cols % 4 == 0 16-byte
    // for the float4 and 8-byte for the bf16x4 ones); with codes, q holds
    // rows · cols codes and s rows · cols / 128 scales (QuantizedX::alloc),
    // cols % 128 == 0.
    // The quad kernels read only their norm weight (constant) before they
    // wait for the previous kernel (programmatic launch).
    if quad {
        unsafe { launch_programmatic(dev, entry, grid, threads, args)? };
    } else {
        unsafe { launch(dev, entry, grid, threads, args)? };
    }
    out.fp8 = codes.map(Box::new);
    Ok(out)
}

pub(crate) fn rms_norm_groups(
    dev: &CudaDevice,
    x: &mut CudaAct,
    weight: &CudaWeight,
    eps: f32,
) -> OpResult<()> {
    bf16("rms_norm", x)?;
    let w = weight.vector("rms_norm")?;
    groups_of("rms_norm", x, w.elems())?;
    let groups = x.elems() / w.elems();
    if groups == 0 {
        return Ok(());
    }
    let args = Args::new()
        .ptr(x.ptr())
        .ptr(w.ptr())
        .i64(groups as i64)
        .i32(int("rms_norm", "group", w.elems())?)
        .f32(eps);
    let (entry, grid, threads) = group_launch(
        "rms_norm",
        groups,
        w.elems(),
        [
            "rms_norm_groups_g16x1_bf16",
            "rms_norm_groups_g16x2_bf16",
            "rms_norm_groups_v4_bf16",
            "rms_norm_groups_bf16",
        ],
    )?;
    // SAFETY: x holds groups·d bf16; w d f32 (the vector kernels: d % 8 or
    // d % 4 == 0, so every group and w's chunks are aligned to their accesses).
    unsafe { launch(dev, entry, grid, threads, args) }
}

/// The gated norm of `x` in place, per group of the weight's length; with
/// `fp8_codes` and groups of 128 (the GDN's value heads), each group's e4m3
/// codes and scale too, attached to `x` ([`CudaAct::quantized`]: the out
/// projection's FP8 GEMM takes them, the codes its quantization makes).
/// Codes `x` carried before are dropped: they no longer describe it.
pub(crate) fn gated_rms_norm(
    dev: &CudaDevice,
    x: &mut CudaAct,
    z: &CudaAct,
    weight: &CudaWeight,
    eps: f32,
    fp8_codes: bool,
) -> OpResult<()> {
    x.fp8 = None;
    bf16("gated_rms_norm", x)?;
    let w = weight.vector("gated_rms_norm")?;
    same_shape("gated_rms_norm", x, z)?;
    groups_of("gated_rms_norm", x, w.elems())?;
    let groups = x.elems() / w.elems();
    if groups == 0 {
        return Ok(());
    }
    let (entry, grid, threads) = group_launch(
        "gated_rms_norm",
        groups,
        w.elems(),
        [
            "gated_rms_norm_g16x1_bf16",
            "gated_rms_norm_g16x2_bf16",
            "gated_rms_norm_v4_bf16",
            "gated_rms_norm_bf16",
        ],
    )?;
    // Groups of 128 run the 16-lane kernel, whose _fp8 form writes the codes.
    let codes = (fp8_codes && w.elems() == crate::ops::fp8::BLOCK)
        .then(|| QuantizedX::alloc(dev, x.rows, x.cols))
        .transpose()?;
    let entry = match &codes {
        Some(_) => {
            debug_assert_eq!(entry, "gated_rms_norm_g16x1_bf16");
            "gated_rms_norm_g16x1_fp8"
        }
        None => entry,
    };
    let mut args = Args::new().ptr(x.ptr()).ptr(z.ptr()).ptr(w.ptr());
    if let Some(c) = &codes {
        args = args.ptr(c.q.ptr()).ptr(c.s.ptr());
    }
    let args = args
        .i64(groups as i64)
        .i32(int("gated_rms_norm", "group", w.elems())?)
        .f32(eps);
    // SAFETY: x, z hold groups·d bf16; w d f32 (alignment as above); with
    // codes (d = 128), q groups · 128 codes and s one scale a group.
    unsafe { launch(dev, entry, grid, threads, args)? };
    x.fp8 = codes.map(Box::new);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::sources::OPS_NORM;
    use crate::kernels::source_constant;

    #[test]
    fn the_quad_kernels_constant_is_the_headers() {
        assert_eq!(
            source_constant(OPS_NORM.source, "NORM_ROW_QUADS"),
            super::RES_QUADS
        );
    }
}
