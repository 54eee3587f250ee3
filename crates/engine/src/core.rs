//! [`EngineCore`]: the engine's state machine on one thread — waiting and
//! running sequences, the slot pool, KV blocks and committed memory — and
//! [`EngineCore::step`], which plans one packed batch under the token
//! budget (growing each planned sequence's KV blocks first, preempting when
//! the pool is short: [`admit`]), admits waiting requests, runs the batch
//! through `Qwen35Model::step` with every sequence's block table, draws
//! tokens and streams them (`core/run.rs`); with prefix caching ([`cache`]) an admitted
//! request resumes from a cached prefix and prefill chunks stop at snapshot
//! points. The loop thread ([`crate::handle`]) drives it;
//! tests and benchmarks may drive it by hand.

mod admit;
mod cache;
mod forget;
mod hold;
mod overlap;
mod run;

use crate::api::{
    EngineStats, FinishReason, GenerateRequest, RankMemory, StreamEvent, SubmitError,
};
use crate::config::{EngineConfig, MAX_CONTEXT, MAX_RUNNING};
use crate::context_fit::plan_pool_fitting_context;
use crate::graphs::GraphsResolution;
use crate::kv::{resolve_kv, KvBackendKind, KvResolution};
use crate::limits::{Checked, Limits};
pub use crate::memory::memory_model;
use crate::overlap::OverlapResolution;
use crate::pool::PoolPlan;
use crate::prefix::BlockPool;
pub use crate::report::{SampledRow, StepReport};
use crate::scheduler::StepBudget;
use crate::sequence::Sequence;
use crate::slots::SlotPool;
use crate::snapshots::SnapshotPool;
use crate::stream::{stream_pair, RequestStream, Waker};
use crate::stripe::{run_settings, solo_stripe, SoloStripeResolution};
use crate::EngineError;
use headroom_core::ops::Backend;
use headroom_core::RouteRequest;
use headroom_model::{AttentionPlan, Qwen35Model, StepModel};
use std::collections::VecDeque;
use std::time::Instant;

/// Checks request `r` against `limits` and makes its stream; the sequence
/// to queue is `None` when the request was answered on its stream already
/// (invalid ids or sampling parameters).
pub(crate) fn prepare(
    limits: &Limits,
    id: u64,
    r: GenerateRequest,
    waiting: usize,
    wake: Option<Waker>,
) -> Result<(RequestStream, Option<Sequence>), SubmitError> {
    let checked = limits.check(&r, waiting)?;
    let (stream, sink) = stream_pair(id, wake);
    match checked {
        Checked::Invalid(why) => {
            sink.send(StreamEvent::Error(why));
            Ok((stream, None))
        }
        Checked::Ok(p) => Ok((stream, Some(Sequence::new(id, r, &limits.eos, p, sink)))),
    }
}

/// The engine's state and step function over a model on backend `B`: one
/// [`Qwen35Model`] or a tensor-parallel group (`M`, see [`StepModel`]).
pub struct EngineCore<B: Backend, M: StepModel<B> = Qwen35Model<B>> {
    model: M,
    state: M::State,
    routes: Vec<Option<RouteRequest>>,
    cfg: EngineConfig,
    limits: Limits,
    kv: KvResolution,
    pool: PoolPlan,
    blocks: BlockPool,
    slots: SlotPool,
    /// The prefix cache's GDN snapshots (state slots after the running ones).
    snapshots: SnapshotPool,
    /// Whether prefix caching was asked for and the KV is paged.
    prefix_on: bool,
    /// The salt of block hashes (the model and its dtype).
    salt: u64,
    /// Waiting requests held for a running sequence's snapshot.
    holds: hold::Holds,
    waiting: VecDeque<Sequence>,
    running: Vec<Sequence>,
    next_id: u64,
    stats: EngineStats,
    /// The solo stripe this engine runs, with why.
    solo: SoloStripeResolution,
    /// The step queued and not yet read (the overlap only).
    inflight: Option<overlap::InFlight<B::Drawn>>,
    /// Steps queued so far (numbers the in-flight step's draws).
    launched: u64,
}

