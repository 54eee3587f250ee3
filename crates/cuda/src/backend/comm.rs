//! The collectives of a tensor-parallel rank (`crate::nccl`): no-ops
//! outside a group; output buffers allocated here from the stream-ordered
//! allocator like every other op's.

use super::launch::dev_err;
use super::memory::new_act;
use super::types::CudaAct;
use crate::device::CudaDevice;
use crate::nccl::NcclComm;
use headroom_core::ops::{OpError, OpResult};

pub(crate) fn all_reduce_sum(
    dev: &CudaDevice,
    comm: Option<&NcclComm>,
    x: &mut CudaAct,
) -> OpResult<()> {
    match comm {
        Some(c) => c.all_reduce_sum(dev, x).map_err(dev_err),
        None => Ok(()),
    }
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
