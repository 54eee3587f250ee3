//! The kernel registry: every kernel source embedded in this binary
//! ([`SOURCES`]) and the entry points each must export. Each op folder of
//! `crate::ops` declares its sources beside its launcher; this is the one
//! list of them all: the artifact gate checks it, the device loads from it.
//! `pdl.cuh`, `async_copy.cuh`, `mma_sync.cuh`, `wgmma_sync.cuh`, `e4m3.cuh` and
//! `e4m3_quant.cuh` here are headers shared by several sources.

pub(crate) mod source;
#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) use source::source_constant;
pub use source::KernelSource;

use crate::ops::attention::sources::{
    ATTENTION_FUSED, ATTENTION_FUSED_WGMMA, ATTENTION_PAGED, ATTENTION_PAGED_PAIRS, ATTENTION_PREP,
    MASKED_SOFTMAX,
};
use crate::ops::conv::sources::OPS_CONV1D;
use crate::ops::fallback::sources::OPS_FALLBACK;
use crate::ops::fp8::sources::{FP8_GEMV, FP8_MOE, FP8_QUANT};
use crate::ops::gdn::sources::{
    GDN_CHUNKED, GDN_CHUNKED_FULL, GDN_CHUNK_PREP, GDN_DECODE, GDN_RECURRENT,
};
use crate::ops::gemv::sources::GEMV;
use crate::ops::kv::sources::OPS_KV;
use crate::ops::moe::sources::{
    MOE_DECODE, MOE_GROUPED_GEMM, MOE_GROUPED_GEMM_FP8, MOE_GROUPED_GEMM_STREAM,
    MOE_GROUPED_GEMM_WGMMA, MOE_GROUPED_GEMM_WS, MOE_GROUPED_GEMM_WS_FP8, MOE_ROUTE,
};
use crate::ops::norm::sources::OPS_NORM;
use crate::ops::pointwise::sources::OPS_POINTWISE;
use crate::ops::rope::sources::OPS_ROPE;
use crate::ops::sample::sources::OPS_SAMPLE;
use crate::ops::state::sources::STATE_COPY;
use crate::ops::tp::sources::OPS_TP;

/// Synthetic weight draws (`headroom_core::ops::rng::normal` on the device).
pub const OPS_INIT: KernelSource = KernelSource {
    name: "ops_init",
    file: "ops_init.cu",
    source: include_str!("ops_init.cu"),
    entry_points: &["init_normal_bf16"],
};

/// Every kernel source the backend launches.
pub const SOURCES: &[KernelSource] = &[
    ATTENTION_FUSED,
    ATTENTION_FUSED_WGMMA,
    ATTENTION_PAGED,
    ATTENTION_PAGED_PAIRS,
    MASKED_SOFTMAX,
    GDN_CHUNK_PREP,
    GDN_CHUNKED,
    GDN_CHUNKED_FULL,
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
    MOE_GROUPED_GEMM_WS,
    MOE_GROUPED_GEMM_STREAM,
    MOE_GROUPED_GEMM_FP8,
    MOE_GROUPED_GEMM_WS_FP8,
    OPS_FALLBACK,
    MOE_DECODE,
    OPS_TP,
    GDN_DECODE,
    ATTENTION_PREP,
    GEMV,
    FP8_GEMV,
    FP8_QUANT,
    FP8_MOE,
    STATE_COPY,
];

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
