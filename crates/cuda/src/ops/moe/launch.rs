//! The launch sequence of the routed experts, pass by pass over chunks of
//! [`CHUNK_TOKENS`](super::CHUNK_TOKENS) tokens: route (with the offsets, and
//! the scatter of a small pass), scatter,
//! gate+up GEMM, down GEMM, combine. Grids are sized from the plan, never
//! from the routing, so nothing waits for the device.

use super::{
    route_entry, validate_inner, GemmImpl, MoeLaunch, SharedEpilogue, FUSED_SCATTER_PAIRS, GEMM_BM,
    ROUTE_WARPS,
};

use crate::alloc::DeviceBuffer;
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
pub(super) enum Param {
    Ptr(u64),
    Int(i32),
}

/// A kernel's parameters in signature order.
pub(super) struct Params(Vec<Param>);

impl Params {
    pub(super) fn new() -> Self {
        Params(Vec::with_capacity(10))
    }
    pub(super) fn ptr(mut self, v: u64) -> Self {
        self.0.push(Param::Ptr(v));
        self
    }
    pub(super) fn int(mut self, v: usize) -> Self {
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

pub(super) fn launch(
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

/// [`routed_experts`](super::routed_experts) on the grouped GEMMs of `imp`
/// (`None`: [`GemmImpl::for_pass`] per pass), calling `mark` before each stage
/// of each pass (and with [`MoeStage::End`] after it). A Hopper-only `imp` on
/// a device that is not `sm_90a` is a [`CudaError::Shape`].
pub fn routed_experts_marked(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    imp: Option<GemmImpl>,
    mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
) -> Result<(), CudaError> {
    routed_experts_range(dev, l, (0, l.experts), imp, None, mark)
}

/// [`routed_experts_marked`] of the experts `first .. first + local` with the
/// shared expert's gated add folded into the combine (bf16 `s.out`).
pub fn routed_experts_shared_marked(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    local: (usize, usize),
    imp: Option<GemmImpl>,
    s: &SharedEpilogue<'_>,
    mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
) -> Result<(), CudaError> {
    routed_experts_range(dev, l, local, imp, Some(s), mark)
}

/// The routing's device buffers of one pass of `pairs` (token, k) pairs over
/// `experts` local experts.
pub(super) struct RouteBuffers {
    /// i32 `[pairs]`: each pair's local expert, -1 for another rank's.
    topk_expert: DeviceBuffer,
    /// f32 `[pairs]`: each pair's weight.
    topk_weight: DeviceBuffer,
    /// i32 `[pairs]`: the token of each slot (row in expert order).
    pub(super) slot_token: DeviceBuffer,
    /// i32 `[pairs]`: the slot of each pair, -1 for another rank's.
    pair_slot: DeviceBuffer,
    /// i32 `[experts + 1]`: per expert, then the routing's finished blocks;
    /// zero between passes.
    pub(super) counts: DeviceBuffer,
    /// i32 `[experts + 1]`: row offsets of each expert in expert order.
    pub(super) expert_offsets: DeviceBuffer,
    /// i32 `[experts + 1]`: row-tile offsets of each expert.
    pub(super) tile_offsets: DeviceBuffer,
}

impl RouteBuffers {
    fn alloc(dev: &CudaDevice, pairs: usize, experts: usize) -> Result<Self, CudaError> {
        Ok(RouteBuffers {
            topk_expert: dev.alloc(pairs * 4)?,
            topk_weight: dev.alloc(pairs * 4)?,
            slot_token: dev.alloc(pairs * 4)?,
            pair_slot: dev.alloc(pairs * 4)?,
            counts: dev.alloc((experts + 1) * 4)?,
            expert_offsets: dev.alloc((experts + 1) * 4)?,
            tile_offsets: dev.alloc((experts + 1) * 4)?,
        })
    }
}

/// The device buffers of one call, sized for its largest pass.
pub(super) struct Workspace {
    pub(super) r: RouteBuffers,
    pub(super) act: DeviceBuffer,
    pub(super) y: DeviceBuffer,
}

impl Workspace {
    /// Buffers for `pairs` (token, k) pairs over `experts` local experts of
    /// `intermediate` and `hidden` columns (sizes bounded by `validate`).
    pub(super) fn alloc(
        dev: &CudaDevice,
        pairs: usize,
        experts: usize,
        intermediate: usize,
        hidden: usize,
    ) -> Result<Workspace, CudaError> {
        Ok(Workspace {
            r: RouteBuffers::alloc(dev, pairs, experts)?,
            act: dev.alloc(pairs * intermediate * 2)?,
            y: dev.alloc(pairs * hidden * 2)?,
        })
    }
}

/// One pass: its first token and token count.
#[derive(Clone, Copy)]
pub(super) struct Pass {
    pub(super) t0: usize,
    pub(super) tokens: usize,
}

/// [`routed_experts_marked`] of the experts `first .. first + local` only
/// (`l.gate_up` / `l.down` hold just those; routing is over all `l.experts`);
/// with `shared`, the combine adds the gated shared expert and writes bf16.
pub(super) fn routed_experts_range(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    (first, local): (usize, usize),
    imp: Option<GemmImpl>,
    shared: Option<&SharedEpilogue<'_>>,
    mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
) -> Result<(), CudaError> {
    let plan = validate_inner(l, first, local, shared, 2)?;
    if let Some(imp) = imp.filter(|i| i.hopper_only() && dev.arch != "sm_90a") {
        return Err(CudaError::Shape {
            op: "moe routed experts",
            detail: format!("the {imp:?} grouped GEMMs need sm_90a, not {}", dev.arch),
        });
    }
    let ws = Workspace::alloc(dev, plan.chunk_pairs, local, l.intermediate, l.hidden)?;
    dev.fill_bytes(&ws.r.counts, 0)?;
    let mut t0 = 0;
    while t0 < l.tokens {
        let pass = Pass {
            t0,
            tokens: plan.chunk_tokens.min(l.tokens - t0),
        };
        let pairs = pass.tokens * l.top_k;
        let pass_imp = imp.unwrap_or_else(|| GemmImpl::for_pass(&dev.arch, pairs, l.experts));
        mark(MoeStage::Route)?;
        route(dev, l, (first, local), pass, &ws.r)?;
        grouped_gemms(dev, l, local, pass, pass_imp, &ws, mark)?;
        mark(MoeStage::Combine)?;
        combine(dev, l, pass, shared, &ws)?;
        mark(MoeStage::End)?;
        t0 += pass.tokens;
    }
    Ok(())
}

/// Routing (whose last block writes the per-expert offsets, and scatters a
/// pass of at most [`FUSED_SCATTER_PAIRS`] pairs) and the scatter to expert
/// order of one pass.
/// `r.counts` must be zero (the memset of the call; each pass's scatter
/// leaves them zero again).
pub(super) fn route(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    (first, local): (usize, usize),
    pass: Pass,
    r: &RouteBuffers,
) -> Result<(), CudaError> {
    let (tc, k) = (pass.tokens, l.top_k);
    let pairs = tc * k;
    let logits = l.router_logits.ptr() + (pass.t0 * l.experts * 4) as u64;
    let params = Params::new()
        .ptr(logits)
        .int(tc)
        .int(l.experts)
        .int(k)
        .int(l.renormalise as usize)
        .ptr(r.topk_expert.ptr())
        .ptr(r.topk_weight.ptr())
        .ptr(r.counts.ptr())
        .int(first)
        .int(local);
    // A small pass is scattered by the routing's last block.
    let fused = pairs <= FUSED_SCATTER_PAIRS;
    let (st, ps) = if fused {
        (r.slot_token.ptr(), r.pair_slot.ptr())
    } else {
        (0, 0)
    };
    launch(
        dev,
        route_entry(l.experts),
        tc.div_ceil(ROUTE_WARPS),
        (ROUTE_WARPS * 32) as u32,
        0,
        params
            .ptr(r.expert_offsets.ptr())
            .ptr(r.tile_offsets.ptr())
            .ptr(st)
            .ptr(ps),
    )?;
    if fused {
        return Ok(());
    }
    launch(
        dev,
        "moe_scatter",
        pairs.div_ceil(ELEMENTWISE_THREADS as usize),
        ELEMENTWISE_THREADS,
        0,
        Params::new()
            .ptr(r.topk_expert.ptr())
            .int(pairs)
            .int(k)
            .ptr(r.expert_offsets.ptr())
            .ptr(r.counts.ptr())
            .ptr(r.slot_token.ptr())
            .ptr(r.pair_slot.ptr()),
    )
}

/// The gate+up and down grouped GEMMs of one pass on `imp`'s kernels.
fn grouped_gemms(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    local: usize,
    pass: Pass,
    imp: GemmImpl,
    ws: &Workspace,
    mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
) -> Result<(), CudaError> {
    let (h, i) = (l.hidden, l.intermediate);
    let pairs = pass.tokens * l.top_k;
    let max_row_tiles = pairs.div_ceil(GEMM_BM) + local.min(pairs);
    let x = l.x.ptr() + (pass.t0 * h * 2) as u64;
    let (gate_up, down) = (imp.gate_up(i), imp.down(h));

    mark(MoeStage::GateUp)?;
    launch(
        dev,
        gate_up.entry,
        gate_up.grid(max_row_tiles, i, dev.sm_count),
        gate_up.threads as u32,
        gate_up.smem,
        Params::new()
            .ptr(x)
            .ptr(ws.r.slot_token.ptr())
            .ptr(l.gate_up.ptr())
            .ptr(ws.act.ptr())
            .ptr(ws.r.expert_offsets.ptr())
            .ptr(ws.r.tile_offsets.ptr())
            .int(local)
            .int(h)
            .int(i),
    )?;

    mark(MoeStage::Down)?;
    launch(
        dev,
        down.entry,
        down.grid(max_row_tiles, h, dev.sm_count),
        down.threads as u32,
        down.smem,
        Params::new()
            .ptr(ws.act.ptr())
            .ptr(l.down.ptr())
            .ptr(ws.y.ptr())
            .ptr(ws.r.expert_offsets.ptr())
            .ptr(ws.r.tile_offsets.ptr())
            .int(local)
            .int(i)
            .int(h),
    )
}

/// The weighted combine of one pass back to token order: f32 `l.out`, or
/// with `shared` the gated shared expert added and bf16 `shared.out`.
pub(super) fn combine(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    pass: Pass,
    shared: Option<&SharedEpilogue<'_>>,
    ws: &Workspace,
) -> Result<(), CudaError> {
    let (t0, tc, h) = (pass.t0, pass.tokens, l.hidden);
    let params = Params::new()
        .ptr(ws.y.ptr())
        .ptr(ws.r.topk_weight.ptr())
        .ptr(ws.r.pair_slot.ptr())
        .int(l.top_k)
        .int(h);
    match shared {
        None => launch(
            dev,
            "moe_combine",
            tc,
            ELEMENTWISE_THREADS,
            0,
            params.ptr(l.out.ptr() + (t0 * h * 4) as u64),
        ),
        Some(s) => {
            let row = (t0 * h * 2) as u64;
            launch(
                dev,
                "moe_combine_shared",
                tc,
                ELEMENTWISE_THREADS,
                0,
                params
                    .ptr(l.x.ptr() + row)
                    .ptr(s.shared_gate.ptr())
                    .ptr(s.shared.ptr() + row)
                    .ptr(s.out.ptr() + row),
            )
        }
    }
}
