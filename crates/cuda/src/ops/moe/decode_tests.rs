//! Tests of the decode path's launcher (`decode.rs`): constants, workspace,
//! weight formats and shapes taken (the kernels under NVRTC: `decode.rs`'s
//! `nvrtc` tests).

use super::*;
use crate::kernels::source_constant;
use crate::ops::moe::sources::MOE_DECODE;

#[test]
fn launch_constants_match_the_kernel() {
    let src = MOE_DECODE.source;
    assert_eq!(source_constant(src, "MAX_ROWS"), MAX_ROWS);
    assert_eq!(source_constant(src, "MAX_EXPERTS"), MAX_EXPERTS);
    assert_eq!(source_constant(src, "MAX_TOP_K"), MAX_TOP_K);
    assert_eq!(source_constant(src, "MAX_HIDDEN"), MAX_HIDDEN);
    assert_eq!(source_constant(src, "MAX_ACT"), MAX_ACT);
    assert!(source_constant(src, "ROUTE_XS") >= MAX_HIDDEN);
    assert_eq!(source_constant(src, "ROUTE_XS"), ROUTE_XS);
    assert_eq!(
        source_constant(src, "NORM_ROW_QUADS"),
        crate::ops::norm::RES_QUADS
    );
    assert_eq!(
        THREADS,
        crate::ops::norm::QUAD_THREADS,
        "the folded norm's block"
    );
    // The norm the router folds in is the norm kernel's: one header for both.
    let norm = crate::ops::norm::sources::OPS_NORM.source;
    assert!(
        norm.contains("namespace headroom_norm_row")
            && MOE_DECODE.source.contains("namespace headroom_norm_row")
    );
    assert_eq!(source_constant(src, "THREADS") as u32, THREADS);
    assert_eq!(source_constant(src, "GATE_UP_COLS"), GATE_UP_COLS);
    assert_eq!(source_constant(src, "GATE_UP_COLS_ROWS"), GATE_UP_COLS_ROWS);
    assert_eq!(THREADS as usize / 32, WARPS);
}

#[test]
fn workspace_parts_are_aligned_and_disjoint() {
    let spec = MoeSpec::all_experts(256, 8, 512, true);
    for rows in 1..=MAX_ROWS {
        let ws = workspace(rows, &spec, 200).unwrap();
        assert_eq!(ws.act_stride, 512);
        let parts = [ws.logits, ws.topk_expert, ws.topk_weight, ws.act];
        assert!(parts.iter().all(|p| p % 16 == 0), "{rows}: {parts:?}");
        assert!(ws.topk_expert >= rows * 257 * 4);
        assert!(ws.topk_weight >= ws.topk_expert + rows * 8 * 4);
        assert!(ws.act >= ws.topk_weight + rows * 8 * 4);
        assert_eq!(ws.bytes, ws.act + rows * 9 * 512 * 4);
    }
    // The moe_d256 fixture's block: top-2 of 8, intermediate 16, shared 24.
    let fixture = MoeSpec::all_experts(8, 2, 16, true);
    let ws = workspace(1, &fixture, 24).unwrap();
    assert_eq!(ws.act_stride, 24);
    assert_eq!(ws.bytes, ws.act + 3 * 24 * 4);
    let odd = MoeSpec::all_experts(6, 2, 24, false);
    assert_eq!(workspace(3, &odd, 40).unwrap().act_stride, 40);
    assert_eq!(workspace(3, &odd, 8).unwrap().act_stride, 24);
    assert_eq!(act_stride(12, 4), 12);
    assert_eq!(act_stride(16, 8), 16);
}

#[test]
fn the_35b_shapes_fit_the_staging_limits() {
    // Qwen3.6-35B-A3B: top-8, intermediate 512 and shared 512.
    assert!(9 * act_stride(512, 512) <= MAX_ACT);
    // Qwen3.5-397B-A17B's block: top-10, intermediate 1024, hidden 4096.
    assert!(11 * act_stride(1024, 1024) <= MAX_ACT);
    const { assert!(4096 <= MAX_HIDDEN) };
}

