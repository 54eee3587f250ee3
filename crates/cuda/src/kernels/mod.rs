//! The kernel sources embedded in this binary and the entry points each must
//! export. This is the one place that lists required entry points: the
//! artifact gate checks them, the launchers look their names up here.

use crate::ops::conv::sources::OPS_CONV1D;
use crate::ops::fallback::sources::OPS_FALLBACK;
use crate::ops::gdn::sources::{GDN_CHUNKED, GDN_CHUNK_PREP, GDN_DECODE, GDN_RECURRENT};
use crate::ops::moe::sources::{
    MOE_DECODE, MOE_GROUPED_GEMM, MOE_GROUPED_GEMM_WGMMA, MOE_GROUPED_GEMM_WIDE, MOE_ROUTE,
};
use crate::ops::tp::sources::OPS_TP;
use headroom_core::Dtype;

/// One `.cu` source compiled as one NVRTC program (one cubin).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSource {
    /// Short name, also the NVRTC program name and the artifact file stem.
    pub name: &'static str,
    /// File name of the source beside this module.
    pub file: &'static str,
    pub source: &'static str,
    /// Entry points the compiled output must export.
    pub entry_points: &'static [&'static str],
}

/// Fused prefill attention for head dims 64/128/256 in f16 and bf16.
pub const ATTENTION_FUSED: KernelSource = KernelSource {
    name: "attention_fused",
    file: "attention_fused.cu",
    source: include_str!("attention_fused.cu"),
    entry_points: &[
        "attn_fused_prefill_d256_bf16",
        "attn_fused_prefill_d256_f16",
        "attn_fused_prefill_d128_bf16",
        "attn_fused_prefill_d128_f16",
        "attn_fused_prefill_d64_bf16",
        "attn_fused_prefill_d64_f16",
    ],
};

/// Fused prefill attention on Hopper warpgroup MMA (sm_90a only).
pub const ATTENTION_FUSED_WGMMA: KernelSource = KernelSource {
    name: "attention_fused_wgmma",
    file: "attention_fused_wgmma.cu",
    source: include_str!("attention_fused_wgmma.cu"),
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

/// Masked softmax of the composed route (f32 scores to f16/bf16 probabilities).
pub const MASKED_SOFTMAX: KernelSource = KernelSource {
    name: "masked_softmax",
    file: "masked_softmax.cu",
    source: include_str!("masked_softmax.cu"),
    entry_points: &["attn_masked_softmax_bf16", "attn_masked_softmax_f16"],
};

/// A full-attention layer's q/k norms, RoPE and KV write for one-row
/// sequences in one launch (`backend::attention_prep`).
pub const ATTENTION_PREP: KernelSource = KernelSource {
    name: "attention_prep",
    file: "attention_prep.cu",
    source: concat!(include_str!("pdl.cuh"), include_str!("attention_prep.cu")),
    entry_points: &["attention_prep_decode_bf16"],
};

/// Synthetic weight draws (`headroom_core::ops::rng::normal` on the device).
pub const OPS_INIT: KernelSource = KernelSource {
    name: "ops_init",
    file: "ops_init.cu",
    source: include_str!("ops_init.cu"),
    entry_points: &["init_normal_bf16"],
};

/// Element-wise and gather kernels of the backend op set.
pub const OPS_POINTWISE: KernelSource = KernelSource {
    name: "ops_pointwise",
    file: "ops_pointwise.cu",
    source: include_str!("ops_pointwise.cu"),
    entry_points: &[
        "embed_bf16",
        "embed_bf16_to_f32",
        "gather_rows_b16",
        "gather_rows_b32",
        "mul_sigmoid_bf16",
        "swiglu_bf16",
        "gdn_gating_bf16",
        "moe_combine_bf16",
        "mul_sigmoid_rows_bf16",
    ],
};

/// The RMSNorms of Qwen3.5 (add + zero-centred, per group, gated).
pub const OPS_NORM: KernelSource = KernelSource {
    name: "ops_norm",
    file: "ops_norm.cu",
    source: concat!(include_str!("pdl.cuh"), include_str!("ops_norm.cu")),
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
    ],
};

/// Partial rotary embedding with per-row positions.
pub const OPS_ROPE: KernelSource = KernelSource {
    name: "ops_rope",
    file: "ops_rope.cu",
    source: include_str!("ops_rope.cu"),
    entry_points: &["rope_bf16", "rope_seq_bf16"],
};

/// KV cache writes and the head-major transposes around attention.
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
    ],
};

/// Greedy / temperature / top-k / top-p sampling, one CTA per row.
pub const OPS_SAMPLE: KernelSource = KernelSource {
    name: "ops_sample",
    file: "ops_sample.cu",
    source: include_str!("ops_sample.cu"),
    entry_points: &[
        "sample_bf16",
        "sample_f32",
        "argmax_slices_bf16",
        "argmax_slices_f32",
        "argmax_finish",
    ],
};

