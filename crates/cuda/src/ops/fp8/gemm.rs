//! The block-scaled FP8 GEMM for prefill: `y = x · (W · scale_inv)ᵀ` with
//! bf16 `x` `[m][k]`, an [`Fp8Matrix`] `W` `[n][k]` and bf16 `y` `[m][n]`.
//! On Hopper it quantizes `x` per (row, 128-column group) to e4m3
//! ([`super::quant::quantize`]) and runs cuBLASLt's block-scaled FP8 matmul
//! ([`crate::blas::Blas::fp8_block_linear`], f32 accumulation) on the
//! shapes it computes right ([`lt_takes`]: on the H200, cuBLASLt 13 ran
//! k = 2,112, n = 320 and k = 128 ..= 384 and returned wrong sums), on
//! rows padded to a multiple of 4 ([`lt_rows`]: it has no algorithm for
//! other row counts) where `y` has room for them. Elsewhere, or where
//! cuBLASLt has no algorithm, it dequantizes `W` to a bf16 workspace and
//! runs the bf16 GEMM on the unquantized `x`.
//! Up to [`super::gemv::MAX_ROWS`] rows run on the FP8 GEMV instead (bf16
//! x, no activation quantization, one pass over the weight). The caller
//! learns which ran ([`Fp8GemmPath`]).
//!
//! cuBLASLt reads the scale tables in a fixed order: [`LT_SCALE_ORDER`]
//! names it (the activation scales rows-contiguous, `[k/128][m]`; the
//! weight's as the checkpoint stores them, `[n/128][k/128]`: the one order
//! of the candidates that matched f64 on the H200), and the launcher lays
//! the activation scales out in it. `tests/fp8_ops.rs` probes every
//! candidate order on the GPU.

use super::gemv::{fp8_gemv, Fp8Gemv, MAX_ROWS};
use super::quant::{dequantize, quantize, transpose_f32, ScaleLayout};
use super::{need, Fp8Matrix};
use crate::alloc::DeviceBuffer;
use crate::blas::{Fp8Linear, Linear};
use crate::device::CudaDevice;
use crate::launch::{alloc, dev_err, mul};
use headroom_core::ops::OpResult;
use headroom_core::Dtype;

const OP: &str = "fp8_gemm";

/// Which path a GEMM took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8GemmPath {
    /// At most 8 rows: the FP8 GEMV on the unquantized x.
    Gemv,
    /// x quantized to e4m3, cuBLASLt's block-scaled FP8 matmul.
    BlockScaled,
    /// W dequantized to bf16, the bf16 GEMM on the unquantized x.
    DequantBf16,
    /// No rows: nothing ran.
    Empty,
}

/// The order of the scale tables cuBLASLt reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LtScaleOrder {
    /// x's scales `[k/128][ld]` (rows contiguous) rather than `[m][k/128]`.
    pub x_rows_contiguous: bool,
    /// W's scales `[k/128][ld]` (row blocks contiguous) rather than the
    /// checkpoint's `[n/128][k/128]`.
    pub w_transposed: bool,
    /// The leading dimension of a rows-contiguous table rounded up to a
    /// multiple of 4 (16 bytes) rather than the rows themselves.
    pub pad_to_4: bool,
}

/// The order cuBLASLt reads (probed on the H200, `tests/fp8_ops.rs`).
pub const LT_SCALE_ORDER: LtScaleOrder = LtScaleOrder {
    x_rows_contiguous: true,
    w_transposed: false,
    pad_to_4: false,
};

impl LtScaleOrder {
    /// Every candidate order (the GPU test tries each).
    pub fn all() -> Vec<LtScaleOrder> {
        let mut v = Vec::new();
        for x in [false, true] {
            for w in [false, true] {
                for pad in [false, true] {
                    if pad && !x && !w {
                        continue;
                    }
                    v.push(LtScaleOrder {
                        x_rows_contiguous: x,
                        w_transposed: w,
                        pad_to_4: pad,
                    });
                }
            }
        }
        v
    }