impl<B: Backend, M: StepModel<B>> EngineCore<B, M> {
    /// Checks the configuration, resolves the routes and the KV backend,
    /// and allocates the state pools. Under [`crate::config::ContextFit::AtMost`]
    /// a `max_context` that does not fit is lowered to the largest that does
    /// before anything is sized from it: [`Self::config`], the limits, the
    /// state and the stats all carry the context the engine runs, and the
    /// pool plan's `lowered_from` the one asked.
    pub fn new(model: M, mut cfg: EngineConfig) -> Result<Self, EngineError> {
        cfg.scheduler.validate().map_err(EngineError::Config)?;
        if cfg.max_running == 0 || cfg.max_running > MAX_RUNNING {
            return Err(EngineError::Config(format!(
                "max_running {} must be in 1..={MAX_RUNNING}",
                cfg.max_running
            )));
        }
        if cfg.max_context == 0 || cfg.max_context > MAX_CONTEXT {
            return Err(EngineError::Config(format!(
                "max_context {} must be in 1..={MAX_CONTEXT}",
                cfg.max_context
            )));
        }
        if !(cfg.memory_fraction > 0.0 && cfg.memory_fraction <= 1.0) {
            return Err(EngineError::Config(format!(
                "memory_fraction {} must be in (0, 1]",
                cfg.memory_fraction
            )));
        }
        // What loading the weights left cached is given back before the
        // pools are sized from what the backend holds.
        model.release_cached_memory();
        let routes = model.routes(&cfg.attention)?;
        let mut memory = memory_model(model.lead(), &routes);
        let calibration = crate::calibrate::on_gpu(&model, &routes, &mut memory, cfg.max_context);
        let kv = resolve_kv(cfg.kv_backend);
        let paged = kv.resolved == KvBackendKind::Paged;
        let pool = plan_pool_fitting_context(&model, &mut cfg, &memory)
            .map_err(|e| EngineError::Config(e.to_string()))?;
        if pool.slots == 0 || pool.slots > MAX_RUNNING {
            return Err(EngineError::Config(format!(
                "{} state slots must be in 1..={MAX_RUNNING}",
                pool.slots
            )));
        }
        tracing::info!("{pool}");
        let state_slots = pool.slots.checked_add(pool.snapshot_slots).ok_or_else(|| {
            EngineError::Config(format!("{} snapshot slots overflow", pool.snapshot_slots))
        })?;
        let state = model
            .new_state(state_slots, cfg.max_context, paged.then_some(pool.blocks))
            .map_err(|e| {
                if paged {
                    EngineError::Config(format!(
                        "the state pools could not be allocated ({e}): {pool}; lower \
                         --memory-fraction, --max-running or --max-context"
                    ))
                } else {
                    crate::memory::state_pool_error(pool.slots, cfg.max_context, &memory, e)
                }
            })?;
        let transient_room_bytes = pool.transient_room_bytes();
        let solo = solo_stripe(&model, &cfg, &memory, transient_room_bytes);
        let limits = Limits {
            transient_room_bytes,
            block_bytes: pool.block_bytes,
            memory,
            settings: cfg.scheduler,
            solo_tokens: solo.tokens,
            budget: cfg.memory_budget_bytes.filter(|_| !paged),
            pool_blocks: paged.then_some(pool.blocks),
            max_context: cfg.max_context,
            max_waiting: cfg.max_waiting,
            prefix_interval: (paged && cfg.prefix_cache.enabled)
                .then(|| cfg.prefix_cache.interval())
                .flatten(),
            vocab: model.lead().vocab_size(),
            eos: cfg.eos_token_ids.clone(),
        };
        let backend = model.lead().backend();
        let overlap = crate::overlap::resolve(
            cfg.step_overlap,
            model.world(),
            cfg.capture_logits,
            backend.kind(),
        );
        tracing::info!("{overlap}");
        let graphs = crate::graphs::resolve(
            cfg.cuda_graphs,
            model.world(),
            backend.step_recording(),
            overlap.on,
        );
        backend.set_step_recording(graphs.on);
        tracing::info!("{graphs}");
        let stats = EngineStats {
            running: 0,
            waiting: 0,
            kv_blocks_used: 0,
            kv_blocks_free: pool.blocks,
            admitted: 0,
            refused: 0,
            finished: 0,
            cancelled: 0,
            prompt_tokens: 0,
            generated_tokens: 0,
            settings: run_settings(&cfg, &solo),
            solo_stripe: solo.clone(),
            gdn_slots_free: pool.slots,
            gdn_slots_used: 0,
            preemptions: 0,
            pool,
            kv: kv.clone(),
            memory_budget_bytes: cfg.memory_budget_bytes,
            memory_committed_bytes: 0,
            steps: 0,
            steps_queued_ahead: 0,
            step_overlap: overlap,
            cuda_graphs: graphs,
            prefix_cache_queried_tokens: 0,
            prefix_cache_hit_tokens: 0,
            kv_blocks_cached: 0,
            prefix_snapshot_slots_used: 0,
            prefix_snapshot_slots: pool.snapshot_slots,
            device_memory: RankMemory::of(&model),
            step_activations: calibration,
        };
        let salt = cache::model_salt(model.lead());
        Ok(EngineCore {
            inflight: None,
            launched: 0,
            snapshots: SnapshotPool::new(pool.slots, pool.snapshot_slots),
            prefix_on: paged && cfg.prefix_cache.enabled,
            salt,
            holds: hold::Holds::default(),
            model,
            state,
            routes,
            slots: SlotPool::new(pool.slots),
            blocks: BlockPool::new(pool.blocks),
            pool,
            cfg,
            limits,
            kv,
            waiting: VecDeque::new(),
            running: Vec::new(),
            next_id: 1,
            stats,
            solo,
        })
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn kv(&self) -> &KvResolution {
        &self.kv
    }

    /// The KV block pool and state slots this engine made.
    pub fn pool(&self) -> &PoolPlan {
        &self.pool
    }

    /// The model (rank 0's of a group).
    pub fn model(&self) -> &Qwen35Model<B> {
        self.model.lead()
    }

    /// The model the engine steps (a plain model or a group: profiling hooks).
    pub fn step_model(&self) -> &M {
        &self.model
    }

    /// The solo stripe this engine runs: requested, resolved, the bound and why.
    pub fn solo_stripe(&self) -> &SoloStripeResolution {
        &self.solo
    }

    /// Whether this engine's steps overlap ([`crate::overlap`]), with why
    /// (kept in the stats, which report it).
    pub fn step_overlap(&self) -> &OverlapResolution {
        &self.stats.step_overlap
    }

    /// Whether this engine's decode steps run as CUDA graphs
    /// ([`crate::graphs`]), with why (kept in the stats).
    pub fn cuda_graphs(&self) -> &GraphsResolution {
        &self.stats.cuda_graphs
    }

    /// `(active, peak)` backend bytes of every rank.
    pub fn rank_memory(&self) -> Vec<(usize, usize)> {
        self.model.rank_memory()
    }

    /// The configuration the engine runs (its `attention` is the current plan).
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The route of every layer (`None`: not a full-attention layer).
    pub fn routes(&self) -> &[Option<RouteRequest>] {
        &self.routes
    }

    /// Sets the attention routes of every later step (the per-engine
    /// setting a benchmark changes between its arms). Only while idle: a
    /// running sequence keeps the routes it was admitted under. The memory
    /// model follows the new routes.
    pub fn set_attention(&mut self, plan: AttentionPlan) -> Result<(), EngineError> {
        self.drain_finished()?;
        if !self.is_idle() {
            return Err(EngineError::Config(format!(
                "the attention routes change only while the engine is idle ({} running, {} waiting)",
                self.running.len(),
                self.waiting.len()
            )));
        }
        let routes = self.model.routes(&plan)?;
        self.limits.memory = memory_model(self.model.lead(), &routes);
        // The activations measured at start-up (`EngineStats::step_activations`).
        if let Some(c) = self.stats.step_activations {
            c.apply_to(&mut self.limits.memory);
        }
        self.solo = solo_stripe(
            &self.model,
            &self.cfg,
            &self.limits.memory,
            self.limits.transient_room_bytes,
        );
        self.limits.solo_tokens = self.solo.tokens;
        self.stats.settings = run_settings(&self.cfg, &self.solo);
        self.stats.solo_stripe = self.solo.clone();
        self.routes = routes;
        self.cfg.attention = plan;
        Ok(())
    }

    /// True when no request is waiting or running and no step is in flight.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty() && self.inflight.is_none()
    }

