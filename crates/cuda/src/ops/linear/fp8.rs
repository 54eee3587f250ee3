//! `linear` on FP8 weights (a checkpoint's block-scaled projections kept
//! FP8 on the device): the FP8 GEMV for 1 ..= 8 rows
//! ([`crate::ops::fp8::gemv`], up to six matrices of one input a launch),
//! the block-scaled FP8 GEMM for more rows with a bf16 output
//! ([`crate::ops::fp8::gemm`]: activations quantized per 128-column group,
//! cuBLASLt on rows padded to a multiple of 4 — the outputs are allocated
//! with room for them — the activations quantized once for the set, or its
//! dequantizing fallback), and the weight dequantized to
//! bf16 scratch for what neither takes (f32 outputs of many rows, weights
//! whose block grid restarts off the block boundary).

use super::linear_blas;
use crate::device::CudaDevice;
use crate::ops::fp8::gemm::{fp8_gemm_set_from, lt_rows, QuantizedX, LT_SCALE_ORDER};
use crate::ops::fp8::gemv::{fp8_gemv, Fp8Gemv, MAX_MATS, MAX_ROWS};
use crate::ops::fp8::weight::{dequantize_weight, matrix_of};
use crate::tensor::{new_act, new_act_with_room, CudaAct, CudaWeight};
use crate::validate::bf16;
use headroom_core::ops::{OpError, OpResult};
use headroom_core::Dtype;

/// `x · W_iᵀ` for each of `ws` (every one FP8), outputs in `out` (bf16 or
/// f32).
pub(crate) fn linear_fp8(
    dev: &CudaDevice,
    x: &CudaAct,
    ws: &[&CudaWeight],
    out: Dtype,
) -> OpResult<Vec<CudaAct>> {
    linear_fp8_from(dev, x, ws, out, None)
}

/// [`linear_fp8`] reading `pre`'s codes of `x` (quantized once for the
/// MoE block's shared and routed experts), else those `x` carries (its
/// add + RMSNorm wrote them), where the block-scaled GEMM runs.
pub(crate) fn linear_fp8_from(
    dev: &CudaDevice,
    x: &CudaAct,
    ws: &[&CudaWeight],
    out: Dtype,
    pre: Option<&QuantizedX>,
) -> OpResult<Vec<CudaAct>> {
    bf16("linear", x)?;
    if !matches!(out, Dtype::Bf16 | Dtype::F32) {
        return Err(OpError::shape(
            "linear",
            format!("writes bf16 or f32, not {out}"),
        ));
    }
    for w in ws {
        if !w.is_fp8() || w.cols != x.cols {
            return Err(OpError::shape(
                "linear",
                format!(
                    "input has {} columns, weight {} [{}][{}]",
                    x.cols,
                    w.format(),
                    w.rows,
                    w.cols
                ),
            ));
        }
    }
    if x.rows == 0 {
        return ws
            .iter()
            .map(|w| new_act(dev, "linear", 0, w.rows, out))
            .collect();
    }
    // The weights the FP8 kernels read as they are, with their outputs; the
    // others (no FP8 kernel: f32 out of many rows, a grid restarting off the
    // blocks) on cuBLAS from their bf16 copy.
    let mut outs: Vec<Option<CudaAct>> = (0..ws.len()).map(|_| None).collect();
    let mut direct = Vec::with_capacity(ws.len());
    // The block-scaled GEMM writes `lt_rows` rows: its outputs get the room.
    let room = if x.rows <= MAX_ROWS {
        x.rows
    } else {
        lt_rows(x.rows)
    };
    for (i, w) in ws.iter().enumerate() {
        match matrix_of(w) {
            Some(m) if x.rows <= MAX_ROWS || out == Dtype::Bf16 => {
                let y = new_act_with_room(dev, "linear", x.rows, room, w.rows, out)?;
                direct.push((i, m, y));
            }
            _ => outs[i] = Some(linear_blas(dev, x, &dequantize_weight(dev, w)?, out)?),
        }
    }
    if x.rows <= MAX_ROWS {
        for group in direct.chunks(MAX_MATS) {
            let launch: Vec<Fp8Gemv> = group
                .iter()
                .map(|(_, w, y)| Fp8Gemv {
                    w: *w,
                    y: y.buffer(),
                })
                .collect();
            fp8_gemv(dev, x.buffer(), x.rows, x.cols, &launch, out)?;
        }
    } else {
        let set: Vec<_> = direct.iter().map(|(_, w, y)| (*w, y.buffer())).collect();
        let pre = pre.or(x.quantized());
        fp8_gemm_set_from(dev, x.buffer(), x.rows, &set, Some(LT_SCALE_ORDER), pre)?;
    }
    for (i, _, y) in direct {
        outs[i] = Some(y);
    }
    outs.into_iter()
        .map(|y| y.ok_or_else(|| OpError::Device("linear: an fp8 output was not computed".into())))
        .collect()
}
