//! The gated delta rule on the device: the chunked form for prefill rows
//! (the prep `gdn_chunk_prep.cu`, then a scan of [`ScanWidth`]: the narrow
//! and wide scans of `gdn_chunked.cu` or the full-width one of
//! `gdn_chunked_full.cu`, chosen by [`scan_width_for`]), the recurrent step
//! for decode rows (`gdn_recurrent.cu`), and the fused decode core of the
//! GDN layer ([`decode`], `gdn_decode.cu`). The kernel sources are declared
//! in `sources.rs`.
//!
//! Semantics are transformers' `torch_recurrent_gated_delta_rule` with
//! `use_qk_l2norm_in_kernel=True` (see `headroom_model::ops::gated_delta`):
//! q, k L2-normalised per head, q scaled by `1/sqrt(k_dim)`, value head `h`
//! reads key head `h / (v_heads / k_heads)`; per token `S *= exp(g)`,
//! `delta = (v - Sᵀk)·β`, `S += k ⊗ delta`, `o = Sᵀq`; f32 state.
//!
//! Every launch is validated on the host first ([`validate`]): a bad
//! sequence range, slot or buffer size is a [`CudaError::InvalidLaunch`],
//! never an out-of-bounds access. Nothing here synchronises with the host.

pub mod decode;
mod launch;
mod plan;
pub mod sources;

use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::CudaError;

pub use launch::{ScanWidth, Tuning};
pub use plan::{validate, Plan, SeqRun, SUPPORTED_DIM};

/// One gated-delta-rule call over a varlen batch.
pub struct GdnLaunch<'a> {
    /// bf16 `[t][2·hk·dk + hv·dv]`: q (hk heads), k (hk heads), v (hv heads) of each row.
    pub qkv: &'a DeviceBuffer,
    /// f32 `[t][hv]`: log decay `g = -exp(A_log)·softplus(a + dt_bias)`.
    pub g: &'a DeviceBuffer,
    /// f32 `[t][hv]`.
    pub beta: &'a DeviceBuffer,
    /// f32 `[slots][hv][dk][dv]`, read and advanced per sequence slot.
    pub state: &'a DeviceBuffer,
    /// bf16 `[t][hv·dv]`; rows outside every sequence are not written.
    pub out: &'a DeviceBuffer,
    /// `(slot, first row, rows)` per sequence.
    pub seqs: &'a [(usize, usize, usize)],
    pub k_heads: usize,
    pub v_heads: usize,
    pub k_dim: usize,
    pub v_dim: usize,
}

/// The prefill scan width for `sequences` sequences of `v_heads` heads on
/// `sm_count` SMs (`full_scan`: the full-width scan can run here, sm_90a):
/// the widest scan (fewest CTAs, least tile traffic per head) whose CTAs
/// still cover at least half the SMs, else the narrow one (most CTAs). On
/// the H200 (132 SMs, 32 value heads) that is narrow for one sequence, wide
/// for two, full-width from three: the crossover measured in
/// docs/perf/cuda-gdn.md, "Session 14" (`gdn_cross`: the pick was the
/// fastest width at each of 1–16 × 1,024 and 2–8 × 4,096 rows).
pub fn scan_width_for(
    v_heads: usize,
    sequences: usize,
    sm_count: usize,
    full_scan: bool,
) -> ScanWidth {
    let covers_half = |w: ScanWidth| {
        let ctas = v_heads
            .saturating_mul(SUPPORTED_DIM / w.columns())
            .saturating_mul(sequences);
        ctas.saturating_mul(2) >= sm_count
    };
    if full_scan && covers_half(ScanWidth::Full) {
        ScanWidth::Full
    } else if covers_half(ScanWidth::Wide) {
        ScanWidth::Wide
    } else {
        ScanWidth::Narrow
    }
}

/// [`scan_width_for`] on `dev`: its SM count, and the full-width scan where
/// it runs ([`ScanWidth::runs_on`]).
pub fn scan_width_on(dev: &CudaDevice, v_heads: usize, sequences: usize) -> ScanWidth {
    let full = ScanWidth::Full.runs_on(&dev.arch);
    scan_width_for(v_heads, sequences, dev.sm_count, full)
}

/// Runs the gated delta rule: sequences of one row through the recurrent
/// step (one launch per [`launch::MAX_DECODE_SEQS`] of them), longer ones
/// through the chunked form (prep + scan per [`launch::MAX_SCAN_SEQS`]),
/// the scan width from [`scan_width_for`].
pub fn gated_delta_rule(dev: &CudaDevice, l: &GdnLaunch<'_>) -> Result<(), CudaError> {
    run(dev, l, &Tuning::default())
}

/// [`gated_delta_rule`] with the prefill scan width fixed (benches, tests).
pub fn gated_delta_rule_with(
    dev: &CudaDevice,
    l: &GdnLaunch<'_>,
    width: ScanWidth,
) -> Result<(), CudaError> {
    run(
        dev,
        l,
        &Tuning {
            width: Some(width),
            ..Tuning::default()
        },
    )
}

/// [`gated_delta_rule`] with the launch choices of `tuning` (benches).
pub fn gated_delta_rule_tuned(
    dev: &CudaDevice,
    l: &GdnLaunch<'_>,
    tuning: &Tuning,
) -> Result<(), CudaError> {
    run(dev, l, tuning)
}

fn run(dev: &CudaDevice, l: &GdnLaunch<'_>, tuning: &Tuning) -> Result<(), CudaError> {
    let plan = validate(l)?;
    let (decode, prefill): (Vec<SeqRun>, Vec<SeqRun>) = plan.seqs.iter().partition(|s| s.rows == 1);
    for group in decode.chunks(launch::MAX_DECODE_SEQS) {
        launch::recurrent(dev, l, group)?;
    }
    for group in prefill.chunks(launch::MAX_SCAN_SEQS) {
        let w = tuning
            .width
            .unwrap_or_else(|| scan_width_on(dev, l.v_heads, group.len()));
        launch::chunked(dev, l, group, w, tuning)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_widest_scan_whose_ctas_cover_half_the_gpu_runs() {
        // 35B-A3B (32 value heads) on an H200 (132 SMs): the measured
        // crossover (session 14) — narrow for 1 sequence, wide for 2,
        // full-width from 3.
        assert_eq!(scan_width_for(32, 1, 132, true), ScanWidth::Narrow);
        assert_eq!(scan_width_for(32, 2, 132, true), ScanWidth::Wide);
        assert_eq!(scan_width_for(32, 3, 132, true), ScanWidth::Full);
        assert_eq!(scan_width_for(32, 8, 132, true), ScanWidth::Full);
        assert_eq!(scan_width_for(usize::MAX, 8, 132, true), ScanWidth::Full);
        // Without the full-width scan (not sm_90a): wide from 2 sequences.
        assert_eq!(scan_width_for(32, 1, 132, false), ScanWidth::Narrow);
        assert_eq!(scan_width_for(32, 2, 132, false), ScanWidth::Wide);
        assert_eq!(scan_width_for(32, 8, 132, false), ScanWidth::Wide);
        // Other head counts: one sequence of 64 heads is wide (128 CTAs);
        // 16 heads need 5 sequences for the full-width scan (80 CTAs).
        assert_eq!(scan_width_for(64, 1, 132, true), ScanWidth::Wide);
        assert_eq!(scan_width_for(16, 4, 132, true), ScanWidth::Wide);
        assert_eq!(scan_width_for(16, 5, 132, true), ScanWidth::Full);
    }
}
