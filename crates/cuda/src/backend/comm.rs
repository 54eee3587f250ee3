//! The collectives of a tensor-parallel rank (`crate::nccl`) and the partial
//! sums they reduce: no-ops outside a group; output buffers allocated here
//! from the stream-ordered allocator like every other op's.
//!
//! Inside a group a row-parallel projection's partial (`linear_partial`, and
//! `moe_partial` in [`super::moe_partial`]) stays **f32**, the reduce sums
//! f32, and the total is rounded to bf16 once (`round_f32_to_bf16`,
//! `kernels/ops_tp.cu`): the rounding one unsplit GEMM does, so TP = N
//! differs from TP = 1 only by the f32 summation order. Rounding each
//! rank's partial to bf16 before a bf16 all-reduce instead rounds twice per
//! element, which on MoE models flips near-tied top-k routes.
//!
//! Large partials are reduced as reduce-scatter (f32) → round the rank's
//! slice → all-gather (bf16): 1.5× the bytes of a bf16 all-reduce instead of
//! 2× for an f32 one, and each element rounded by exactly one rank. Small
//! ones (decode rows) take one f32 all-reduce and a local rounding: one
//! collective's latency instead of two.

use crate::device::CudaDevice;
use crate::launch::{alloc, dev_err, launch, mul, stride_grid, Args};
use crate::nccl::NcclComm;
use crate::ops::linear::{linear, linear_blas};
use crate::tensor::{new_act, CudaAct, CudaWeight};
use headroom_core::ops::{OpError, OpResult};
use headroom_core::Dtype;

/// Elements from which an f32 partial is reduced by reduce-scatter +
/// all-gather (4 MiB of f32: where NCCL is bandwidth-bound on NVLink).
pub(crate) const SCATTER_MIN_ELEMS: usize = 1 << 20;

/// The dtype of a row-parallel partial: f32 inside a group, the activation
/// dtype (bf16, no extra work) outside one.
pub(crate) fn partial_dtype(comm: Option<&NcclComm>) -> Dtype {
    match comm {
        Some(_) => Dtype::F32,
        None => Dtype::Bf16,
    }
}

/// `y = x · Wᵀ` as this rank's partial of a row-parallel projection.
pub(crate) fn linear_partial(
    dev: &CudaDevice,
    comm: Option<&NcclComm>,
    x: &CudaAct,
    w: &CudaWeight,
) -> OpResult<CudaAct> {
    match comm {
        // Inside a group the f32 partial stays on cuBLAS (`linear_f32` below
        // is the same call, for the tests that split a projection by hand).
        Some(_) => linear_blas(dev, x, w, partial_dtype(comm)),
        None => linear(dev, x, w, Dtype::Bf16),
    }
}

/// `n` f32 values at `src` rounded to bf16 at `dst` (both fresh buffers:
/// 16-byte aligned, as the kernel's vector accesses need).
fn round_into(dev: &CudaDevice, src: u64, dst: u64, n: usize) -> OpResult<()> {
    if n == 0 {
        return Ok(());
    }
    let n64 = i64::try_from(n).map_err(|_| OpError::shape("round_f32_to_bf16", "too long"))?;
    let args = Args::new().ptr(src).ptr(dst).i64(n64);
    // SAFETY: src holds n f32, dst n bf16 (the callers' buffers).
    unsafe {
        launch(
            dev,
            "round_f32_to_bf16",
            stride_grid(n.div_ceil(4), 256),
            256,
            args,
        )
    }
}

/// An f32 activation rounded once to bf16 (a bf16 one is refused: it has
/// been rounded already).
pub(crate) fn round_to_bf16(dev: &CudaDevice, x: &CudaAct) -> OpResult<CudaAct> {
    if x.dtype != Dtype::F32 {
        return Err(OpError::shape(
            "round_to_bf16",
            format!("expects an f32 activation, got {}", x.dtype),
        ));
    }
    let out = new_act(dev, "round_to_bf16", x.rows, x.cols, Dtype::Bf16)?;
    round_into(dev, x.ptr(), out.ptr(), x.elems())?;
    Ok(out)
}

