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

/// A grouped GEMM's weights, as its kernel takes them.
#[derive(Clone, Copy)]
pub(super) enum GemmWeights {
    /// bf16 `[rows][K]` at this address, right after the A side.
    Bf16(u64),
    /// The addresses of e4m3 codes `[rows][K]` and of their f32 block
    /// scales, right after the A side.
    Fp8(u64, u64),
    /// The bf16 weights' TMA tensor map, the last parameter.
    Map(TensorMap),
    /// The address of e4m3 weights' f32 block scales, right after the A
    /// side, and their codes' TMA tensor map (over their bytes as bf16
    /// `[rows][K / 2]`), the last parameter.
    Fp8Map(u64, TensorMap),
}

/// A pass's two grouped GEMMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gemm {
    /// The gathered rows of x by gate and up, SwiGLU into act: K hidden, N
    /// intermediate.
    GateUp,
    /// act by down into y: K intermediate, N hidden.
    Down,
}

/// One grouped GEMM of a pass, as every family's kernels take it: the A
/// side's pointers, the weights (unless a map), the output, then the tile
/// list (the routing's `expert_offsets` and `tile_offsets`, the local
/// experts, K and N), then, with a map, the unit counters and the map.
pub(super) struct GroupedGemm<'a> {
    /// The A side: the pass's rows of x and the slots' tokens (gate+up), or
    /// act (down); e4m3 codes with their scales on the FP8 path.
    a: &'a [u64],
    w: GemmWeights,
    /// act (gate+up) or y (down).
    out: u64,
    /// K and N: hidden and intermediate for gate+up, the reverse for down.
    k: usize,
    n: usize,
    gemm: Gemm,
}

impl<'a> GroupedGemm<'a> {
    /// `l`'s GEMM `gemm` of a pass on the A side `a` and the weights `w`,
    /// into `ws`.
    fn new(
        gemm: Gemm,
        l: &MoeLaunch<'_>,
        ws: &Workspace,
        a: &'a [u64],
        w: GemmWeights,
    ) -> GroupedGemm<'a> {
        let (k, n, out) = match gemm {
            Gemm::GateUp => (l.hidden, l.intermediate, ws.act.ptr()),
            Gemm::Down => (l.intermediate, l.hidden, ws.y.ptr()),
        };
        GroupedGemm {
            a,
            w,
            out,
            k,
            n,
            gemm,
        }
    }

    /// The kernel's parameters over the tile list of `r` and `local` experts.
    fn params(&self, r: &RouteBuffers, local: usize) -> Params {
        let mut p = self.a.iter().fold(Params::new(), |p, &a| p.ptr(a));
        p = match self.w {
            GemmWeights::Bf16(w) => p.ptr(w),
            GemmWeights::Fp8(codes, scales) => p.ptr(codes).ptr(scales),
            GemmWeights::Fp8Map(scales, _) => p.ptr(scales),
            GemmWeights::Map(_) => p,
        };
        p = p
            .ptr(self.out)
            .ptr(r.expert_offsets.ptr())
            .ptr(r.tile_offsets.ptr())
            .int(local)
            .int(self.k)
            .int(self.n);
        match self.w {
            GemmWeights::Map(m) | GemmWeights::Fp8Map(_, m) => p.ptr(r.sched(self.gemm)).map(m),
            _ => p,
        }
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
    /// i32 `[experts + 1 + SCHED_INTS]`: per expert, then the routing's
    /// finished blocks (zero between passes), then the warp-specialised
    /// GEMMs' unit counters ([`RouteBuffers::sched`]; zero between launches).
    /// Zeroed once a call.
    counts: DeviceBuffer,
    /// Where the unit counters start in `counts`.
    sched: u64,
    /// i32 `[experts + 1]`: row offsets of each expert in expert order.
    expert_offsets: DeviceBuffer,
    /// i32 `[experts + 1]`: row-tile offsets of each expert.
    tile_offsets: DeviceBuffer,
}

/// The ints after the routing's counts: two unit counters for each of the
/// two warp-specialised GEMMs.
pub(super) const SCHED_INTS: usize = 4;

impl RouteBuffers {
    fn alloc(dev: &CudaDevice, pairs: usize, experts: usize) -> Result<Self, CudaError> {
        let counts = dev.alloc((experts + 1 + SCHED_INTS) * 4)?;
        Ok(RouteBuffers {
            topk_expert: dev.alloc(pairs * 4)?,
            topk_weight: dev.alloc(pairs * 4)?,
            slot_token: dev.alloc(pairs * 4)?,
            pair_slot: dev.alloc(pairs * 4)?,
            sched: counts.ptr() + ((experts + 1) * 4) as u64,
            counts,
            expert_offsets: dev.alloc((experts + 1) * 4)?,
            tile_offsets: dev.alloc((experts + 1) * 4)?,
        })
    }

    /// The two unit counters of `gemm`'s warp-specialised kernel (the next
    /// unit, the CTAs ended; moe_grouped_gemm_ws.cu): zero when it starts,
    /// and zero again when it ends.
    fn sched(&self, gemm: Gemm) -> u64 {
        self.sched
            + match gemm {
                Gemm::GateUp => 0,
                Gemm::Down => 8,
            }
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

#[cfg(test)]
#[path = "launch_tests.rs"]
mod tests;
