//! The solo stripe an engine runs ([`resolve_solo_stripe`], a pure function
//! of the settings, the backend, the memory model and the memory left): the
//! prompt tokens per step of a request alone in the engine.
//!
//! * An explicit stripe (`--solo-stripe N`, `--chunk N`) is used as given.
//! * `auto` on the CPU is [`FIXED_SOLO_STRIPE`] (2,048: its measured setting,
//!   `docs/perf/model-prefill.md` — chunking costs the CPU little and bounds
//!   its activations).
//! * `auto` on CUDA grows to the whole remaining prompt: the largest stripe
//!   up to `min(SOLO_STRIPE_CAP, max_context)` whose predicted step transient
//!   ([`MemoryModel::solo_step_transient`] at `max_context` keys) fits the
//!   budget — `solo_stripe_budget_bytes`, else the free device memory after
//!   weights and state ([`free_device_bytes`]) or, where smaller, what the
//!   pool plan left for transients of the `--memory-fraction` /
//!   `--memory-budget-mib` share ([`ROOM_SOURCE`]): an operator who gives the
//!   engine a share of the card gets a peak within it. On the H200 a 2,048-token
//!   stripe cost +31 % at 32k against one step (`docs/perf/cuda-model.md`
//!   run 5): each small step runs the MoE grouped GEMMs and the other kernels
//!   at a fraction of their efficiency.
//!
//! The result carries the bound that decided it and a sentence saying why;
//! the engine records both in its stats and the benchmarks in their JSON.
//! `solo_stripe` gathers the inputs for an engine (on CUDA the free device
//! memory: device 0's total as the driver reports it, less what the fullest
//! rank holds after weights and state) and `run_settings` writes the resolved
//! tokens into the settings the stats show.

use crate::memory::MemoryModel;
use crate::settings::{SchedulerSettings, SoloStripe, FIXED_SOLO_STRIPE, SOLO_STRIPE_CAP};
use headroom_core::ops::Backend;
use headroom_core::BackendKind;
use headroom_model::StepModel;
use serde::Serialize;

/// The budget source named when the pool plan's room for transients
/// ([`crate::pool::PoolPlan::transient_room_bytes`]) bounds the stripe.
pub const ROOM_SOURCE: &str = "the memory fraction / budget left after the pools";

/// Rows a memory-bound stripe is rounded down to (the KV block).
const STRIPE_ROUNDING: usize = crate::kv::KV_BLOCK_ROWS;

/// What decided the stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum StripeBound {
    /// Set explicitly (flag or configuration).
    #[default]
    Explicit,
    /// `auto` on the CPU: the fixed stripe.
    CpuFixed,
    /// `auto` on a GPU: the engine's context (every admissible prompt in one step).
    Context,
    /// `auto` on a GPU: the cap ([`SOLO_STRIPE_CAP`]).
    Cap,
    /// `auto` on a GPU: the largest stripe whose predicted transient fits the budget.
    Memory,
    /// `auto` on a GPU whose budget fits not even the fixed stripe: kept at it.
    MemoryFloor,
}

/// The solo stripe resolved for one engine, with why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct SoloStripeResolution {
    /// What was asked: `auto` or tokens.
    pub requested: SoloStripe,
    /// Prompt tokens per step of a request alone (the step's whole budget;
    /// the scheduler never takes less than the prefill chunk).
    pub tokens: usize,
    pub bound: StripeBound,
    /// The budget an `auto` stripe on a GPU was held to (`None` otherwise).
    pub budget_bytes: Option<u64>,
    /// Where the budget came from: `solo_stripe_budget` or `free device memory`.
    pub budget_source: Option<String>,
    /// Predicted transient bytes of a solo step of `tokens` rows at the
    /// engine's context (activations + attention; the memory model's estimate).
    pub predicted_step_bytes: u64,
    pub reason: String,
}

/// Everything [`resolve_solo_stripe`] reads.
#[derive(Debug, Clone, Copy)]
pub struct StripeInputs<'a> {
    pub settings: &'a SchedulerSettings,
    pub backend: BackendKind,
    pub memory: &'a MemoryModel,
    /// The engine's most tokens of one sequence.
    pub max_context: usize,
    /// Free device bytes after weights and state (`None`: unknown).
    pub free_bytes: Option<u64>,
    /// Bytes the pool plan left for transients (`None`: unbounded).
    pub room_bytes: Option<u64>,
}

/// Device bytes left for transients: `total` minus what the backend holds
/// (`active`: weights, state pools) minus a reserve of 10 % of `total`, at
/// least 1 GiB (the CUDA context, cuBLAS workspaces, allocator slack).
pub fn free_device_bytes(total: u64, active: u64) -> u64 {
    let reserve = (total / 10).max(1 << 30);
    total.saturating_sub(active).saturating_sub(reserve)
}