    /// The leading dimension of a rows-contiguous table of `rows` rows.
    fn ld(self, rows: usize) -> usize {
        if self.pad_to_4 {
            rows.next_multiple_of(4)
        } else {
            rows
        }
    }

    /// Where the activation scales go for `m` rows.
    pub fn x_layout(self, m: usize) -> ScaleLayout {
        if self.x_rows_contiguous {
            ScaleLayout::ColMajor { ld: self.ld(m) }
        } else {
            ScaleLayout::RowMajor
        }
    }
}

/// Whether the block-scaled matmul takes `m × k` by `n`: `n` a multiple of
/// 128 and `k` of [`LT_MIN_K`] (whole scale blocks: with tails cuBLASLt 13
/// returned wrong sums on the H200, and with k = 128, 256 or 384 too —
/// 41 % and 95 % errors at 40 rows, `docs/perf/cuda-fp8.md` run 1 — while
/// k = 512, 2048 and 4096 matched f64 at 8 ..= 1000 rows); cuBLASLt's
/// heuristic may still refuse it.
pub fn lt_takes(m: usize, n: usize, k: usize) -> bool {
    m > 0 && k.is_multiple_of(LT_MIN_K) && n.is_multiple_of(super::BLOCK)
}

/// The in-features cuBLASLt's block-scaled matmul is trusted with come in
/// multiples of this (see [`lt_takes`]).
pub const LT_MIN_K: usize = 512;

/// cuBLASLt has a block-scaled algorithm only for row counts that are
/// multiples of this (its rows-contiguous activation-scale table: 36, 512
/// and 520 rows ran, 9 and 37 had no algorithm, `docs/perf/cuda-fp8.md`
/// run 1 and session 31); other row counts run padded to [`lt_rows`].
pub const LT_ROW_MULTIPLE: usize = 4;

/// The rows cuBLASLt's block-scaled matmul runs for `m` rows: `m` rounded
/// up to [`LT_ROW_MULTIPLE`]. A caller gives `y` room for them to keep a
/// serving step's arbitrary row count on the FP8 matmul.
pub fn lt_rows(m: usize) -> usize {
    m.next_multiple_of(LT_ROW_MULTIPLE)
}

/// Checks x `[m][k]` bf16 and y `[m][n]` bf16 against `w`.
fn check(x: &DeviceBuffer, m: usize, w: &Fp8Matrix, y: &DeviceBuffer) -> OpResult<()> {
    w.check(OP)?;
    need(OP, "x", x, mul(OP, mul(OP, m, w.k)?, 2)?)?;
    need(OP, "y", y, mul(OP, mul(OP, m, w.n)?, 2)?)
}

/// `y = x · (W · scale_inv)ᵀ` on cuBLASLt's block-scaled FP8 matmul, or
/// on the bf16 fallback where it refuses the shape.
pub fn fp8_gemm(
    dev: &CudaDevice,
    x: &DeviceBuffer,
    m: usize,
    w: Fp8Matrix,
    y: &DeviceBuffer,
) -> OpResult<Fp8GemmPath> {
    fp8_gemm_with(dev, x, m, w, y, Some(LT_SCALE_ORDER))
}

/// [`fp8_gemm`] with the scale order `lt` (`None`: the dequantizing bf16
/// fallback whatever the rows, for tests and benches).
pub fn fp8_gemm_with(
    dev: &CudaDevice,
    x: &DeviceBuffer,
    m: usize,
    w: Fp8Matrix,
    y: &DeviceBuffer,
    lt: Option<LtScaleOrder>,
) -> OpResult<Fp8GemmPath> {
    let paths = fp8_gemm_set(dev, x, m, &[(w, y)], lt)?;
    Ok(paths[0])
}

