//! The kernel registry: every kernel source embedded in this binary
//! ([`SOURCES`]) and the entry points each must export. Each op folder of
//! `crate::ops` declares its sources beside its launcher; this is the one
//! list of them all: the artifact gate checks it, the device loads from it.
//! `pdl.cuh` here is the header shared by several sources.

mod source;
#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) use source::source_constant;
pub use source::KernelSource;

use crate::ops::attention::sources::{
    ATTENTION_FUSED, ATTENTION_FUSED_WGMMA, ATTENTION_PREP, MASKED_SOFTMAX,
};
use crate::ops::gemv::sources::GEMV;
use crate::ops::kv::sources::OPS_KV;
use crate::ops::norm::sources::OPS_NORM;
use crate::ops::pointwise::sources::OPS_POINTWISE;
use crate::ops::rope::sources::OPS_ROPE;
use crate::ops::sample::sources::OPS_SAMPLE;

/// Gated delta rule, chunked prefill form: the per-chunk prep (`ops::gdn`).
pub const GDN_CHUNK_PREP: KernelSource = KernelSource {
    name: "gdn_chunk_prep",
    file: "gdn_chunk_prep.cu",
    source: concat!(
        include_str!("gdn_common.cuh"),
        include_str!("gdn_prep_tf32.cuh"),
        include_str!("gdn_chunk_prep.cu")
    ),
    entry_points: &[
        "gdn_chunk_prep_v3_bf16",
        "gdn_chunk_prep_v4_bf16",
        "gdn_chunk_prep_v5_bf16",
        "gdn_chunk_prep_v6_bf16",
    ],
};

/// Gated delta rule, chunked prefill form: the scan over chunks (`ops::gdn`).
pub const GDN_CHUNKED: KernelSource = KernelSource {
    name: "gdn_chunked",
    file: "gdn_chunked.cu",
    source: concat!(
        include_str!("gdn_common.cuh"),
        include_str!("gdn_chunked.cu")
    ),
    entry_points: &[
        "gdn_chunk_scan_bf16",
        "gdn_chunk_scan_bv64_bf16",
        "gdn_chunk_scan_v3_bf16",
        "gdn_chunk_scan_v3_bv64_bf16",
        "gdn_chunk_scan_v3deep_bf16",
        "gdn_chunk_scan_v5_bf16",
        "gdn_chunk_scan_v6_bf16",
    ],
};

/// Gated delta rule, recurrent decode step (`ops::gdn`).
pub const GDN_RECURRENT: KernelSource = KernelSource {
    name: "gdn_recurrent",
    file: "gdn_recurrent.cu",
    source: include_str!("gdn_recurrent.cu"),
    entry_points: &["gdn_recurrent_step_bf16"],
};

/// The GDN layer core for one-row sequences in one launch: conv, gating,
/// recurrent rule, gated norm (`backend::gdn_decode`).
pub const GDN_DECODE: KernelSource = KernelSource {
    name: "gdn_decode",
    file: "gdn_decode.cu",
    source: concat!(include_str!("pdl.cuh"), include_str!("gdn_decode.cu")),
    entry_points: &["gdn_decode_step_bf16"],
};

/// Synthetic weight draws (`headroom_core::ops::rng::normal` on the device).
pub const OPS_INIT: KernelSource = KernelSource {
    name: "ops_init",
    file: "ops_init.cu",
    source: include_str!("ops_init.cu"),
    entry_points: &["init_normal_bf16"],
};

/// Causal depthwise conv1d + SiLU with per-slot state.
pub const OPS_CONV1D: KernelSource = KernelSource {
    name: "ops_conv1d",
    file: "ops_conv1d.cu",
    source: include_str!("ops_conv1d.cu"),
    entry_points: &[
        "conv1d_silu_f32w",
        "conv1d_silu_k4_f32w",
        "conv1d_silu_bf16w",
        "conv_state_advance_bf16",
        "conv1d_silu_k4x8_f32w",
        "conv_state_advance_cu_bf16",
    ],
};

/// Sparse-MoE routing, expert-order bookkeeping and the weighted combine (`ops::moe`).
pub const MOE_ROUTE: KernelSource = KernelSource {
    name: "moe_route",
    file: "moe_route.cu",
    source: include_str!("moe_route.cu"),
    entry_points: &[
        "moe_route",
        "moe_offsets",
        "moe_scatter",
        "moe_combine",
        "moe_combine_shared",
    ],
};

