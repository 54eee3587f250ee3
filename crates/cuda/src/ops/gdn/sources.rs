//! The kernel sources of the gated delta rule and the entry points each
//! exports (referenced from the registry's `SOURCES` list in `crate::kernels`).

use crate::kernels::source::KernelSource;

/// Gated delta rule, chunked prefill form: the per-chunk prep (writes
/// `Tβ = T·diag(β)`, P and the factors; docs/perf/cuda-gdn.md, "Session 13,
/// branch gdnlite").
pub const GDN_CHUNK_PREP: KernelSource = KernelSource {
    name: "gdn_chunk_prep",
    file: "gdn_chunk_prep.cu",
    source: concat!(
        include_str!("../../kernels/mma_sync.cuh"),
        include_str!("gdn_common.cuh"),
        include_str!("gdn_prep_tf32.cuh"),
        include_str!("gdn_chunk_prep.cu")
    ),
    entry_points: &["gdn_chunk_prep_bf16"],
};

/// Gated delta rule, chunked prefill form: the scans over the prep's output,
/// `δ = Tβ·(V − diag(e^G/|k|)·K·S0)`, 32 or 64 value columns per CTA.
pub const GDN_CHUNKED: KernelSource = KernelSource {
    name: "gdn_chunked",
    file: "gdn_chunked.cu",
    source: concat!(
        include_str!("../../kernels/mma_sync.cuh"),
        include_str!("gdn_common.cuh"),
        include_str!("gdn_stmatrix.cuh"),
        include_str!("gdn_chunked.cu")
    ),
    entry_points: &["gdn_chunk_scan_narrow_bf16", "gdn_chunk_scan_wide_bf16"],
};

/// Gated delta rule, chunked prefill form: the full-width scan (sm_90a
/// only; docs/perf/cuda-gdn.md, "Session 13, branch gdnfused"): one CTA per
/// (value head, sequence) owning the whole 128 × 128 state, each chunk's
/// tiles read once per head, phase 1 (K·S0, Q·S0) on wgmma m64n32k16.
pub const GDN_CHUNKED_FULL: KernelSource = KernelSource {
    name: "gdn_chunked_full",
    file: "gdn_chunked_full.cu",
    source: concat!(
        include_str!("../../kernels/wgmma_sync.cuh"),
        include_str!("../../kernels/mma_sync.cuh"),
        include_str!("gdn_common.cuh"),
        include_str!("gdn_stmatrix.cuh"),
        include_str!("gdn_chunked_full.cu")
    ),
    entry_points: &["gdn_chunk_scan_full_bf16"],
};

/// Gated delta rule, recurrent decode step.
pub const GDN_RECURRENT: KernelSource = KernelSource {
    name: "gdn_recurrent",
    file: "gdn_recurrent.cu",
    source: include_str!("gdn_recurrent.cu"),
    entry_points: &["gdn_recurrent_step_bf16"],
};

/// The GDN layer core for one-row sequences in one launch: conv, gating,
/// recurrent rule, gated norm ([`super::decode`]); a head on one CTA.
pub const GDN_DECODE: KernelSource = KernelSource {
    name: "gdn_decode",
    file: "gdn_decode.cu",
    source: concat!(
        include_str!("../../kernels/pdl.cuh"),
        include_str!("gdn_decode.cu")
    ),
    entry_points: &["gdn_decode_step_bf16"],
};
