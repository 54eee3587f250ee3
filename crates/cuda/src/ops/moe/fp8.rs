//! The routed experts on block-scaled FP8 experts, natively
//! (`moe_grouped_gemm_fp8.cu`, sm_90a): per pass, the routing of
//! [`super::launch`]; x quantized per (token, 128 columns) to e4m3
//! (`crate::ops::fp8::quant`'s kernels, one f32 scale each); the gate+up
//! grouped GEMM on e4m3 × e4m3 wgmma with per-128-K promotion and the
//! SwiGLU epilogue (bf16 act);
//! act quantized per (sorted row, 128 columns); the down grouped GEMM (bf16
//! y); the combine of [`super::launch`]. No bf16 copy of the experts. A
//! caller that quantized x already (the MoE block, once for its shared
//! expert too) passes its codes ([`routed_experts_fp8_from`]).
//!
//! [`native_takes`] says which calls run here; the others keep the
//! dequantize + bf16 grouped GEMMs fallback (`crate::backend::moe`).

use super::gemm::{ws_unit_fits, WS_BN, WS_MAX_EXPERTS, WS_PAIRS};
use super::launch::{Gemm, GemmWeights, Passes};
use super::weights::weight_map;
use super::{
    check_len_of, validate_inner, GemmKernel, MoeLaunch, MoePlan, MoeStage, SharedEpilogue, GEMM_BM,
};
use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::launch::dev_err;
use crate::ops::fp8::gemm::QuantizedX;
use crate::ops::fp8::quant::launch_quantize;
use crate::ops::fp8::BLOCK;
use crate::tensor_map::Sw128Map;
use crate::CudaError;
use headroom_core::ops::{OpError, OpResult};

/// Rows of one CTA of the FP8 grouped GEMMs (`HM`): half a routing row tile.
pub const FP8_HM: usize = 64;
/// Weight rows of one K loop (`BN`): 64 gate and 64 up rows, or 128 down
/// rows.
pub const FP8_BN: usize = 128;
/// Column tiles of `FP8_BN` y columns one down CTA takes (`DOWN_TILES`), in
/// one pipeline (the last CTA of a row the rest).
pub const FP8_DOWN_TILES: usize = 2;
/// Threads of one CTA (`THREADS`: one warpgroup).
pub const FP8_THREADS: usize = 128;
/// Dynamic shared memory of one CTA (`SMEM_BYTES`: 3 stages of 64 A and 128
/// B rows of 128 bytes, on a 1024-byte aligned base).
pub const FP8_SMEM_BYTES: usize = 3 * (FP8_HM + FP8_BN) * 128 + 1024;

/// An FP8 grouped GEMM's kernel `entry` of `tile_cols` output columns a
/// CTA: one warpgroup, [`FP8_HM`] rows (two CTAs a routing row tile), one
/// CTA per tile.
const fn fp8_kernel(entry: &'static str, tile_cols: usize) -> GemmKernel {
    GemmKernel::new(entry, FP8_SMEM_BYTES, FP8_THREADS, tile_cols).with_row_ctas(GEMM_BM / FP8_HM)
}

/// The gate+up kernel: `FP8_BN / 2` columns of act a CTA.
const FP8_GATE_UP: GemmKernel = fp8_kernel("moe_gemm_gate_up_fp8", FP8_BN / 2);
/// The down kernel: up to `FP8_BN · FP8_DOWN_TILES` columns of y a CTA.
const FP8_DOWN: GemmKernel = fp8_kernel("moe_gemm_down_fp8", FP8_BN * FP8_DOWN_TILES);

/// Stages of the warp-specialised FP8 kernels (`STAGES` in
/// `moe_grouped_gemm_ws_fp8.cu`).
pub const FP8_WS_STAGES: usize = 4;
/// Dynamic shared memory of a warp-specialised FP8 gate+up CTA
/// (`SMEM_GATE_UP`: the stages of 128 A and 256 B rows of 128 bytes, their
/// full and empty mbarriers, the tile table, alignment slack).
pub const FP8_WS_SMEM_GATE_UP: usize =
    FP8_WS_STAGES * (128 + WS_BN) * 128 + 2 * FP8_WS_STAGES * 8 + (WS_MAX_EXPERTS + 1) * 4 + 1024;
