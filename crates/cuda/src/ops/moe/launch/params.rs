//! A grouped GEMM's kernel parameters, in its signature's order ([`Params`],
//! built by [`GroupedGemm::params`] from the pass's operands, weights and
//! tile list), and the launch that hands them to the driver ([`launch`]).

use super::workspace::{RouteBuffers, Workspace};
use crate::device::CudaDevice;
use crate::ops::moe::MoeLaunch;
use crate::tensor_map::TensorMap;
use crate::CudaError;
use std::ffi::c_void;

/// One kernel parameter by value.
pub(in crate::ops::moe) enum Param {
    Ptr(u64),
    Int(i32),
    F32(f32),
    /// A TMA tensor map (`const __grid_constant__`), boxed: the driver
    /// copies its 128 bytes from this address at the launch.
    Map(Box<TensorMap>),
}

/// A kernel's parameters in signature order.
pub(in crate::ops::moe) struct Params(pub(in crate::ops::moe) Vec<Param>);

impl Params {
    pub(in crate::ops::moe) fn new() -> Self {
        Params(Vec::with_capacity(10))
    }
    pub(in crate::ops::moe) fn ptr(mut self, v: u64) -> Self {
        self.0.push(Param::Ptr(v));
        self
    }
    pub(in crate::ops::moe) fn int(mut self, v: usize) -> Self {
        // Every value is bounded to the int range by `validate`.
        self.0.push(Param::Int(v as i32));
        self
    }
    pub(in crate::ops::moe) fn f32(mut self, v: f32) -> Self {
        self.0.push(Param::F32(v));
        self
    }
    pub(in crate::ops::moe) fn map(mut self, m: TensorMap) -> Self {
        self.0.push(Param::Map(Box::new(m)));
        self
    }
    /// Pointers to each value, as the driver takes them (valid while `self` is).
    pub(in crate::ops::moe) fn raw(&mut self) -> Vec<*mut c_void> {
        self.0
            .iter_mut()
            .map(|p| match p {
                Param::Ptr(v) => v as *mut u64 as *mut c_void,
                Param::Int(v) => v as *mut i32 as *mut c_void,
                Param::F32(v) => v as *mut f32 as *mut c_void,
                Param::Map(m) => &mut **m as *mut TensorMap as *mut c_void,
            })
            .collect()
    }
}

/// A grouped GEMM's weights, as its kernel takes them.
#[derive(Clone, Copy)]
pub(in crate::ops::moe) enum GemmWeights {
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
pub(in crate::ops::moe) enum Gemm {
    /// The gathered rows of x by gate and up, SwiGLU into act: K hidden, N
    /// intermediate.
    GateUp,
    /// act by down into y: K intermediate, N hidden.
    Down,
}

impl RouteBuffers {
    /// The two unit counters of `gemm`'s warp-specialised kernel (the next
    /// unit, the CTAs ended; moe_grouped_gemm_ws.cu): zero when it starts,
    /// and zero again when it ends.
    pub(in crate::ops::moe) fn sched(&self, gemm: Gemm) -> u64 {
        self.sched
            + match gemm {
                Gemm::GateUp => 0,
                Gemm::Down => 8,
            }
    }
}

/// One grouped GEMM of a pass, as every family's kernels take it: the A
/// side's pointers, the weights (unless a map), the output, then the tile
/// list (the routing's `expert_offsets` and `tile_offsets`, the local
/// experts, K and N), then, with a map, the unit counters and the map.
pub(in crate::ops::moe) struct GroupedGemm<'a> {
    /// The A side: the pass's rows of x and the slots' tokens (gate+up), or
    /// act (down); e4m3 codes with their scales on the FP8 path.
    a: &'a [u64],
    w: GemmWeights,
    /// act (gate+up) or y (down).
    out: u64,
    /// K and N: hidden and intermediate for gate+up, the reverse for down.
    k: usize,
    pub(in crate::ops::moe) n: usize,
    gemm: Gemm,
}

impl<'a> GroupedGemm<'a> {
    /// `l`'s GEMM `gemm` of a pass on the A side `a` and the weights `w`,
    /// into `ws`.
    pub(in crate::ops::moe) fn new(
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
    pub(in crate::ops::moe) fn params(&self, r: &RouteBuffers, local: usize) -> Params {
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

pub(in crate::ops::moe) fn launch(
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
