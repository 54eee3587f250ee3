//! Block-scaled FP8 weights (the DeepSeek-V3 / Qwen FP8 checkpoint format)
//! on the device: W float8 e4m3 `[n][k]` (one byte each, row-major) with
//! f32 `scale_inv` `[ceil(n/128)][ceil(k/128)]`, the real weight being
//! `W[n][k] · scale_inv[n/128][k/128]`. The launchers take raw device
//! buffers ([`Fp8Matrix`]), so a caller that holds such weights calls them
//! directly:
//! * [`gemv`]: the decode GEMV (1 ..= 8 rows, bf16 x, f32 accumulation);
//! * [`experts`]: its batched-experts variant for the MoE decode (stacked
//!   experts' matrices, the expert of each (row, slot) pair on the device);
//! * [`quant`]: per-(row, 128-group) activation quantization to e4m3 and
//!   the weight dequantization to bf16 (the GEMM's fallback);
//! * [`gemm`]: the prefill GEMM (cuBLASLt block scaling, else dequantize +
//!   the bf16 GEMM);
//! * [`weight`]: an FP8 `CudaWeight` (the model's weights kept FP8 on the
//!   device) as these launchers' matrices, or dequantized to bf16;
//! * [`moe`]: the MoE decode on FP8 experts.

pub mod experts;
pub mod gemm;
pub mod gemv;
pub mod moe;
pub mod quant;
pub mod sources;
pub(crate) mod weight;

use crate::alloc::DeviceBuffer;
use crate::launch::mul;
use headroom_core::ops::{OpError, OpResult};

/// Rows and columns of one scale block.
pub const BLOCK: usize = 128;

/// One block-scaled FP8 matrix on the device.
#[derive(Debug, Clone, Copy)]
pub struct Fp8Matrix<'a> {
    /// e4m3 `[n][k]`.
    pub w: &'a DeviceBuffer,
    /// f32 `[ceil(n/128)][ceil(k/128)]`.
    pub scale_inv: &'a DeviceBuffer,
    /// Output features (rows of W).
    pub n: usize,
    /// Input features (columns of W).
    pub k: usize,
}

impl Fp8Matrix<'_> {
    /// Scale blocks along n and along k.
    pub fn scale_dims(&self) -> (usize, usize) {
        (self.n.div_ceil(BLOCK), self.k.div_ceil(BLOCK))
    }

    /// Checks that the shape is non-empty and that both buffers hold it.
    pub fn check(&self, op: &'static str) -> OpResult<()> {
        if self.n == 0 || self.k == 0 {
            return Err(OpError::shape(
                op,
                format!("empty FP8 weight [{}][{}]", self.n, self.k),
            ));
        }
        let (nb, kb) = self.scale_dims();
        need(op, "weight", self.w, mul(op, self.n, self.k)?)?;
        need(
            op,
            "scale_inv",
            self.scale_inv,
            mul(op, mul(op, nb, kb)?, 4)?,
        )?;
        if !self.scale_inv.ptr().is_multiple_of(4) {
            return Err(OpError::shape(op, "scale_inv is not 4-byte aligned"));
        }
        Ok(())
    }
}

/// A shape error unless `buf` holds at least `bytes` bytes.
pub(crate) fn need(op: &'static str, what: &str, buf: &DeviceBuffer, bytes: usize) -> OpResult<()> {
    if buf.len_bytes() < bytes {
        return Err(OpError::shape(
            op,
            format!("{what} holds {} bytes, needs {bytes}", buf.len_bytes()),
        ));
    }
    Ok(())
}