/// Dynamic shared memory of a warp-specialised FP8 down CTA (`SMEM_DOWN`:
/// the gate+up layout and two warpgroups' 64 x 128 bf16 y, one half of a
/// unit's columns at a time).
pub const FP8_WS_SMEM_DOWN: usize = FP8_WS_SMEM_GATE_UP + 2 * 64 * 128 * 2;
// One CTA an SM: its shared memory within the 227 KiB a CTA may take.
const _: () = assert!(FP8_WS_SMEM_DOWN <= 227 * 1024);
/// The warp-specialised FP8 gate+up kernel: `WS_BN / 2` act columns a
/// unit.
const FP8_WS_GATE_UP: GemmKernel =
    GemmKernel::warp_specialized("moe_gemm_gate_up_ws_fp8", FP8_WS_SMEM_GATE_UP, WS_BN / 2);
/// The warp-specialised FP8 down kernel: `WS_BN` y columns a unit.
const FP8_WS_DOWN: GemmKernel =
    GemmKernel::warp_specialized("moe_gemm_down_ws_fp8", FP8_WS_SMEM_DOWN, WS_BN);

/// Pairs per pass from which [`Fp8Gemms::for_pass`] runs [`Fp8Gemms::Ws`]:
/// the bf16 kernels' threshold, where the FP8 ws kernels measured 2 % faster
/// than the tiles (2,048 tokens of top 8) and 5 % slower at a quarter of it
/// (docs/perf/cuda-fp8.md, session 34).
pub const FP8_WS_PAIRS: usize = WS_PAIRS;

/// The FP8 grouped GEMMs of a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8Gemms {
    /// One CTA a tile of 64 rows (`moe_grouped_gemm_fp8.cu`), three an SM.
    Tiles,
    /// One persistent warp-specialised CTA an SM over 128-row units
    /// (`moe_grouped_gemm_ws_fp8.cu`); at most [`WS_MAX_EXPERTS`] local
    /// experts.
    Ws,
}

impl Fp8Gemms {
    /// The family a pass of `pairs` (token, k) pairs over `local` experts
    /// runs: [`Fp8Gemms::Ws`] from [`FP8_WS_PAIRS`] pairs and up to
    /// [`WS_MAX_EXPERTS`] experts, else [`Fp8Gemms::Tiles`].
    pub fn for_pass(pairs: usize, local: usize) -> Fp8Gemms {
        if pairs >= FP8_WS_PAIRS && local <= WS_MAX_EXPERTS {
            Fp8Gemms::Ws
        } else {
            Fp8Gemms::Tiles
        }
    }
}

/// The kernel of `gemm` (warp-specialised or not) and its weights, e4m3
/// `codes` of `rows` rows of `k` bytes with their `scales`: the
/// warp-specialised kernels read the codes through a tensor map over their
/// bytes as bf16 `[rows][k / 2]` in boxes of `WS_BN / 2` rows (one
/// 128-byte row a box row; TMA copies bytes), encoded on the buffer's first
/// use.
fn fp8_gemm(
    ws: bool,
    gemm: Gemm,
    codes: &DeviceBuffer,
    scales: &DeviceBuffer,
    rows: usize,
    k: usize,
) -> Result<(GemmKernel, GemmWeights), CudaError> {
    let kernel = match (ws, gemm) {
        (true, Gemm::GateUp) => FP8_WS_GATE_UP,
        (true, Gemm::Down) => FP8_WS_DOWN,
        (false, Gemm::GateUp) => FP8_GATE_UP,
        (false, Gemm::Down) => FP8_DOWN,
    };
    if !ws {
        return Ok((kernel, GemmWeights::Fp8(codes.ptr(), scales.ptr())));
    }
    let map = weight_map(
        codes,
        Sw128Map {
            rows,
            cols: k / 2,
            box_rows: WS_BN / 2,
        },
    )?;
    Ok((kernel, GemmWeights::Fp8Map(scales.ptr(), map)))
}

