//! The engine's scheduler and KV-cache flags, shared by `generate`, `serve`
//! and `bench prefill`, and the one place any command turns flags into
//! [`SchedulerSettings`]: the defaults, then `--chunk`, then the specific
//! flags, then checked (the engine reads no environment).

use headroom_engine::{
    CudaGraphs, KvBackendKind, PrefixCacheSettings, SchedulerSettings, SoloStripe, StepOverlap,
};

/// `--prefill-chunk --step-tokens --solo-stripe --kv --no-prefix-cache
/// --prefix-cache-state-slots --prefix-cache-interval --batch-invariant
/// --step-overlap --cuda-graphs --no-cuda-graphs`.
#[derive(clap::Args, Debug, Clone)]
pub struct EngineArgs {
    /// Prompt tokens per sequence per step when several share the engine
    /// (default 2048).
    #[arg(long, value_name = "N")]
    pub prefill_chunk: Option<usize>,
    /// Rows per engine step over all sequences (default 8192).
    #[arg(long, value_name = "N")]
    pub step_tokens: Option<usize>,
    /// Prompt tokens per step of a request alone in the engine, or `auto`
    /// (default auto: the whole prompt on cuda, 2048 on cpu).
    #[arg(long, value_name = "N|auto")]
    pub solo_stripe: Option<SoloStripe>,
    /// MiB of transients an `auto` solo stripe may use (default: the free
    /// device memory after weights and state).
    #[arg(long, value_name = "MIB")]
    pub solo_stripe_budget_mib: Option<u64>,
    /// KV cache backend of the engine: paged (a block pool sized from memory,
    /// blocks taken as sequences grow) or contiguous (every slot's full
    /// context reserved).
    #[arg(long, default_value = "paged", value_name = "paged|contiguous")]
    pub kv: KvBackendKind,
    /// Turn prefix caching off (on by default with paged KV: full KV blocks
    /// shared by content, GDN state snapshots at block ends).
    #[arg(long)]
    pub no_prefix_cache: bool,
    /// Spare state slots holding the prefix cache's GDN state snapshots
    /// (each one sequence's GDN state; default: 16, or fewer where they
    /// would take more than 1/16 of the memory left after the largest step,
    /// at least 2). A hit resumes from a snapshot, so 0 is refused (use
    /// --no-prefix-cache); 1 keeps hits but cannot hold a burst back.
    #[arg(long, value_name = "N", conflicts_with = "no_prefix_cache")]
    pub prefix_cache_state_slots: Option<usize>,
    /// Tokens between the prefix cache's snapshots inside a long prompt
    /// (whole blocks of 64; default 0: only at prompt ends and where a
    /// prompt branches off a cached prefix).
    #[arg(long, value_name = "N", conflicts_with = "no_prefix_cache")]
    pub prefix_cache_interval: Option<usize>,
    /// Batch-invariant arithmetic: a request's logits alone and among any
    /// others in a step agree (on CUDA the MoE block of small steps runs the
    /// grouped GEMMs instead of the faster decode kernels, so batch-1 decode
    /// is slower; the CPU is batch-invariant anyway).
    #[arg(long)]
    pub batch_invariant: bool,
    /// Queue each engine step before the last one's tokens are read, so the
    /// host's work between steps runs while the device computes: on, off, or
    /// auto (default: on for CUDA, off on the CPU, which draws each step's
    /// tokens at once; docs/configuration.md).
    #[arg(long, default_value = "auto", value_name = "auto|on|off")]
    pub step_overlap: StepOverlap,
    /// Record each decode step as a CUDA graph and launch it as one unit
    /// (the same kernels and bits, one driver submission instead of ~300):
    /// on, off, or auto (default: on for CUDA where the step overlap is on,
    /// measured on the H200; docs/configuration.md).
    #[arg(long, default_value = "auto", value_name = "auto|on|off")]
    pub cuda_graphs: CudaGraphs,
    /// The same as --cuda-graphs off (for A/B runs).
    #[arg(long, conflicts_with = "cuda_graphs")]
    pub no_cuda_graphs: bool,
}

impl EngineArgs {
    /// `--cuda-graphs`, or off with `--no-cuda-graphs`.
    pub fn cuda_graphs(&self) -> CudaGraphs {
        if self.no_cuda_graphs {
            CudaGraphs::Off
        } else {
            self.cuda_graphs
        }
    }

    /// The backend settings these flags select.
    pub fn backend(&self) -> crate::backend_select::BackendSettings {
        crate::backend_select::BackendSettings {
            batch_invariant: self.batch_invariant,
        }
    }

