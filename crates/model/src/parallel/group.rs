//! [`TpGroup`]: the ranks of one tensor-parallel model in one process. Each
//! call runs every rank's forward at once (rank 0 on the calling thread, the
//! others on scoped threads: the collectives need all ranks inside them
//! together) and returns rank 0's result — after the LM head's all-gather,
//! every rank holds the same full logits.
//!
//! Inputs are checked here, once, before any rank starts, so a bad request
//! cannot leave some ranks waiting in a collective for a rank that refused
//! it. If a rank still fails mid-forward, the group's `abort` (the
//! communicator's) wakes the others with an error; the group is then dead
//! (build a new one).

use super::plan::ShardPlan;
use crate::profile::PartTime;
use crate::{
    ForwardOptions, ForwardOutput, LogitsRows, ModelConfig, ModelError, ModelState, Qwen35Model,
    Session, StepOutput, Weights,
};
use headroom_core::ops::{Backend, Batch};
use headroom_core::RouteRequest;
use std::sync::Arc;

/// Where the ranks' weights come from.
#[derive(Clone, Copy)]
pub enum TpWeights<'a> {
    /// A checkpoint on the host, shared by the ranks (each uploads its slices).
    Checkpoint(&'a Weights),
    /// Synthetic weights from a seed (each rank draws its window).
    Synthetic { seed: u64 },
}

/// Fails the communicator's waiting collectives (see the module doc).
pub type Abort = Arc<dyn Fn() + Send + Sync>;

/// The ranks of one model.
pub struct TpGroup<B: Backend> {
    plan: ShardPlan,
    ranks: Vec<Qwen35Model<B>>,
    abort: Option<Abort>,
}

/// One sequence's state on every rank.
pub struct TpSession<B: Backend> {
    sessions: Vec<Session<B>>,
}

impl<B: Backend> TpSession<B> {
    /// Tokens held.
    pub fn position(&self) -> usize {
        self.sessions.first().map_or(0, |s| s.position())
    }
}

