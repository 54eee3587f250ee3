//! The kernel source of sampling (`crate::kernels::SOURCES` lists it).

use crate::kernels::source::KernelSource;

/// Greedy / temperature / top-k / top-p sampling, one CTA per row.
pub const OPS_SAMPLE: KernelSource = KernelSource {
    name: "ops_sample",
    file: "ops_sample.cu",
    source: include_str!("ops_sample.cu"),
    entry_points: &[
        "sample_bf16",
        "sample_f32",
        "argmax_slices_bf16",
        "argmax_slices_v8_bf16",
        "argmax_slices_f32",
        "argmax_finish",
    ],
};
