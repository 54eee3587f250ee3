//! The launch sequence of the routed experts, pass by pass over chunks of
//! [`CHUNK_TOKENS`](super::CHUNK_TOKENS) tokens: route, offsets, scatter,
//! gate+up GEMM, down GEMM, combine. Grids are sized from the plan, never
//! from the routing, so nothing waits for the device.

use super::{
    validate_inner, GemmImpl, MoeLaunch, SharedEpilogue, GEMM_BM, MAX_EXPERTS, ROUTE_WARPS,
};
use crate::device::CudaDevice;
use crate::CudaError;
use std::ffi::c_void;

/// Threads of the scatter and combine kernels (`SCATTER_THREADS`, `COMBINE_THREADS`).
const ELEMENTWISE_THREADS: u32 = 256;

/// A point in the launch sequence, given to the caller's mark before the
/// stage's launches (and `End` after the last): a bench records events there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeStage {
    /// Routing, offsets and scatter.
    Route,
    GateUp,
    Down,
    Combine,
    /// After the pass's last launch.
    End,
}

/// One kernel parameter by value.
enum Param {
    Ptr(u64),
    Int(i32),
}

/// A kernel's parameters in signature order.
struct Params(Vec<Param>);

impl Params {
    fn new() -> Self {
        Params(Vec::with_capacity(10))
    }
    fn ptr(mut self, v: u64) -> Self {
        self.0.push(Param::Ptr(v));
        self
    }
    fn int(mut self, v: usize) -> Self {
        // Every value is bounded to the int range by `validate`.
        self.0.push(Param::Int(v as i32));
        self
    }
    /// Pointers to each value, as the driver takes them (valid while `self` is).
    fn raw(&mut self) -> Vec<*mut c_void> {
        self.0
            .iter_mut()
            .map(|p| match p {
                Param::Ptr(v) => v as *mut u64 as *mut c_void,
                Param::Int(v) => v as *mut i32 as *mut c_void,
            })
            .collect()
    }
}

fn launch(
    dev: &CudaDevice,
    entry: &'static str,
    grid: usize,
    threads: u32,
    smem: usize,
    mut params: Params,
) -> Result<(), CudaError> {
    let f = dev.function(entry)?;
    if smem > 48 * 1024 {
        dev.set_dynamic_smem(f, smem)?;
    }
    let mut raw = params.raw();
    // SAFETY: `validate` checked every buffer against the sizes the kernels
    // touch, the workspace was allocated from the same plan, and the
    // parameters follow the kernels' signatures in order and type.
    unsafe { dev.launch(f, (grid as u32, 1, 1), (threads, 1, 1), smem, &mut raw) }
}

/// [`routed_experts`](super::routed_experts) on the grouped GEMMs of `imp`,
/// calling `mark` before each stage of each pass (and with [`MoeStage::End`]
/// after it). Wgmma on a device that is not `sm_90a` is a [`CudaError::Shape`].
pub fn routed_experts_marked(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    imp: GemmImpl,
    mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
) -> Result<(), CudaError> {
    routed_experts_range(dev, l, (0, l.experts), imp, None, mark)
}

/// [`routed_experts_marked`] of the experts `first .. first + local` (their
/// `l.gate_up` / `l.down`; routing over all `l.experts`).
pub fn routed_experts_local_marked(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    local: (usize, usize),
    imp: GemmImpl,
    mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
) -> Result<(), CudaError> {
    routed_experts_range(dev, l, local, imp, None, mark)
}

/// [`routed_experts_marked`] of the experts `first .. first + local` with the
/// shared expert's gated add folded into the combine (bf16 `s.out`).
pub fn routed_experts_shared_marked(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    local: (usize, usize),
    imp: GemmImpl,
    s: &SharedEpilogue<'_>,
    mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
) -> Result<(), CudaError> {
    routed_experts_range(dev, l, local, imp, Some(s), mark)
}