/// Fake device memory: increasing addresses, 256-byte aligned.
#[derive(Default)]
struct Fake(std::sync::atomic::AtomicU64);
impl crate::alloc::RawMemory for Fake {
    fn malloc(&self, bytes: usize) -> Result<u64, crate::CudaError> {
        let at = self.0.fetch_add(
            bytes.next_multiple_of(256) as u64,
            std::sync::atomic::Ordering::SeqCst,
        );
        Ok(0x1_0000 + at)
    }
    fn free(&self, _ptr: u64) {}
}

/// A weight `[rows][cols]` on fake memory: bf16, or FP8 whose grid restarts
/// every `grid` rows.
fn weight(rows: usize, cols: usize, fp8: Option<usize>) -> CudaWeight {
    let a = crate::alloc::Allocator::new(Box::new(Fake::default()));
    let fp8 = fp8.map(|grid| crate::tensor::Fp8Scales {
        scale_inv: a
            .alloc(rows / grid * grid.div_ceil(128) * cols.div_ceil(128) * 4)
            .unwrap(),
        grid_rows: grid,
    });
    let bytes = rows * cols * if fp8.is_some() { 1 } else { 2 };
    CudaWeight {
        buf: a.alloc(bytes).unwrap(),
        rows,
        cols,
        dtype: Dtype::Bf16,
        fp8,
    }
}

/// A block of `experts` experts (hidden h, intermediate i, shared si), the
/// routed experts FP8 when `routed`, the shared expert's projections FP8
/// where `shared` says.
fn block(
    h: usize,
    i: usize,
    si: usize,
    experts: usize,
    routed: bool,
    shared: [bool; 3],
) -> MoeWeights<CudaWeight> {
    let f = |on: bool, grid: usize| on.then_some(grid);
    MoeWeights {
        router: weight(experts, h, None),
        gate_up: weight(experts * 2 * i, h, f(routed, 2 * i)),
        down: weight(experts * h, i, f(routed, h)),
        shared_gate_proj: weight(si, h, f(shared[0], si)),
        shared_up_proj: weight(si, h, f(shared[1], si)),
        shared_down_proj: weight(h, si, f(shared[2], h)),
        shared_gate: weight(1, h, None),
    }
}

fn act(rows: usize, cols: usize) -> CudaAct {
    let a = crate::alloc::Allocator::new(Box::new(Fake::default()));
    CudaAct {
        buf: a.alloc(rows * cols * 2).unwrap(),
        rows,
        cols,
        dtype: Dtype::Bf16,
        fp8: None,
    }
}

/// Which entries `formats` picks: "bf16", "fp8" (shared FP8), "fp8_sbf16", or "none".
fn picked(w: &MoeWeights<CudaWeight>, spec: &MoeSpec) -> &'static str {
    match formats(w, spec) {
        Some(Formats::Bf16) => "bf16",
        Some(Formats::Fp8 {
            shared: Some(_), ..
        }) => "fp8",
        Some(Formats::Fp8 { shared: None, .. }) => "fp8_sbf16",
        None => "none",
    }
}

#[test]
fn the_weight_formats_pick_their_entries_and_mixed_or_fp8_routers_are_refused() {
    let spec = MoeSpec::all_experts(8, 2, 256, true);
    let (h, i, si) = (192, 256, 96);
    assert_eq!(
        picked(&block(h, i, si, 8, false, [false; 3]), &spec),
        "bf16"
    );
    assert_eq!(picked(&block(h, i, si, 8, true, [true; 3]), &spec), "fp8");
    assert_eq!(
        picked(&block(h, i, si, 8, true, [false; 3]), &spec),
        "fp8_sbf16"
    );
    // A shared expert of mixed formats, or FP8 beside bf16 routed experts.
    assert_eq!(
        picked(&block(h, i, si, 8, true, [true, false, true]), &spec),
        "none"
    );
    assert_eq!(picked(&block(h, i, si, 8, false, [true; 3]), &spec), "none");
    // An FP8 router or shared gate.
    let mut w = block(h, i, si, 8, true, [true; 3]);
    w.router = weight(8, h, Some(8));
    assert_eq!(picked(&w, &spec), "none");
    let mut w = block(h, i, si, 8, true, [true; 3]);
    w.shared_gate = weight(1, h, Some(1));
    assert_eq!(picked(&w, &spec), "none");
    // Experts whose grid is not one per expert (gate and up parts of 192
    // rows stacked into 384-row experts).
    let spec192 = MoeSpec::all_experts(8, 2, 192, true);
    let mut w = block(h, 192, si, 8, true, [true; 3]);
    w.gate_up = weight(8 * 384, h, Some(192));
    assert_eq!(picked(&w, &spec192), "none");
    // The experts' scales are checked against their grids.
    let w = block(h, i, si, 8, true, [true; 3]);
    check_scales(&formats(&w, &spec).unwrap()).unwrap();
}

