//! The kernel source of the tensor-parallel partials (`crate::kernels::SOURCES`
//! lists it).

use crate::kernels::source::KernelSource;

/// The tensor-parallel partial kernels.
pub const OPS_TP: KernelSource = KernelSource {
    name: "ops_tp",
    file: "ops_tp.cu",
    source: include_str!("ops_tp.cu"),
    entry_points: &["moe_combine_partial_f32", "round_f32_to_bf16"],
};
