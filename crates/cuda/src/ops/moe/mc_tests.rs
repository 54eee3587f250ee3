//! The cluster-multicast grouped GEMMs (`moe_grouped_gemm_mc.cu`) without a
//! device: launch constants equal to the kernel's, which kernels run for
//! which shapes, grids of whole clusters (the NVRTC compile check is in
//! `sources.rs`).

use super::gemm::{MC_CLUSTER, MC_MAX_EXPERTS, MC_SMEM_DOWN, MC_SMEM_GATE_UP};
use super::sources::MOE_GROUPED_GEMM_MC;
use super::*;
use crate::kernels::source_constant as constant;

#[test]
fn cluster_launch_constants_match_their_kernel_source() {
    let src = MOE_GROUPED_GEMM_MC.source;
    assert_eq!(constant(src, "BM"), GEMM_BM);
    assert_eq!(constant(src, "BN"), WIDE_BN);
    assert_eq!(constant(src, "BK"), GEMM_BK);
    assert_eq!(constant(src, "STAGES"), 4);
    assert_eq!(constant(src, "WARPGROUPS") * 128, GEMM_THREADS);
    assert_eq!(constant(src, "CLUSTER"), MC_CLUSTER);
    assert_eq!(constant(src, "MAX_EXPERTS"), MC_MAX_EXPERTS);
    assert!(src.contains("SMEM_GATE_UP = STAGES * STAGE_BYTES + BAR_BYTES + TABLE_BYTES + 1024;"));
    assert!(src.contains("SMEM_DOWN = SMEM_GATE_UP + WARPGROUPS * EPI_BYTES;"));
    assert!(src.contains("BAR_BYTES = 2 * STAGES * 8;"));
    assert!(src.contains("TABLE_BYTES = (MAX_EXPERTS + 1) * 4;"));
    assert_eq!(MC_SMEM_GATE_UP, 198_724);
    assert_eq!(MC_SMEM_DOWN, 231_492);
    // The 32 bytes of static shared memory and the driver's 1 KiB reserve
    // still fit one CTA in an SM's 228 KiB.
    const { assert!(MC_SMEM_DOWN + 32 + 1024 <= 228 * 1024) };
    // Each CTA's TMA box is half of B: 128 weight rows of 64.
    assert_eq!(constant(src, "BN") / MC_CLUSTER, 128);
    assert_eq!(
        MOE_GROUPED_GEMM_MC.entry_points,
        [
            GemmImpl::Cluster.gate_up(512).entry,
            GemmImpl::Cluster.down(2048).entry
        ]
    );
    assert_eq!(MOE_GROUPED_GEMM_MC.required_arch(), Some("sm_90a"));
}

#[test]
fn cluster_kernels_run_where_the_wide_ones_would_and_fall_back_the_same_way() {
    let c = GemmImpl::Cluster;
    let g = c.gate_up(512);
    assert_eq!(g.entry, "moe_gemm_gate_up_mc_bf16");
    assert_eq!(
        (g.tile_cols, g.smem, g.threads, g.persistent, g.cluster),
        (128, MC_SMEM_GATE_UP, 256, true, 2)
    );
    let d = c.down(2048);
    assert_eq!(d.entry, "moe_gemm_down_mc_bf16");
    assert_eq!((d.tile_cols, d.smem, d.cluster), (256, MC_SMEM_DOWN, 2));
    // Shapes the wide tiles do not divide run the 128 x 128 wgmma kernels.
    assert_eq!(c.gate_up(192), GemmImpl::Wgmma.gate_up(192));
    assert_eq!(c.down(384), GemmImpl::Wgmma.down(384));
    assert_eq!(c.gate_up(192).cluster, 1);
    // No other family runs in clusters.
    for imp in [
        GemmImpl::MmaSync,
        GemmImpl::Wgmma,
        GemmImpl::Wide,
        GemmImpl::Stream,
    ] {
        assert_eq!((imp.gate_up(512).cluster, imp.down(2048).cluster), (1, 1));
        assert_eq!(imp.for_experts(1024), imp);
    }
    // Past 256 local experts the pair table does not fit: the wide kernels.
    assert_eq!(c.for_experts(MC_MAX_EXPERTS), GemmImpl::Cluster);
    assert_eq!(c.for_experts(MC_MAX_EXPERTS + 1), GemmImpl::Wide);
    assert!(c.hopper_only());
    // Never the default (until the H200 says it wins).
    for pairs in [1, 4096, WIDE_PAIRS, 32_768 * 8] {
        assert_ne!(GemmImpl::for_pass("sm_90a", pairs, 256), GemmImpl::Cluster);
    }
}