#[test]
fn fp8_experts_need_dot_lengths_in_chunks_of_16_and_bf16_of_8() {
    let spec = |i: usize| MoeSpec::all_experts(8, 2, i, true);
    let takes_with = |rows: usize, h: usize, i: usize, si: usize, fp8: bool| {
        let w = block(h, i, si, 8, fp8, [fp8; 3]);
        takes(&act(rows, h), &w, &spec(i))
    };
    for fp8 in [false, true] {
        // Tails of the 128-column blocks: hidden 192, intermediate 320, shared 96.
        assert!(takes_with(1, 192, 320, 96, fp8), "{fp8}");
        assert!(takes_with(8, 192, 320, 96, fp8), "{fp8}");
        assert!(!takes_with(9, 192, 320, 96, fp8), "{fp8}: 9 rows");
    }
    // Multiples of 8 that are not of 16: bf16 only.
    for (h, i, si) in [(200, 320, 96), (192, 328, 96), (192, 320, 104)] {
        assert!(takes_with(1, h, i, si, false), "bf16 {h} {i} {si}");
        assert!(!takes_with(1, h, i, si, true), "fp8 {h} {i} {si}");
    }
    assert_eq!(Formats::Bf16.chunk(), 8);
}

/// An activation `[rows][cols]` of `dtype` on fake memory.
fn act_of(rows: usize, cols: usize, dtype: Dtype) -> CudaAct {
    let a = crate::alloc::Allocator::new(Box::new(Fake::default()));
    CudaAct {
        buf: a.alloc(rows * cols * dtype.size_bytes()).unwrap(),
        rows,
        cols,
        dtype,
        fp8: None,
    }
}

/// An f32 vector of `n` on fake memory.
fn f32_vector(n: usize) -> CudaWeight {
    let a = crate::alloc::Allocator::new(Box::new(Fake::default()));
    CudaWeight {
        buf: a.alloc(n * 4).unwrap(),
        rows: 1,
        cols: n,
        dtype: Dtype::F32,
        fp8: None,
    }
}

#[test]
fn the_router_folds_the_norm_in_only_where_the_norm_kernel_would_run() {
    let spec = MoeSpec::all_experts(8, 2, 256, true);
    let takes = |rows: usize, h: usize, res: Dtype, delta: Dtype, norm: usize| {
        let w = block(h, 256, 96, 8, false, [false; 3]);
        takes_after_norm(
            &act_of(rows, h, res),
            &act_of(rows, h, delta),
            &f32_vector(norm),
            &w,
            &spec,
        )
    };
    // The model's: an f32 residual, a bf16 delta, up to 8 rows of 2048.
    assert!(takes(1, 2048, Dtype::F32, Dtype::Bf16, 2048));
    assert!(takes(8, 2048, Dtype::F32, Dtype::Bf16, 2048));
    // 4096 wide: 4 rows fill the router's staging, 5 do not fit it.
    assert!(takes(4, 4096, Dtype::F32, Dtype::Bf16, 4096));
    assert!(!takes(5, 4096, Dtype::F32, Dtype::Bf16, 4096));
    // Wider than the norm kernel's quads; a bf16 residual; an f32 delta; a
    // norm of another length; more rows than the decode kernels take.
    assert!(!takes(1, 4104, Dtype::F32, Dtype::Bf16, 4104));
    assert!(!takes(1, 2048, Dtype::Bf16, Dtype::Bf16, 2048));
    assert!(!takes(1, 2048, Dtype::F32, Dtype::F32, 2048));
    assert!(!takes(1, 2048, Dtype::F32, Dtype::Bf16, 2047));
    assert!(!takes(9, 1024, Dtype::F32, Dtype::Bf16, 1024));
}

