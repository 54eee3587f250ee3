//! Attention on a CUDA device. Prefill attention over plain tensors
//! ([`prefill`]): the fused kernel or the composed (cuBLAS + masked softmax)
//! route, with the semantics of `headroom_core::attention` and an
//! [`AttentionReport`] whose transient bytes come from the caching
//! allocator. The backend's attention over the KV block pool ([`cache`]):
//! one launch for the whole batch on Hopper ([`paged_raw`]), else the K/V
//! gathered and the per-sequence kernels; the fused decode prep ([`prep`]).
//! The kernels' sources are declared in [`sources`].

pub(crate) mod cache;
mod composed;
mod fused;
mod gathered;
mod paged;
mod paged_plan;
pub(crate) mod prep;
pub mod sources;
#[cfg(test)]
mod tests;

pub use composed::{softmax_entry, workspace_bytes as composed_workspace_bytes};
pub use fused::{
    fused_entry, fused_impl, fused_wgmma_entry, smem_bytes as fused_smem_bytes, split_plan,
    split_plan_for, splits_for, FusedImpl, SplitPlan, BLOCK_M as FUSED_BLOCK_M,
    BLOCK_N_MAX as FUSED_BLOCK_N_MAX, MAX_SPLITS, WGMMA_BLOCK_M,
};
pub(crate) use gathered::GATHER_LIMIT_BYTES;
pub use paged::{
    combine_form, paged_entry, paged_raw, paged_raw_with, pairs_entry, pairs_smem_bytes,
    CombineForm, PagedBuffers, PagedKernel, PagedOptions, PagedRun, PagedShape,
    ROWS_COMBINE_MAX_SPLITS,
};
pub use paged_plan::{paged_plan, ItemOrder, PagedPlan, WorkItem};

use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::CudaError;
use headroom_core::{AttentionError, AttentionReport, AttentionShape, Dtype, RouteRequest};

/// The four device tensors of a call (head-major, storage dtype `dtype`).
pub struct AttentionBuffers<'a> {
    pub q: &'a DeviceBuffer,
    pub k: &'a DeviceBuffer,
    pub v: &'a DeviceBuffer,
    pub out: &'a DeviceBuffer,
}

/// Device addresses of the four tensors of a call (head-major, each exactly
/// the shape's size): views into larger buffers, e.g. one KV head of a cache.
#[derive(Debug, Clone, Copy)]
pub struct RawBuffers {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub out: u64,
}

impl AttentionBuffers<'_> {
    fn raw(&self) -> RawBuffers {
        RawBuffers {
            q: self.q.ptr(),
            k: self.k.ptr(),
            v: self.v.ptr(),
            out: self.out.ptr(),
        }
    }
}

const LOG2_E: f32 = std::f32::consts::LOG2_E;

fn elems(buf: &DeviceBuffer, dtype: Dtype) -> usize {
    let es = dtype.size_bytes();
    if buf.len_bytes().is_multiple_of(es) {
        buf.len_bytes() / es
    } else {
        usize::MAX // never equal to a shape's count: reported as a length mismatch
    }
}

/// Runs one prefill attention call and returns what ran. The call is queued on
/// the device stream; the report's transient bytes are the allocator's peak
/// during the call minus what was allocated before it.
pub fn prefill(
    dev: &CudaDevice,
    shape: &AttentionShape,
    dtype: Dtype,
    route: RouteRequest,
    bufs: &AttentionBuffers<'_>,
) -> Result<AttentionReport, CudaError> {
    shape.validate_buffers(
        elems(bufs.q, dtype),
        elems(bufs.k, dtype),
        elems(bufs.v, dtype),
        elems(bufs.out, dtype),
    )?;
    // SAFETY: the buffers were just checked to hold exactly the shape's elements.
    unsafe {
        run(
            dev,
            shape,
            dtype,
            route,
            &bufs.raw(),
            shape.kv_len * shape.head_dim,
        )
    }
}

/// [`prefill`] over raw device addresses (no buffer-length check: the shape
/// itself is validated).
///
/// # Safety
/// `q` and `out` must address `shape.q_elems()` elements of `dtype`, `k` and
/// `v` `shape.kv_elems()`, all live device memory of `dev` until the queued
/// work has run.
pub unsafe fn prefill_raw(
    dev: &CudaDevice,
    shape: &AttentionShape,
    dtype: Dtype,
    route: RouteRequest,
    bufs: &RawBuffers,
) -> Result<AttentionReport, CudaError> {
    shape.validate()?;
    run(
        dev,
        shape,
        dtype,
        route,
        bufs,
        shape.kv_len * shape.head_dim,
    )
}

/// # Safety
/// As [`prefill_raw`]; the shape is valid.
unsafe fn run(
    dev: &CudaDevice,
    shape: &AttentionShape,
    dtype: Dtype,
    route: RouteRequest,
    bufs: &RawBuffers,
    kv_stride: usize,
) -> Result<AttentionReport, CudaError> {
    if dtype == Dtype::F32 {
        return Err(AttentionError::UnsupportedDtype {
            dtype,
            route: match route {
                RouteRequest::Fused => "fused",
                RouteRequest::Composed { .. } => "composed",
            },
            backend: "cuda",
        }
        .into());
    }
    dev.bind()?;
    let alloc = dev.allocator();
    let before = alloc.stats().active;
    alloc.reset_peak();
    let scale_log2 = shape.scale_or_default() * LOG2_E;
    let (route, query_block) = match route {
        RouteRequest::Fused => {
            fused::run(dev, shape, dtype, scale_log2, bufs, kv_stride)?;
            (headroom_core::Route::Fused, None)
        }
        RouteRequest::Composed { .. } if kv_stride != shape.kv_len * shape.head_dim => {
            return Err(CudaError::Shape {
                op: "attention",
                detail: "the composed route takes plain K/V tensors only".into(),
            });
        }
        RouteRequest::Composed { query_block } => {
            let qb = composed::run(dev, shape, dtype, query_block, scale_log2, bufs)?;
            (headroom_core::Route::Composed, Some(qb))
        }
    };
    Ok(AttentionReport {
        route,
        query_block,
        transient_bytes: alloc.stats().peak.saturating_sub(before),
    })
}
