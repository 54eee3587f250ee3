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
}

impl CudaAct {
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

/// An uploaded weight: a matrix `[rows][cols]` in bf16, or a vector
/// (`rows == 1`) in f32.
#[derive(Debug)]
pub struct CudaWeight {
    pub(crate) buf: DeviceBuffer,
    pub rows: usize,
    pub cols: usize,
    pub dtype: Dtype,
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

    /// The f32 vector this weight must be for `op`.
    pub(crate) fn vector(&self, op: &'static str) -> OpResult<&CudaWeight> {
        if self.dtype != Dtype::F32 {
            return Err(OpError::shape(
                op,
                "this weight must be uploaded as a vector (f32)",
            ));
        }
        Ok(self)
    }

    /// The bf16 matrix this weight must be for `op`.
    pub(crate) fn matrix(&self, op: &'static str) -> OpResult<&CudaWeight> {
        if self.dtype != Dtype::Bf16 {
            return Err(OpError::shape(
                op,
                "this weight must be uploaded as a matrix (bf16)",
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
    let bytes = mul(op, mul(op, rows, cols)?, dtype.size_bytes())?;
    Ok(CudaAct {
        buf: alloc(dev, bytes)?,
        rows,
        cols,
        dtype,
    })
}