#[test]
fn cluster_grids_are_whole_clusters_of_pairs_up_to_the_resident_ones() {
    let (g, d) = (GemmImpl::Cluster.gate_up(512), GemmImpl::Cluster.down(2048));
    // 8,192 tokens of top-8 over 256 experts: plenty of pairs, 66 clusters
    // resident on 132 SMs.
    let rt = max_row_tiles(8192 * 8, 256);
    assert_eq!(g.cluster_grid(rt, 256, 512, 66), 132);
    assert_eq!(d.cluster_grid(rt, 256, 2048, 60), 120);
    // One row tile of one expert: one pair a column tile (4 of act's 512).
    assert_eq!(g.cluster_grid(1, 1, 512, 66), 2 * 4);
    // Three row tiles over two experts: at most 2 pairs (2 + 1 tiles).
    assert_eq!(d.cluster_grid(3, 2, 2048, 66), 2 * 2 * 8);
    // Many experts with one tile each: a pair per tile.
    assert_eq!(d.cluster_grid(5, 256, 256, 66), 2 * 5);
    // Never an empty grid.
    assert_eq!(d.cluster_grid(0, 8, 256, 66), 2);
    for ctas in [
        g.cluster_grid(rt, 256, 512, 66),
        d.cluster_grid(3, 2, 2048, 7),
    ] {
        assert!(crate::device::check_cluster_grid(ctas, MC_CLUSTER).is_ok());
    }
}

#[test]
fn warp_specialized_kernels_match_their_source_and_run_where_cluster_would() {
    use super::gemm::WS_THREADS;
    use super::sources::MOE_GROUPED_GEMM_WS;
    let src = MOE_GROUPED_GEMM_WS.source;
    assert_eq!(constant(src, "BM"), GEMM_BM);
    assert_eq!(constant(src, "BN"), WIDE_BN);
    assert_eq!(constant(src, "BK"), GEMM_BK);
    assert_eq!(constant(src, "STAGES"), 4);
    assert_eq!(constant(src, "MAX_EXPERTS"), MC_MAX_EXPERTS);
    assert!(src.contains("THREADS = MMA_THREADS + PRODUCER_THREADS;"));
    assert_eq!(constant(src, "PRODUCER_THREADS"), 128);
    assert_eq!(constant(src, "WARPGROUPS") * 128 + 128, WS_THREADS);
    // The same shared-memory layout as the cluster kernels.
    assert!(src.contains("SMEM_GATE_UP = STAGES * STAGE_BYTES + BAR_BYTES + TABLE_BYTES + 1024;"));
    assert!(src.contains("SMEM_DOWN = SMEM_GATE_UP + WARPGROUPS * EPI_BYTES;"));
    assert!(src.contains("BAR_BYTES = 2 * STAGES * 8;"));
    assert!(src.contains("TABLE_BYTES = (MAX_EXPERTS + 1) * 4;"));
    let (cw, ws) = (GemmImpl::ClusterWs, GemmImpl::Ws);
    assert_eq!(
        MOE_GROUPED_GEMM_WS.entry_points,
        [
            cw.gate_up(512).entry,
            cw.down(2048).entry,
            ws.gate_up(512).entry,
            ws.down(2048).entry
        ]
    );
    assert_eq!(MOE_GROUPED_GEMM_WS.required_arch(), Some("sm_90a"));
    for (imp, cluster) in [(cw, MC_CLUSTER), (ws, 1)] {
        let (g, d) = (imp.gate_up(512), imp.down(2048));
        assert_eq!(
            (
                g.tile_cols,
                g.smem,
                g.threads,
                g.persistent,
                g.cluster,
                g.tma_map
            ),
            (128, MC_SMEM_GATE_UP, WS_THREADS, true, cluster, true)
        );
        assert_eq!(
            (d.tile_cols, d.smem, d.cluster),
            (256, MC_SMEM_DOWN, cluster)
        );
        assert_eq!(imp.gate_up(192), GemmImpl::Wgmma.gate_up(192));
        assert_eq!(imp.down(384), GemmImpl::Wgmma.down(384));
        assert_eq!(imp.for_experts(MC_MAX_EXPERTS), imp);
        assert_eq!(imp.for_experts(MC_MAX_EXPERTS + 1), GemmImpl::Wide);
        assert!(imp.hopper_only());
        for pairs in [1, 4096, WIDE_PAIRS, 32_768 * 8] {
            assert_ne!(GemmImpl::for_pass("sm_90a", pairs, 256), imp);
        }
    }
    // Ws: one CTA per SM walking the tiles (no clusters).
    let rt = max_row_tiles(8192 * 8, 256);
    assert_eq!(ws.gate_up(512).grid(rt, 512, 132), 132);
    assert_eq!(ws.down(2048).grid(3, 2048, 132), 24);
}