    /// Checks and queues a request (the hand-driven form of `EngineHandle::submit`).
    pub fn submit(&mut self, r: GenerateRequest) -> Result<RequestStream, SubmitError> {
        let id = self.next_id;
        self.next_id += 1;
        self.submit_with_id(id, r, None)
    }

    pub(crate) fn submit_with_id(
        &mut self,
        id: u64,
        r: GenerateRequest,
        wake: Option<Waker>,
    ) -> Result<RequestStream, SubmitError> {
        match prepare(&self.limits, id, r, self.waiting.len(), wake) {
            Ok((stream, seq)) => {
                if let Some(seq) = seq {
                    self.enqueue(seq);
                }
                Ok(stream)
            }
            Err(e) => {
                self.stats.refused += 1;
                Err(e)
            }
        }
    }

    /// Queues a checked sequence (one with nothing to generate ends at once).
    pub(crate) fn enqueue(&mut self, seq: Sequence) {
        if seq.max_tokens == 0 {
            seq.finish(FinishReason::Length);
            self.stats.finished += 1;
        } else {
            self.waiting.push_back(seq);
        }
        self.refresh_stats();
    }

    /// Counters and configuration now.
    pub fn stats(&self) -> EngineStats {
        self.stats.clone()
    }

    /// Ends every request with `event` (shutdown).
    pub fn abort_all(&mut self, why: &str) {
        self.clear_holds();
        // Its tokens are dropped with their requests.
        self.inflight = None;
        for mut s in self.waiting.drain(..).chain(self.running.drain(..)) {
            s.sink.send(StreamEvent::Error(why.to_string()));
            self.blocks.release(&mut s.blocks);
            if s.slot != usize::MAX {
                self.slots.give(s.slot);
            }
        }
        self.refresh_stats();
    }