/// The f32 `scale_inv` tables of FP8 experts whose e4m3 codes are the
/// launch's `gate_up` and `down`.
#[derive(Debug, Clone, Copy)]
pub struct Fp8ExpertScales<'a> {
    /// `[local][ceil(2·intermediate / 128)][hidden / 128]`.
    pub gate_up: &'a DeviceBuffer,
    /// `[local][ceil(hidden / 128)][intermediate / 128]`.
    pub down: &'a DeviceBuffer,
}

/// Whether the native FP8 grouped GEMMs take a call on `arch` of `hidden`
/// columns and `intermediate` per expert. Refused, so dequantized to bf16
/// for the bf16 grouped GEMMs instead:
/// * any GPU but `sm_90a`: e4m3 wgmma is Hopper's (the fallback runs the
///   mma.sync bf16 kernels there);
/// * `hidden` or `intermediate` not a multiple of 128: a k-block of the
///   kernels is exactly one scale block of both operands (a partial block
///   would need masked scales and K tails), the down GEMM's K is
///   `intermediate`, and act's quantization groups must tile it;
/// * experts whose scale grid is not one grid per expert (the caller's
///   check, `crate::ops::fp8::weight::experts_of`).
pub fn native_takes(arch: &str, hidden: usize, intermediate: usize) -> bool {
    arch == "sm_90a"
        && hidden > 0
        && intermediate > 0
        && hidden.is_multiple_of(BLOCK)
        && intermediate.is_multiple_of(BLOCK)
}

/// The op of this path's errors.
const FP8_OP: &str = "moe routed experts (fp8)";

fn shape_err(detail: String) -> CudaError {
    CudaError::Shape { op: FP8_OP, detail }
}

/// [`super::validate_shared`] for e4m3 experts (`l.gate_up`, `l.down`) with
/// the scales `s`: shapes [`native_takes`] accepts (but any architecture)
/// and every buffer long enough.
pub fn validate_fp8(
    l: &MoeLaunch<'_>,
    (first, local): (usize, usize),
    s: Fp8ExpertScales<'_>,
    shared: Option<&SharedEpilogue<'_>>,
) -> Result<MoePlan, CudaError> {
    let plan = validate_inner(l, first, local, shared, 1)?;
    let (h, i) = (l.hidden, l.intermediate);
    if !native_takes("sm_90a", h, i) {
        return Err(shape_err(format!(
            "hidden {h} and intermediate {i} must be multiples of {BLOCK}"
        )));
    }
    let gu = local * (2 * i).div_ceil(BLOCK) * (h / BLOCK) * 4;
    let dn = local * h.div_ceil(BLOCK) * (i / BLOCK) * 4;
    check_len_of(FP8_OP, s.gate_up, "gate_up scales", gu)?;
    check_len_of(FP8_OP, s.down, "down scales", dn)?;
    let (gate_up, down) = fp8_grids(plan.max_row_tiles, h, i);
    if gate_up.max(down) > i32::MAX as usize {
        return Err(shape_err("the grid exceeds the kernels' int range".into()));
    }
    Ok(plan)
}

/// CTAs of the gate+up and down launches over `row_tiles` row tiles of a
/// call of `hidden` columns and `intermediate` per expert: two per row tile
/// and column tile (`FP8_BN / 2` columns of act, `FP8_BN` of y; not
/// persistent, so whatever the SMs).
fn fp8_grids(row_tiles: usize, hidden: usize, intermediate: usize) -> (usize, usize) {
    (
        FP8_GATE_UP.grid(row_tiles, intermediate, 1),
        FP8_DOWN.grid(row_tiles, hidden, 1),
    )
}

/// Device bytes of the quantized operands of a pass of `tokens` tokens and
/// `pairs` pairs (on top of [`MoePlan::workspace_bytes`]).
pub fn quant_workspace_bytes(
    tokens: usize,
    pairs: usize,
    hidden: usize,
    intermediate: usize,
) -> usize {
    tokens * hidden
        + tokens * (hidden / BLOCK) * 4
        + pairs * intermediate
        + pairs * (intermediate / BLOCK) * 4
}

/// e4m3 codes and f32 scales of one quantized operand.
struct Quantized {
    q: DeviceBuffer,
    s: DeviceBuffer,
}

impl Quantized {
    fn alloc(dev: &CudaDevice, rows: usize, k: usize) -> Result<Quantized, CudaError> {
        Ok(Quantized {
            q: dev.alloc(rows * k)?,
            s: dev.alloc(rows * (k / BLOCK) * 4)?,
        })
    }
}

