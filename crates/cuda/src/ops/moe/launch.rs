//! The launch sequence of the routed experts, pass by pass over chunks of
//! [`CHUNK_TOKENS`](super::CHUNK_TOKENS) tokens: route (with the offsets, and
//! the scatter of a small pass), scatter,
//! gate+up GEMM, down GEMM, combine. Grids are sized from the plan, never
//! from the routing, so nothing waits for the device. The pass loop
//! ([`MoePlan::passes`], [`Passes`]) and the grouped GEMMs' parameters and
//! launch ([`GroupedGemm`], [`Passes::launch_gemm`]) are the FP8 path's too,
//! with its own kernels and operands.

use super::weights::weight_map;
use super::{
    max_row_tiles, route_entry, validate_inner, GemmImpl, GemmKernel, MoeLaunch, MoePlan,
    SharedEpilogue, FUSED_SCATTER_PAIRS, OP, ROUTE_MAX_BLOCKS, ROUTE_WARPS, SCATTER_PER_THREAD,
    WS_BN,
};

mod params;
mod workspace;

pub(super) use params::{launch, Gemm, GemmWeights, GroupedGemm, Params};
pub(super) use workspace::{RouteBuffers, Workspace, SCHED_INTS};

use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::tensor_map::Sw128Map;
use crate::CudaError;

/// Threads of the scatter and combine kernels (`SCATTER_THREADS`, `COMBINE_THREADS`).
pub(super) const ELEMENTWISE_THREADS: u32 = 256;

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

    /// The device address of the pass's first row of `l.x`.
    pub(super) fn x(self, l: &MoeLaunch<'_>) -> u64 {
        l.x.ptr() + (self.t0 * l.hidden * 2) as u64
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

/// One call's passes: the launch `l` over its experts `first .. first +
/// local`, the plan it was validated to, the shared expert's epilogue if
/// any, and the workspace of its largest pass.
pub(super) struct Passes<'a> {
    dev: &'a CudaDevice,
    l: &'a MoeLaunch<'a>,
    /// `(first, local)`.
    experts: (usize, usize),
    plan: MoePlan,
    shared: Option<&'a SharedEpilogue<'a>>,
    pub(super) ws: Workspace,
}

impl<'a> Passes<'a> {
    /// The passes of `plan` (validated for `l` over `experts` with `shared`)
    /// and their workspace.
    pub(super) fn new(
        dev: &'a CudaDevice,
        l: &'a MoeLaunch<'a>,
        experts: (usize, usize),
        plan: MoePlan,
        shared: Option<&'a SharedEpilogue<'a>>,
    ) -> Result<Self, CudaError> {
        let ws = Workspace::alloc(dev, l, &plan, experts.1)?;
        Ok(Passes {
            dev,
            l,
            experts,
            plan,
            shared,
            ws,
        })
    }

    /// The pass loop (zeroing the routing counts first): for each pass,
    /// `mark(Route)`, the routing, `gemms(pass, mark)` (the format's grouped
    /// GEMMs, which mark [`MoeStage::GateUp`] and [`MoeStage::Down`]
    /// themselves), `mark(Combine)`, the combine, `mark(End)`. The device's
    /// errors and the marks' become `E` through `err`; the first error ends
    /// the call.
    pub(super) fn run<E>(
        &self,
        mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
        err: impl Fn(CudaError) -> E,
        mut gemms: impl FnMut(Pass, &mut dyn FnMut(MoeStage) -> Result<(), CudaError>) -> Result<(), E>,
    ) -> Result<(), E> {
        let (dev, l, ws) = (self.dev, self.l, &self.ws);
        dev.fill_bytes(&ws.r.counts, 0).map_err(&err)?;
        for pass in self.plan.passes(l.tokens) {
            mark(MoeStage::Route).map_err(&err)?;
            route(dev, l, self.experts, pass, &ws.r).map_err(&err)?;
            gemms(pass, mark)?;
            mark(MoeStage::Combine).map_err(&err)?;
            combine(dev, l, pass, self.shared, ws).map_err(&err)?;
            mark(MoeStage::End).map_err(&err)?;
        }
        Ok(())
    }