    /// Predicted bytes of the running sequences: KV + GDN of each plus the
    /// largest transient (attention calls run one sequence at a time).
    fn committed(&self, extra: Option<&crate::memory::Prediction>) -> u64 {
        let all = self.running.iter().map(|s| &s.prediction).chain(extra);
        let (mut fixed, mut transient) = (0u64, 0u64);
        for p in all {
            fixed = fixed.saturating_add(p.kv_bytes + p.gdn_bytes);
            transient = transient.max(p.transient_bytes);
        }
        fixed.saturating_add(transient)
    }

    fn refresh_stats(&mut self) {
        let committed = self.committed(None);
        let st = &mut self.stats;
        st.running = self.running.len();
        st.waiting = self.waiting.len();
        st.kv_blocks_used = self.blocks.used();
        st.kv_blocks_free = self.blocks.free();
        st.kv_blocks_cached = self.blocks.cached();
        st.prefix_snapshot_slots_used = self.snapshots.used();
        st.gdn_slots_free = self.slots.free();
        st.gdn_slots_used = self.slots.total() - self.slots.free();
        st.memory_committed_bytes = committed;
        st.device_memory = RankMemory::of(&self.model);
    }

    /// One engine step: reap cancellations, plan (decode rows first, then
    /// prefill chunks, admitting waiting requests while rows are left), run
    /// the packed batch, draw and stream tokens. `Ok(None)` when idle. With
    /// the step overlap on, the step planned is queued before the last
    /// one's tokens are read, and the report is of the step whose tokens
    /// this call read (`core/overlap.rs`).
    pub fn step(&mut self) -> Result<Option<StepReport>, EngineError> {
        let started = Instant::now();
        self.reap_cancelled();
        if self.stats.step_overlap.on {
            let report = self.step_overlapped(started);
            self.refresh_stats();
            return report;
        }
        let Some(plan) = self.plan_step()? else {
            self.refresh_stats();
            return Ok(None);
        };
        let report = self.run_plan(&plan, started);
        self.refresh_stats();
        report.map(Some)
    }

