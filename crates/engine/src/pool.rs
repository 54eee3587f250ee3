//! How many KV blocks and state slots an engine gets ([`size_pool`], a pure
//! function of the memory available and the sizes of one block and one
//! slot), and the one-line account of the result ([`PoolPlan`]'s `Display`).
//!
//! The bytes available to the engine's state and transients are, on CUDA,
//! `--memory-fraction` (default [`crate::config::DEFAULT_MEMORY_FRACTION`]) of the device
//! total less what the backend holds after the weights (capped by
//! `--memory-budget-mib` when given), and on the CPU the stated budget. From
//! them:
//!
//! 1. the largest step's transient peak (the memory model's prediction for
//!    the scheduler's largest step; an `auto` solo stripe on CUDA is planned
//!    at the whole prompt only where that takes at most
//!    [`STRIPE_PLAN_SHARE`] of the memory, [`planned_step_rows`]) and the
//!    prefix cache's snapshot slots
//!    (each one sequence's GDN state) are set aside — by default at most
//!    [`crate::settings::SNAPSHOT_SHARE`] of what is left after the
//!    transient (at least two, at most `--prefix-cache-state-slots`'
//!    default), so that on a memory-starved card the snapshots do not take
//!    the running sequences' room; a given `--prefix-cache-state-slots` is
//!    taken as given;
//! 2. the GDN state slots (one per running sequence): `--max-running` when
//!    given, else what memory allows — at most [`GDN_SHARE`] (two thirds)
//!    of what is left after step 1 goes to GDN state, and every slot keeps
//!    room for at least one KV block — capped at [`AUTO_RUNNING_CAP`];
//! 3. the rest is KV blocks (`block_bytes` each: K and V of every
//!    full-attention layer), at most enough for every slot at full context.
//!
//! A configuration in which not even one sequence fits at full context (or
//! the transient or the GDN slots alone exceed the memory) is an error with
//! the numbers and, where a shorter context fits the same settings, the
//! largest such `--max-context` (`context_fit.rs`, around [`plan_pool`]) —
//! or, where the configuration takes its context as a ceiling
//! ([`crate::config::ContextFit::AtMost`]), the plan at that context.
//! Without a budget (a CPU engine given none) every slot gets its full
//! context.
//!
//! [`plan_pool`] gathers the inputs for one engine (the device total, what
//! the backend holds, the memory model's sizes and step prediction);
//! contiguous KV keeps its identity layout (every slot's full context
//! reserved) and an explicit `kv_pool_blocks` is taken as given.

use crate::config::EngineConfig;
use crate::kv::{blocks_for, KvBackendKind, KV_BLOCK_ROWS};
use crate::memory::MemoryModel;
use crate::settings::{
    SchedulerSettings, SnapshotSlots, SoloStripe, FIXED_SOLO_STRIPE, SOLO_STRIPE_CAP,
};
use headroom_core::ops::Backend;
use headroom_core::BackendKind;
use headroom_model::StepModel;
use serde::Serialize;

/// The most of the memory left (after the step's transient and the
/// snapshots) that GDN state slots take when `--max-running` is not given,
/// as a fraction (numerator, denominator); the rest is KV blocks. Measured
/// on an H200 (35B-A3B bf16, docs/perf/serving.md session 5, call R3): with
/// half, W1 (c = 512) ran 420 sequences and 4,774 output tok/s; with 512
/// slots 5,124 (TTFT p50 2.0 s -> 0.55 s), while two thirds still leave
/// 0.86 M tokens of KV (16 sequences of 32k need 0.53 M).
pub const GDN_SHARE: (u64, u64) = (2, 3);

/// Most state slots `--max-running` resolves to when sized from memory.
pub const AUTO_RUNNING_CAP: usize = 1024;

/// How many state slots to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunningSlots {
    /// Exactly this many (`--max-running N`).
    Fixed(usize),
    /// What memory allows, at most this many.
    FromMemory { cap: usize },
}

