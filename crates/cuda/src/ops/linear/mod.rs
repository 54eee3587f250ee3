//! `linear` (`y = x · Wᵀ`): the skinny GEMV of [`crate::ops::gemv`] for
//! 1 ..= 8 rows, cuBLAS with bf16 operands and f32 compute otherwise; FP8
//! weights on the FP8 kernels ([`fp8`]).

mod fp8;

pub(crate) use fp8::linear_fp8_from;

use crate::blas::Linear;
use crate::decode_stats::{timed, BLAS_CALLS, BLAS_NS};
use crate::device::CudaDevice;
use crate::launch::dev_err;
use crate::ops::gemv;
use crate::tensor::{new_act, CudaAct, CudaWeight};
use crate::validate::bf16;
use headroom_core::ops::{OpError, OpResult};
use headroom_core::Dtype;
use std::sync::atomic::Ordering;

/// `y = x · Wᵀ` with `y` in `out_dtype` (bf16, or f32 for router logits):
/// the skinny GEMV for 1 ..= 8 rows ([`gemv`]), cuBLAS otherwise.
pub(crate) fn linear(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &CudaWeight,
    out_dtype: Dtype,
) -> OpResult<CudaAct> {
    if w.is_fp8() {
        return one(fp8::linear_fp8(dev, x, &[w], out_dtype)?);
    }
    if gemv::takes(x.rows, out_dtype, w.elems() * 2) {
        one(gemv::gemv(dev, x, &[w], out_dtype)?)
    } else {
        linear_blas(dev, x, w, out_dtype)
    }
}

/// `linear` of `x` by each of `ws`, bf16: one GEMV launch per 6 matrices for
/// 1 ..= 8 rows, else one cuBLAS GEMM each.
pub(crate) fn linear_many(
    dev: &CudaDevice,
    x: &CudaAct,
    ws: &[&CudaWeight],
) -> OpResult<Vec<CudaAct>> {
    // FP8 weights take their own path; the GEMV choice is the bf16 ones'.
    let bytes = ws
        .iter()
        .filter(|w| !w.is_fp8())
        .map(|w| w.elems() * 2)
        .sum();
    linear_with(
        dev,
        x,
        ws,
        gemv::takes(x.rows, Dtype::Bf16, bytes),
        Dtype::Bf16,
    )
}

/// `x · W_iᵀ` for each of `ws`, outputs in `out` (bf16 or f32): on the GEMV
/// ([`gemv::MAX_MATS`] matrices a launch) when `gemv` and the rows allow,
/// else one cuBLAS GEMM per matrix; FP8 weights on [`fp8`] whatever `gemv`.
pub(crate) fn linear_with(
    dev: &CudaDevice,
    x: &CudaAct,
    ws: &[&CudaWeight],
    gemv: bool,
    out: Dtype,
) -> OpResult<Vec<CudaAct>> {
    if ws.iter().all(|w| w.is_fp8()) && !ws.is_empty() {
        return fp8::linear_fp8(dev, x, ws, out);
    }
    if ws.iter().any(|w| w.is_fp8()) {
        return mixed(dev, x, ws, gemv, out);
    }
    if gemv && (1..=gemv::MAX_ROWS).contains(&x.rows) {
        gemv::gemv_many(dev, x, ws, out)
    } else {
        ws.iter().map(|w| linear_blas(dev, x, w, out)).collect()
    }
}

/// [`linear_with`] on a set of FP8 and bf16 weights (a GDN layer's FP8
/// projections beside its bf16 `a` / `b`): the FP8 ones together on the FP8
/// path, the bf16 ones together on theirs, outputs in `ws`'s order.
fn mixed(
    dev: &CudaDevice,
    x: &CudaAct,
    ws: &[&CudaWeight],
    gemv: bool,
    out: Dtype,
) -> OpResult<Vec<CudaAct>> {
    let (fp8, plain): (Vec<usize>, Vec<usize>) = (0..ws.len()).partition(|&i| ws[i].is_fp8());
    let pick = |idx: &[usize]| idx.iter().map(|&i| ws[i]).collect::<Vec<_>>();
    let mut ys: Vec<Option<CudaAct>> = (0..ws.len()).map(|_| None).collect();
    let runs = [
        (&fp8, fp8::linear_fp8(dev, x, &pick(&fp8), out)?),
        (&plain, linear_with(dev, x, &pick(&plain), gemv, out)?),
    ];
    for (idx, outs) in runs {
        for (&i, y) in idx.iter().zip(outs) {
            ys[i] = Some(y);
        }
    }
    ys.into_iter()
        .map(|y| y.ok_or_else(|| OpError::Device("linear: an output was not computed".into())))
        .collect()
}

/// The one output of a one-matrix launch.
fn one(mut ys: Vec<CudaAct>) -> OpResult<CudaAct> {
    ys.pop()
        .ok_or_else(|| OpError::Device("gemv returned no output".into()))
}

/// [`linear`] on cuBLAS whatever the rows (the TP f32 partial stays here;
/// an FP8 weight is dequantized to bf16 scratch first).
pub(crate) fn linear_blas(
    dev: &CudaDevice,
    x: &CudaAct,
    w: &CudaWeight,
    out_dtype: Dtype,
) -> OpResult<CudaAct> {
    bf16("linear", x)?;
    if w.is_fp8() {
        let wb = crate::ops::fp8::weight::dequantize_weight(dev, w)?;
        return linear_blas(dev, x, &wb, out_dtype);
    }
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
    dev.capture().library_call(&l.call_class());
    let stats = dev.options().decode_stats;
    // SAFETY: the three buffers were sized from the same dims.
    timed(stats, &BLAS_NS, || unsafe { blas.linear(&l) }).map_err(dev_err)?;
    Ok(y)
}
