//! The launch sequence of the routed experts, pass by pass over chunks of
//! [`CHUNK_TOKENS`](super::CHUNK_TOKENS) tokens: route (with the offsets, and
//! the scatter of a small pass), scatter,
//! gate+up GEMM, down GEMM, combine. Grids are sized from the plan, never
//! from the routing, so nothing waits for the device. The pass loop
//! ([`MoePlan::passes`], [`run_passes`]) is the FP8 path's too, with its own
//! grouped GEMMs.

use super::{
    max_row_tiles, route_entry, validate_inner, GemmImpl, GemmKernel, MoeLaunch, MoePlan,
    SharedEpilogue, FUSED_SCATTER_PAIRS, OP, ROUTE_WARPS, WS_BN,
};

use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::tensor_map::{Sw128Map, TensorMap};
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
    /// A TMA tensor map (`const __grid_constant__`), boxed: the driver
    /// copies its 128 bytes from this address at the launch.
    Map(Box<TensorMap>),
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
    pub(super) fn map(mut self, m: TensorMap) -> Self {
        self.0.push(Param::Map(Box::new(m)));
        self
    }
    /// The tail every grouped GEMM's signature shares: the routing's
    /// `expert_offsets` and `tile_offsets` of `r`, the `local` experts and
    /// the GEMM's K and N (hidden and intermediate, or the reverse).
    pub(super) fn tile_list(self, r: &RouteBuffers, local: usize, k: usize, n: usize) -> Self {
        self.ptr(r.expert_offsets.ptr())
            .ptr(r.tile_offsets.ptr())
            .int(local)
            .int(k)
            .int(n)
    }
    /// Pointers to each value, as the driver takes them (valid while `self` is).
    fn raw(&mut self) -> Vec<*mut c_void> {
        self.0
            .iter_mut()
            .map(|p| match p {
                Param::Ptr(v) => v as *mut u64 as *mut c_void,
                Param::Int(v) => v as *mut i32 as *mut c_void,
                Param::Map(m) => &mut **m as *mut TensorMap as *mut c_void,
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
    counts: DeviceBuffer,
    /// i32 `[experts + 1]`: row offsets of each expert in expert order.
    expert_offsets: DeviceBuffer,
    /// i32 `[experts + 1]`: row-tile offsets of each expert.
    tile_offsets: DeviceBuffer,
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
    /// Buffers for the largest pass of `plan` (`plan.chunk_pairs` (token, k)
    /// pairs) over `local` local experts of `l`'s `intermediate` and `hidden`
    /// columns (sizes bounded by `validate`).
    pub(super) fn alloc(
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

/// One pass: its first token and token count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pass {
    pub(super) t0: usize,
    pub(super) tokens: usize,
}

impl Pass {
    /// The pass's (token, k) pairs.
    pub(super) fn pairs(self, top_k: usize) -> usize {
        self.tokens * top_k
    }

    /// Upper bound of the pass's row tiles over `local` experts (its grids
    /// are sized on it): [`max_row_tiles`] of its pairs.
    pub(super) fn max_row_tiles(self, top_k: usize, local: usize) -> usize {
        max_row_tiles(self.pairs(top_k), local)
    }
}

impl MoePlan {
    /// The passes of a call of `tokens` tokens, in launch order: from token
    /// 0, contiguous, `chunk_tokens` each but the last (the rest, never
    /// empty); none for 0 tokens (which [`validate`](super::validate)
    /// refuses). A plan with `chunk_tokens` 0 (never validated: it is at
    /// least 1 when `tokens` is) panics.
    pub(super) fn passes(&self, tokens: usize) -> impl Iterator<Item = Pass> {
        let chunk = self.chunk_tokens;
        (0..tokens).step_by(chunk).map(move |t0| Pass {
            t0,
            tokens: chunk.min(tokens - t0),
        })
    }
}

/// The pass loop of one call on the workspace `ws` (zeroing its routing
/// counts first): for each of `plan`'s passes, `mark(Route)`, the routing,
/// `gemms(pass, mark)` (the format's grouped GEMMs, which mark
/// [`MoeStage::GateUp`] and [`MoeStage::Down`] themselves), `mark(Combine)`,
/// the combine, `mark(End)`. The device's errors and the marks' become `E`
/// through `err`; the first error ends the call.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_passes<E>(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    (first, local): (usize, usize),
    plan: &MoePlan,
    shared: Option<&SharedEpilogue<'_>>,
    ws: &Workspace,
    mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
    err: impl Fn(CudaError) -> E,
    mut gemms: impl FnMut(Pass, &mut dyn FnMut(MoeStage) -> Result<(), CudaError>) -> Result<(), E>,
) -> Result<(), E> {
    dev.fill_bytes(&ws.r.counts, 0).map_err(&err)?;
    for pass in plan.passes(l.tokens) {
        mark(MoeStage::Route).map_err(&err)?;
        route(dev, l, (first, local), pass, &ws.r).map_err(&err)?;
        gemms(pass, mark)?;
        mark(MoeStage::Combine).map_err(&err)?;
        combine(dev, l, pass, shared, ws).map_err(&err)?;
        mark(MoeStage::End).map_err(&err)?;
    }
    Ok(())
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
            op: OP,
            detail: format!("the {imp:?} grouped GEMMs need sm_90a, not {}", dev.arch),
        });
    }
    let ws = Workspace::alloc(dev, l, &plan, local)?;
    run_passes(
        dev,
        l,
        (first, local),
        &plan,
        shared,
        &ws,
        mark,
        |e| e,
        |pass, mark| {
            let pairs = pass.pairs(l.top_k);
            let pass_imp = imp
                .unwrap_or_else(|| GemmImpl::for_pass(&dev.arch, pairs, l.experts))
                .for_experts(local);
            grouped_gemms(dev, l, local, pass, pass_imp, &ws, mark)
        },
    )
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
    let max_row_tiles = pass.max_row_tiles(l.top_k, local);
    let x = l.x.ptr() + (pass.t0 * h * 2) as u64;
    let (gate_up, down) = (imp.gate_up(i), imp.down(h));

    mark(MoeStage::GateUp)?;
    let params = if gate_up.tma_map {
        // Local experts' gate and up rows of hidden, in boxes of 128 rows.
        let w = Sw128Map {
            rows: local * 2 * i,
            cols: h,
            box_rows: WS_BN / 2,
        };
        Params::new()
            .ptr(x)
            .ptr(ws.r.slot_token.ptr())
            .ptr(ws.act.ptr())
            .tile_list(&ws.r, local, h, i)
            .map(w.encode(l.gate_up.ptr())?)
    } else {
        Params::new()
            .ptr(x)
            .ptr(ws.r.slot_token.ptr())
            .ptr(l.gate_up.ptr())
            .ptr(ws.act.ptr())
            .tile_list(&ws.r, local, h, i)
    };
    launch_gemm(dev, gate_up, max_row_tiles, i, params)?;

    mark(MoeStage::Down)?;
    let params = if down.tma_map {
        let w = Sw128Map {
            rows: local * h,
            cols: i,
            box_rows: WS_BN / 2,
        };
        Params::new()
            .ptr(ws.act.ptr())
            .ptr(ws.y.ptr())
            .tile_list(&ws.r, local, i, h)
            .map(w.encode(l.down.ptr())?)
    } else {
        Params::new()
            .ptr(ws.act.ptr())
            .ptr(l.down.ptr())
            .ptr(ws.y.ptr())
            .tile_list(&ws.r, local, i, h)
    };
    launch_gemm(dev, down, max_row_tiles, h, params)
}

/// `k`'s launch over `row_tiles` row tiles (at most) of `cols` output
/// columns: one CTA a tile, or a persistent grid.
fn launch_gemm(
    dev: &CudaDevice,
    k: GemmKernel,
    row_tiles: usize,
    cols: usize,
    params: Params,
) -> Result<(), CudaError> {
    let grid = k.grid(row_tiles, cols, dev.sm_count);
    launch(dev, k.entry, grid, k.threads as u32, k.smem, params)
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