/// [`fp8_gemm_with`] for every `(W, y)` of `set` on the same `x`: the
/// activations are quantized once for all the matrices cuBLASLt takes (a
/// GDN layer's qkv and z, an attention layer's q, k and v), the same codes
/// and scales each separate call would make. The paths in `set`'s order.
pub fn fp8_gemm_set(
    dev: &CudaDevice,
    x: &DeviceBuffer,
    m: usize,
    set: &[(Fp8Matrix, &DeviceBuffer)],
    lt: Option<LtScaleOrder>,
) -> OpResult<Vec<Fp8GemmPath>> {
    fp8_gemm_set_from(dev, x, m, set, lt, None)
}

pub use crate::tensor::QuantizedX;

impl QuantizedX {
    /// Quantizes bf16 `x` `[m][k]`.
    pub fn new(dev: &CudaDevice, x: &DeviceBuffer, m: usize, k: usize) -> OpResult<QuantizedX> {
        let out = QuantizedX::alloc(dev, m, k)?;
        quantize(dev, x, m, k, &out.q, &out.s, ScaleLayout::RowMajor)?;
        Ok(out)
    }

    /// Room for the codes and scales of `[m][k]`, unwritten (for a kernel
    /// that writes them beside its own output: the add + RMSNorm).
    pub(crate) fn alloc(dev: &CudaDevice, m: usize, k: usize) -> OpResult<QuantizedX> {
        let kb = k.div_ceil(super::BLOCK);
        let q = alloc(dev, mul(OP, lt_rows(m), k)?)?;
        let s = alloc(dev, mul(OP, mul(OP, m, kb)?, 4)?)?;
        Ok(QuantizedX { q, s, m, k })
    }
}

/// A device table a set's products read (codes or scales): made for the
/// set, or a caller's.
enum Table<'a> {
    Own(DeviceBuffer),
    Given(&'a DeviceBuffer),
}

impl Table<'_> {
    fn buf(&self) -> &DeviceBuffer {
        match self {
            Table::Own(b) => b,
            Table::Given(b) => b,
        }
    }
}

/// [`fp8_gemm_set`] reading the codes of `pre` (the same `x` quantized
/// already: its scales are transposed into cuBLASLt's order, the codes
/// read as they are) where it matches `m` and a matrix's `k`; the same
/// bits as quantizing here.
pub fn fp8_gemm_set_from(
    dev: &CudaDevice,
    x: &DeviceBuffer,
    m: usize,
    set: &[(Fp8Matrix, &DeviceBuffer)],
    lt: Option<LtScaleOrder>,
    pre: Option<&QuantizedX>,
) -> OpResult<Vec<Fp8GemmPath>> {
    for (w, y) in set {
        check(x, m, w, y)?;
    }
    if m == 0 {
        return Ok(vec![Fp8GemmPath::Empty; set.len()]);
    }
    if lt.is_some() && m <= MAX_ROWS {
        for (w, y) in set {
            let one = Fp8Gemv { w: *w, y };
            fp8_gemv(dev, x, m, w.k, &[one], Dtype::Bf16)?;
        }
        return Ok(vec![Fp8GemmPath::Gemv; set.len()]);
    }
    // cuBLASLt runs `lt_rows(m)` rows into the room `y` has past its m rows
    // (a `y` without that room takes the fallback). The padding rows' codes
    // and scales are left unset: an output row depends on its own input row
    // only, so they change no real row, and the room is never read.
    let rows = lt_rows(m);
    let mut quantized: Option<(usize, Table, Table)> = None;
    let mut paths = Vec::with_capacity(set.len());
    for (w, y) in set {
        let room = mul(OP, mul(OP, rows, w.n)?, 2)? <= y.len_bytes();
        let mut ran = false;
        if let Some(order) = lt.filter(|_| lt_takes(m, w.n, w.k) && room) {
            let layout = order.x_layout(rows);
            if quantized.as_ref().is_none_or(|(k, _, _)| *k != w.k) {
                let kb = w.k.div_ceil(super::BLOCK);
                let (_, _, span) = layout.strides(rows, kb)?;
                let given = pre.filter(|p| (p.m, p.k) == (m, w.k));
                quantized = Some(match (given, layout) {
                    (Some(p), ScaleLayout::RowMajor) => {
                        (w.k, Table::Given(&p.q), Table::Given(&p.s))
                    }
                    (Some(p), ScaleLayout::ColMajor { ld }) => {
                        let s = alloc(dev, mul(OP, span, 4)?)?;
                        transpose_f32(dev, &p.s, m, kb, &s, ld)?;
                        (w.k, Table::Given(&p.q), Table::Own(s))
                    }
                    (None, _) => {
                        let q = alloc(dev, mul(OP, rows, w.k)?)?;
                        let s = alloc(dev, mul(OP, span, 4)?)?;
                        quantize(dev, x, m, w.k, &q, &s, layout)?;
                        (w.k, Table::Own(q), Table::Own(s))
                    }
                });
            }
            if let Some((_, q, s)) = &quantized {
                ran = block_scaled(dev, q.buf(), s.buf(), rows, w, y, order)?;
            }
        }
        if !ran {
            dequant_gemm(dev, x, m, w, y)?;
        }
        paths.push(if ran {
            Fp8GemmPath::BlockScaled
        } else {
            Fp8GemmPath::DequantBf16
        });
    }
    Ok(paths)
}

