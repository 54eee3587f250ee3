//! Dense ops: `linear` (the skinny GEMV of `gemv` for 1 ..= 8 rows, cuBLAS
//! with bf16 operands and f32 compute otherwise), the
//! embedding and row gathers, and the element-wise gates.

use super::decode_stats::{timed, BLAS_CALLS, BLAS_NS};
use super::gemv;
use super::launch::{dev_err, grid_dim, launch, stride_grid, upload, Args, GRID_X};
use super::memory::new_act;
use super::types::{CudaAct, CudaWeight};
use super::validate::{bf16, same_shape};
use crate::blas::Linear;
use crate::device::CudaDevice;
use headroom_core::ops::{OpError, OpResult};
use headroom_core::Dtype;
use std::sync::atomic::Ordering;

/// `y = x · Wᵀ` with `y` in `out_dtype` (bf16, or f32 for router logits):
/// the skinny GEMV for 1 ..= 8 rows ([`gemv`], unless `HEADROOM_GEMV=off`),
/// cuBLAS otherwise.
pub(crate) fn linear(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &CudaWeight,
    out_dtype: Dtype,
) -> OpResult<CudaAct> {
    match gemv::takes(x.rows, out_dtype, w.elems() * 2) {
        Some(k) => one(gemv::gemv(dev, k, x, &[w], out_dtype)?),
        None => linear_blas(dev, x, w, out_dtype),
    }
}

/// `linear` of `x` by each of `ws`, bf16: one GEMV launch per 6 matrices for
/// 1 ..= 8 rows, else one cuBLAS GEMM each.
pub(crate) fn linear_many(
    dev: &CudaDevice,
    x: &CudaAct,
    ws: &[&CudaWeight],
) -> OpResult<Vec<CudaAct>> {
    let bytes = ws.iter().map(|w| w.elems() * 2).sum();
    let kernel = gemv::takes(x.rows, Dtype::Bf16, bytes);
    gemv::linear_many(dev, kernel, x, ws, Dtype::Bf16)
}

/// The one output of a one-matrix launch.
fn one(mut ys: Vec<CudaAct>) -> OpResult<CudaAct> {
    ys.pop()
        .ok_or_else(|| OpError::Device("gemv returned no output".into()))
}

/// [`linear`] on cuBLAS whatever the rows (the TP f32 partial stays here).
pub(crate) fn linear_blas(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &CudaWeight,
    out_dtype: Dtype,
) -> OpResult<CudaAct> {
    bf16("linear", x)?;
    let w = w.matrix("linear")?;
    if x.cols != w.cols {
        return Err(OpError::shape(
            "linear",
            format!(
                "input has {} columns, weight [{}][{}]",
                x.cols, w.rows, w.cols
            ),
        ));
    }
    let y = new_act(dev, "linear", x.rows, w.rows, out_dtype)?;
    if x.rows == 0 {
        return Ok(y);
    }
    let blas = dev.blas().map_err(dev_err)?;
    let l = Linear {
        x: x.ptr(),
        x_dtype: Dtype::Bf16,
        w: w.ptr(),
        w_dtype: Dtype::Bf16,
        y: y.ptr(),
        y_dtype: out_dtype,
        rows: x.rows,
        in_features: x.cols,
        out_features: w.rows,
        accumulate: false,
    };
    BLAS_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the three buffers were sized from the same dims.
    timed(&BLAS_NS, || unsafe { blas.linear(&l) }).map_err(dev_err)?;
    Ok(y)
}

/// Rows `table[ids[i]]` as f32: the start of the residual stream, which
/// stays f32 (`add_rms_norm` adds each layer's bf16 output to it in f32).
pub(crate) fn embed(dev: &CudaDevice, table: &CudaWeight, ids: &[u32]) -> OpResult<CudaAct> {
    let table = table.matrix("embed")?;
    if let Some(&bad) = ids.iter().find(|&&id| id as usize >= table.rows) {
        return Err(OpError::shape(
            "embed",
            format!("token id {bad} >= vocab {}", table.rows),
        ));
    }
    let out = new_act(dev, "embed", ids.len(), table.cols, Dtype::F32)?;
    if ids.is_empty() {
        return Ok(out);
    }
    let ids_dev = upload(dev, ids)?;
    let cols = super::launch::int("embed", "hidden", table.cols)?;
    let args = Args::new()
        .ptr(table.ptr())
        .ptr(ids_dev.ptr())
        .ptr(out.ptr())
        .i32(cols);
    let grid = (grid_dim("embed", ids.len(), GRID_X)?, 1, 1);
    // SAFETY: ids < rows (checked); out holds ids.len() f32 rows of `cols`.
    unsafe { launch(dev, "embed_bf16_to_f32", grid, 256, args)? };
    Ok(out)
}

