//! The kernel source of the KV cache writes and head-major transposes
//! (`crate::kernels::SOURCES` lists it).

use crate::kernels::source::KernelSource;

/// KV cache writes, the paged-KV gather and the head-major transposes around attention.
pub const OPS_KV: KernelSource = KernelSource {
    name: "ops_kv",
    file: "ops_kv.cu",
    source: include_str!("ops_kv.cu"),
    entry_points: &[
        "kv_write_bf16",
        "tokens_to_heads_bf16",
        "heads_to_tokens_bf16",
        "tokens_to_heads_v8_bf16",
        "heads_to_tokens_v8_bf16",
        "heads_to_tokens_gated_v8_bf16",
        "kv_write_seq_v8_bf16",
        "kv_gather_bf16",
    ],
};
