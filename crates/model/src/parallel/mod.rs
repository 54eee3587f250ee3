//! Tensor and expert parallelism: one process, a thread per rank, each rank
//! a [`Qwen35Model`](crate::Qwen35Model) holding its shard on its own
//! backend; the forward is the ordinary one, whose layers end in one
//! all-reduce (see `crate::layers`), the collectives being backend ops
//! (`Backend::all_reduce_sum`, `Backend::all_gather_cols`).
//!
//! * [`plan`] — which rank holds which heads, experts and rows (a pure function);
//! * [`slice`] — a shard's slice of a host tensor or of a synthetic draw;
//! * [`group`] — [`TpGroup`]: the ranks, run together on every call.
//!
//! The design and its costs are written in `docs/parallel.md`.

pub mod group;
pub mod plan;
pub mod slice;

pub use group::{TpGroup, TpSession, TpWeights};
pub use plan::{HeadSplit, MlpSplit, PlanError, RankShard, ShardPlan};
