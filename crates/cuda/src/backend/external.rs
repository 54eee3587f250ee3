//! The two kernels of `crate::ops` the backend calls: the gated delta rule
//! (`ops::gdn`) and the grouped-GEMM routed experts (`ops::moe`), each with
//! its shape-general fallback (`ops::fallback`).

use super::launch::dev_err;
use crate::device::CudaDevice;
use headroom_core::ops::OpResult;

/// The key and value head dim the gated delta rule kernels are built for.
pub(crate) const GDN_HEAD_DIM: usize = crate::ops::gdn::SUPPORTED_DIM;

pub(crate) use crate::ops::gdn::GdnLaunch as GdnCall;
pub(crate) use crate::ops::moe::MoeLaunch as MoeCall;

/// The chunked (prefill) or recurrent (decode) gated delta rule of
/// `crate::ops::gdn` for its head dim, the shape-general fallback otherwise.
pub(crate) fn gated_delta_rule(dev: &CudaDevice, call: &GdnCall<'_>) -> OpResult<()> {
    if call.k_dim == GDN_HEAD_DIM && call.v_dim == GDN_HEAD_DIM {
        crate::ops::gdn::gated_delta_rule(dev, call).map_err(dev_err)
    } else {
        crate::ops::fallback::gated_delta_rule(dev, call)
    }
}

/// Whether the grouped-GEMM experts kernel takes this shape (its tile multiples).
pub(crate) fn moe_fast_path(hidden: usize, intermediate: usize) -> bool {
    use crate::ops::moe::{GEMM_BK, GEMM_BN};
    hidden.is_multiple_of(GEMM_BN)
        && hidden.is_multiple_of(GEMM_BK)
        && intermediate.is_multiple_of(GEMM_BN / 2)
        && intermediate.is_multiple_of(GEMM_BK)
}

/// The grouped-GEMM routed experts of `crate::ops::moe` where the shape fits
/// its tiles, the shape-general fallback otherwise.
/// `local`: `(first, count)` of the experts `call.gate_up` / `call.down` hold.
pub(crate) fn routed_experts(
    dev: &CudaDevice,
    call: &MoeCall<'_>,
    local: (usize, usize),
) -> OpResult<()> {
    if moe_fast_path(call.hidden, call.intermediate) {
        crate::ops::moe::routed_experts_local(dev, call, local.0, local.1).map_err(dev_err)
    } else {
        crate::ops::fallback::routed_experts(dev, call, local)
    }
}
