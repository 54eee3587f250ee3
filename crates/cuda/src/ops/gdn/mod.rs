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

pub use launch::{ScanWidth, Tuning, SCAN_FULL_ARCH};
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
/// `sm_count` SMs (`full_scan`: the full-width scan can run here, sm_90a).
/// The full-width scan (one CTA per head and sequence, each chunk's tiles
/// read once) once its CTAs fill the GPU; below that, 64 columns (half the
/// tile traffic from L2) when those CTAs fill it, else 32 (twice the CTAs).
/// Measured in docs/perf/cuda-gdn.md (gdn3 run 2, gdn5 run 2; session 14).
pub fn scan_width_for(
    v_heads: usize,
    sequences: usize,
    sm_count: usize,
    full_scan: bool,
) -> ScanWidth {
    if full_scan && v_heads.saturating_mul(sequences) >= sm_count {
        return ScanWidth::Full;
    }
    let wide_ctas = v_heads
        .saturating_mul(SUPPORTED_DIM / ScanWidth::Wide.columns())
        .saturating_mul(sequences);
    if wide_ctas >= sm_count {
        ScanWidth::Wide
    } else {
        ScanWidth::Narrow
    }
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
        let w = tuning.width.unwrap_or_else(|| {
            let full = dev.arch == SCAN_FULL_ARCH;
            scan_width_for(l.v_heads, group.len(), dev.sm_count, full)
        });
        launch::chunked(dev, l, group, w, tuning)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wide_scan_runs_once_its_ctas_fill_the_gpu() {
        // 35B-A3B (32 value heads) on an H200 (132 SMs), without the full-width scan.
        assert_eq!(scan_width_for(32, 1, 132, false), ScanWidth::Narrow);
        assert_eq!(scan_width_for(32, 2, 132, false), ScanWidth::Narrow);
        assert_eq!(scan_width_for(32, 3, 132, false), ScanWidth::Wide);
        assert_eq!(scan_width_for(32, 8, 132, false), ScanWidth::Wide);
        assert_eq!(scan_width_for(usize::MAX, 8, 132, false), ScanWidth::Wide);
    }

    #[test]
    fn the_full_width_scan_runs_once_its_ctas_fill_the_gpu() {
        // 35B-A3B (32 value heads) on an H200 (132 SMs): one CTA per head and sequence.
        assert_eq!(scan_width_for(32, 1, 132, true), ScanWidth::Narrow);
        assert_eq!(scan_width_for(32, 3, 132, true), ScanWidth::Wide);
        assert_eq!(scan_width_for(32, 4, 132, true), ScanWidth::Wide);
        assert_eq!(scan_width_for(32, 5, 132, true), ScanWidth::Full);
        assert_eq!(scan_width_for(32, 8, 132, true), ScanWidth::Full);
        assert_eq!(scan_width_for(usize::MAX, 8, 132, true), ScanWidth::Full);
    }
}