impl<B: Backend> TpGroup<B> {
    /// Builds rank `r`'s shard on `backends[r]` (each backend already a rank
    /// of a group of `backends.len()`, e.g. `headroom_cpu::cpu_group`), every
    /// rank on its own thread; `abort` fails the group's waiting collectives.
    pub fn build(
        backends: Vec<B>,
        cfg: &ModelConfig,
        weights: TpWeights<'_>,
        abort: Option<Abort>,
    ) -> Result<Self, ModelError> {
        let plan = ShardPlan::new(cfg, backends.len())?;
        let built: Vec<Result<Qwen35Model<B>, ModelError>> = std::thread::scope(|s| {
            let handles: Vec<_> = backends
                .into_iter()
                .zip(plan.ranks.iter().cloned())
                .map(|(be, shard)| {
                    s.spawn(move || match weights {
                        TpWeights::Checkpoint(w) => Qwen35Model::load_shard(be, cfg, w, shard),
                        TpWeights::Synthetic { seed } => {
                            Qwen35Model::synthetic_shard(be, cfg, seed, shard)
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|h| join_rank(h).and_then(|r| r))
                .collect()
        });
        let ranks = built.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(TpGroup { plan, ranks, abort })
    }

    pub fn world(&self) -> usize {
        self.ranks.len()
    }

    pub fn plan(&self) -> &ShardPlan {
        &self.plan
    }

    /// Rank `r`'s model.
    pub fn rank(&self, r: usize) -> Option<&Qwen35Model<B>> {
        self.ranks.get(r)
    }

    pub fn config(&self) -> &ModelConfig {
        self.ranks[0].config()
    }

    pub fn vocab_size(&self) -> usize {
        self.config().vocab_size
    }

    /// `(active, peak)` backend bytes of every rank.
    pub fn memory(&self) -> Vec<(usize, usize)> {
        self.ranks.iter().map(|m| m.backend().memory()).collect()
    }

    /// Device bytes every rank's backend has obtained (held and cached).
    pub fn memory_reserved(&self) -> Vec<usize> {
        self.ranks
            .iter()
            .map(|m| m.backend().memory_reserved())
            .collect()
    }

    /// Returns every rank's cached memory to its device.
    pub fn release_cached_memory(&self) {
        self.ranks
            .iter()
            .for_each(|m| m.backend().release_cached_memory());
    }

    pub fn reset_peak_memory(&self) {
        self.ranks
            .iter()
            .for_each(|m| m.backend().reset_peak_memory());
    }

    pub fn synchronize(&self) -> Result<(), ModelError> {
        for m in &self.ranks {
            m.backend().synchronize().map_err(ModelError::op)?;
        }
        Ok(())
    }

    /// Every rank's [`Qwen35Model::set_profile_mode`].
    pub fn set_profile_mode(&self, mode: crate::profile::ProfileMode) {
        self.ranks.iter().for_each(|m| m.set_profile_mode(mode));
    }

    /// Every rank's per-part times since the last call.
    pub fn take_profile(&self) -> Vec<Vec<PartTime>> {
        self.ranks.iter().map(|m| m.take_profile()).collect()
    }

    /// A fresh single-sequence session of up to `capacity` tokens on every rank.
    pub fn new_session_with_capacity(&self, capacity: usize) -> Result<TpSession<B>, ModelError> {
        let sessions = self
            .ranks
            .iter()
            .map(|m| m.new_session_with_capacity(capacity))
            .collect::<Result<_, _>>()?;
        Ok(TpSession { sessions })
    }

    /// Fresh state pools on every rank (see [`Qwen35Model::new_paged_state`]).
    pub fn new_state(
        &self,
        slots: usize,
        capacity: usize,
        kv_blocks: Option<usize>,
    ) -> Result<Vec<ModelState<B>>, ModelError> {
        self.ranks
            .iter()
            .map(|m| m.new_paged_state(slots, capacity, kv_blocks))
            .collect()
    }

    /// Checks what every rank would check, before any rank starts.
    fn check_tokens(
        &self,
        ids: &[u32],
        position: usize,
        capacity: usize,
    ) -> Result<(), ModelError> {
        if ids.is_empty() {
            return Err(ModelError::EmptyInput);
        }
        let vocab = self.vocab_size();
        if let Some(pos) = ids.iter().position(|&id| id as usize >= vocab) {
            return Err(ModelError::TokenOutOfRange {
                id: ids[pos],
                position: position + pos,
                vocab,
            });
        }
        if position + ids.len() > capacity {
            return Err(ModelError::ContextFull {
                have: position,
                adding: ids.len(),
                capacity,
            });
        }
        Ok(())
    }

    /// [`Qwen35Model::prefill`] on every rank; rank 0's output.
    pub fn prefill(
        &self,
        session: &mut TpSession<B>,
        ids: &[u32],
        opts: &ForwardOptions,
    ) -> Result<ForwardOutput, ModelError> {
        let s0 = session.sessions.first().ok_or(ModelError::EmptyInput)?;
        self.check_tokens(ids, s0.position(), s0.state().capacity())?;
        if opts.chunk == Some(0) {
            return Err(ModelError::ZeroChunk);
        }
        self.ranks[0].routes(&opts.attention)?;
        let mut outs = self.on_ranks(&mut session.sessions, |m, s| m.prefill(s, ids, opts))?;
        Ok(outs.swap_remove(0))
    }

    /// Logits of a prompt from an empty session (per `opts.logits`).
    pub fn forward_logits(
        &self,
        ids: &[u32],
        opts: &ForwardOptions,
    ) -> Result<Vec<f32>, ModelError> {
        let mut s = self.new_session_with_capacity(ids.len().max(1))?;
        Ok(self.prefill(&mut s, ids, opts)?.logits)
    }

    /// One decode step: the logits `[vocab]` of `id` after the session's tokens.
    pub fn decode(
        &self,
        session: &mut TpSession<B>,
        id: u32,
        route: RouteRequest,
    ) -> Result<Vec<f32>, ModelError> {
        let opts = ForwardOptions {
            attention: crate::AttentionPlan::Uniform(route),
            chunk: None,
            logits: LogitsRows::Last,
        };
        Ok(self.prefill(session, &[id], &opts)?.logits)
    }

    /// [`Qwen35Model::step`] on every rank (`states` from [`Self::new_state`]);
    /// rank 0's output (its logits on rank 0's device).
    pub fn step(
        &self,
        states: &mut [ModelState<B>],
        ids: &[u32],
        batch: &Batch,
        routes: &[Option<RouteRequest>],
        rows: LogitsRows,
    ) -> Result<StepOutput<B>, ModelError> {
        if states.len() != self.ranks.len() {
            return Err(ModelError::Unsupported(format!(
                "{} states for {} ranks",
                states.len(),
                self.ranks.len()
            )));
        }
        batch.validate(states[0].slots()).map_err(ModelError::op)?;
        self.check_tokens(ids, 0, usize::MAX)?;
        for i in 0..batch.sequences() {
            if batch.history[i] + batch.seq_len(i) > states[0].capacity() {
                return Err(ModelError::ContextFull {
                    have: batch.history[i],
                    adding: batch.seq_len(i),
                    capacity: states[0].capacity(),
                });
            }
        }
        let mut outs = self.on_ranks(states, |m, st| m.step(st, ids, batch, routes, rows))?;
        Ok(outs.swap_remove(0))
    }

    /// Runs `f` on every rank with its own `state`, all at once; the first
    /// error (after aborting the communicator so no rank stays blocked).
    fn on_ranks<S: Send, T: Send>(
        &self,
        states: &mut [S],
        f: impl Fn(&Qwen35Model<B>, &mut S) -> Result<T, ModelError> + Sync,
    ) -> Result<Vec<T>, ModelError> {
        if states.len() != self.ranks.len() {
            return Err(ModelError::Unsupported("one state per rank".into()));
        }
        let abort = self.abort.as_ref();
        let run = |m: &Qwen35Model<B>, s: &mut S| {
            let r = f(m, s);
            if r.is_err() {
                if let Some(a) = abort {
                    a();
                }
            }
            r
        };
        let results: Vec<Result<T, ModelError>> = std::thread::scope(|sc| {
            let mut it = self.ranks.iter().zip(states.iter_mut());
            let (m0, s0) = it.next().expect("a group has at least one rank");
            let run = &run;
            let handles: Vec<_> = it.map(|(m, s)| sc.spawn(move || run(m, s))).collect();
            let mut out = vec![run(m0, s0)];
            out.extend(
                handles
                    .into_iter()
                    .enumerate()
                    .map(|(i, h)| join_rank((i + 1, h)).and_then(|r| r)),
            );
            out
        });
        results
            .into_iter()
            .enumerate()
            .map(|(rank, r)| {
                r.map_err(|e| match e {
                    e @ ModelError::Rank { .. } => e,
                    e if self.ranks.len() > 1 => ModelError::Rank {
                        rank,
                        detail: e.to_string(),
                    },
                    e => e,
                })
            })
            .collect()
    }
}

/// A rank thread's result; a panic becomes an error.
fn join_rank<T>((rank, h): (usize, std::thread::ScopedJoinHandle<'_, T>)) -> Result<T, ModelError> {
    h.join().map_err(|_| ModelError::Rank {
        rank,
        detail: "the rank's thread panicked".into(),
    })
}