/// Where a pass's x codes come from: quantized into this buffer pass by
/// pass, or the caller's codes of the whole x.
enum XCodes<'a> {
    Pass(Quantized),
    Given(&'a QuantizedX),
}

/// The e4m3 codes and row-major scales `[m][k / 128]` of bf16 `[m][k]` at
/// device address `x` into `out` (`crate::ops::fp8::quant`'s kernels), `k`
/// a multiple of 128.
fn quantize_rows(dev: &CudaDevice, x: u64, m: usize, k: usize, out: &Quantized) -> OpResult<()> {
    // SAFETY: x addresses m · k bf16 (the pass's rows of the validated x, or
    // the workspace's act), out holds m · k codes and m · (k / 128) scales
    // (its allocation), all on dev.
    unsafe { launch_quantize(dev, x, m, k, out.q.ptr(), out.s.ptr(), k / BLOCK, 1) }
}

/// The routed experts of `l` on its e4m3 experts (`l.gate_up`, `l.down`,
/// the experts `first .. first + local`) with scales `s`: f32 `l.out`, or
/// with `shared` the gated shared expert added and bf16 `shared.out`.
/// `mark` is called before each stage of each pass (and with
/// [`MoeStage::End`] after it). A device that is not `sm_90a`, or a shape
/// [`validate_fp8`] refuses, is an error before any launch.
pub fn routed_experts_fp8(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    local: (usize, usize),
    s: Fp8ExpertScales<'_>,
    shared: Option<&SharedEpilogue<'_>>,
    mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
) -> OpResult<()> {
    routed_experts_fp8_from(dev, l, local, s, shared, None, mark)
}

/// [`routed_experts_fp8`] on `pre`, `l.x` quantized already (the MoE
/// block quantizes it once for its shared expert too): each pass reads its
/// rows of `pre`'s codes and row-major scales instead of quantizing them.
/// The same bits; a `pre` of another shape than `l.x` is an error.
pub fn routed_experts_fp8_from(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    (first, local): (usize, usize),
    s: Fp8ExpertScales<'_>,
    shared: Option<&SharedEpilogue<'_>>,
    pre: Option<&QuantizedX>,
    mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
) -> OpResult<()> {
    routed_experts_fp8_on(dev, l, (first, local), s, shared, pre, None, mark)
}