    /// The scheduler settings these flags select; `chunk` (a command's
    /// `--chunk`) sets both the prefill chunk and the solo stripe first.
    pub fn scheduler(&self, chunk: Option<usize>) -> anyhow::Result<SchedulerSettings> {
        scheduler_settings(SchedulerFlags {
            chunk,
            prefill_chunk: self.prefill_chunk,
            step_tokens: self.step_tokens,
            solo_stripe: self.solo_stripe,
            solo_stripe_budget_mib: self.solo_stripe_budget_mib,
        })
    }

    /// The prefix-cache settings these flags select; `--prefix-cache-state-slots
    /// 0` with caching on is refused (a hit resumes from a GDN state
    /// snapshot: with none the cache would never hit).
    pub fn prefix_cache(&self) -> anyhow::Result<PrefixCacheSettings> {
        if self.no_prefix_cache {
            return Ok(PrefixCacheSettings::off());
        }
        if self.prefix_cache_state_slots == Some(0) {
            anyhow::bail!(
                "--prefix-cache-state-slots 0: a prefix-cache hit resumes from a GDN state \
                 snapshot, so with no snapshot slots the cache would never hit; pass at least 1 \
                 (2 to hold back a burst sharing a prefix) or --no-prefix-cache"
            );
        }
        let d = PrefixCacheSettings::default();
        Ok(PrefixCacheSettings {
            state_slots: self.prefix_cache_state_slots.unwrap_or(d.state_slots),
            state_slots_from_memory: self.prefix_cache_state_slots.is_none(),
            interval_tokens: self.prefix_cache_interval.unwrap_or(d.interval_tokens),
            ..d
        })
    }
}

/// The scheduler flags of one command (each absent one left at its default).
#[derive(Debug, Clone, Copy, Default)]
pub struct SchedulerFlags {
    /// `--chunk`: the prefill chunk and the solo stripe at once.
    pub chunk: Option<usize>,
    pub prefill_chunk: Option<usize>,
    pub step_tokens: Option<usize>,
    pub solo_stripe: Option<SoloStripe>,
    pub solo_stripe_budget_mib: Option<u64>,
}

/// The default settings, then the flags in `f`, checked.
pub fn scheduler_settings(f: SchedulerFlags) -> anyhow::Result<SchedulerSettings> {
    let mut s = SchedulerSettings::default();
    apply(&mut s, f);
    s.validate()
        .map_err(|e| anyhow::anyhow!("scheduler settings: {e}"))?;
    Ok(s)
}

/// The flags over `s`: `chunk` first, the specific flags after it.
fn apply(s: &mut SchedulerSettings, f: SchedulerFlags) {
    if let Some(c) = f.chunk {
        s.prefill_chunk = c;
        s.solo_stripe = SoloStripe::Tokens(c);
    }
    s.prefill_chunk = f.prefill_chunk.unwrap_or(s.prefill_chunk);
    s.step_tokens = f.step_tokens.unwrap_or(s.step_tokens);
    s.solo_stripe = f.solo_stripe.unwrap_or(s.solo_stripe);
    if let Some(mib) = f.solo_stripe_budget_mib {
        s.solo_stripe_budget_bytes = Some(mib.saturating_mul(1 << 20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> SchedulerSettings {
        SchedulerSettings {
            prefill_chunk: 512,
            step_tokens: 2048,
            solo_stripe: SoloStripe::Auto,
            ..SchedulerSettings::default()
        }
    }

    #[test]
    fn no_flags_keep_the_base() {
        let mut s = base();
        apply(&mut s, SchedulerFlags::default());
        assert_eq!(s.prefill_chunk, 512);
        assert_eq!(s.step_tokens, 2048);
        assert_eq!(s.solo_stripe, SoloStripe::Auto);
    }

    #[test]
    fn chunk_sets_chunk_and_stripe_and_specific_flags_win() {
        let mut s = base();
        apply(
            &mut s,
            SchedulerFlags {
                chunk: Some(64),
                ..SchedulerFlags::default()
            },
        );
        assert_eq!(s.prefill_chunk, 64);
        assert_eq!(s.solo_stripe, SoloStripe::Tokens(64));
        let mut s = base();
        apply(
            &mut s,
            SchedulerFlags {
                chunk: Some(64),
                prefill_chunk: Some(128),
                step_tokens: Some(256),
                solo_stripe: Some(SoloStripe::Auto),
                solo_stripe_budget_mib: Some(1024),
            },
        );
        assert_eq!(s.solo_stripe_budget_bytes, Some(1 << 30));
        assert_eq!(s.prefill_chunk, 128);
        assert_eq!(s.step_tokens, 256);
        assert_eq!(s.solo_stripe, SoloStripe::Auto);
    }

    #[test]
    fn a_zero_step_budget_is_refused_by_name() {
        let err = scheduler_settings(SchedulerFlags {
            step_tokens: Some(0),
            ..SchedulerFlags::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("scheduler settings:"), "{err}");
    }
}
