//! The kernel sources of the sparse MoE and the entry points each exports
//! (referenced from the registry's `SOURCES` list in `crate::kernels`).

use crate::kernels::source::KernelSource;

/// A warpgroup-MMA grouped-GEMM source (sm_90a) with the headers compiled in
/// front of it: the cp.async and wgmma wrappers, any further headers named
/// after the file (e.g. the TMA helpers), the tile list and the grouped
/// GEMMs' shared pieces (`moe_gemm_common.cuh`, `moe_wgmma_common.cuh`), then
/// any headers named after a `;` (those that use the tile list).
macro_rules! wgmma_gemm_source {
    ($file:literal $(, $header:literal)* $(; $after:literal)*) => {
        concat!(
            include_str!("../../kernels/async_copy.cuh"),
            include_str!("../../kernels/wgmma_sync.cuh"),
            include_str!("../../kernels/mma_sync.cuh"),
            $(include_str!($header),)*
            include_str!("moe_tile_list.cuh"),
            include_str!("moe_gemm_common.cuh"),
            include_str!("moe_wgmma_common.cuh"),
            $(include_str!($after),)*
            include_str!($file)
        )
    };
}

/// Sparse-MoE routing, expert-order bookkeeping and the weighted combine
/// (with the next layer's input norm folded in: the norm's row code in front).
pub const MOE_ROUTE: KernelSource = KernelSource {
    name: "moe_route",
    file: "moe_route.cu",
    source: concat!(
        include_str!("../../kernels/e4m3_quant.cuh"),
        include_str!("../norm/norm_row.cuh"),
        include_str!("../norm/norm_row_out.cuh"),
        include_str!("moe_route.cu")
    ),
    entry_points: &[
        "moe_route",
        "moe_route_wide",
        "moe_scatter",
        "moe_combine",
        "moe_combine_shared",
        "moe_combine_shared_norm",
        "moe_combine_shared_norm_fp8",
    ],
};

/// Grouped GEMMs of the routed experts, gate+up with SiLU·mul and down.
pub const MOE_GROUPED_GEMM: KernelSource = KernelSource {
    name: "moe_grouped_gemm",
    file: "moe_grouped_gemm.cu",
    source: concat!(
        include_str!("../../kernels/async_copy.cuh"),
        include_str!("../../kernels/mma_sync.cuh"),
        include_str!("moe_gemm_common.cuh"),
        include_str!("moe_grouped_gemm.cu")
    ),
    entry_points: &["moe_gemm_gate_up_bf16", "moe_gemm_down_bf16"],
};

/// The same grouped GEMMs on Hopper warpgroup MMA (sm_90a only).
pub const MOE_GROUPED_GEMM_WGMMA: KernelSource = KernelSource {
    name: "moe_grouped_gemm_wgmma",
    file: "moe_grouped_gemm_wgmma.cu",
    source: wgmma_gemm_source!("moe_grouped_gemm_wgmma.cu"),
    entry_points: &["moe_gemm_gate_up_wgmma_bf16", "moe_gemm_down_wgmma_s_bf16"],
};

/// The routed experts' grouped GEMMs on block-scaled FP8 experts and
/// activations (e4m3 wgmma with per-128-K promotion; sm_90a only).
pub const MOE_GROUPED_GEMM_FP8: KernelSource = KernelSource {
    name: "moe_grouped_gemm_fp8",
    file: "moe_grouped_gemm_fp8.cu",
    source: wgmma_gemm_source!("moe_grouped_gemm_fp8.cu"),
    entry_points: &["moe_gemm_gate_up_fp8", "moe_gemm_down_fp8"],
};

/// The routed experts' grouped GEMMs warp-specialised on 128 x 256 wgmma
/// tiles: a producer warpgroup loading (A by cp.async, B by TMA), two MMA
/// warpgroups on mbarriers, no CTA barrier in the k-loop (sm_90a only).
pub const MOE_GROUPED_GEMM_WS: KernelSource = KernelSource {
    name: "moe_grouped_gemm_ws",
    file: "moe_grouped_gemm_ws.cu",
    source: wgmma_gemm_source!("moe_grouped_gemm_ws.cu", "../../kernels/tma.cuh"; "moe_ws_common.cuh"),
    entry_points: &["moe_gemm_gate_up_ws_bf16", "moe_gemm_down_ws_bf16"],
};

