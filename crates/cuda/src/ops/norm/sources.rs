//! The kernel source of the RMSNorms (`crate::kernels::SOURCES` lists it).

use crate::kernels::source::KernelSource;

/// The RMSNorms of Qwen3.5 (add + zero-centred, per group, gated), each in
/// the variants the shapes pick.
pub const OPS_NORM: KernelSource = KernelSource {
    name: "ops_norm",
    file: "ops_norm.cu",
    source: concat!(
        include_str!("../../kernels/pdl.cuh"),
        include_str!("../../kernels/e4m3_quant.cuh"),
        include_str!("bf16x8.cuh"),
        include_str!("norm_row.cuh"),
        include_str!("norm_row_out.cuh"),
        include_str!("ops_norm.cu")
    ),
    entry_points: &[
        "add_rms_norm_bf16",
        "add_rms_norm_cached_bf16",
        "add_rms_norm_f32res",
        "add_rms_norm_cached_f32res",
        "rms_norm_groups_bf16",
        "gated_rms_norm_bf16",
        "rms_norm_groups_v4_bf16",
        "gated_rms_norm_v4_bf16",
        "rms_norm_groups_g16x1_bf16",
        "rms_norm_groups_g16x2_bf16",
        "gated_rms_norm_g16x1_bf16",
        "gated_rms_norm_g16x2_bf16",
        "add_rms_norm_quad_f32res",
        "add_rms_norm_quad_f32res_fp8",
        "gated_rms_norm_g16x1_fp8",
    ],
};
