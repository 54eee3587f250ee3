//! FP8 conversions (`fp8_quant.cu`): bf16 activations to e4m3 with one f32
//! scale per (row, 128-column group) ([`quantize`]), a block-scaled weight
//! to bf16 ([`dequantize`], the GEMM's fallback), and an f32 table into the
//! other major order ([`transpose_f32`], scale tables for cuBLASLt).

use super::{need, Fp8Matrix, BLOCK};
use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::launch::{grid_dim, int, launch_programmatic, mul, stride_grid, Args, GRID_X};
use headroom_core::ops::{OpError, OpResult};

/// Threads of a `fp8_quant_bf16` CTA (`THREADS`), one warp per group.
const QUANT_THREADS: u32 = 256;
const QUANT_WARPS: usize = QUANT_THREADS as usize / 32;
/// Groups a half-warp of `fp8_quant_bf16_v16` quantizes (`QUANT_GROUPS`).
const QUANT_GROUPS: usize = 4;

/// Where scale `(row, group)` of an `[m][ceil(k/128)]` table goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleLayout {
    /// `s[row · kb + group]`: row-major `[m][kb]` (groups contiguous).
    RowMajor,
    /// `s[group · ld + row]`: `[kb][ld]` (rows contiguous), `ld >= m`.
    ColMajor { ld: usize },
}

impl ScaleLayout {
    /// `(s_row, s_group)` strides and the f32 values the table spans for
    /// `m` rows of `kb` groups.
    pub fn strides(self, m: usize, kb: usize) -> OpResult<(usize, usize, usize)> {
        const OP: &str = "fp8_quant";
        match self {
            ScaleLayout::RowMajor => Ok((kb, 1, mul(OP, m, kb)?)),
            ScaleLayout::ColMajor { ld } if ld >= m => Ok((1, ld, mul(OP, ld, kb)?)),
            ScaleLayout::ColMajor { ld } => Err(OpError::shape(
                OP,
                format!("scale leading dimension {ld} < {m} rows"),
            )),
        }
    }
}

/// Quantizes bf16 `x` `[m][k]` into e4m3 `q` `[m][k]` and f32 scales `s`
/// (one per row and 128-column group, at `layout`): scale = amax / 448 (1
/// for an all-zero group), `q = e4m3(x / scale)`, nearest, saturating.
pub fn quantize(
    dev: &CudaDevice,
    x: &DeviceBuffer,
    m: usize,
    k: usize,
    q: &DeviceBuffer,
    s: &DeviceBuffer,
    layout: ScaleLayout,
) -> OpResult<()> {
    const OP: &str = "fp8_quant";
    if k == 0 {
        return Err(OpError::shape(OP, "k = 0"));
    }
    let kb = k.div_ceil(BLOCK);
    let (s_row, s_group, span) = layout.strides(m, kb)?;
    let elems = mul(OP, m, k)?;
    need(OP, "x", x, mul(OP, elems, 2)?)?;
    need(OP, "q", q, elems)?;
    need(OP, "scales", s, mul(OP, span, 4)?)?;
    // SAFETY: x holds m · k bf16, q m · k bytes and s the table's span
    // (checked above).
    unsafe { launch_quantize(dev, x.ptr(), m, k, q.ptr(), s.ptr(), s_row, s_group) }
}