/// [`routed_experts_marked`] of the experts `first .. first + local` only
/// (`l.gate_up` / `l.down` hold just those; routing is over all `l.experts`);
/// with `shared`, the combine adds the gated shared expert and writes bf16.
pub(super) fn routed_experts_range(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    (first, local): (usize, usize),
    imp: GemmImpl,
    shared: Option<&SharedEpilogue<'_>>,
    mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
) -> Result<(), CudaError> {
    let plan = validate_inner(l, first, local, shared)?;
    if imp.hopper_only() && dev.arch != "sm_90a" {
        return Err(CudaError::Shape {
            op: "moe routed experts",
            detail: format!("the wgmma grouped GEMMs need sm_90a, not {}", dev.arch),
        });
    }
    // e: the experts this call computes; routing is over all l.experts.
    let (h, e, k, i) = (l.hidden, local, l.top_k, l.intermediate);
    let pairs_max = plan.chunk_pairs;
    let topk_expert = dev.alloc(pairs_max * 4)?;
    let topk_weight = dev.alloc(pairs_max * 4)?;
    let slot_token = dev.alloc(pairs_max * 4)?;
    let pair_slot = dev.alloc(pairs_max * 4)?;
    let counts = dev.alloc(e * 4)?;
    let expert_offsets = dev.alloc((e + 1) * 4)?;
    let tile_offsets = dev.alloc((e + 1) * 4)?;
    let act = dev.alloc(pairs_max * i * 2)?;
    let y = dev.alloc(pairs_max * h * 2)?;

    let mut t0 = 0;
    while t0 < l.tokens {
        let tc = plan.chunk_tokens.min(l.tokens - t0);
        let pairs = tc * k;
        let pass_imp = imp.for_pass(pairs);
        let (gate_up_kernel, down_kernel) =
            (pass_imp.gate_up(l.intermediate), pass_imp.down(l.hidden));
        let max_row_tiles = pairs.div_ceil(GEMM_BM) + e.min(pairs);
        let x = l.x.ptr() + (t0 * h * 2) as u64;
        let logits = l.router_logits.ptr() + (t0 * l.experts * 4) as u64;

        mark(MoeStage::Route)?;
        dev.fill_bytes(&counts, 0)?;
        launch(
            dev,
            "moe_route",
            tc.div_ceil(ROUTE_WARPS),
            (ROUTE_WARPS * 32) as u32,
            ROUTE_WARPS * l.experts * 4,
            Params::new()
                .ptr(logits)
                .int(tc)
                .int(l.experts)
                .int(k)
                .int(l.renormalise as usize)
                .ptr(topk_expert.ptr())
                .ptr(topk_weight.ptr())
                .ptr(counts.ptr())
                .int(first)
                .int(local),
        )?;
        launch(
            dev,
            "moe_offsets",
            1,
            MAX_EXPERTS as u32,
            0,
            Params::new()
                .ptr(counts.ptr())
                .int(e)
                .ptr(expert_offsets.ptr())
                .ptr(tile_offsets.ptr()),
        )?;
        launch(
            dev,
            "moe_scatter",
            pairs.div_ceil(ELEMENTWISE_THREADS as usize),
            ELEMENTWISE_THREADS,
            0,
            Params::new()
                .ptr(topk_expert.ptr())
                .int(pairs)
                .int(k)
                .ptr(expert_offsets.ptr())
                .ptr(counts.ptr())
                .ptr(slot_token.ptr())
                .ptr(pair_slot.ptr()),
        )?;

        mark(MoeStage::GateUp)?;
        launch(
            dev,
            gate_up_kernel.entry,
            gate_up_kernel.grid(max_row_tiles, i, dev.sm_count),
            gate_up_kernel.threads as u32,
            gate_up_kernel.smem,
            Params::new()
                .ptr(x)
                .ptr(slot_token.ptr())
                .ptr(l.gate_up.ptr())
                .ptr(act.ptr())
                .ptr(expert_offsets.ptr())
                .ptr(tile_offsets.ptr())
                .int(e)
                .int(h)
                .int(i),
        )?;

        mark(MoeStage::Down)?;
        launch(
            dev,
            down_kernel.entry,
            down_kernel.grid(max_row_tiles, h, dev.sm_count),
            down_kernel.threads as u32,
            down_kernel.smem,
            Params::new()
                .ptr(act.ptr())
                .ptr(l.down.ptr())
                .ptr(y.ptr())
                .ptr(expert_offsets.ptr())
                .ptr(tile_offsets.ptr())
                .int(e)
                .int(i)
                .int(h),
        )?;

        mark(MoeStage::Combine)?;
        let combine = Params::new()
            .ptr(y.ptr())
            .ptr(topk_weight.ptr())
            .ptr(pair_slot.ptr())
            .int(k)
            .int(h);
        match shared {
            None => launch(
                dev,
                "moe_combine",
                tc,
                ELEMENTWISE_THREADS,
                0,
                combine.ptr(l.out.ptr() + (t0 * h * 4) as u64),
            )?,
            Some(s) => {
                let row = (t0 * h * 2) as u64;
                launch(
                    dev,
                    "moe_combine_shared",
                    tc,
                    ELEMENTWISE_THREADS,
                    0,
                    combine
                        .ptr(x)
                        .ptr(s.shared_gate.ptr())
                        .ptr(s.shared.ptr() + row)
                        .ptr(s.out.ptr() + row),
                )?
            }
        }
        mark(MoeStage::End)?;
        t0 += tc;
    }
    Ok(())
}
