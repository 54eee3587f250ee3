//! The kernel source of the shape-general fallbacks (`crate::kernels::SOURCES`
//! lists it).

use crate::kernels::source::KernelSource;

/// Shape-general fallbacks of the gated delta rule and the routed experts
/// (small models).
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