/// Launches the quantization of bf16 `[m][k]` at device address `x` into the
/// codes at `q` and the f32 scales at `s` (scale `(row, group)` at `row ·
/// s_row + group · s_group`): `fp8_quant_bf16_v16` where `k % 8 == 0` and the
/// rows are 16-byte (x) and 8-byte (q) aligned, else `fp8_quant_bf16`. The
/// same codes and scales either way.
///
/// # Safety
/// `x` must address `m · k` bf16, `q` `m · k` bytes and `s` every scale the
/// strides reach for `m` rows of `ceil(k / 128)` groups, all live on `dev`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn launch_quantize(
    dev: &CudaDevice,
    x: u64,
    m: usize,
    k: usize,
    q: u64,
    s: u64,
    s_row: usize,
    s_group: usize,
) -> OpResult<()> {
    const OP: &str = "fp8_quant";
    if m == 0 {
        return Ok(());
    }
    let groups = mul(OP, m, k.div_ceil(BLOCK))?;
    if k.is_multiple_of(8) && x.is_multiple_of(16) && q.is_multiple_of(8) {
        let warps = groups.div_ceil(2 * QUANT_GROUPS);
        let grid = (grid_dim(OP, warps.div_ceil(QUANT_WARPS), GRID_X)?, 1, 1);
        let args = quant_args(x, q, s, m, k, s_row, s_group)?;
        // SAFETY: the buffers as the caller guarantees; a half-warp per
        // (row, group), 2 · QUANT_GROUPS groups a warp over the grid, groups
        // past m · kb skipped; the 16-byte loads and 8-byte stores with
        // k % 8 == 0 and aligned rows; the kernel reads x after
        // griddepcontrol.wait.
        return unsafe {
            launch_programmatic(dev, "fp8_quant_bf16_v16", grid, QUANT_THREADS, args)
        };
    }
    let warps = groups;
    let vec = k.is_multiple_of(4) && x.is_multiple_of(8) && q.is_multiple_of(4);
    let grid = (grid_dim(OP, warps.div_ceil(QUANT_WARPS), GRID_X)?, 1, 1);
    let args = quant_args(x, q, s, m, k, s_row, s_group)?.i32(i32::from(vec));
    // SAFETY: the buffers as the caller guarantees; one warp per (row, group)
    // of the grid, the excess warps return; the wide loads and stores only
    // with k % 4 == 0 and aligned rows; the kernel reads x after
    // griddepcontrol.wait.
    unsafe { launch_programmatic(dev, "fp8_quant_bf16", grid, QUANT_THREADS, args) }
}

/// The arguments both quantization kernels start with: `x`, `q`, the scale
/// table, `m`, `k` and the table's row and group strides.
fn quant_args(
    x: u64,
    q: u64,
    s: u64,
    m: usize,
    k: usize,
    s_row: usize,
    s_group: usize,
) -> OpResult<Args> {
    Ok(Args::new()
        .ptr(x)
        .ptr(q)
        .ptr(s)
        .i64(m as i64)
        .i32(int("fp8_quant", "k", k)?)
        .i64(s_row as i64)
        .i64(s_group as i64))
}

/// `out` bf16 `[n][k]` = the weight `W · scale_inv` (rounded once).
pub fn dequantize(dev: &CudaDevice, w: Fp8Matrix, out: &DeviceBuffer) -> OpResult<()> {
    const OP: &str = "fp8_dequant";
    w.check(OP)?;
    dequantize_stacked(dev, w.w, w.scale_inv, w.n, w.k, w.n, out)
}