/// [`routed_experts_fp8_from`] on the grouped GEMMs of `gemms` (`None`:
/// [`Fp8Gemms::for_pass`] per pass). [`Fp8Gemms::Ws`] over more than
/// [`WS_MAX_EXPERTS`] local experts is an error before any launch.
#[allow(clippy::too_many_arguments)]
pub fn routed_experts_fp8_on(
    dev: &CudaDevice,
    l: &MoeLaunch<'_>,
    (first, local): (usize, usize),
    s: Fp8ExpertScales<'_>,
    shared: Option<&SharedEpilogue<'_>>,
    pre: Option<&QuantizedX>,
    gemms: Option<Fp8Gemms>,
    mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
) -> OpResult<()> {
    let plan = validate_fp8(l, (first, local), s, shared).map_err(dev_err)?;
    if gemms == Some(Fp8Gemms::Ws) && local > WS_MAX_EXPERTS {
        return Err(dev_err(shape_err(format!(
            "the warp-specialised FP8 GEMMs take at most {WS_MAX_EXPERTS} local experts, not {local}"
        ))));
    }
    if let Some(p) = pre {
        if (p.m, p.k) != (l.tokens, l.hidden) {
            return Err(dev_err(shape_err(format!(
                "x quantized as [{}][{}], the call's x is [{}][{}]",
                p.m, p.k, l.tokens, l.hidden
            ))));
        }
    }
    if dev.arch != "sm_90a" {
        return Err(OpError::Unsupported {
            op: FP8_OP,
            reason: format!("the FP8 grouped GEMMs need sm_90a, not {}", dev.arch),
        });
    }
    let (h, i) = (l.hidden, l.intermediate);
    let passes = Passes::new(dev, l, (first, local), plan, shared).map_err(dev_err)?;
    let xq = match pre {
        Some(p) => XCodes::Given(p),
        None => XCodes::Pass(Quantized::alloc(dev, plan.chunk_tokens, h).map_err(dev_err)?),
    };
    let aq = Quantized::alloc(dev, plan.chunk_pairs, i).map_err(dev_err)?;
    let ws = &passes.ws;
    passes.run(mark, dev_err, |pass, mark| {
        // The pass's rows: quantized here, or those of `pre` from its first.
        let (q, s_x) = match &xq {
            XCodes::Pass(xq) => {
                quantize_rows(dev, pass.x(l), pass.tokens, h, xq)?;
                (xq.q.ptr(), xq.s.ptr())
            }
            XCodes::Given(p) => (
                p.q.ptr() + (pass.t0 * h) as u64,
                p.s.ptr() + (pass.t0 * (h / BLOCK) * 4) as u64,
            ),
        };

        let ws_gemms =
            gemms.unwrap_or_else(|| Fp8Gemms::for_pass(pass.pairs(l.top_k), local)) == Fp8Gemms::Ws;
        mark(MoeStage::GateUp).map_err(dev_err)?;
        let a = [q, s_x, ws.r.slot_token.ptr()];
        let (k, w) = fp8_gemm(
            ws_gemms && ws_unit_fits(true, i),
            Gemm::GateUp,
            l.gate_up,
            s.gate_up,
            local * 2 * i,
            h,
        )
        .map_err(dev_err)?;
        passes
            .launch_gemm(k, pass, Gemm::GateUp, &a, w)
            .map_err(dev_err)?;

        mark(MoeStage::Down).map_err(dev_err)?;
        quantize_rows(dev, ws.act.ptr(), pass.pairs(l.top_k), i, &aq)?;
        let a = [aq.q.ptr(), aq.s.ptr()];
        let ws_down = ws_gemms && ws_unit_fits(false, h);
        let (k, w) =
            fp8_gemm(ws_down, Gemm::Down, l.down, s.down, local * h, i).map_err(dev_err)?;
        passes
            .launch_gemm(k, pass, Gemm::Down, &a, w)
            .map_err(dev_err)
    })
}

#[cfg(test)]
mod tests {
    use super::super::gemm::WS_THREADS;
    use super::super::sources::{MOE_GROUPED_GEMM_FP8, MOE_GROUPED_GEMM_WS_FP8};
    use super::*;
    use crate::kernels::source_constant;

    #[test]
    fn constants_match_the_kernel_source() {
        let src = MOE_GROUPED_GEMM_FP8.source;
        assert_eq!(source_constant(src, "HM"), FP8_HM);
        assert_eq!(source_constant(src, "BN"), FP8_BN);
        assert_eq!(source_constant(src, "DOWN_TILES"), FP8_DOWN_TILES);
        assert_eq!(source_constant(src, "BM"), GEMM_BM);
        assert_eq!(source_constant(src, "BLOCK"), BLOCK);
        assert_eq!(source_constant(src, "THREADS"), FP8_THREADS);
        assert_eq!(source_constant(src, "STAGES"), 3);
        assert_eq!(source_constant(src, "BK"), 128);
    }

    #[test]
    fn the_kernels_run_one_warpgroup_a_cta_one_cta_a_tile() {
        let kernels = [FP8_GATE_UP, FP8_DOWN];
        assert_eq!(MOE_GROUPED_GEMM_FP8.entry_points, kernels.map(|k| k.entry));
        for k in kernels {
            assert_eq!(
                (k.threads, k.smem, k.persistent, k.tma_map, k.row_ctas),
                (FP8_THREADS, FP8_SMEM_BYTES, false, false, 2)
            );
        }
        assert_eq!((FP8_GATE_UP.tile_cols, FP8_DOWN.tile_cols), (64, 256));
    }

    #[test]
    fn two_ctas_run_per_row_tile_and_column_tile() {
        // 64 act columns a gate+up tile, two tiles of 128 y columns a down
        // CTA (one where a row has one left: 384 columns, 2 CTAs).
        assert_eq!(fp8_grids(10, 2048, 512), (10 * 2 * 8, 10 * 2 * 8));
        assert_eq!(fp8_grids(1, 128, 128), (4, 2));
        assert_eq!(fp8_grids(3, 384, 128), (3 * 2 * 2, 3 * 2 * 2));
    }

