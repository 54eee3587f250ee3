//! The routed experts on block-scaled FP8 experts, natively
//! (`moe_grouped_gemm_fp8.cu`, sm_90a): per pass, the routing of
//! [`super::launch`]; x quantized per (token, 128 columns) to e4m3
//! (`crate::ops::fp8::quant`'s kernels, one f32 scale each); the gate+up
//! grouped GEMM on e4m3 × e4m3 wgmma with per-128-K promotion and the
//! SwiGLU epilogue (bf16 act);
//! act quantized per (sorted row, 128 columns); the down grouped GEMM (bf16
//! y); the combine of [`super::launch`]. No bf16 copy of the experts.
//!
//! [`native_takes`] says which calls run here; the others keep the
//! dequantize + bf16 grouped GEMMs fallback (`crate::backend::moe`).

use super::launch::{combine, launch, route, Params, Pass, Workspace};
use super::{validate_inner, MoeLaunch, MoePlan, MoeStage, SharedEpilogue, GEMM_BM};
use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::launch::dev_err;
use crate::ops::fp8::quant::launch_quantize;
use crate::ops::fp8::BLOCK;
use crate::CudaError;
use headroom_core::ops::{OpError, OpResult};

/// Rows of one CTA of the FP8 grouped GEMMs (`HM`): half a routing row tile.
pub const FP8_HM: usize = 64;
/// Weight rows of one CTA (`BN`): 64 gate and 64 up rows, or 128 down rows.
pub const FP8_BN: usize = 128;
/// Threads of one CTA (`THREADS`: one warpgroup).
pub const FP8_THREADS: usize = 128;
/// Dynamic shared memory of one CTA (`SMEM_BYTES`: 3 stages of 64 A and 128
/// B rows of 128 bytes, on a 1024-byte aligned base).
pub const FP8_SMEM_BYTES: usize = 3 * (FP8_HM + FP8_BN) * 128 + 1024;

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

fn shape_err(detail: String) -> CudaError {
    CudaError::Shape {
        op: "moe routed experts (fp8)",
        detail,
    }
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
    for (name, buf, bytes) in [
        ("gate_up scales", s.gate_up, gu),
        ("down scales", s.down, dn),
    ] {
        if buf.len_bytes() < bytes {
            return Err(shape_err(format!(
                "buffer `{name}` has {} bytes, the shape needs {bytes}",
                buf.len_bytes()
            )));
        }
    }
    // The grids: two CTAs per row tile and column tile.
    let grid = plan.max_row_tiles * 2 * (i / (FP8_BN / 2)).max(h / FP8_BN);
    if grid > i32::MAX as usize {
        return Err(shape_err("the grid exceeds the kernels' int range".into()));
    }
    Ok(plan)
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
    (first, local): (usize, usize),
    s: Fp8ExpertScales<'_>,
    shared: Option<&SharedEpilogue<'_>>,
    mark: &mut dyn FnMut(MoeStage) -> Result<(), CudaError>,
) -> OpResult<()> {
    let plan = validate_fp8(l, (first, local), s, shared).map_err(dev_err)?;
    if dev.arch != "sm_90a" {
        return Err(OpError::Unsupported {
            op: "moe routed experts (fp8)",
            reason: format!("the FP8 grouped GEMMs need sm_90a, not {}", dev.arch),
        });
    }
    let (h, i) = (l.hidden, l.intermediate);
    let pairs_max = plan.chunk_pairs;
    let ws = Workspace::alloc(dev, pairs_max, local, i, h).map_err(dev_err)?;
    let xq = Quantized::alloc(dev, plan.chunk_tokens, h).map_err(dev_err)?;
    let aq = Quantized::alloc(dev, pairs_max, i).map_err(dev_err)?;
    dev.fill_bytes(&ws.r.counts, 0).map_err(dev_err)?;
    let mut t0 = 0;
    while t0 < l.tokens {
        let pass = Pass {
            t0,
            tokens: plan.chunk_tokens.min(l.tokens - t0),
        };
        let pairs = pass.tokens * l.top_k;
        let max_row_tiles = pairs.div_ceil(GEMM_BM) + local.min(pairs);
        mark(MoeStage::Route).map_err(dev_err)?;
        route(dev, l, (first, local), pass, &ws.r).map_err(dev_err)?;
        quantize_rows(dev, l.x.ptr() + (t0 * h * 2) as u64, pass.tokens, h, &xq)?;

        mark(MoeStage::GateUp).map_err(dev_err)?;
        let params = Params::new()
            .ptr(xq.q.ptr())
            .ptr(xq.s.ptr())
            .ptr(ws.r.slot_token.ptr())
            .ptr(l.gate_up.ptr())
            .ptr(s.gate_up.ptr())
            .ptr(ws.act.ptr())
            .ptr(ws.r.expert_offsets.ptr())
            .ptr(ws.r.tile_offsets.ptr())
            .int(local)
            .int(h)
            .int(i);
        let grid = max_row_tiles * 2 * (i / (FP8_BN / 2));
        launch(
            dev,
            "moe_gemm_gate_up_fp8",
            grid,
            FP8_THREADS as u32,
            FP8_SMEM_BYTES,
            params,
        )
        .map_err(dev_err)?;

        mark(MoeStage::Down).map_err(dev_err)?;
        quantize_rows(dev, ws.act.ptr(), pairs, i, &aq)?;
        let params = Params::new()
            .ptr(aq.q.ptr())
            .ptr(aq.s.ptr())
            .ptr(l.down.ptr())
            .ptr(s.down.ptr())
            .ptr(ws.y.ptr())
            .ptr(ws.r.expert_offsets.ptr())
            .ptr(ws.r.tile_offsets.ptr())
            .int(local)
            .int(i)
            .int(h);
        let grid = max_row_tiles * 2 * (h / FP8_BN);
        launch(
            dev,
            "moe_gemm_down_fp8",
            grid,
            FP8_THREADS as u32,
            FP8_SMEM_BYTES,
            params,
        )
        .map_err(dev_err)?;

        mark(MoeStage::Combine).map_err(dev_err)?;
        combine(dev, l, pass, shared, &ws).map_err(dev_err)?;
        mark(MoeStage::End).map_err(dev_err)?;
        t0 += pass.tokens;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::sources::MOE_GROUPED_GEMM_FP8;
    use super::*;
    use crate::kernels::source_constant;

    #[test]
    fn constants_match_the_kernel_source() {
        let src = MOE_GROUPED_GEMM_FP8.source;
        assert_eq!(source_constant(src, "HM"), FP8_HM);
        assert_eq!(source_constant(src, "BN"), FP8_BN);
        assert_eq!(source_constant(src, "BM"), GEMM_BM);
        assert_eq!(source_constant(src, "BLOCK"), BLOCK);
        assert_eq!(source_constant(src, "THREADS"), FP8_THREADS);
        assert_eq!(source_constant(src, "STAGES"), 3);
        assert_eq!(source_constant(src, "BK"), 128);
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
        let include = crate::CudaOptions::from_env().include_dir().unwrap();
        let k = MOE_GROUPED_GEMM_FP8;
        let c = crate::nvrtc::compile(k.name, k.source, "sm_90a", &include).unwrap();
        println!("{}", c.log);
        for e in k.entry_points {
            assert_eq!(
                crate::nvrtc::spill_store_bytes(&c.log, e),
                Some(0),
                "{e}:\n{}",
                c.log
            );
        }
    }
}
