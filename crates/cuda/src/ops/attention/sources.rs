//! The kernel sources of attention (`crate::kernels::SOURCES` lists them).

use crate::kernels::source::KernelSource;

/// Fused prefill attention for head dims 64/128/256 in f16 and bf16 (mma.sync, sm_80+).
pub const ATTENTION_FUSED: KernelSource = KernelSource {
    name: "attention_fused",
    file: "attention_fused.cu",
    source: concat!(
        include_str!("../../kernels/async_copy.cuh"),
        include_str!("score_rows.cuh"),
        include_str!("attention_fused.cu")
    ),
    entry_points: &[
        "attn_fused_prefill_d256_bf16",
        "attn_fused_prefill_d256_f16",
        "attn_fused_prefill_d128_bf16",
        "attn_fused_prefill_d128_f16",
        "attn_fused_prefill_d64_bf16",
        "attn_fused_prefill_d64_f16",
    ],
};

/// Fused prefill attention on Hopper warpgroup MMA (sm_90a only), and the
/// combine of its split-KV partials.
pub const ATTENTION_FUSED_WGMMA: KernelSource = KernelSource {
    name: "attention_fused_wgmma",
    file: "attention_fused_wgmma.cu",
    source: concat!(
        include_str!("../../kernels/async_copy.cuh"),
        include_str!("../../kernels/wgmma_sync.cuh"),
        include_str!("wgmma_common.cuh"),
        include_str!("score_rows.cuh"),
        include_str!("attention_tiles.cuh"),
        include_str!("attention_fused_wgmma.cu")
    ),
    entry_points: &[
        "attn_fused_prefill_wgmma_d256_bf16",
        "attn_fused_prefill_wgmma_d256_f16",
        "attn_fused_prefill_wgmma_d128_bf16",
        "attn_fused_prefill_wgmma_d128_f16",
        "attn_fused_prefill_wgmma_d64_bf16",
        "attn_fused_prefill_wgmma_d64_f16",
        "attn_split_combine_bf16",
        "attn_split_combine_f16",
    ],
};

/// Varlen attention of every sequence of a batch over the KV block pool on
/// Hopper warpgroup MMA (sm_90a only), token-major q/out, optional output
/// gate, and the (gated) combine of its split-KV partials.
pub const ATTENTION_PAGED: KernelSource = KernelSource {
    name: "attention_paged",
    file: "attention_paged.cu",
    source: concat!(
        include_str!("../../kernels/pdl.cuh"),
        include_str!("../../kernels/async_copy.cuh"),
        include_str!("../../kernels/wgmma_sync.cuh"),
        include_str!("wgmma_common.cuh"),
        include_str!("score_rows.cuh"),
        include_str!("attention_tiles.cuh"),
        include_str!("paged_io.cuh"),
        include_str!("attention_paged.cu")
    ),
    entry_points: &[
        "attn_paged_wgmma_d256_bf16",
        "attn_paged_wgmma_d256_f16",
        "attn_paged_wgmma_d128_bf16",
        "attn_paged_wgmma_d128_f16",
        "attn_paged_wgmma_d64_bf16",
        "attn_paged_wgmma_d64_f16",
        "attn_paged_combine_bf16",
        "attn_paged_combine_f16",
        "attn_paged_combine_rows_d256_bf16",
        "attn_paged_combine_rows_d256_f16",
        "attn_paged_combine_rows_d128_bf16",
        "attn_paged_combine_rows_d128_f16",
        "attn_paged_combine_rows_d64_bf16",
        "attn_paged_combine_rows_d64_f16",
    ],
};

/// Paged attention for long prompts on Hopper (sm_90a only): two query heads
/// of a KV group a CTA sharing the key tiles a producer warpgroup streams
/// (head dim 256).
pub const ATTENTION_PAGED_PAIRS: KernelSource = KernelSource {
    name: "attention_paged_pairs",
    file: "attention_paged_pairs.cu",
    source: concat!(
        include_str!("../../kernels/pdl.cuh"),
        include_str!("../../kernels/async_copy.cuh"),
        include_str!("../../kernels/tma.cuh"),
        include_str!("../../kernels/wgmma_sync.cuh"),
        include_str!("wgmma_common.cuh"),
        include_str!("score_rows.cuh"),
        include_str!("attention_tiles.cuh"),
        include_str!("paged_io.cuh"),
        include_str!("attention_paged_pairs.cu")
    ),
    entry_points: &["attn_paged_pairs_d256_bf16", "attn_paged_pairs_d256_f16"],
};

/// Masked softmax of the composed route (f32 scores to f16/bf16 probabilities).
pub const MASKED_SOFTMAX: KernelSource = KernelSource {
    name: "masked_softmax",
    file: "masked_softmax.cu",
    source: include_str!("masked_softmax.cu"),
    entry_points: &["attn_masked_softmax_bf16", "attn_masked_softmax_f16"],
};

/// A full-attention layer's q/k norms, RoPE and KV write for one-row
/// sequences in one launch (`prep`).
pub const ATTENTION_PREP: KernelSource = KernelSource {
    name: "attention_prep",
    file: "attention_prep.cu",
    source: concat!(
        include_str!("../../kernels/pdl.cuh"),
        include_str!("../norm/bf16x8.cuh"),
        include_str!("attention_prep.cu")
    ),
    entry_points: &["attention_prep_decode_bf16"],
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "needs NVRTC and the CUDA headers: run by .ci/kernel-gate.sh (--include-ignored)"]
    fn the_paged_and_fused_wgmma_kernels_compile_for_sm_90a_without_spills() {
        for k in [
            ATTENTION_PAGED,
            ATTENTION_PAGED_PAIRS,
            ATTENTION_FUSED_WGMMA,
        ] {
            crate::nvrtc::compile_sm90a_without_spills(&k);
        }
    }
}