/// The warp-specialised grouped GEMMs on block-scaled FP8 experts and
/// activations: the producer / consumer structure of
/// [`MOE_GROUPED_GEMM_WS`] on 128 x 128 tiles, the per-128-K promotion of
/// [`MOE_GROUPED_GEMM_FP8`] (sm_90a only).
pub const MOE_GROUPED_GEMM_WS_FP8: KernelSource = KernelSource {
    name: "moe_grouped_gemm_ws_fp8",
    file: "moe_grouped_gemm_ws_fp8.cu",
    source: wgmma_gemm_source!("moe_grouped_gemm_ws_fp8.cu", "../../kernels/tma.cuh"; "moe_ws_common.cuh"),
    entry_points: &["moe_gemm_gate_up_ws_fp8", "moe_gemm_down_ws_fp8"],
};

/// The routed experts' grouped GEMMs for a few rows per expert: weights
/// streamed through a persistent cp.async ring, mma.sync (any sm_80+ GPU).
pub const MOE_GROUPED_GEMM_STREAM: KernelSource = KernelSource {
    name: "moe_grouped_gemm_stream",
    file: "moe_grouped_gemm_stream.cu",
    source: concat!(
        include_str!("../../kernels/async_copy.cuh"),
        include_str!("../../kernels/mma_sync.cuh"),
        include_str!("moe_tile_list.cuh"),
        include_str!("moe_gemm_common.cuh"),
        include_str!("moe_grouped_gemm_stream.cu")
    ),
    entry_points: &["moe_gemm_gate_up_stream_bf16", "moe_gemm_down_stream_bf16"],
};

/// The MoE block for a few rows (decode) in three launches ([`super::decode`]),
/// bf16 or FP8 experts.
pub const MOE_DECODE: KernelSource = KernelSource {
    name: "moe_decode",
    file: "moe_decode.cu",
    source: concat!(
        include_str!("../../kernels/pdl.cuh"),
        include_str!("../../kernels/mma_sync.cuh"),
        include_str!("../norm/norm_row.cuh"),
        include_str!("moe_decode_common.cuh"),
        include_str!("../../kernels/e4m3.cuh"),
        include_str!("moe_decode_fp8.cuh"),
        include_str!("moe_decode.cu"),
        include_str!("moe_decode_down_mma.cu"),
        include_str!("moe_decode_gate_up_mma.cu")
    ),
    entry_points: &[
        "moe_decode_route",
        "moe_decode_route_norm",
        "moe_decode_gate_up",
        "moe_decode_down",
        "moe_decode_gate_up_fp8",
        "moe_decode_down_fp8",
        "moe_decode_gate_up_fp8_sbf16",
        "moe_decode_down_fp8_sbf16",
        "moe_decode_gate_up_rows",
        "moe_decode_gate_up_fp8_rows",
        "moe_decode_gate_up_fp8_sbf16_rows",
        "moe_decode_down_fp8_mma",
        "moe_decode_gate_up_fp8_mma",
        "moe_decode_down_mma",
        "moe_decode_gate_up_mma",
        "moe_decode_gate_up_fp8_mma_rows",
        "moe_decode_gate_up_mma_rows",
    ],
};

#[cfg(test)]
mod tests {
    // The warp-specialised kernels compile without spills and without ptxas
    // serialising their wgmma (the other grouped GEMMs' checks are the
    // kernel gate's `headroom kernels build`).
    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn every_entry_compiles_for_sm_90a_without_spills() {
        for k in [&super::MOE_GROUPED_GEMM_WS, &super::MOE_GROUPED_GEMM_WS_FP8] {
            let c = crate::nvrtc::compile_sm90a_without_spills(k);
            println!("{}", c.log);
            assert!(
                !c.log.contains("Potential Performance Loss"),
                "ptxas serialised the wgmma pipe of {}:\n{}",
                k.name,
                c.log
            );
        }
    }
}