/// What [`size_pool`] reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolInputs {
    /// Bytes the state pools and the step's transients may use (`None`: unbounded).
    pub available_bytes: Option<u64>,
    /// Bytes of one KV block over every full-attention layer (K and V).
    pub block_bytes: u64,
    /// Bytes of one sequence's GDN state over every linear-attention layer.
    pub gdn_bytes_per_slot: u64,
    /// Bytes a running sequence adds to a step's transients beyond its
    /// rows' activations: the logits of the row it samples (a step samples
    /// at most one row a running sequence), set aside with its state slot.
    pub sampled_bytes_per_slot: u64,
    /// Predicted transient peak of the scheduler's largest step (one sampled
    /// row; the others are counted a slot, `sampled_bytes_per_slot`).
    pub step_transient_bytes: u64,
    pub running: RunningSlots,
    /// Most tokens of one sequence.
    pub max_context: usize,
    /// Spare state slots of the prefix cache's GDN snapshots (set aside
    /// before the running slots and the KV blocks).
    pub snapshots: SnapshotSlots,
}

/// The pools an engine makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct PoolPlan {
    /// KV blocks of [`KV_BLOCK_ROWS`] rows.
    pub blocks: usize,
    /// GDN state slots (most sequences running at once).
    pub slots: usize,
    /// Spare state slots holding prefix-cache GDN snapshots.
    pub snapshot_slots: usize,
    pub block_bytes: u64,
    pub gdn_bytes_per_slot: u64,
    /// Bytes set aside for the largest step's transients.
    pub step_transient_bytes: u64,
    /// The bytes the plan was sized from (`None`: unbounded).
    pub available_bytes: Option<u64>,
    /// Most tokens of one sequence: the context the engine runs.
    pub max_context: usize,
    /// The context asked for, where it did not fit and the engine runs the
    /// largest that does instead (`max_context`, under
    /// [`crate::config::ContextFit::AtMost`]); `None`: it runs the asked one.
    pub lowered_from: Option<usize>,
}

impl PoolPlan {
    /// Token rows the KV pool holds.
    pub fn tokens(&self) -> usize {
        self.blocks.saturating_mul(KV_BLOCK_ROWS)
    }

    pub fn kv_bytes(&self) -> u64 {
        (self.blocks as u64).saturating_mul(self.block_bytes)
    }

    pub fn gdn_bytes(&self) -> u64 {
        (self.slots as u64).saturating_mul(self.gdn_bytes_per_slot)
    }

    /// Bytes of the prefix cache's snapshot slots.
    pub fn snapshot_bytes(&self) -> u64 {
        (self.snapshot_slots as u64).saturating_mul(self.gdn_bytes_per_slot)
    }

    /// Bytes the plan leaves for a step's transients: what it was sized from
    /// less the KV blocks, the state slots and the snapshot slots (`None`:
    /// unbounded). The solo stripe an `auto` engine resolves on CUDA stays
    /// within it, so `--memory-fraction` and `--memory-budget-mib` bound the
    /// engine's peak, not only its pools ([`crate::stripe`]).
    pub fn transient_room_bytes(&self) -> Option<u64> {
        self.available_bytes.map(|a| {
            a.saturating_sub(self.kv_bytes())
                .saturating_sub(self.gdn_bytes())
                .saturating_sub(self.snapshot_bytes())
        })
    }

    /// Sequences that fit at once at full context (by blocks and by slots).
    pub fn full_context_sequences(&self) -> usize {
        (self.blocks / blocks_for(self.max_context).max(1)).min(self.slots)
    }
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

impl std::fmt::Display for PoolPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "KV pool {} blocks of {KV_BLOCK_ROWS} tokens = {} tokens ({:.2} GiB); {} state slots \
             ({:.2} GiB GDN state); {} prefix-cache snapshot slots ({:.2} GiB); {} sequences fit \
             at full context ({} tokens{})",
            self.blocks,
            self.tokens(),
            gib(self.kv_bytes()),
            self.slots,
            gib(self.gdn_bytes()),
            self.snapshot_slots,
            gib(self.snapshot_bytes()),
            self.full_context_sequences(),
            self.max_context,
            match self.lowered_from {
                Some(asked) => format!(", lowered from {asked} to fit"),
                None => String::new(),
            },
        )
    }
}