    /// The next step's `(index in running, rows)`: decode rows first, then
    /// prefill chunks, each sequence's blocks grown before it is planned,
    /// then waiting requests admitted while rows are left. `None` when
    /// there is nothing to run.
    fn plan_step(&mut self) -> Result<Option<Vec<(usize, usize)>>, EngineError> {
        let mut budget = self.step_budget();
        let preemptions = self.stats.preemptions;
        let mut plan: Vec<(usize, usize)> = Vec::new();
        let mut i = 0;
        while i < self.running.len() && budget.left() > 0 {
            let processed = self.running[i].processed;
            if self.running[i].decodes_next() {
                if !self.grow(i, processed + 1, &mut plan) {
                    break;
                }
                budget.decode();
                plan.push((i, 1));
            }
            i += 1;
        }
        let mut i = 0;
        while i < self.running.len() && budget.left() > 0 {
            let (rem, processed) = (
                self.running[i].remaining_prompt(),
                self.running[i].processed,
            );
            if rem > 0 {
                let n = self.cut_chunk(i, budget.peek_prefill(rem));
                if !self.grow(i, processed + n, &mut plan) {
                    break;
                }
                budget.prefill(n);
                plan.push((i, n));
            }
            i += 1;
        }
        // No admission in a step that had to preempt: the pool is short.
        while self.stats.preemptions == preemptions
            && budget.left() > 0
            && self.admit_next(&mut plan, &mut budget)?
        {
            let i = self.running.len() - 1;
            let (rem, processed) = (
                self.running[i].remaining_prompt(),
                self.running[i].processed,
            );
            let n = self.cut_chunk(i, budget.peek_prefill(rem));
            if n == 0 || !self.grow(i, processed + n, &mut plan) {
                break;
            }
            budget.prefill(n);
            plan.push((i, n));
        }
        Ok((!plan.is_empty()).then_some(plan))
    }

    /// The budget of the step to plan now.
    fn step_budget(&self) -> StepBudget {
        let solo = self.running.len() + self.waiting.len() == 1;
        match self.head_of_line() {
            Some(rem) if !solo => {
                StepBudget::head_of_line(&self.cfg.scheduler, rem, self.solo.tokens)
            }
            _ => StepBudget::new(&self.cfg.scheduler, solo, self.solo.tokens),
        }
    }

    /// The remaining prompt of the oldest prefill when no running sequence
    /// decodes this step (the first running one still prefilling, else the
    /// first waiting one), for [`StepBudget::head_of_line`].
    fn head_of_line(&self) -> Option<usize> {
        if self.running.iter().any(|s| s.remaining_prompt() == 0) {
            return None;
        }
        self.running
            .iter()
            .chain(self.waiting.iter())
            .map(|s| s.remaining_prompt())
            .find(|&r| r > 0)
    }
}
