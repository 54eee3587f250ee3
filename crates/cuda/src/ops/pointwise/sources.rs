//! The kernel source of the element-wise and gather ops
//! (`crate::kernels::SOURCES` lists it).

use crate::kernels::source::KernelSource;

/// Element-wise and gather kernels of the backend op set.
pub const OPS_POINTWISE: KernelSource = KernelSource {
    name: "ops_pointwise",
    file: "ops_pointwise.cu",
    source: include_str!("ops_pointwise.cu"),
    entry_points: &[
        "embed_bf16_to_f32",
        "embed_drawn_bf16_to_f32",
        "gather_rows_b16",
        "gather_rows_b32",
        "gather_rows_v16",
        "mul_sigmoid_bf16",
        "swiglu_v8_bf16",
        "gdn_gating_bf16",
        "moe_combine_bf16",
    ],
};