#[test]
fn one_row_takes_the_narrow_gate_up_and_more_rows_its_rows_twin() {
    let compiled = crate::ops::moe::sources::MOE_DECODE.entry_points;
    for suffix in ["", "_fp8", "_fp8_sbf16"] {
        let [one, wide, down] = entries(suffix);
        assert_eq!(one, format!("moe_decode_gate_up{suffix}"));
        assert_eq!(wide, format!("moe_decode_gate_up{suffix}_rows"));
        assert_eq!(down, format!("moe_decode_down{suffix}"));
        assert!([one, wide, down].iter().all(|e| compiled.contains(e)));
        // A hidden no tensor-core gate_up takes (past 2,048).
        let h100 = (9, 0);
        assert_eq!(gate_up_for(suffix, 1, h100, 4096), (one, GATE_UP_COLS));
        for rows in 2..=MAX_ROWS {
            assert_eq!(
                gate_up_for(suffix, rows, h100, 4096),
                (wide, GATE_UP_COLS_ROWS),
                "{rows} rows"
            );
        }
        // An intermediate no tensor-core down takes (past 512).
        assert_eq!(
            down_for(suffix, h100, 2048, 1024, 512),
            (down, WARPS, THREADS)
        );
        // Where the tensor-core kernels take the shape: bf16 experts from
        // sm_80 (gate_up at one row and from three rows, down at every row
        // count), FP8 routed and shared experts from sm_89 at every row
        // count (not FP8 routed experts beside a bf16 shared expert).
        for rows in 1..=MAX_ROWS {
            let mma_gate_up = match (suffix, rows) {
                ("", 1) => Some(("moe_decode_gate_up_mma", GATE_UP_COLS)),
                ("", 2) => None,
                ("", _) => Some(("moe_decode_gate_up_mma_rows", GATE_UP_COLS_ROWS)),
                ("_fp8", 1) => Some(("moe_decode_gate_up_fp8_mma", GATE_UP_COLS)),
                ("_fp8", _) => Some(("moe_decode_gate_up_fp8_mma_rows", GATE_UP_COLS_ROWS)),
                _ => None,
            };
            let (gu, cols) = gate_up_for(suffix, rows, h100, 2048);
            let plain = gate_up_for(suffix, rows, h100, 4096);
            let want = mma_gate_up.unwrap_or(plain);
            assert_eq!((gu, cols), want, "{suffix} {rows} rows");
            assert!(compiled.contains(&gu));
            let on_ampere = if suffix.is_empty() { want } else { plain };
            assert_eq!(
                gate_up_for(suffix, rows, (8, 0), 2048),
                on_ampere,
                "{suffix} {rows} rows on sm_80"
            );
            assert_eq!(gate_up_for(suffix, rows, (7, 5), 2048), plain);
        }
        let want = match suffix {
            "" => ("moe_decode_down_mma", DOWN_MMA_TILE_BF16, DOWN_MMA_THREADS),
            "_fp8" => ("moe_decode_down_fp8_mma", DOWN_MMA_TILE, DOWN_MMA_THREADS),
            _ => (down, WARPS, THREADS),
        };
        assert_eq!(down_for(suffix, h100, 2048, 512, 512), want);
        assert!(compiled.contains(&want.0));
        let on_ampere = if suffix.is_empty() {
            want
        } else {
            (down, WARPS, THREADS)
        };
        assert_eq!(down_for(suffix, (8, 0), 2048, 512, 512), on_ampere);
    }
}