/// Skinny bf16 GEMV of 1..=8 rows over up to 6 matrices in one launch
/// (`backend::gemv`): C outputs per warp (c1, c2; c4 up to 4 rows; a1 through
/// cp.async), R rows (r1 ..= r8).
pub const GEMV: KernelSource = KernelSource {
    name: "gemv",
    file: "gemv.cu",
    source: concat!(include_str!("pdl.cuh"), include_str!("gemv.cu")),
    entry_points: &[
        "gemv_c1_r1",
        "gemv_c1_r2",
        "gemv_c1_r3",
        "gemv_c1_r4",
        "gemv_c1_r5",
        "gemv_c1_r6",
        "gemv_c1_r7",
        "gemv_c1_r8",
        "gemv_c2_r1",
        "gemv_c2_r2",
        "gemv_c2_r3",
        "gemv_c2_r4",
        "gemv_c2_r5",
        "gemv_c2_r6",
        "gemv_c2_r7",
        "gemv_c2_r8",
        "gemv_a1_r1",
        "gemv_a1_r2",
        "gemv_a1_r3",
        "gemv_a1_r4",
        "gemv_a1_r5",
        "gemv_a1_r6",
        "gemv_a1_r7",
        "gemv_a1_r8",
        "gemv_c4_r1",
        "gemv_c4_r2",
        "gemv_c4_r3",
        "gemv_c4_r4",
    ],
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

/// The integer literal of `constexpr int NAME = <int>;` in a kernel source
/// (the tests that keep launch constants equal to the kernels' own).
#[cfg(test)]
pub(crate) fn source_constant(src: &str, name: &str) -> usize {
    let pat = format!("constexpr int {name} = ");
    let at = src
        .find(&pat)
        .unwrap_or_else(|| panic!("{name} not in source"))
        + pat.len();
    let lit: String = src[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    lit.parse()
        .unwrap_or_else(|_| panic!("{name} is not a literal"))
}

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

fn dtype_suffix(dtype: Dtype) -> Option<&'static str> {
    match dtype {
        Dtype::F16 => Some("f16"),
        Dtype::Bf16 => Some("bf16"),
        Dtype::F32 => None,
    }
}

/// The fused kernel for `head_dim` and `dtype`, if one is compiled.
pub fn fused_entry(head_dim: usize, dtype: Dtype) -> Option<&'static str> {
    let name = format!("attn_fused_prefill_d{head_dim}_{}", dtype_suffix(dtype)?);
    ATTENTION_FUSED
        .entry_points
        .iter()
        .copied()
        .find(|e| *e == name)
}

/// The Hopper (wgmma) fused kernel for `head_dim` and `dtype`, if one is compiled.
pub fn fused_wgmma_entry(head_dim: usize, dtype: Dtype) -> Option<&'static str> {
    let name = format!(
        "attn_fused_prefill_wgmma_d{head_dim}_{}",
        dtype_suffix(dtype)?
    );
    ATTENTION_FUSED_WGMMA
        .entry_points
        .iter()
        .copied()
        .find(|e| *e == name)
}

/// The masked-softmax kernel writing probabilities in `dtype`.
pub fn softmax_entry(dtype: Dtype) -> Option<&'static str> {
    let name = format!("attn_masked_softmax_{}", dtype_suffix(dtype)?);
    MASKED_SOFTMAX
        .entry_points
        .iter()
        .copied()
        .find(|e| *e == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_core::fused_capability::{CUDA_FUSED_DTYPES, FUSED_HEAD_DIMS};

    #[test]
    fn capability_table_has_a_required_entry_point_for_every_cell() {
        let required = required_entry_points();
        for d in FUSED_HEAD_DIMS {
            for dt in CUDA_FUSED_DTYPES {
                let e = fused_entry(d, dt).unwrap_or_else(|| panic!("no fused kernel d{d} {dt}"));
                assert!(required.contains(&e));
                assert_eq!(source_of(e), Some(&ATTENTION_FUSED));
                let w =
                    fused_wgmma_entry(d, dt).unwrap_or_else(|| panic!("no wgmma kernel d{d} {dt}"));
                assert!(required.contains(&w));
                assert_eq!(source_of(w), Some(&ATTENTION_FUSED_WGMMA));
            }
            assert!(softmax_entry(Dtype::Bf16).is_some());
        }
        assert!(required.contains(&"attn_fused_prefill_d256_bf16"));
        assert!(required.contains(&"attn_fused_prefill_d256_f16"));
        assert_eq!(fused_entry(256, Dtype::F32), None);
        assert_eq!(fused_entry(96, Dtype::Bf16), None);
    }
}
