//! Where a forward's time goes: a per-part breakdown (GDN rule, conv, full
//! attention, MoE, projections, norms, ...) for the prefill benchmarks.
//!
//! Off by default and then free. [`ProfileMode::Synced`] brackets each part
//! by `Backend::synchronize` and times it on the host, so the device work of
//! that part alone is measured (the synchronisations cost a few
//! microseconds each, and serialise the stream: TTFT is measured with
//! profiling off). [`ProfileMode::Queued`] brackets each part by two
//! timeline marks (CUDA events) and waits for nothing: the device time
//! between them, read when the parts are taken — a forward profiled this
//! way runs as it does unprofiled, but for an event between every two parts.

use headroom_core::ops::{Backend, TimelineMark};
use serde::Serialize;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// How [`Profiler::time`] times a part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProfileMode {
    /// Not timed.
    #[default]
    Off,
    /// The backend synchronised before and after the part: its wall time
    /// alone, host launch time included.
    Synced,
    /// A timeline mark before and after the part, nothing waited for: the
    /// device time between the marks (with a synchronous backend, the wall
    /// time), read by [`Profiler::take`].
    Queued,
}

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

/// A part's two marks, not yet read.
type Pending = (Part, TimelineMark, TimelineMark);

/// Accumulates [`PartTime`]s when on.
#[derive(Debug, Default)]
pub struct Profiler {
    mode: AtomicU8,
    totals: Mutex<Vec<PartTime>>,
    pending: Mutex<Vec<Pending>>,
}

/// Adds `secs` of one call to `part`'s total.
fn add(totals: &mut Vec<PartTime>, part: Part, secs: f64) {
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
}

impl Profiler {
    pub fn set_mode(&self, mode: ProfileMode) {
        self.mode.store(mode as u8, Ordering::Relaxed);
    }

    pub fn mode(&self) -> ProfileMode {
        match self.mode.load(Ordering::Relaxed) {
            1 => ProfileMode::Synced,
            2 => ProfileMode::Queued,
            _ => ProfileMode::Off,
        }
    }

    /// Whether parts are timed (either mode).
    pub fn enabled(&self) -> bool {
        self.mode() != ProfileMode::Off
    }

    /// Runs `f` as part `part` (timed unless off).
    pub fn time<B: Backend, T>(&self, be: &B, part: Part, f: impl FnOnce() -> T) -> T {
        match self.mode() {
            ProfileMode::Off => f(),
            ProfileMode::Synced => {
                let _ = be.synchronize();
                let started = Instant::now();
                let out = f();
                let _ = be.synchronize();
                let secs = started.elapsed().as_secs_f64();
                add(
                    &mut self.totals.lock().unwrap_or_else(|p| p.into_inner()),
                    part,
                    secs,
                );
                out
            }
            ProfileMode::Queued => {
                let from = be.timeline_mark();
                let out = f();
                if let (Ok(from), Ok(to)) = (from, be.timeline_mark()) {
                    let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
                    pending.push((part, from, to));
                }
                out
            }
        }
    }

    /// The totals in [`Part::ALL`] order (the queued parts' marks read on
    /// `be`, waiting for the last), and clears them.
    pub fn take<B: Backend>(&self, be: &B) -> Vec<PartTime> {
        let pending = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        for (part, from, to) in pending {
            // A mark the backend cannot read (an error) leaves its part out.
            if let Ok(secs) = be.timeline_seconds(&from, &to) {
                add(&mut totals, part, secs);
            }
        }
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
        assert!(p.take(&be).is_empty());
        p.set_mode(ProfileMode::Synced);
        assert_eq!(p.mode(), ProfileMode::Synced);
        p.time(&be, Part::Moe, || {
            std::thread::sleep(std::time::Duration::from_millis(2))
        });
        p.time(&be, Part::Moe, || ());
        p.time(&be, Part::Embed, || ());
        let t = p.take(&be);
        assert_eq!(
            t.iter().map(|x| x.part).collect::<Vec<_>>(),
            vec![Part::Embed, Part::Moe]
        );
        assert_eq!(t[1].calls, 2);
        assert!(t[1].seconds >= 0.002);
        assert!(p.take(&be).is_empty(), "take clears");
    }

    #[test]
    fn queued_parts_are_read_when_taken_and_add_up_with_synced_ones() {
        let be = CpuBackend::new();
        let p = Profiler::default();
        p.set_mode(ProfileMode::Queued);
        assert!(p.enabled());
        assert_eq!(
            p.time(&be, Part::Attention, || {
                std::thread::sleep(std::time::Duration::from_millis(3));
                7
            }),
            7
        );
        p.time(&be, Part::Attention, || ());
        // Nothing is read until the parts are taken: the totals are empty,
        // the marks pending.
        assert!(p.totals.lock().unwrap().is_empty());
        assert_eq!(p.pending.lock().unwrap().len(), 2);
        p.set_mode(ProfileMode::Synced);
        p.time(&be, Part::Attention, || {
            std::thread::sleep(std::time::Duration::from_millis(1))
        });
        p.set_mode(ProfileMode::Off);
        p.time(&be, Part::Attention, || ());
        let t = p.take(&be);
        assert_eq!(t.len(), 1);
        assert_eq!((t[0].part, t[0].calls), (Part::Attention, 3));
        assert!(t[0].seconds >= 0.004, "{}", t[0].seconds);
        assert!(
            p.pending.lock().unwrap().is_empty(),
            "take reads every mark"
        );
    }

    #[test]
    fn a_mark_the_backend_cannot_read_leaves_its_part_out() {
        let be = CpuBackend::new();
        let p = Profiler::default();
        let foreign = || TimelineMark::Device(Box::new(0u8));
        p.pending
            .lock()
            .unwrap()
            .push((Part::Moe, foreign(), foreign()));
        p.set_mode(ProfileMode::Queued);
        p.time(&be, Part::Embed, || ());
        let t = p.take(&be);
        assert_eq!(
            t.iter().map(|x| x.part).collect::<Vec<_>>(),
            vec![Part::Embed]
        );
    }
}