#[test]
fn the_down_takes_the_tensor_cores_for_whole_tiles_and_rounds() {
    let src = crate::ops::moe::sources::MOE_DECODE.source;
    assert_eq!(source_constant(src, "DOWN_MMA_TILE"), DOWN_MMA_TILE);
    assert_eq!(source_constant(src, "DOWN_BF_TILE"), DOWN_MMA_TILE_BF16);
    assert_eq!(
        source_constant(src, "DOWN_MMA_WARPS") * 32,
        DOWN_MMA_THREADS as usize
    );
    assert_eq!(
        source_constant(src, "DOWN_MMA_ROUNDS") * 64,
        DOWN_MMA_MAX_INTER
    );
    assert_eq!(
        source_constant(src, "DOWN_BF_ROUNDS") * 64,
        DOWN_MMA_MAX_INTER
    );
    let h100 = (9, 0);
    for f in [Mma::Bf16, Mma::Fp8] {
        // The 35B-A3B shape: hidden 2048, 512 and 512.
        assert!(down_mma_takes(f, h100, 2048, 512, 512));
        assert!(down_mma_takes(f, h100, 16, 64, 64));
        // A tail in hidden, rounds not whole, past the limit, empty.
        assert!(!down_mma_takes(f, h100, 2052, 512, 512));
        assert!(!down_mma_takes(f, h100, 2048, 520, 512));
        assert!(!down_mma_takes(f, h100, 2048, 512, 1024));
        assert!(!down_mma_takes(f, h100, 2048, 0, 512));
        assert!(!down_mma_takes(f, h100, 2048, 512, 96));
    }
    // bf16 tiles of 8 output columns, FP8 ones of 16.
    assert!(down_mma_takes(Mma::Bf16, h100, 2056, 512, 512));
    assert!(!down_mma_takes(Mma::Fp8, h100, 2056, 512, 512));
    // bf16 on the tensor cores from sm_80 (Ampere); the e4m3 conversion
    // from sm_89 (Ada) on, so Ampere keeps the FP8 FMA kernel.
    assert!(down_mma_takes(Mma::Bf16, (8, 0), 2048, 512, 512));
    assert!(!down_mma_takes(Mma::Bf16, (7, 5), 2048, 512, 512));
    assert!(down_mma_takes(Mma::Fp8, (8, 9), 2048, 512, 512));
    assert!(!down_mma_takes(Mma::Fp8, (8, 6), 2048, 512, 512));
    assert!(!down_mma_takes(Mma::Fp8, (8, 0), 2048, 512, 512));
}

#[test]
fn the_gate_up_takes_the_tensor_cores_for_whole_rounds_up_to_2048() {
    let src = crate::ops::moe::sources::MOE_DECODE.source;
    // A CTA's columns: GU_MMA_TILES tiles of 8, as GATE_UP_COLS columns of
    // WARPS warps (the launcher's grid).
    assert_eq!(
        source_constant(src, "GU_MMA_TILES") * 8,
        WARPS * GATE_UP_COLS
    );
    assert_eq!(
        source_constant(src, "GU_MMA_TILES_ROWS") * 8,
        WARPS * GATE_UP_COLS_ROWS
    );
    assert_eq!(source_constant(src, "GU_MMA_ROUNDS") * 64 * WARPS, 2048);
    assert_eq!(source_constant(src, "GU_BF_STAGE") * 2 * 32 * WARPS, 2048);
    let h100 = (9, 0);
    for f in [Mma::Bf16, Mma::Fp8] {
        assert!(gate_up_mma_takes(f, h100, 2048));
        assert!(gate_up_mma_takes(f, h100, 64));
        assert!(!gate_up_mma_takes(f, h100, 2112));
        assert!(!gate_up_mma_takes(f, h100, 4096));
        assert!(!gate_up_mma_takes(f, h100, 2000));
        assert!(!gate_up_mma_takes(f, h100, 0));
    }
    // bf16 rounds are 32 columns, FP8 ones 64.
    assert!(gate_up_mma_takes(Mma::Bf16, h100, 96));
    assert!(!gate_up_mma_takes(Mma::Fp8, h100, 96));
    assert!(gate_up_mma_takes(Mma::Bf16, (8, 0), 2048));
    assert!(!gate_up_mma_takes(Mma::Bf16, (7, 5), 2048));
    assert!(gate_up_mma_takes(Mma::Fp8, (8, 9), 2048));
    assert!(!gate_up_mma_takes(Mma::Fp8, (8, 0), 2048));
}