/// The block-scaled matmul on e4m3 `xq` `[m][k]` whose scales `xs` are
/// row-major `[m][ceil(k/128)]` (as [`quantize`] with
/// [`ScaleLayout::RowMajor`] writes them), laid out in `order` here;
/// `Ok(false)` (nothing ran) where [`lt_takes`] or cuBLASLt refuses the
/// shape. `any_shape` skips [`lt_takes`] (for the GPU probe of what
/// cuBLASLt computes right).
#[allow(clippy::too_many_arguments)]
pub fn fp8_gemm_quantized(
    dev: &CudaDevice,
    xq: &DeviceBuffer,
    xs: &DeviceBuffer,
    m: usize,
    w: Fp8Matrix,
    y: &DeviceBuffer,
    order: LtScaleOrder,
    any_shape: bool,
) -> OpResult<bool> {
    w.check(OP)?;
    let kb = w.k.div_ceil(super::BLOCK);
    need(OP, "xq", xq, mul(OP, m, w.k)?)?;
    need(OP, "xs", xs, mul(OP, mul(OP, m, kb)?, 4)?)?;
    need(OP, "y", y, mul(OP, mul(OP, m, w.n)?, 2)?)?;
    if m == 0 || !w.k.is_multiple_of(16) || !(any_shape || lt_takes(m, w.n, w.k)) {
        return Ok(false);
    }
    if !order.x_rows_contiguous {
        return block_scaled(dev, xq, xs, m, &w, y, order);
    }
    let ld = order.ld(m);
    let t = alloc(dev, mul(OP, mul(OP, ld, kb)?, 4)?)?;
    transpose_f32(dev, xs, m, kb, &t, ld)?;
    block_scaled(dev, xq, &t, m, &w, y, order)
}

/// cuBLASLt's matmul on quantized x (its scales already in `order`), the
/// weight's scales transposed first if `order` asks.
fn block_scaled(
    dev: &CudaDevice,
    xq: &DeviceBuffer,
    xs: &DeviceBuffer,
    m: usize,
    w: &Fp8Matrix,
    y: &DeviceBuffer,
    order: LtScaleOrder,
) -> OpResult<bool> {
    let (nb, kb) = w.scale_dims();
    let transposed;
    let w_scale = if order.w_transposed {
        let ld = order.ld(nb);
        transposed = alloc(dev, mul(OP, mul(OP, ld, kb)?, 4)?)?;
        transpose_f32(dev, w.scale_inv, nb, kb, &transposed, ld)?;
        transposed.ptr()
    } else {
        w.scale_inv.ptr()
    };
    let l = Fp8Linear {
        x: xq.ptr(),
        x_scale: xs.ptr(),
        w: w.w.ptr(),
        w_scale,
        y: y.ptr(),
        rows: m,
        in_features: w.k,
        out_features: w.n,
    };
    let blas = dev.blas().map_err(dev_err)?;
    dev.capture()
        .library_call(&crate::blas::call_class(2, m, w.n, w.k, [Dtype::Bf16; 3]));
    // SAFETY: xq holds m · k e4m3, its scales the table of `order`, W n · k
    // e4m3 with its (possibly transposed) block scales, y m · n bf16
    // (checked by the callers); the buffers outlive the queued matmul on
    // the device's stream (the allocator reuses memory in stream order).
    unsafe { blas.fp8_block_linear(&l) }.map_err(dev_err)
}

