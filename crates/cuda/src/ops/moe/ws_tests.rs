//! The warp-specialised grouped GEMMs (`moe_grouped_gemm_ws.cu`,
//! [`GemmImpl::Ws`]) and the per-pass dispatch without a device: launch
//! constants equal to the kernel's, which kernels run for which shapes and
//! passes (the NVRTC compile check is in `sources.rs`).

use super::sources::MOE_GROUPED_GEMM_WS;
use super::*;
use crate::kernels::source_constant as constant;

#[test]
fn warp_specialized_launch_constants_match_their_kernel_source() {
    let src = MOE_GROUPED_GEMM_WS.source;
    assert_eq!(constant(src, "BM"), GEMM_BM);
    assert_eq!(constant(src, "BN"), WS_BN);
    assert_eq!(constant(src, "BK"), GEMM_BK);
    assert_eq!(constant(src, "STAGES"), 4);
    assert_eq!(constant(src, "MAX_EXPERTS"), WS_MAX_EXPERTS);
    assert!(src.contains("THREADS = MMA_THREADS + PRODUCER_THREADS;"));
    assert_eq!(constant(src, "PRODUCER_THREADS"), 128);
    assert_eq!(constant(src, "WARPGROUPS") * 128 + 128, WS_THREADS);
    assert_eq!(constant(src, "EPI_COLS"), 128);
    assert!(src.contains("SMEM_GATE_UP = STAGES * STAGE_BYTES + BAR_BYTES + TABLE_BYTES + 1024;"));
    assert!(src.contains("SMEM_DOWN = SMEM_GATE_UP + WARPGROUPS * EPI_BYTES;"));
    assert!(src.contains("BAR_BYTES = 2 * STAGES * 8;"));
    assert!(src.contains("TABLE_BYTES = (MAX_EXPERTS + 1) * 4;"));
    assert_eq!(WS_SMEM_GATE_UP, 198_724);
    assert_eq!(WS_SMEM_DOWN, 231_492);
    // The 32 bytes of static shared memory and the driver's 1 KiB reserve
    // still fit one CTA in an SM's 228 KiB.
    const { assert!(WS_SMEM_DOWN + 32 + 1024 <= 228 * 1024) };
    // B's two TMA boxes: 128 weight rows of 64 each (the tensor map's box).
    assert_eq!(constant(src, "BN") / 2, 128);
    let ws = GemmImpl::Ws;
    assert_eq!(
        MOE_GROUPED_GEMM_WS.entry_points,
        [ws.gate_up(512).entry, ws.down(2048).entry]
    );
    assert_eq!(MOE_GROUPED_GEMM_WS.required_arch(), Some("sm_90a"));
    // No cluster left in the kernels.
    assert!(!src.contains("multicast") && !src.contains("cluster_sync"));
}

#[test]
fn warp_specialized_kernels_run_where_the_shape_divides_their_tiles_and_fall_back_otherwise() {
    let ws = GemmImpl::Ws;
    let (g, d) = (ws.gate_up(512), ws.down(2048));
    assert_eq!(
        (g.entry, d.entry),
        ("moe_gemm_gate_up_ws_bf16", "moe_gemm_down_ws_bf16")
    );
    assert_eq!(
        (
            g.tile_cols,
            g.smem,
            g.threads,
            g.persistent,
            g.ctas_per_sm,
            g.tma_map
        ),
        (128, WS_SMEM_GATE_UP, WS_THREADS, true, 1, true)
    );
    assert_eq!(
        (d.tile_cols, d.smem, d.threads, d.persistent, d.tma_map),
        (256, WS_SMEM_DOWN, WS_THREADS, true, true)
    );
    // Intermediate 192 and hidden 384 are not whole 128 x 256 tiles: that
    // GEMM runs the 128 x 128 wgmma kernel, the other stays.
    assert_eq!(ws.gate_up(192), GemmImpl::Wgmma.gate_up(192));
    assert_eq!(ws.down(384), GemmImpl::Wgmma.down(384));
    assert_eq!(ws.down(256).entry, "moe_gemm_down_ws_bf16");
    assert_eq!(ws.gate_up(128).entry, "moe_gemm_gate_up_ws_bf16");
    // Past 256 local experts the tile table does not fit: the 128 x 128 tiles.
    assert_eq!(ws.for_experts(WS_MAX_EXPERTS), GemmImpl::Ws);
    assert_eq!(ws.for_experts(WS_MAX_EXPERTS + 1), GemmImpl::Wgmma);
    for imp in [GemmImpl::MmaSync, GemmImpl::Wgmma, GemmImpl::Stream] {
        assert_eq!(imp.for_experts(1024), imp);
        assert!(!imp.gate_up(512).tma_map && !imp.down(2048).tma_map);
    }
    assert!(ws.hopper_only());
    // One CTA per SM walking the tiles, never more than the tiles.
    let rt = max_row_tiles(8192 * 8, 256);
    assert_eq!(g.grid(rt, 512, 132), 132);
    assert_eq!(d.grid(100, 2048, 132), 132);
    assert_eq!(d.grid(3, 2048, 132), 24);
}

#[test]
fn hopper_runs_the_warp_specialized_tiles_from_2048_tokens_of_top_8() {
    let e = 256;
    assert_eq!(WS_PAIRS, 2048 * 8);
    for pairs in [WS_PAIRS, 8192 * 8, 32_768 * 8, usize::MAX] {
        assert_eq!(GemmImpl::for_pass("sm_90a", pairs, e), GemmImpl::Ws);
    }
    // Between the streaming bar (16 pairs an expert) and WS_PAIRS: 128 x 128.
    for pairs in [513 * 8, 1024 * 8, WS_PAIRS - 1] {
        assert_eq!(GemmImpl::for_pass("sm_90a", pairs, e), GemmImpl::Wgmma);
    }
    // Few experts: the streaming bar is low, Ws still from WS_PAIRS.
    assert_eq!(GemmImpl::for_pass("sm_90a", 129, 8), GemmImpl::Wgmma);
    assert_eq!(GemmImpl::for_pass("sm_90a", WS_PAIRS, 8), GemmImpl::Ws);
    // A pass the streaming kernels take even past WS_PAIRS (1,024 experts).
    assert_eq!(
        GemmImpl::for_pass("sm_90a", WS_PAIRS, 1024),
        GemmImpl::Stream
    );
    // Off Hopper, mma.sync whatever the pass.
    for arch in ["sm_80", "sm_89", "sm_90", "sm_100"] {
        for pairs in [1, WS_PAIRS, 1 << 20] {
            assert_eq!(GemmImpl::for_pass(arch, pairs, e), GemmImpl::MmaSync);
        }
    }
    // Untileable shapes and too many local experts under the default.
    let imp = GemmImpl::for_pass("sm_90a", WS_PAIRS, e);
    assert_eq!(imp.down(384), GemmImpl::Wgmma.down(384));
    assert_eq!(imp.for_experts(512), GemmImpl::Wgmma);
}