/// The stripe for these inputs (see the module doc).
pub fn resolve_solo_stripe(i: &StripeInputs<'_>) -> SoloStripeResolution {
    let s = i.settings;
    let predicted = |rows: usize| i.memory.solo_step_transient(rows, i.max_context);
    let done =
        |tokens: usize, bound, budget: Option<(u64, &str)>, reason: String| SoloStripeResolution {
            requested: s.solo_stripe,
            tokens,
            bound,
            budget_bytes: budget.map(|b| b.0),
            budget_source: budget.map(|b| b.1.to_string()),
            predicted_step_bytes: predicted(tokens),
            reason,
        };
    if let SoloStripe::Tokens(n) = s.solo_stripe {
        return done(
            n,
            StripeBound::Explicit,
            None,
            format!("explicit solo stripe {n}"),
        );
    }
    if i.backend == BackendKind::Cpu {
        return done(
            FIXED_SOLO_STRIPE,
            StripeBound::CpuFixed,
            None,
            format!("auto on the CPU: the fixed stripe {FIXED_SOLO_STRIPE} (its measured setting)"),
        );
    }
    let cap = SOLO_STRIPE_CAP;
    let upper = cap.min(i.max_context.max(1));
    let upper_bound = if i.max_context < cap {
        StripeBound::Context
    } else {
        StripeBound::Cap
    };
    let upper_why = match upper_bound {
        StripeBound::Context => format!("the engine's context {}", i.max_context),
        _ => format!("the cap {cap}"),
    };
    let budget = match (s.solo_stripe_budget_bytes, i.free_bytes, i.room_bytes) {
        (Some(b), _, _) => Some((b, "solo_stripe_budget")),
        (None, Some(f), Some(r)) if r < f => Some((r, ROOM_SOURCE)),
        (None, Some(f), _) => Some((f, "free device memory")),
        (None, None, Some(r)) => Some((r, ROOM_SOURCE)),
        (None, None, None) => None,
    };
    let Some((bytes, source)) = budget else {
        return done(
            upper,
            upper_bound,
            None,
            format!("auto on a GPU: the whole prompt up to {upper_why} (no memory budget known)"),
        );
    };
    if predicted(upper) <= bytes {
        return done(
            upper,
            upper_bound,
            budget,
            format!(
                "auto on a GPU: the whole prompt up to {upper_why}; a step of {upper} rows is \
                 predicted at {} bytes, within the budget of {bytes} bytes ({source})",
                predicted(upper)
            ),
        );
    }
    let floor = FIXED_SOLO_STRIPE.min(upper);
    if predicted(floor) > bytes {
        return done(
            floor,
            StripeBound::MemoryFloor,
            budget,
            format!(
                "auto on a GPU: the budget of {bytes} bytes ({source}) fits not even a step of \
                 {floor} rows (predicted {} bytes); kept at {floor}",
                predicted(floor)
            ),
        );
    }
    // Largest n in [floor, upper) with predicted(n) <= bytes (monotone in n).
    let (mut lo, mut hi) = (floor, upper);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if predicted(mid) <= bytes {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let tokens = (lo / STRIPE_ROUNDING * STRIPE_ROUNDING).max(floor);
    done(
        tokens,
        StripeBound::Memory,
        budget,
        format!(
            "auto on a GPU: {tokens} rows, the most whose predicted step transient ({} bytes) \
             fits the budget of {bytes} bytes ({source}); {upper_why} would need {} bytes",
            predicted(tokens),
            predicted(upper)
        ),
    )
}

/// The solo stripe of an engine over `model` (its state allocated): on
/// CUDA the free device memory is the device's total (device 0's, as the
/// driver reports it) less what the fullest rank holds, less a reserve;
/// `room_bytes` is what the pool plan left for transients.
pub(crate) fn solo_stripe<B: Backend, M: StepModel<B>>(
    model: &M,
    cfg: &crate::EngineConfig,
    memory: &crate::memory::MemoryModel,
    room_bytes: Option<u64>,
) -> SoloStripeResolution {
    let backend = model.lead().backend().kind();
    let free_bytes = match backend {
        BackendKind::Cuda => headroom_hardware::cuda_availability().ok().map(|d| {
            let active = model.rank_memory().iter().map(|m| m.0).max().unwrap_or(0);
            free_device_bytes(d.memory_gib.saturating_mul(1 << 30), active as u64)
        }),
        BackendKind::Cpu => None,
    };
    let solo = resolve_solo_stripe(&StripeInputs {
        settings: &cfg.scheduler,
        backend,
        memory,
        max_context: cfg.max_context,
        free_bytes,
        room_bytes,
    });
    tracing::info!(
        "solo stripe {} ({:?}): {}",
        solo.tokens,
        solo.bound,
        solo.reason
    );
    solo
}

/// The settings as run: an `auto` solo stripe replaced by its tokens.
pub(crate) fn run_settings(
    cfg: &crate::EngineConfig,
    solo: &SoloStripeResolution,
) -> SchedulerSettings {
    SchedulerSettings {
        solo_stripe: SoloStripe::Tokens(solo.tokens),
        ..cfg.scheduler
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::memory::AttentionLayer;
    use headroom_core::ops::{AttentionCall, WorkspaceModel};
    use headroom_core::{AttentionKind, Dtype, LayerKind, RouteRequest};

    /// A GPU-like account: composed `group · q_len · kv_len · 6` bytes, fused 0.
    #[derive(Debug)]
    struct ScoreBlock;

    impl WorkspaceModel for ScoreBlock {
        fn attention_bytes(&self, c: &AttentionCall) -> u64 {
            let group = (c.layer.q_heads / c.layer.kv_heads) as u64;
            match c.route {
                RouteRequest::Fused => 0,
                RouteRequest::Composed { .. } => group * (c.q_len * c.kv_len) as u64 * 6,
            }
        }
    }

    /// A memory model of `per_row` activation bytes a row, one fused
    /// attention layer and no fixed bytes (the pool's tests use it too).
    pub(crate) fn memory(per_row: u64) -> MemoryModel {
        MemoryModel {
            kv_bytes_per_token: 1024,
            gdn_bytes_per_slot: 1 << 20,
            attention: vec![AttentionLayer {
                layer: 3,
                kind: LayerKind {
                    attention: AttentionKind::Full,
                    head_dim: 256,
                    q_heads: 16,
                    kv_heads: 2,
                    dtype: Dtype::Bf16,
                },
                route: RouteRequest::Fused,
            }],
            workspace: std::sync::Arc::new(ScoreBlock),
            activation_bytes_per_row: per_row,
            logits_bytes_per_row: 0,
            step_fixed_bytes: 0,
        }
    }

    fn resolve(
        stripe: SoloStripe,
        backend: BackendKind,
        per_row: u64,
        max_context: usize,
        budget: Option<u64>,
        free: Option<u64>,
    ) -> SoloStripeResolution {
        let settings = SchedulerSettings {
            solo_stripe: stripe,
            solo_stripe_budget_bytes: budget,
            ..SchedulerSettings::default()
        };
        let m = memory(per_row);
        resolve_solo_stripe(&StripeInputs {
            settings: &settings,
            backend,
            memory: &m,
            max_context,
            free_bytes: free,
            room_bytes: None,
        })
    }

    #[test]
    fn an_explicit_stripe_is_used_as_given_on_any_backend() {
        for backend in [BackendKind::Cpu, BackendKind::Cuda] {
            let r = resolve(
                SoloStripe::Tokens(8192),
                backend,
                100_000,
                1 << 20,
                Some(1),
                Some(1),
            );
            assert_eq!((r.tokens, r.bound), (8192, StripeBound::Explicit));
            assert_eq!(r.requested, SoloStripe::Tokens(8192));
            assert!(r.reason.contains("explicit"), "{}", r.reason);
        }
    }

    #[test]
    fn auto_on_the_cpu_is_the_fixed_2048() {
        let r = resolve(
            SoloStripe::Auto,
            BackendKind::Cpu,
            100_000,
            1 << 20,
            None,
            Some(u64::MAX),
        );
        assert_eq!((r.tokens, r.bound), (2048, StripeBound::CpuFixed));
        assert_eq!(r.requested, SoloStripe::Auto);
        assert_eq!(r.budget_bytes, None);
    }

    #[test]
    fn auto_on_a_gpu_is_the_cap_or_the_context_when_memory_allows() {
        let gib = 1u64 << 30;
        let r = resolve(
            SoloStripe::Auto,
            BackendKind::Cuda,
            100_000,
            200_000,
            None,
            Some(60 * gib),
        );
        assert_eq!((r.tokens, r.bound), (65_536, StripeBound::Cap));
        assert_eq!(r.budget_source.as_deref(), Some("free device memory"));
        assert_eq!(r.predicted_step_bytes, 65_536 * 100_000);
        let r = resolve(
            SoloStripe::Auto,
            BackendKind::Cuda,
            100_000,
            32_832,
            None,
            Some(60 * gib),
        );
        assert_eq!((r.tokens, r.bound), (32_832, StripeBound::Context));
        assert!(r.reason.contains("whole prompt"), "{}", r.reason);
    }

    #[test]
    fn auto_on_a_gpu_shrinks_to_what_the_budget_fits() {
        // 100 kB per row, a budget of 1 GB (explicit: it wins over the free memory).
        let r = resolve(
            SoloStripe::Auto,
            BackendKind::Cuda,
            100_000,
            1 << 20,
            Some(1_000_000_000),
            Some(u64::MAX),
        );
        assert_eq!(r.bound, StripeBound::Memory);
        assert_eq!(r.tokens, 9984, "10,000 rows fit, rounded down to 64");
        assert!(r.predicted_step_bytes <= 1_000_000_000);
        assert_eq!(r.budget_source.as_deref(), Some("solo_stripe_budget"));
        // The free memory when no budget is set.
        let r = resolve(
            SoloStripe::Auto,
            BackendKind::Cuda,
            100_000,
            1 << 20,
            None,
            Some(500_000_000),
        );
        assert_eq!((r.tokens, r.bound), (4992, StripeBound::Memory));
        // A budget below even the fixed stripe keeps the fixed stripe, and says so.
        let r = resolve(
            SoloStripe::Auto,
            BackendKind::Cuda,
            100_000,
            1 << 20,
            Some(1000),
            None,
        );
        assert_eq!((r.tokens, r.bound), (2048, StripeBound::MemoryFloor));
        assert!(r.reason.contains("not even"), "{}", r.reason);
    }

    /// [`resolve`] with the pool plan's room for transients as well.
    fn resolve_in_room(
        budget: Option<u64>,
        free: Option<u64>,
        room: Option<u64>,
    ) -> SoloStripeResolution {
        let settings = SchedulerSettings {
            solo_stripe_budget_bytes: budget,
            ..SchedulerSettings::default()
        };
        let m = memory(100_000);
        resolve_solo_stripe(&StripeInputs {
            settings: &settings,
            backend: BackendKind::Cuda,
            memory: &m,
            max_context: 1 << 20,
            free_bytes: free,
            room_bytes: room,
        })
    }

    #[test]
    fn auto_on_a_gpu_stays_within_what_the_memory_share_left_after_the_pools() {
        // 100 kB a row. The card has 60 GB free, but --memory-fraction (or
        // --memory-budget-mib) left the pools' plan 500 MB for transients:
        // the stripe takes what fits those, not the card's free memory.
        let r = resolve_in_room(None, Some(60_000_000_000), Some(500_000_000));
        assert_eq!((r.tokens, r.bound), (4992, StripeBound::Memory));
        assert_eq!(r.budget_bytes, Some(500_000_000));
        assert_eq!(r.budget_source.as_deref(), Some(ROOM_SOURCE));
        assert!(r.reason.contains(ROOM_SOURCE), "{}", r.reason);
        // Where the free memory is the smaller, it decides (the default
        // fraction's room and the free memory are the same share).
        let r = resolve_in_room(None, Some(500_000_000), Some(60_000_000_000));
        assert_eq!(
            (r.tokens, r.budget_source.as_deref()),
            (4992, Some("free device memory"))
        );
        // The free memory unknown: the room alone.
        let r = resolve_in_room(None, None, Some(1_000_000_000));
        assert_eq!(
            (r.tokens, r.budget_source.as_deref()),
            (9984, Some(ROOM_SOURCE))
        );
        // An explicit --solo-stripe-budget-mib is taken as given.
        let r = resolve_in_room(Some(1_000_000_000), Some(60_000_000_000), Some(500_000_000));
        assert_eq!(
            (r.tokens, r.budget_source.as_deref()),
            (9984, Some("solo_stripe_budget"))
        );
    }

    #[test]
    fn composed_attention_counts_against_the_budget() {
        let settings = SchedulerSettings::default();
        let mut m = memory(0);
        m.attention[0].route = RouteRequest::Composed { query_block: 0 };
        // group 8: 8 · rows · kv · 6 bytes; kv = the context 65,536.
        let budget = 8 * 4096 * 65_536 * 6;
        let r = resolve_solo_stripe(&StripeInputs {
            settings: &SchedulerSettings {
                solo_stripe_budget_bytes: Some(budget),
                ..settings
            },
            backend: BackendKind::Cuda,
            memory: &m,
            max_context: 65_536,
            free_bytes: None,
            room_bytes: None,
        });
        assert_eq!((r.tokens, r.bound), (4096, StripeBound::Memory));
    }

    #[test]
    fn free_device_bytes_keeps_a_reserve() {
        let gib = 1u64 << 30;
        assert_eq!(free_device_bytes(140 * gib, 70 * gib), 56 * gib);
        assert_eq!(free_device_bytes(8 * gib, 6 * gib), gib);
        assert_eq!(free_device_bytes(8 * gib, 9 * gib), 0);
    }
}