/// The fallback: W dequantized to a bf16 workspace, then the bf16 GEMM.
fn dequant_gemm(
    dev: &CudaDevice,
    x: &DeviceBuffer,
    m: usize,
    w: &Fp8Matrix,
    y: &DeviceBuffer,
) -> OpResult<()> {
    let wb = alloc(dev, mul(OP, mul(OP, w.n, w.k)?, 2)?)?;
    dequantize(dev, *w, &wb)?;
    let l = Linear {
        x: x.ptr(),
        x_dtype: Dtype::Bf16,
        w: wb.ptr(),
        w_dtype: Dtype::Bf16,
        y: y.ptr(),
        y_dtype: Dtype::Bf16,
        rows: m,
        in_features: w.k,
        out_features: w.n,
        accumulate: false,
    };
    let blas = dev.blas().map_err(dev_err)?;
    dev.capture().library_call(&l.call_class());
    // SAFETY: x holds m · k bf16, the workspace n · k bf16, y m · n bf16
    // (checked); the workspace outlives the queued GEMM in stream order.
    unsafe { blas.linear(&l) }.map_err(dev_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_scale_blocks_take_cublaslt() {
        assert!(lt_takes(512, 256, 4096));
        assert!(lt_takes(1, 2048, 2048));
        assert!(lt_takes(40, 2048, 512));
        assert!(!lt_takes(512, 320, 4096));
        assert!(!lt_takes(512, 256, 2048 + 64));
        assert!(!lt_takes(0, 256, 4096));
        // Small k: wrong sums on the H200 (run 1 of docs/perf/cuda-fp8.md).
        for k in [128, 256, 384, 640] {
            assert!(!lt_takes(40, 256, k), "k {k}");
        }
    }

    #[test]
    fn cublaslt_rows_are_the_next_multiple_of_four() {
        assert_eq!(lt_rows(0), 0);
        assert_eq!(lt_rows(9), 12);
        assert_eq!(lt_rows(36), 36);
        assert_eq!(lt_rows(37), 40);
        assert_eq!(lt_rows(662), 664);
        assert_eq!(lt_rows(8193), 8196);
        for m in 1..200 {
            let r = lt_rows(m);
            assert!(r >= m && r < m + LT_ROW_MULTIPLE && r.is_multiple_of(LT_ROW_MULTIPLE));
        }
    }

    #[test]
    fn candidate_orders_are_distinct_and_include_the_default() {
        let all = LtScaleOrder::all();
        assert_eq!(all.len(), 7);
        let unique: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(unique.len(), all.len());
        assert!(all.contains(&LT_SCALE_ORDER));
    }

    #[test]
    fn rows_contiguous_activation_scales_pad_their_leading_dimension() {
        let o = LtScaleOrder {
            x_rows_contiguous: true,
            w_transposed: false,
            pad_to_4: true,
        };
        assert_eq!(o.x_layout(37), ScaleLayout::ColMajor { ld: 40 });
        assert_eq!(
            LtScaleOrder {
                pad_to_4: false,
                ..o
            }
            .x_layout(37),
            ScaleLayout::ColMajor { ld: 37 }
        );
        assert_eq!(
            LtScaleOrder {
                x_rows_contiguous: false,
                ..o
            }
            .x_layout(37),
            ScaleLayout::RowMajor
        );
    }
}