/// In place, the sum of `x` over the group. An f32 partial comes back bf16,
/// rounded once after the sum (outside a group: just rounded).
pub(crate) fn all_reduce_sum(
    dev: &CudaDevice,
    comm: Option<&NcclComm>,
    x: &mut CudaAct,
) -> OpResult<()> {
    let wide = x.dtype == Dtype::F32;
    let c = match comm {
        Some(c) if !wide => return c.all_reduce_sum(dev, x).map_err(dev_err),
        Some(c) => c,
        None if wide => {
            *x = round_to_bf16(dev, x)?;
            return Ok(());
        }
        None => return Ok(()),
    };
    let n = x.elems();
    if n >= SCATTER_MIN_ELEMS && n.is_multiple_of(c.world) {
        let count = n / c.world;
        let part = alloc(dev, mul("all_reduce_sum", count, 4)?)?;
        let part16 = alloc(dev, mul("all_reduce_sum", count, 2)?)?;
        let out = new_act(dev, "all_reduce_sum", x.rows, x.cols, Dtype::Bf16)?;
        // SAFETY: x holds world · count f32, part count f32, part16 count
        // bf16, out world · count bf16, all on this rank's device.
        unsafe { c.reduce_scatter_sum(dev, x.ptr(), part.ptr(), count, Dtype::F32) }
            .map_err(dev_err)?;
        round_into(dev, part.ptr(), part16.ptr(), count)?;
        unsafe { c.all_gather_flat(dev, part16.ptr(), out.ptr(), count, Dtype::Bf16) }
            .map_err(dev_err)?;
        *x = out;
    } else {
        c.all_reduce_sum(dev, x).map_err(dev_err)?;
        *x = round_to_bf16(dev, x)?;
    }
    Ok(())
}

pub(crate) fn all_gather_cols(
    dev: &CudaDevice,
    comm: Option<&NcclComm>,
    x: CudaAct,
) -> OpResult<CudaAct> {
    let Some(c) = comm else {
        return Ok(x);
    };
    let cols = x
        .cols
        .checked_mul(c.world)
        .ok_or_else(|| OpError::shape("all_gather_cols", "columns overflow"))?;
    let out = new_act(dev, "all_gather_cols", x.rows, cols, x.dtype)?;
    // One row: rank-major is already row-major. Several: gather, then place.
    let staging = if x.rows > 1 {
        Some(new_act(dev, "all_gather_cols", x.rows, cols, x.dtype)?)
    } else {
        None
    };
    c.all_gather_cols(dev, &x, &out, staging.as_ref())
        .map_err(dev_err)?;
    Ok(out)
}

impl super::CudaBackend {
    /// `y = x · Wᵀ` with an f32 `y`: what `linear_partial` returns inside a
    /// group (on one GPU, for the tests that split a projection by hand).
    pub fn linear_f32(&self, x: &CudaAct, w: &CudaWeight) -> OpResult<CudaAct> {
        linear_blas(&self.dev, x, w, Dtype::F32)
    }

    /// An f32 activation rounded once to bf16: the last step of the
    /// all-reduce of an f32 partial.
    pub fn round_to_bf16(&self, x: &CudaAct) -> OpResult<CudaAct> {
        round_to_bf16(&self.dev, x)
    }

    /// An f32 activation from host values (kept f32, unlike `act_from_f32`'s bf16).
    pub fn act_from_f32_wide(&self, rows: usize, cols: usize, data: &[f32]) -> OpResult<CudaAct> {
        if rows.checked_mul(cols) != Some(data.len()) {
            return Err(OpError::shape(
                "act_from_f32_wide",
                format!("{} values for [{rows}][{cols}]", data.len()),
            ));
        }
        let buf = if data.is_empty() {
            alloc(&self.dev, 0)?
        } else {
            self.dev.upload(data).map_err(dev_err)?
        };
        Ok(CudaAct {
            buf,
            rows,
            cols,
            dtype: Dtype::F32,
            fp8: None,
        })
    }
}