    #[test]
    fn the_warp_specialised_kernels_match_their_source() {
        let src = MOE_GROUPED_GEMM_WS_FP8.source;
        let c = |name| source_constant(src, name);
        assert_eq!(c("STAGES"), FP8_WS_STAGES);
        assert_eq!((c("BM"), c("BN"), c("BK")), (GEMM_BM, WS_BN, BLOCK));
        assert_eq!(c("MAX_EXPERTS"), WS_MAX_EXPERTS);
        // SMEM_GATE_UP: the stages of 128 A and BN B rows of BK bytes, full
        // and empty mbarriers, the tile table, alignment slack; SMEM_DOWN
        // adds the two warpgroups' 64 x 128 bf16 y.
        let gate_up = c("STAGES") * (c("BM") + c("BN")) * c("BK")
            + 2 * c("STAGES") * 8
            + (c("MAX_EXPERTS") + 1) * 4
            + 1024;
        assert_eq!(FP8_WS_SMEM_GATE_UP, gate_up);
        assert_eq!(FP8_WS_SMEM_DOWN, gate_up + 2 * 64 * (c("BN") / 2) * 2);
        assert_eq!(
            MOE_GROUPED_GEMM_WS_FP8.entry_points,
            [FP8_WS_GATE_UP.entry, FP8_WS_DOWN.entry]
        );
        for k in [FP8_WS_GATE_UP, FP8_WS_DOWN] {
            assert_eq!(
                (k.threads, k.persistent, k.ctas_per_sm, k.tma_map),
                (WS_THREADS, true, 1, true)
            );
        }
        assert_eq!(
            (FP8_WS_GATE_UP.tile_cols, FP8_WS_DOWN.tile_cols),
            (128, 256)
        );
        assert_eq!(FP8_WS_GATE_UP.smem, FP8_WS_SMEM_GATE_UP);
        assert_eq!(FP8_WS_DOWN.smem, FP8_WS_SMEM_DOWN);
        // A persistent grid: one CTA an SM, or fewer units.
        assert_eq!(FP8_WS_DOWN.grid(1000, 2048, 132), 132);
        assert_eq!(FP8_WS_DOWN.grid(3, 2048, 132), 3 * 8);
    }

    #[test]
    fn a_gemm_whose_columns_do_not_fill_whole_units_runs_on_the_tiles() {
        // A unit: 128 act columns of gate+up, 256 y columns of down.
        assert!(ws_unit_fits(true, 512) && ws_unit_fits(true, 128));
        assert!(!ws_unit_fits(true, 192));
        assert!(ws_unit_fits(false, 2048) && ws_unit_fits(false, 256));
        assert!(!ws_unit_fits(false, 384) && !ws_unit_fits(false, 128));
    }

    #[test]
    fn passes_of_many_pairs_over_few_experts_run_warp_specialised() {
        assert_eq!(Fp8Gemms::for_pass(FP8_WS_PAIRS, 256), Fp8Gemms::Ws);
        assert_eq!(Fp8Gemms::for_pass(8192 * 8, 128), Fp8Gemms::Ws);
        assert_eq!(Fp8Gemms::for_pass(FP8_WS_PAIRS - 1, 256), Fp8Gemms::Tiles);
        assert_eq!(Fp8Gemms::for_pass(FP8_WS_PAIRS, 257), Fp8Gemms::Tiles);
    }

    #[test]
    fn only_hopper_and_whole_scale_blocks_run_natively() {
        assert!(native_takes("sm_90a", 2048, 512));
        assert!(!native_takes("sm_89", 2048, 512));
        assert!(!native_takes("sm_100a", 2048, 512));
        assert!(!native_takes("sm_90a", 2048, 576));
        assert!(!native_takes("sm_90a", 2112, 512));
        assert!(!native_takes("sm_90a", 0, 512));
    }

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn every_entry_compiles_for_sm_90a_without_spills() {
        let c = crate::nvrtc::compile_sm90a_without_spills(&MOE_GROUPED_GEMM_FP8);
        println!("{}", c.log);
    }
}
