//! The device buffers of one routed-experts call: the routing's
//! ([`RouteBuffers`]: each pair's expert, weight and slot, the per-expert
//! counts and offsets, the warp-specialised GEMMs' unit counters) and the
//! pass's activations and outputs ([`Workspace`]), sized for its largest pass.

use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::ops::moe::{MoeLaunch, MoePlan, COUNT_STRIDE};
use crate::CudaError;

/// The routing's device buffers of one pass of `pairs` (token, k) pairs over
/// `experts` local experts.
pub(in crate::ops::moe) struct RouteBuffers {
    /// i32 `[pairs]`: each pair's local expert, -1 for another rank's.
    pub(in crate::ops::moe) topk_expert: DeviceBuffer,
    /// f32 `[pairs]`: each pair's weight.
    pub(in crate::ops::moe) topk_weight: DeviceBuffer,
    /// i32 `[pairs]`: the token of each slot (row in expert order).
    pub(in crate::ops::moe) slot_token: DeviceBuffer,
    /// i32 `[pairs]`: the slot of each pair, -1 for another rank's.
    pub(in crate::ops::moe) pair_slot: DeviceBuffer,
    /// i32 `[(experts + 1) · COUNT_STRIDE + SCHED_INTS]`: per expert (its
    /// count at `e · COUNT_STRIDE`, one L2 line each), then the routing's
    /// finished blocks (zero between passes), then the warp-specialised
    /// GEMMs' unit counters ([`RouteBuffers::sched`]; zero between launches).
    /// Zeroed once a call.
    pub(in crate::ops::moe) counts: DeviceBuffer,
    /// Where the unit counters start in `counts`.
    pub(in crate::ops::moe) sched: u64,
    /// i32 `[experts + 1]`: row offsets of each expert in expert order.
    pub(in crate::ops::moe) expert_offsets: DeviceBuffer,
    /// i32 `[experts + 1]`: row-tile offsets of each expert.
    pub(in crate::ops::moe) tile_offsets: DeviceBuffer,
}

/// The ints after the routing's counts: two unit counters for each of the
/// two warp-specialised GEMMs.
pub(in crate::ops::moe) const SCHED_INTS: usize = 4;

impl RouteBuffers {
    pub(in crate::ops::moe) fn alloc(
        dev: &CudaDevice,
        pairs: usize,
        experts: usize,
    ) -> Result<Self, CudaError> {
        let counted = (experts + 1) * COUNT_STRIDE;
        let counts = dev.alloc((counted + SCHED_INTS) * 4)?;
        Ok(RouteBuffers {
            topk_expert: dev.alloc(pairs * 4)?,
            topk_weight: dev.alloc(pairs * 4)?,
            slot_token: dev.alloc(pairs * 4)?,
            pair_slot: dev.alloc(pairs * 4)?,
            sched: counts.ptr() + (counted * 4) as u64,
            counts,
            expert_offsets: dev.alloc((experts + 1) * 4)?,
            tile_offsets: dev.alloc((experts + 1) * 4)?,
        })
    }
}

/// The device buffers of one call, sized for its largest pass.
pub(in crate::ops::moe) struct Workspace {
    pub(in crate::ops::moe) r: RouteBuffers,
    pub(in crate::ops::moe) act: DeviceBuffer,
    pub(in crate::ops::moe) y: DeviceBuffer,
}

impl Workspace {
    /// Buffers for the largest pass of `plan` (`plan.chunk_pairs` (token, k)
    /// pairs) over `local` local experts of `l`'s `intermediate` and `hidden`
    /// columns (sizes bounded by `validate`).
    pub(in crate::ops::moe) fn alloc(
        dev: &CudaDevice,
        l: &MoeLaunch<'_>,
        plan: &MoePlan,
        local: usize,
    ) -> Result<Workspace, CudaError> {
        let pairs = plan.chunk_pairs;
        Ok(Workspace {
            r: RouteBuffers::alloc(dev, pairs, local)?,
            act: dev.alloc(pairs * l.intermediate * 2)?,
            y: dev.alloc(pairs * l.hidden * 2)?,
        })
    }
}