/// `out` bf16 `[rows][k]` = `W · scale_inv` for e4m3 `w` `[rows][k]` whose
/// block grid restarts every `grid_rows` rows (stacked matrices: scales
/// `[rows / grid_rows][ceil(grid_rows / 128)][ceil(k / 128)]`).
pub fn dequantize_stacked(
    dev: &CudaDevice,
    w: &DeviceBuffer,
    scale_inv: &DeviceBuffer,
    rows: usize,
    k: usize,
    grid_rows: usize,
    out: &DeviceBuffer,
) -> OpResult<()> {
    const OP: &str = "fp8_dequant";
    if rows == 0 || k == 0 || grid_rows == 0 || !rows.is_multiple_of(grid_rows) {
        return Err(OpError::shape(
            OP,
            format!("[{rows}][{k}] in matrices of {grid_rows} rows"),
        ));
    }
    let elems = mul(OP, rows, k)?;
    let scales = mul(
        OP,
        mul(OP, rows / grid_rows, grid_rows.div_ceil(BLOCK))?,
        k.div_ceil(BLOCK),
    )?;
    need(OP, "weight", w, elems)?;
    need(OP, "scale_inv", scale_inv, mul(OP, scales, 4)?)?;
    need(OP, "out", out, mul(OP, elems, 2)?)?;
    let args = Args::new()
        .ptr(w.ptr())
        .ptr(scale_inv.ptr())
        .ptr(out.ptr())
        .i64(rows as i64)
        .i32(int(OP, "k", k)?)
        .i32(i32::from(
            k.is_multiple_of(4) && w.ptr().is_multiple_of(4) && out.ptr().is_multiple_of(8),
        ))
        .i64(grid_rows as i64);
    // CTAs stride over the rows: as many as rows, at most 16 per SM.
    let ctas = rows.clamp(1, dev.sm_count.max(1) * 16);
    let grid = (grid_dim(OP, ctas, GRID_X)?, 1, 1);
    // SAFETY: the weight, its scales and out hold what the shape needs
    // (checked); the loops stay below `rows` rows and k columns, the scale
    // index below the matrices' grids, the wide accesses only with k % 4 ==
    // 0 (4-byte aligned rows of W, 8-byte of out); the kernel waits for the
    // previous one before it writes.
    unsafe { launch_programmatic(dev, "fp8_dequant_bf16", grid, 256, args) }
}

/// `dst[j · ld + i] = src[i · b + j]` for the f32 table `src` `[a][b]`
/// (`ld >= a`): the table in the other major order.
pub fn transpose_f32(
    dev: &CudaDevice,
    src: &DeviceBuffer,
    a: usize,
    b: usize,
    dst: &DeviceBuffer,
    ld: usize,
) -> OpResult<()> {
    const OP: &str = "fp8_transpose";
    if ld < a {
        return Err(OpError::shape(OP, format!("leading dimension {ld} < {a}")));
    }
    let elems = mul(OP, a, b)?;
    need(OP, "src", src, mul(OP, elems, 4)?)?;
    need(OP, "dst", dst, mul(OP, mul(OP, ld, b)?, 4)?)?;
    if elems == 0 {
        return Ok(());
    }
    let args = Args::new()
        .ptr(src.ptr())
        .ptr(dst.ptr())
        .i64(a as i64)
        .i64(b as i64)
        .i64(ld as i64);
    // SAFETY: src holds a · b f32, dst ld · b (checked); the kernel waits for
    // the previous one before it reads or writes.
    unsafe { launch_programmatic(dev, "fp8_transpose_f32", stride_grid(elems, 256), 256, args) }
}

#[cfg(test)]
mod tests {
    use super::super::sources::FP8_QUANT;
    use super::*;
    use crate::kernels::source_constant;

    #[test]
    fn constants_match_the_kernel_source() {
        assert_eq!(
            source_constant(FP8_QUANT.source, "THREADS"),
            QUANT_THREADS as usize
        );
        assert_eq!(source_constant(FP8_QUANT.source, "BLOCK"), BLOCK);
        assert_eq!(
            source_constant(FP8_QUANT.source, "QUANT_GROUPS"),
            QUANT_GROUPS
        );
    }

    #[test]
    fn scale_layouts_give_strides_and_spans() {
        assert_eq!(ScaleLayout::RowMajor.strides(37, 17).unwrap(), (17, 1, 629));
        assert_eq!(
            ScaleLayout::ColMajor { ld: 40 }.strides(37, 17).unwrap(),
            (1, 40, 680)
        );
        assert!(ScaleLayout::ColMajor { ld: 36 }.strides(37, 17).is_err());
        assert!(ScaleLayout::RowMajor.strides(usize::MAX, 2).is_err());
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn every_entry_compiles_for_sm_90a_without_spills() {
        crate::nvrtc::compile_sm90a_without_spills(&FP8_QUANT);
    }
}
