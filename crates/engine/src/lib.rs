//! Headroom's engine: continuous batching over any backend of the op set.
//!
//! * [`settings`] — the scheduler's prefill chunk, step token budget and solo
//!   stripe (defaults 512 / 2048 / `auto`; the engine reads no environment);
//! * [`stripe`] — what an `auto` solo stripe resolves to on an engine (the
//!   whole prompt on GPUs within a cap and a memory budget, 2048 on the CPU),
//!   with why;
//! * [`scheduler`] — the token budget of one step: decode rows first, then
//!   prefill chunks, several sequences packed into one `Qwen35Model::step`;
//! * [`kv`] — the KV factory (paged | contiguous, resolved with its reason);
//! * [`prefix`] — the KV block pool (blocks of 64 rows, reference counted,
//!   full blocks content-addressed and kept cached in an LRU) and
//!   [`snapshots`] — the GDN state snapshots a prefix hit resumes from;
//! * [`pool`] — how many KV blocks and state slots an engine makes, from
//!   the memory available (a pure function and its inputs);
//! * [`slots`] — the state slot pool (the GDN state, one per running sequence);
//! * [`memory`] — each request's predicted bytes for admission (the attention
//!   workspace as the backend answers it, `Backend::workspace_model`);
//! * [`core`] — [`EngineCore`], the step function (admission, block growth
//!   and preemption in `core/admit.rs`), and what a step did
//!   ([`StepReport`]); [`handle`] — the loop
//!   thread and the cloneable [`EngineHandle`];
//! * [`sampling`] — the host path of rows that ask for penalties or log
//!   probabilities;
//! * [`api`] / [`stream`] — requests, stream events, errors, stats;
//! * [`overlap`] — the step overlap: step k + 1 queued before step k's
//!   tokens are read (its mechanics in `core/overlap.rs`);
//! * [`warmup`] — the start-up warm-up: a full prefill step and decode
//!   steps at several batch sizes, then the engine forgets them.
//!
//! Numerics: a sequence's logits do not depend on what it is batched with or
//! how its prompt is chunked (each op treats sequences independently and the
//! GDN state and KV rows are carried exactly across chunks); the tests hold
//! the CPU backend to ≤ 1e-5 relative.

pub mod api;
pub mod calibrate;
pub mod config;
pub mod context_fit;
pub mod core;
pub mod graphs;
pub mod handle;
pub mod kv;
pub mod limits;
mod lru;
pub mod memory;
pub mod overlap;
pub mod pool;
pub mod prefix;
mod report;
pub mod sampling;
pub mod scheduler;
mod sequence;
pub mod settings;
pub mod slots;
pub mod snapshots;
pub mod stream;
pub mod stripe;
pub mod switch;
pub mod warmup;

pub use api::{
    AttentionRun, EngineStats, FinishReason, GenerateRequest, RankMemory, SamplingExtras,
    StreamEvent, SubmitError, TokenLogprobs, Usage, MAX_TOP_LOGPROBS,
};
pub use config::{EngineConfig, DEFAULT_MEMORY_FRACTION};
pub use core::{EngineCore, SampledRow, StepReport};
pub use graphs::{CudaGraphs, GraphsResolution};
pub use handle::{spawn, EngineHandle};
pub use kv::{resolve_kv, KvBackendKind, KvResolution, KvStorage, KV_BLOCK_ROWS};
pub use limits::Limits;
pub use memory::{MemoryModel, Prediction};
pub use overlap::{OverlapResolution, StepOverlap};
pub use pool::{PoolError, PoolPlan};
pub use settings::{PrefixCacheSettings, SchedulerSettings, SoloStripe, SNAPSHOT_MIN};
pub use stream::RequestStream;
pub use stripe::{SoloStripeResolution, StripeBound};
pub use switch::{AutoSwitch, Resolution};

/// Why an engine could not be built or stepped.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("engine configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Model(#[from] headroom_model::ModelError),
    #[error(transparent)]
    Op(#[from] headroom_core::OpError),
    #[error("engine internal error: {0}")]
    Internal(String),
}
