//! Where a forward's time goes: a per-part breakdown (GDN rule, conv, full
//! attention, MoE, projections, norms, ...) for the prefill benchmarks.
//!
//! Off by default and then free. When enabled, each part is bracketed by
//! `Backend::synchronize` and timed on the host, so the device work of that
//! part alone is measured (the synchronisations cost a few microseconds
//! each, and serialise the stream: TTFT is measured with profiling off).

use headroom_core::ops::Backend;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The parts of a forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    Embed,
    /// Residual add + RMSNorm: every layer's input norm, and the
    /// post-attention norm of layers with a dense MLP (a MoE layer's is in
    /// [`Part::Moe`]; the final norm, before the LM head, is not timed).
    Norm,
    /// q/k/v/gate/o projections of full-attention layers.
    AttentionProjections,
    /// q/k norm, RoPE and the KV write of full-attention layers.
    AttentionPrep,
    /// The attention kernel (route as resolved).
    Attention,
    /// in_proj_qkv/z/a/b and out_proj of GDN layers.
    GdnProjections,
    /// Conv, gating and gated norm: timed apart in prefill; in decode they
    /// run inside `Backend::gdn_core`, timed whole as [`Part::GdnRule`].
    Conv,
    GdnGating,
    /// The gated delta rule (chunked in prefill); in decode the whole GDN
    /// core (`Backend::gdn_core`: conv, gating, rule and gated norm).
    GdnRule,
    GatedNorm,
    /// The sparse MoE block with its post-attention norm
    /// (`Backend::add_rms_norm_moe_partial`): norm, router, routed experts,
    /// shared expert.
    Moe,
    DenseMlp,
    LmHead,
    /// Tensor-parallel collectives (all-reduce after each mixer and MLP,
    /// the LM head's all-gather), including waiting for the other ranks.
    Comm,
}

impl Part {
    pub const ALL: [Part; 14] = [
        Part::Embed,
        Part::Norm,
        Part::AttentionProjections,
        Part::AttentionPrep,
        Part::Attention,
        Part::GdnProjections,
        Part::Conv,
        Part::GdnGating,
        Part::GdnRule,
        Part::GatedNorm,
        Part::Moe,
        Part::DenseMlp,
        Part::LmHead,
        Part::Comm,
    ];
}

/// One part's total over the forwards since the last reset.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PartTime {
    pub part: Part,
    pub seconds: f64,
    pub calls: u64,
}

/// Accumulates [`PartTime`]s when enabled.
#[derive(Debug, Default)]
pub struct Profiler {
    enabled: AtomicBool,
    totals: Mutex<Vec<PartTime>>,
}

impl Profiler {
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Runs `f` as part `part` (timed when enabled).
    pub fn time<B: Backend, T>(&self, be: &B, part: Part, f: impl FnOnce() -> T) -> T {
        if !self.enabled() {
            return f();
        }
        let _ = be.synchronize();
        let started = Instant::now();
        let out = f();
        let _ = be.synchronize();
        let secs = started.elapsed().as_secs_f64();
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        match totals.iter_mut().find(|t| t.part == part) {
            Some(t) => {
                t.seconds += secs;
                t.calls += 1;
            }
            None => totals.push(PartTime {
                part,
                seconds: secs,
                calls: 1,
            }),
        }
        out
    }

    /// The totals in [`Part::ALL`] order, and clears them.
    pub fn take(&self) -> Vec<PartTime> {
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<PartTime> = Part::ALL
            .iter()
            .filter_map(|p| totals.iter().find(|t| t.part == *p).copied())
            .collect();
        out.retain(|t| t.calls > 0);
        totals.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_cpu::CpuBackend;

    #[test]
    fn disabled_records_nothing_enabled_accumulates_per_part() {
        let be = CpuBackend::new();
        let p = Profiler::default();
        assert_eq!(p.time(&be, Part::Moe, || 3), 3);
        assert!(p.take().is_empty());
        p.set_enabled(true);
        p.time(&be, Part::Moe, || {
            std::thread::sleep(std::time::Duration::from_millis(2))
        });
        p.time(&be, Part::Moe, || ());
        p.time(&be, Part::Embed, || ());
        let t = p.take();
        assert_eq!(
            t.iter().map(|x| x.part).collect::<Vec<_>>(),
            vec![Part::Embed, Part::Moe]
        );
        assert_eq!(t[1].calls, 2);
        assert!(t[1].seconds >= 0.002);
        assert!(p.take().is_empty(), "take clears");
    }
}