/// Grouped GEMMs of the routed experts, gate+up with SiLU·mul and down (`ops::moe`).
pub const MOE_GROUPED_GEMM: KernelSource = KernelSource {
    name: "moe_grouped_gemm",
    file: "moe_grouped_gemm.cu",
    source: include_str!("moe_grouped_gemm.cu"),
    entry_points: &["moe_gemm_gate_up_bf16", "moe_gemm_down_bf16"],
};

/// Shape-general fallbacks of the gated delta rule and the routed experts
/// (small models; `backend::fallback`).
pub const OPS_FALLBACK: KernelSource = KernelSource {
    name: "ops_fallback",
    file: "ops_fallback.cu",
    source: include_str!("ops_fallback.cu"),
    entry_points: &[
        "gdn_recurrent_any_bf16",
        "moe_dense_route",
        "swiglu_halves_bf16",
        "moe_dense_accumulate",
    ],
};

/// The same grouped GEMMs on Hopper warpgroup MMA (sm_90a only).
pub const MOE_GROUPED_GEMM_WGMMA: KernelSource = KernelSource {
    name: "moe_grouped_gemm_wgmma",
    file: "moe_grouped_gemm_wgmma.cu",
    source: include_str!("moe_grouped_gemm_wgmma.cu"),
    entry_points: &[
        "moe_gemm_gate_up_wgmma_bf16",
        "moe_gemm_down_wgmma_bf16",
        "moe_gemm_down_wgmma_s_bf16",
    ],
};

/// The routed experts' grouped GEMMs on 128 x 256 wgmma tiles (sm_90a only).
pub const MOE_GROUPED_GEMM_WIDE: KernelSource = KernelSource {
    name: "moe_grouped_gemm_wide",
    file: "moe_grouped_gemm_wide.cu",
    source: include_str!("moe_grouped_gemm_wide.cu"),
    entry_points: &[
        "moe_gemm_gate_up_wide_bf16",
        "moe_gemm_down_wide_bf16",
        "moe_gemm_gate_up_ws_bf16",
        "moe_gemm_down_ws_bf16",
    ],
};

/// The MoE block for a few rows (decode) in three launches (`backend::moe_decode`).
pub const MOE_DECODE: KernelSource = KernelSource {
    name: "moe_decode",
    file: "moe_decode.cu",
    source: concat!(include_str!("pdl.cuh"), include_str!("moe_decode.cu")),
    entry_points: &["moe_decode_route", "moe_decode_gate_up", "moe_decode_down"],
};

/// Tensor-parallel partials in f32: the MoE combine of one rank and the one
/// rounding of a reduced sum (`backend::comm`, `backend::moe_partial`).
pub const OPS_TP: KernelSource = KernelSource {
    name: "ops_tp",
    file: "ops_tp.cu",
    source: include_str!("ops_tp.cu"),
    entry_points: &["moe_combine_partial_f32", "round_f32_to_bf16"],
};

/// Every kernel source the backend launches.
pub const SOURCES: &[KernelSource] = &[
    ATTENTION_FUSED,
    ATTENTION_FUSED_WGMMA,
    MASKED_SOFTMAX,
    GDN_CHUNK_PREP,
    GDN_CHUNKED,
    GDN_RECURRENT,
    OPS_INIT,
    OPS_POINTWISE,
    OPS_NORM,
    OPS_ROPE,
    OPS_CONV1D,
    OPS_KV,
    OPS_SAMPLE,
    MOE_ROUTE,
    MOE_GROUPED_GEMM,
    MOE_GROUPED_GEMM_WGMMA,
    MOE_GROUPED_GEMM_WIDE,
    OPS_FALLBACK,
    MOE_DECODE,
    OPS_TP,
    GDN_DECODE,
    ATTENTION_PREP,
    GEMV,
];

/// Every entry point the artifact must contain, source by source.
pub fn required_entry_points() -> Vec<&'static str> {
    SOURCES
        .iter()
        .flat_map(|s| s.entry_points.iter().copied())
        .collect()
}

/// The source that exports `entry`.
pub fn source_of(entry: &str) -> Option<&'static KernelSource> {
    SOURCES.iter().find(|s| s.entry_points.contains(&entry))
}