/// `out[i] = x[rows[i]]` (bf16 or f32 activations).
pub(crate) fn gather_rows(dev: &CudaDevice, x: &CudaAct, rows: &[usize]) -> OpResult<CudaAct> {
    if let Some(&bad) = rows.iter().find(|&&r| r >= x.rows) {
        return Err(OpError::shape(
            "gather_rows",
            format!("row {bad} >= {}", x.rows),
        ));
    }
    let out = new_act(dev, "gather_rows", rows.len(), x.cols, x.dtype)?;
    if rows.is_empty() || x.cols == 0 {
        return Ok(out);
    }
    let idx: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
    let idx_dev = upload(dev, &idx)?;
    let entry = match x.dtype.size_bytes() {
        2 => "gather_rows_b16",
        _ => "gather_rows_b32",
    };
    let cols = super::launch::int("gather_rows", "columns", x.cols)?;
    let args = Args::new()
        .ptr(x.ptr())
        .ptr(idx_dev.ptr())
        .ptr(out.ptr())
        .i32(cols);
    let grid = (grid_dim("gather_rows", rows.len(), GRID_X)?, 1, 1);
    // SAFETY: every index < x.rows (checked); out holds rows.len() rows.
    unsafe { launch(dev, entry, grid, 256, args)? };
    Ok(out)
}

/// In place `x *= sigmoid(gate)`.
pub(crate) fn mul_sigmoid(dev: &CudaDevice, x: &mut CudaAct, gate: &CudaAct) -> OpResult<()> {
    bf16("mul_sigmoid", x)?;
    same_shape("mul_sigmoid", x, gate)?;
    let n = x.elems();
    if n == 0 {
        return Ok(());
    }
    let args = Args::new().ptr(x.ptr()).ptr(gate.ptr()).i64(n as i64);
    // SAFETY: both hold n bf16 elements.
    unsafe { launch(dev, "mul_sigmoid_bf16", stride_grid(n, 256), 256, args) }
}

/// `silu(gate) ⊙ up`.
pub(crate) fn swiglu(dev: &CudaDevice, gate: &CudaAct, up: &CudaAct) -> OpResult<CudaAct> {
    bf16("swiglu", gate)?;
    same_shape("swiglu", gate, up)?;
    let out = new_act(dev, "swiglu", gate.rows, gate.cols, Dtype::Bf16)?;
    let n = gate.elems();
    if n > 0 {
        let args = Args::new()
            .ptr(gate.ptr())
            .ptr(up.ptr())
            .ptr(out.ptr())
            .i64(n as i64);
        // SAFETY: all three hold n bf16 elements.
        unsafe { launch(dev, "swiglu_bf16", stride_grid(n, 256), 256, args)? };
    }
    Ok(out)
}

/// `(g, beta)` in f32 from `a`, `b` `[t][heads]`.
pub(crate) fn gdn_gating(
    dev: &CudaDevice,
    a: &CudaAct,
    b: &CudaAct,
    a_log: &CudaWeight,
    dt_bias: &CudaWeight,
) -> OpResult<(CudaAct, CudaAct)> {
    bf16("gdn_gating", a)?;
    same_shape("gdn_gating", a, b)?;
    let (a_log, dt_bias) = (a_log.vector("gdn_gating")?, dt_bias.vector("gdn_gating")?);
    if a_log.elems() != a.cols || dt_bias.elems() != a.cols {
        return Err(OpError::shape(
            "gdn_gating",
            "A_log / dt_bias length != heads",
        ));
    }
    let g = new_act(dev, "gdn_gating", a.rows, a.cols, Dtype::F32)?;
    let beta = new_act(dev, "gdn_gating", a.rows, a.cols, Dtype::F32)?;
    let n = a.elems();
    if n > 0 {
        let heads = super::launch::int("gdn_gating", "heads", a.cols)?;
        let args = Args::new()
            .ptr(a.ptr())
            .ptr(b.ptr())
            .ptr(a_log.ptr())
            .ptr(dt_bias.ptr())
            .ptr(g.ptr())
            .ptr(beta.ptr())
            .i64(n as i64)
            .i32(heads);
        // SAFETY: a, b hold n bf16; g, beta n f32; the vectors `heads` f32.
        unsafe { launch(dev, "gdn_gating_bf16", stride_grid(n, 256), 256, args)? };
    }
    Ok((g, beta))
}