    /// `pass`'s GEMM `gemm` on the A side `a` and the weights `w`, launched
    /// on `kernel` over (at most) the pass's row tiles of N output columns:
    /// [`GemmKernel::grid`]'s CTAs.
    pub(super) fn launch_gemm(
        &self,
        kernel: GemmKernel,
        pass: Pass,
        gemm: Gemm,
        a: &[u64],
        w: GemmWeights,
    ) -> Result<(), CudaError> {
        let g = GroupedGemm::new(gemm, self.l, &self.ws, a, w);
        let local = self.experts.1;
        let row_tiles = pass.max_row_tiles(self.l.top_k, local);
        let grid = kernel.grid(row_tiles, g.n, self.dev.sm_count);
        let params = g.params(&self.ws.r, local);
        let threads = kernel.threads as u32;
        launch(self.dev, kernel.entry, grid, threads, kernel.smem, params)
    }
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
    let passes = Passes::new(dev, l, (first, local), plan, shared)?;
    passes.run(
        mark,
        |e| e,
        |pass, mark| {
            let pairs = pass.pairs(l.top_k);
            let pass_imp = imp
                .unwrap_or_else(|| GemmImpl::for_pass(&dev.arch, pairs, l.experts))
                .for_experts(local);
            grouped_gemms(&passes, pass, pass_imp, mark)
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
        route_blocks(tc),
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
        pairs.div_ceil(ELEMENTWISE_THREADS as usize * SCATTER_PER_THREAD),
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

/// The routing kernel's grid for `tokens`: a warp a token up to
/// [`ROUTE_MAX_BLOCKS`] blocks, past that the blocks' warps take several.
pub(super) fn route_blocks(tokens: usize) -> usize {
    tokens.div_ceil(ROUTE_WARPS).clamp(1, ROUTE_MAX_BLOCKS)
}

/// The gate+up and down grouped GEMMs of one pass on `imp`'s kernels.
fn grouped_gemms(
    p: &Passes<'_>,
    pass: Pass,
    imp: GemmImpl,
    mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
) -> Result<(), CudaError> {
    let (l, ws, local) = (p.l, &p.ws, p.experts.1);
    let (h, i) = (l.hidden, l.intermediate);

    mark(MoeStage::GateUp)?;
    let k = imp.gate_up(i);
    // Local experts' gate and up rows of hidden.
    let w = bf16_weights(k, l.gate_up, local * 2 * i, h)?;
    let a = [pass.x(l), ws.r.slot_token.ptr()];
    p.launch_gemm(k, pass, Gemm::GateUp, &a, w)?;

    mark(MoeStage::Down)?;
    let k = imp.down(h);
    let w = bf16_weights(k, l.down, local * h, i)?;
    p.launch_gemm(k, pass, Gemm::Down, &[ws.act.ptr()], w)
}

/// The bf16 weights `w` of `rows` rows of `cols` (K) as `kernel` takes them:
/// their tensor map (boxes of `WS_BN / 2` rows; encoded on the buffer's first
/// use, [`weight_map`]), or their address.
fn bf16_weights(
    kernel: GemmKernel,
    w: &DeviceBuffer,
    rows: usize,
    cols: usize,
) -> Result<GemmWeights, CudaError> {
    if !kernel.tma_map {
        return Ok(GemmWeights::Bf16(w.ptr()));
    }
    let m = Sw128Map {
        rows,
        cols,
        box_rows: WS_BN / 2,
    };
    Ok(GemmWeights::Map(weight_map(w, m)?))
}

/// The weighted combine of one pass back to token order: f32 `l.out`, or
/// with `shared` the gated shared expert added and bf16 `shared.out`, or
/// with its norm the next norm's rows there ([`combine_call`]).
pub(super) fn combine(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    pass: Pass,
    shared: Option<&SharedEpilogue<'_>>,
    ws: &Workspace,
) -> Result<(), CudaError> {
    let (entry, params) = combine_call(l, pass, shared, ws);
    launch(dev, entry, pass.tokens, ELEMENTWISE_THREADS, 0, params)
}

/// The combine's entry and its parameters in the signature's order (one
/// block a token of the pass).
pub(super) fn combine_call(
    l: &MoeLaunch<'_>,
    pass: Pass,
    shared: Option<&SharedEpilogue<'_>>,
    ws: &Workspace,
) -> (&'static str, Params) {
    let (t0, h) = (pass.t0, l.hidden);
    let params = Params::new()
        .ptr(ws.y.ptr())
        .ptr(ws.r.topk_weight.ptr())
        .ptr(ws.r.pair_slot.ptr())
        .int(l.top_k)
        .int(h);
    let Some(s) = shared else {
        return ("moe_combine", params.ptr(l.out.ptr() + (t0 * h * 4) as u64));
    };
    let row = (t0 * h * 2) as u64;
    let params = params
        .ptr(l.x.ptr() + row)
        .ptr(s.shared_gate.ptr())
        .ptr(s.shared.ptr() + row);
    let Some(n) = &s.norm else {
        return ("moe_combine_shared", params.ptr(s.out.ptr() + row));
    };
    // The next norm folded in: the residual's rows (f32), the weight, the
    // normed rows, their codes and scales, eps.
    let params = params
        .ptr(n.residual.ptr() + row * 2)
        .ptr(n.weight.ptr())
        .ptr(s.out.ptr() + row);
    match n.codes {
        None => ("moe_combine_shared_norm", params.f32(n.eps)),
        Some((q, sc)) => (
            "moe_combine_shared_norm_fp8",
            params
                .ptr(q.ptr() + (t0 * h) as u64)
                .ptr(sc.ptr() + (t0 * (h / 128) * 4) as u64)
                .f32(n.eps),
        ),
    }
}

#[cfg(test)]
#[path = "launch_tests.rs"]
mod tests;