/// Why no pool fits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    #[error(
        "the largest step's transients ({:.2} GiB predicted) exceed the {:.2} GiB available \
         for state and transients; raise --memory-fraction or lower --step-tokens / --solo-stripe",
        gib(*step_transient_bytes), gib(*available_bytes)
    )]
    Transient {
        step_transient_bytes: u64,
        available_bytes: u64,
    },
    #[error(
        "the prefix cache's {snapshot_slots} snapshot slots ({:.2} GiB) and the largest step's \
         transients exceed the {:.2} GiB available; lower --prefix-cache-state-slots or raise \
         --memory-fraction",
        gib(*snapshot_bytes), gib(*available_bytes)
    )]
    Snapshots {
        snapshot_slots: usize,
        snapshot_bytes: u64,
        available_bytes: u64,
    },
    #[error(
        "cannot fit: {slots} state slots ({:.2} GiB GDN state) + {need_blocks} KV blocks for one \
         sequence of {max_context} tokens ({:.2} GiB) + the largest step's transients ({:.2} GiB) \
         need {:.2} GiB, {:.2} GiB available; lower --max-running or --max-context, or raise \
         --memory-fraction",
        gib(*gdn_bytes), gib(*kv_bytes), gib(*step_transient_bytes),
        gib(gdn_bytes.saturating_add(*kv_bytes).saturating_add(*step_transient_bytes)),
        gib(*available_bytes)
    )]
    NoFit {
        slots: usize,
        gdn_bytes: u64,
        need_blocks: usize,
        max_context: usize,
        kv_bytes: u64,
        step_transient_bytes: u64,
        available_bytes: u64,
    },
    #[error("{cause}; with these settings the largest --max-context that fits is {fits} tokens")]
    ContextTooLong {
        /// Why the asked context does not fit.
        cause: Box<PoolError>,
        /// The largest context that does (found by `context_fit.rs`).
        fits: usize,
    },
}

/// The pools for `i` (see the module doc), or why none fits.
pub fn size_pool(i: &PoolInputs) -> Result<PoolPlan, PoolError> {
    let per_seq = blocks_for(i.max_context).max(1);
    let plan = |snapshot_slots: usize, slots: usize, blocks: usize| PoolPlan {
        blocks,
        slots,
        snapshot_slots,
        block_bytes: i.block_bytes,
        gdn_bytes_per_slot: i.gdn_bytes_per_slot,
        step_transient_bytes: i.step_transient_bytes,
        available_bytes: i.available_bytes,
        max_context: i.max_context,
        lowered_from: None,
    };
    let Some(available) = i.available_bytes else {
        let slots = match i.running {
            RunningSlots::Fixed(n) => n,
            RunningSlots::FromMemory { cap } => cap,
        };
        let snapshot_slots = i.snapshots.resolve(None, i.gdn_bytes_per_slot);
        return Ok(plan(snapshot_slots, slots, slots.saturating_mul(per_seq)));
    };
    let after_transient =
        available
            .checked_sub(i.step_transient_bytes)
            .ok_or(PoolError::Transient {
                step_transient_bytes: i.step_transient_bytes,
                available_bytes: available,
            })?;
    let snapshot_slots = i
        .snapshots
        .resolve(Some(after_transient), i.gdn_bytes_per_slot);
    let snapshot_bytes = (snapshot_slots as u64).saturating_mul(i.gdn_bytes_per_slot);
    let left = after_transient
        .checked_sub(snapshot_bytes)
        .ok_or(PoolError::Snapshots {
            snapshot_slots,
            snapshot_bytes,
            available_bytes: available,
        })?;
    let slot_bytes = i
        .gdn_bytes_per_slot
        .saturating_add(i.sampled_bytes_per_slot);
    let slots = match i.running {
        RunningSlots::Fixed(n) => n,
        RunningSlots::FromMemory { cap } => {
            let by_share = (left / GDN_SHARE.1)
                .saturating_mul(GDN_SHARE.0)
                .checked_div(slot_bytes)
                .unwrap_or(u64::MAX);
            let by_block = left
                .checked_div(slot_bytes.saturating_add(i.block_bytes))
                .unwrap_or(u64::MAX);
            usize::try_from(by_share.min(by_block))
                .unwrap_or(usize::MAX)
                .min(cap)
                .max(1)
        }
    };
    let no_fit = || PoolError::NoFit {
        slots,
        gdn_bytes: (slots as u64).saturating_mul(i.gdn_bytes_per_slot),
        need_blocks: per_seq,
        max_context: i.max_context,
        kv_bytes: (per_seq as u64).saturating_mul(i.block_bytes),
        step_transient_bytes: i.step_transient_bytes,
        available_bytes: available,
    };
    let kv_left = left
        .checked_sub((slots as u64).saturating_mul(slot_bytes))
        .ok_or_else(no_fit)?;
    let blocks = usize::try_from(kv_left.checked_div(i.block_bytes).unwrap_or(u64::MAX))
        .unwrap_or(usize::MAX)
        .min(slots.saturating_mul(per_seq))
        .min(u32::MAX as usize);
    if blocks < per_seq {
        return Err(no_fit());
    }
    Ok(plan(snapshot_slots, slots, blocks))
}

