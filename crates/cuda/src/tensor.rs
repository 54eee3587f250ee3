//! The device-side values of the CUDA backend: activations, weights and the
//! per-layer state pools, each a device buffer with its shape and dtype.

use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::launch::{alloc, mul};
use headroom_core::ops::{GdnSpec, KvSpec, OpError, OpResult};
use headroom_core::Dtype;

/// An activation `[rows][cols]`: bf16, or f32 where precision needs it
/// (the residual stream, `g` / `beta` of the GDN gating, router logits).
#[derive(Debug)]
pub struct CudaAct {
    pub(crate) buf: DeviceBuffer,
    pub rows: usize,
    pub cols: usize,
    pub dtype: Dtype,
    /// The same rows as e4m3 codes and scales, where the op that wrote the
    /// act made them too (on a backend with FP8 weights: the add + RMSNorm,
    /// `crate::ops::norm::add_rms_norm`, and the GDN's gated norm,
    /// `crate::ops::norm::gated_rms_norm`, which drops codes it finds): the
    /// FP8 GEMMs that read the act take them instead of quantizing it
    /// again. No op writes into such an act after the one that made them.
    pub(crate) fp8: Option<Box<QuantizedX>>,
}

impl CudaAct {
    /// The act's e4m3 codes and scales, where the op that wrote it made
    /// them (tests compare them with the quantization of the act).
    pub fn quantized(&self) -> Option<&QuantizedX> {
        self.fp8.as_deref()
    }

    pub fn ptr(&self) -> u64 {
        self.buf.ptr()
    }
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.buf
    }
    pub fn elems(&self) -> usize {
        self.rows * self.cols
    }
}

/// bf16 activations `[m][k]` as e4m3 codes and scales, made once for every
/// FP8 product that reads them (by `crate::ops::fp8::gemm`'s
/// `QuantizedX::new`, or beside a norm's output): codes `[m][k]` in a
/// buffer with room for `lt_rows(m)` rows (cuBLASLt runs them; the padding
/// rows are left unset) and f32 scales row-major `[m][ceil(k / 128)]` — the
/// routed experts read them as they are, cuBLASLt after a transpose into its
/// order. The codes and scales `crate::ops::fp8::quant::quantize` makes.
#[derive(Debug)]
pub struct QuantizedX {
    pub q: DeviceBuffer,
    pub s: DeviceBuffer,
    pub m: usize,
    pub k: usize,
}

/// An uploaded weight: a matrix `[rows][cols]` in bf16, a vector (`rows ==
/// 1`) in f32, or a block-scaled FP8 matrix (`fp8` is `Some`: `buf` holds
/// the e4m3 bytes `[rows][cols]` as the checkpoint stores them, `dtype` is
/// bf16, the dtype it computes with). An FP8 weight reaches only the ops
/// that read it as FP8 (`crate::ops::linear`, the MoE experts); every other
/// op asks for [`CudaWeight::matrix`] and is refused it.
#[derive(Debug)]
pub struct CudaWeight {
    pub(crate) buf: DeviceBuffer,
    pub rows: usize,
    pub cols: usize,
    pub dtype: Dtype,
    pub(crate) fp8: Option<Fp8Scales>,
}

/// The block scales of an FP8 weight: f32 `[rows / grid_rows][ceil(grid_rows
/// / 128)][ceil(cols / 128)]`, the grid restarting every `grid_rows` rows
/// (each stacked expert's matrix, or the whole weight), as
/// `headroom_core::fp8::Fp8Block` holds them; blocks of 128 × 128.
#[derive(Debug)]
pub struct Fp8Scales {
    pub(crate) scale_inv: DeviceBuffer,
    /// Rows after which the block grid restarts (a divisor of `rows`).
    pub grid_rows: usize,
}

/// How a weight is stored on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CudaWeightFormat {
    Bf16,
    F32,
    /// e4m3 with one f32 scale per 128 × 128 block.
    Fp8Block128,
}

impl std::fmt::Display for CudaWeightFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CudaWeightFormat::Bf16 => "bf16",
            CudaWeightFormat::F32 => "f32",
            CudaWeightFormat::Fp8Block128 => "fp8-e4m3 (128x128 block scales)",
        })
    }
}

