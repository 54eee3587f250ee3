//! The kernel source of the rotary embedding (`crate::kernels::SOURCES` lists it).

use crate::kernels::source::KernelSource;

/// Partial rotary embedding, each row's position from the sequence table.
pub const OPS_ROPE: KernelSource = KernelSource {
    name: "ops_rope",
    file: "ops_rope.cu",
    source: include_str!("ops_rope.cu"),
    entry_points: &["rope_seq_bf16"],
};