/// The most of the memory available that a plan sets aside for an `auto`
/// solo stripe's transients on CUDA, as (numerator, denominator). Where the
/// whole prompt's step (up to the cap or the context) needs more, the plan
/// is made for the largest stripe whose transient fits this share (at least
/// the fixed stripe, and never below the shared step); at run time the
/// stripe resolves within what the pools left. With the step activations
/// measured at start-up (`crate::calibrate`: 79,433 bytes a row counted for
/// the bf16 35B-A3B, 86,165 for its FP8 form) the whole 65,536-row step
/// takes ≈ 5.2 / 5.7 GB: within a sixth of an H200's ≈ 60 GiB after the bf16
/// weights and of an 80 GB H100's ≈ 37 GiB after the FP8 ones; on an 80 GB
/// H100 serving the bf16 form (≈ 6.5 GiB) a sixth plans a stripe of ≈ 15k
/// rows (a 32k prompt in three steps) and leaves the rest to running
/// sequences. A third (session 29, with the shape's estimate of twice the
/// bytes a row) planned the same stripe; measured against a third once the
/// rows were measured: docs/perf/serving.md, session 30.
pub const STRIPE_PLAN_SHARE: (u64, u64) = (1, 6);

/// Rows of the largest step a plan sets aside transients for:
/// [`largest_step_rows`], except that an `auto` stripe on CUDA whose
/// whole-prompt step needs more than [`STRIPE_PLAN_SHARE`] of `available`
/// is planned at the largest stripe that fits that share.
pub fn planned_step_rows(
    s: &SchedulerSettings,
    backend: BackendKind,
    max_context: usize,
    memory: &MemoryModel,
    available: Option<u64>,
) -> usize {
    let whole = largest_step_rows(s, backend, max_context);
    let (Some(available), SoloStripe::Auto, BackendKind::Cuda) =
        (available, s.solo_stripe, backend)
    else {
        return whole;
    };
    let share = available / STRIPE_PLAN_SHARE.1 * STRIPE_PLAN_SHARE.0;
    let solo = crate::stripe::resolve_solo_stripe(&crate::stripe::StripeInputs {
        settings: s,
        backend,
        memory,
        max_context,
        free_bytes: Some(share),
        room_bytes: None,
    })
    .tokens;
    s.largest_step_rows(solo)
}

/// The transient a plan sets aside for its largest step: a lone request's
/// step of `rows` rows (one sampled), or a shared step of the step budget's
/// rows, each row possibly a sequence of up to `max_context` keys (what a
/// route that gathers the sequences' K/V holds), its sampled rows' logits
/// counted a running slot ([`PoolInputs::sampled_bytes_per_slot`]).
pub fn planned_step_transient(
    s: &SchedulerSettings,
    rows: usize,
    max_context: usize,
    memory: &MemoryModel,
) -> u64 {
    let shared = s.step_rows(false, 0).min(rows);
    memory
        .solo_step_transient(rows, max_context)
        .max(memory.step_transient(shared, shared, 0, max_context))
}