impl CudaWeight {
    pub fn ptr(&self) -> u64 {
        self.buf.ptr()
    }
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.buf
    }
    pub fn elems(&self) -> usize {
        self.rows * self.cols
    }

    /// How this weight is stored.
    pub fn format(&self) -> CudaWeightFormat {
        match (&self.fp8, self.dtype) {
            (Some(_), _) => CudaWeightFormat::Fp8Block128,
            (None, Dtype::F32) => CudaWeightFormat::F32,
            (None, _) => CudaWeightFormat::Bf16,
        }
    }

    /// Whether this is a block-scaled FP8 matrix.
    pub fn is_fp8(&self) -> bool {
        self.fp8.is_some()
    }

    /// Device bytes this weight holds (data and, for FP8, its scales).
    pub fn device_bytes(&self) -> usize {
        self.buf.len_bytes() + self.fp8.as_ref().map_or(0, |s| s.scale_inv.len_bytes())
    }

    /// The scales of an FP8 weight.
    pub fn fp8_scales(&self) -> Option<&Fp8Scales> {
        self.fp8.as_ref()
    }

    /// The f32 vector this weight must be for `op`.
    pub(crate) fn vector(&self, op: &'static str) -> OpResult<&CudaWeight> {
        if self.dtype != Dtype::F32 || self.fp8.is_some() {
            return Err(OpError::shape(
                op,
                "this weight must be uploaded as a vector (f32)",
            ));
        }
        Ok(self)
    }

    /// The bf16 matrix this weight must be for `op` (an FP8 weight is not).
    pub(crate) fn matrix(&self, op: &'static str) -> OpResult<&CudaWeight> {
        if self.dtype != Dtype::Bf16 || self.fp8.is_some() {
            return Err(OpError::shape(
                op,
                format!(
                    "this weight must be a bf16 matrix, it is {} [{}][{}]",
                    self.format(),
                    self.rows,
                    self.cols
                ),
            ));
        }
        Ok(self)
    }

    /// A matrix in either form (bf16 or FP8), for the ops that take both.
    pub(crate) fn any_matrix(&self, op: &'static str) -> OpResult<&CudaWeight> {
        if self.dtype != Dtype::Bf16 {
            return Err(OpError::shape(
                op,
                "this weight must be uploaded as a matrix (bf16 or fp8)",
            ));
        }
        Ok(self)
    }
}

/// One full-attention layer's KV cache: a pool of `spec.blocks` blocks,
/// `k` and `v` bf16 `[blocks][kv_heads][KV_BLOCK_ROWS][head_dim]` (a block is
/// one 64-row key tile of every head; token `p` of a sequence is row
/// `p % 64` of block `table[p / 64]`, its table from the batch), allocated
/// up front, and the tokens each slot's sequence holds.
#[derive(Debug)]
pub struct CudaKvCache {
    pub spec: KvSpec,
    pub(crate) k: DeviceBuffer,
    pub(crate) v: DeviceBuffer,
    pub(crate) lens: Vec<usize>,
}

/// One Gated DeltaNet layer's state: conv state bf16 `[slots][kernel-1][conv_dim]`
/// (the last input rows, exact in the activation dtype) and recurrent state
/// f32 `[slots][v_heads][k_dim][v_dim]`.
#[derive(Debug)]
pub struct CudaGdnState {
    pub spec: GdnSpec,
    pub(crate) conv: DeviceBuffer,
    pub(crate) recurrent: DeviceBuffer,
    /// u32 `[slots][k_heads]`, zero between launches: the fused decode
    /// kernel's tickets (`kernels/gdn_decode.cu`).
    pub(crate) tickets: DeviceBuffer,
}

/// A fresh, uninitialised activation `[rows][cols]` of `dtype` (`op` names
/// the op in a size error).
pub(crate) fn new_act(
    dev: &CudaDevice,
    op: &'static str,
    rows: usize,
    cols: usize,
    dtype: Dtype,
) -> OpResult<CudaAct> {
    new_act_with_room(dev, op, rows, rows, cols, dtype)
}

/// [`new_act`] whose buffer holds `room` rows (at least `rows`): for a
/// kernel that writes padding rows past the act's own (the FP8 GEMM's
/// cuBLASLt rows, `ops::fp8::gemm::lt_rows`); readers see `rows`.
pub(crate) fn new_act_with_room(
    dev: &CudaDevice,
    op: &'static str,
    rows: usize,
    room: usize,
    cols: usize,
    dtype: Dtype,
) -> OpResult<CudaAct> {
    let bytes = mul(op, mul(op, rows.max(room), cols)?, dtype.size_bytes())?;
    Ok(CudaAct {
        buf: alloc(dev, bytes)?,
        rows,
        cols,
        dtype,
        fp8: None,
    })
}
