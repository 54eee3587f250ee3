//! The kernel source of the causal conv1d (`crate::kernels::SOURCES` lists it).

use crate::kernels::source::KernelSource;

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
        "conv_state_advance_cu_k4x8_bf16",
    ],
};