/// Rows of the scheduler's largest step: a shared step, or a solo step of
/// the largest stripe `auto` may resolve to on `backend` (the cap or the
/// context on a GPU, the fixed stripe on the CPU).
pub fn largest_step_rows(s: &SchedulerSettings, backend: BackendKind, max_context: usize) -> usize {
    let solo = match s.solo_stripe {
        SoloStripe::Tokens(n) => n,
        SoloStripe::Auto => match backend {
            BackendKind::Cuda => SOLO_STRIPE_CAP.min(max_context),
            BackendKind::Cpu => FIXED_SOLO_STRIPE,
        },
    };
    s.largest_step_rows(solo)
}

/// The pools of an engine over `model` (its weights loaded, no state yet)
/// configured by `cfg`, with `memory` its memory model.
pub(crate) fn plan_pool<B: Backend, M: StepModel<B>>(
    model: &M,
    cfg: &EngineConfig,
    memory: &MemoryModel,
) -> Result<PoolPlan, PoolError> {
    let backend = model.lead().backend().kind();
    let available = match backend {
        BackendKind::Cuda => headroom_hardware::cuda_availability()
            .ok()
            .map(|d| {
                let held = model.rank_memory().iter().map(|m| m.0).max().unwrap_or(0);
                let total = d.memory_gib.saturating_mul(1 << 30) as f64;
                ((total * cfg.memory_fraction) as u64).saturating_sub(held as u64)
            })
            .map(|a| cfg.memory_budget_bytes.map_or(a, |b| a.min(b)))
            .or(cfg.memory_budget_bytes),
        BackendKind::Cpu => cfg.memory_budget_bytes,
    };
    let rows = planned_step_rows(&cfg.scheduler, backend, cfg.max_context, memory, available);
    let inputs = PoolInputs {
        available_bytes: available,
        block_bytes: memory
            .kv_bytes_per_token
            .saturating_mul(KV_BLOCK_ROWS as u64),
        gdn_bytes_per_slot: memory.gdn_bytes_per_slot,
        sampled_bytes_per_slot: memory.logits_bytes_per_row,
        step_transient_bytes: planned_step_transient(&cfg.scheduler, rows, cfg.max_context, memory),
        running: if cfg.max_running_from_memory {
            RunningSlots::FromMemory {
                cap: cfg.max_running,
            }
        } else {
            RunningSlots::Fixed(cfg.max_running)
        },
        max_context: cfg.max_context,
        snapshots: cfg
            .prefix_cache
            .snapshot_slots(cfg.kv_backend == KvBackendKind::Paged),
    };
    match (cfg.kv_backend, cfg.kv_pool_blocks) {
        (KvBackendKind::Paged, None) => size_pool(&inputs),
        (KvBackendKind::Paged, Some(blocks)) => {
            let mut plan = size_pool(&PoolInputs {
                available_bytes: None,
                ..inputs
            })?;
            plan.blocks = blocks.min(u32::MAX as usize);
            Ok(plan)
        }
        (KvBackendKind::Contiguous, _) => Ok(contiguous_pool(&inputs)),
    }
}

/// The identity layout: every slot reserves its full context; slots from
/// memory count each one's GDN state and full-context KV.
pub fn contiguous_pool(i: &PoolInputs) -> PoolPlan {
    let per_seq = blocks_for(i.max_context).max(1);
    let slots = match (i.running, i.available_bytes) {
        (RunningSlots::Fixed(n), _) => n,
        (RunningSlots::FromMemory { cap }, None) => cap,
        (RunningSlots::FromMemory { cap }, Some(a)) => {
            let per_slot = i
                .gdn_bytes_per_slot
                .saturating_add(i.block_bytes.saturating_mul(per_seq as u64));
            let n = a
                .saturating_sub(i.step_transient_bytes)
                .checked_div(per_slot)
                .unwrap_or(u64::MAX);
            usize::try_from(n).unwrap_or(usize::MAX).min(cap).max(1)
        }
    };
    PoolPlan {
        blocks: slots.saturating_mul(per_seq),
        slots,
        snapshot_slots: 0,
        block_bytes: i.block_bytes,
        gdn_bytes_per_slot: i.gdn_bytes_per_slot,
        step_transient_bytes: i.step_transient_bytes,
        available_bytes: i.available_bytes,
        max_context: i.max_context,
        lowered_from: None,
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
