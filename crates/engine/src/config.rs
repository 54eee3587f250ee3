//! The engine's configuration ([`EngineConfig`]) and its bounds (the most
//! slots, context and queue an engine accepts; the share of device memory
//! it sizes itself to by default). The checks a request passes before it
//! is queued are `crate::limits`.

use crate::graphs::CudaGraphs;
use crate::kv::KvBackendKind;
use crate::overlap::StepOverlap;
use crate::settings::{PrefixCacheSettings, SchedulerSettings};
use headroom_core::RouteRequest;
use headroom_model::AttentionPlan;

/// How to build and run an engine.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineConfig {
    pub scheduler: SchedulerSettings,
    /// The attention route of every full-attention layer (the policy's resolution).
    pub attention: AttentionPlan,
    pub kv_backend: KvBackendKind,
    /// Bytes the engine's state and attention transients may use (`None`:
    /// unbounded on the CPU; on CUDA `memory_fraction` of the device bounds it).
    pub memory_budget_bytes: Option<u64>,
    /// Share of the device's memory (CUDA) the engine sizes its pools to,
    /// weights included ([`crate::pool`]).
    pub memory_fraction: f64,
    /// Most sequences running at once (state slots); with
    /// `max_running_from_memory` the cap of what memory allows.
    pub max_running: usize,
    /// Size the state slots from memory (up to `max_running`) rather than
    /// taking `max_running` as given.
    pub max_running_from_memory: bool,
    /// KV blocks of the paged pool (`None`: sized from memory, [`crate::pool`]).
    pub kv_pool_blocks: Option<usize>,
    /// Most tokens (prompt + generated) of one sequence; with
    /// `context_fit` [`ContextFit::AtMost`] a ceiling the engine may lower.
    pub max_context: usize,
    /// Whether `max_context` is exact or a ceiling lowered to what memory fits.
    pub context_fit: ContextFit,
    /// Most requests waiting for admission.
    pub max_waiting: usize,
    /// End-of-sequence ids added to every request's stop tokens.
    pub eos_token_ids: Vec<u32>,
    /// Keep each drawn row's logits in [`crate::StepReport`] (tests, parity).
    pub capture_logits: bool,
    /// Prefix caching: on by default (paged KV), with its snapshot slots.
    pub prefix_cache: PrefixCacheSettings,
    /// Whether a step is queued before the last one's tokens are read
    /// ([`crate::overlap`]).
    pub step_overlap: StepOverlap,
    /// Whether decode steps are recorded and launched as CUDA graphs
    /// ([`crate::graphs`]).
    pub cuda_graphs: CudaGraphs,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            scheduler: SchedulerSettings::default(),
            attention: AttentionPlan::Uniform(RouteRequest::Composed { query_block: 128 }),
            kv_backend: KvBackendKind::Paged,
            memory_budget_bytes: None,
            memory_fraction: DEFAULT_MEMORY_FRACTION,
            max_running: 8,
            max_running_from_memory: false,
            kv_pool_blocks: None,
            max_context: 4096,
            context_fit: ContextFit::Exact,
            max_waiting: 1024,
            eos_token_ids: Vec::new(),
            capture_logits: false,
            prefix_cache: PrefixCacheSettings::default(),
            step_overlap: StepOverlap::default(),
            cuda_graphs: CudaGraphs::default(),
        }
    }
}

/// How an engine takes [`EngineConfig::max_context`] when one sequence of
/// it does not fit the memory with the other settings (`crate::context_fit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ContextFit {
    /// The context is what was asked: where it does not fit, the engine does
    /// not start, and its error names the largest context that would (a
    /// caller that chose the context: `--max-context N`).
    #[default]
    Exact,
    /// The context is a ceiling: where it does not fit, the engine runs the
    /// largest that does (a whole number of KV blocks) and says so with a
    /// warning and in its pool plan (a caller that took the model's own
    /// context as a default).
    AtMost,
}

/// The share of device memory an engine on CUDA sizes itself to by default.
pub const DEFAULT_MEMORY_FRACTION: f64 = 0.90;

/// Most slots / context / queue an engine accepts (bounds before allocating).
pub const MAX_RUNNING: usize = 4096;
pub const MAX_CONTEXT: usize = 1 << 24;
