//! [`StepModel`]: what the engine needs of a model — its state pools, one
//! packed [`Qwen35Model::step`], and the backend it samples on — so the same
//! engine runs one [`Qwen35Model`] or a tensor-parallel [`TpGroup`] of them.
//!
//! A group's step returns rank 0's output (after the LM head's gather every
//! rank holds the full logits), so the engine samples on rank 0's backend.
//! [`StepModel::lead`] is that rank's model: its shard's head counts are
//! what one rank's KV cache and GDN state hold, i.e. per-rank memory.
//!
//! [`ForwardingStepModel`] wraps a step model and calls a [`StepHook`] before
//! each step (tests inject faults or observe the model's drop through it).

use crate::{AttentionPlan, LogitsRows, ModelError, ModelState, Qwen35Model, StepOutput, TpGroup};
use headroom_core::ops::{Backend, Batch};
use headroom_core::RouteRequest;

/// A model the engine can step (see the module doc).
pub trait StepModel<B: Backend>: Send {
    /// The state pools of every rank.
    type State: Send;

    /// The model of rank 0: its backend samples, its shard sizes one rank's state.
    fn lead(&self) -> &Qwen35Model<B>;

    /// Ranks (1 for a plain model).
    fn world(&self) -> usize;

    /// `(active, peak)` backend bytes of every rank.
    fn rank_memory(&self) -> Vec<(usize, usize)>;

    /// Device bytes every rank's backend has obtained: held and cached
    /// ([`Backend::memory_reserved`]).
    fn rank_memory_reserved(&self) -> Vec<usize>;

    /// Returns every rank's cached memory to its device
    /// ([`Backend::release_cached_memory`]).
    fn release_cached_memory(&self);

    /// Starts every rank's peak ([`Self::rank_memory`]'s second figure)
    /// again from what it holds now ([`Backend::reset_peak_memory`]).
    fn reset_peak_memory(&self);

    /// Each full-attention layer's route for `plan` (the same on every rank).
    fn routes(&self, plan: &AttentionPlan) -> Result<Vec<Option<RouteRequest>>, ModelError> {
        self.lead().routes(plan)
    }

    /// Fresh state pools of `slots` sequences of up to `capacity` tokens,
    /// each full-attention layer's KV a pool of `kv_blocks` blocks read
    /// through the batches' block tables (`None`: every slot's blocks
    /// reserved, no tables needed; see `headroom_core::ops::BlockTables`).
    fn new_state(
        &self,
        slots: usize,
        capacity: usize,
        kv_blocks: Option<usize>,
    ) -> Result<Self::State, ModelError>;

    /// Empties `slot` on every rank.
    fn reset_slot(&self, state: &mut Self::State, slot: usize) -> Result<(), ModelError>;

    /// Makes `to` resume where `from` is on every rank (GDN state copied,
    /// KV length set; see `ModelState::copy_slot`): it overwrites all that
    /// [`Self::reset_slot`] empties, so a resumed slot needs no reset first.
    fn copy_state_slot(
        &self,
        state: &mut Self::State,
        from: usize,
        to: usize,
    ) -> Result<(), ModelError>;

    /// [`Qwen35Model::step`] (on every rank; rank 0's output).
    fn step(
        &self,
        state: &mut Self::State,
        ids: &[u32],
        batch: &Batch,
        routes: &[Option<RouteRequest>],
        rows: LogitsRows,
    ) -> Result<StepOutput<B>, ModelError>;

    /// [`StepModel::step`] whose inputs may take tokens a previous step drew
    /// and the host has not read ([`StepIds`]). By default the drawn tokens
    /// are read on rank 0 first (a wait); a single model feeds them from
    /// where they were drawn ([`Qwen35Model::step_drawn`]).
    fn step_drawn(
        &self,
        state: &mut Self::State,
        ids: StepIds<'_, B::Drawn>,
        batch: &Batch,
        routes: &[Option<RouteRequest>],
        rows: LogitsRows,
    ) -> Result<StepOutput<B>, ModelError> {
        let filled = ids.on_host(self.lead().backend())?;
        self.step(state, &filled, batch, routes, rows)
    }
}

/// A step's input tokens: `ids`, except the entries `holes[j].0`, which are
/// row `holes[j].1` of the tokens a previous step drew
/// (`Backend::sample_later`) and the host has not read yet — the engine's
/// step overlap queues a step before the last one's tokens are read.
pub struct StepIds<'a, D> {
    pub ids: &'a [u32],
    /// `(holes, drawn)`: none when every id is known.
    pub drawn: Option<(&'a [(usize, usize)], &'a D)>,
}

impl<'a, D> StepIds<'a, D> {
    /// Ids all known on the host.
    pub fn known(ids: &'a [u32]) -> Self {
        StepIds { ids, drawn: None }
    }

    /// The ids with the holes filled from the drawn tokens, read on `be`
    /// (which waits for them).
    pub fn on_host<B: Backend<Drawn = D>>(&self, be: &B) -> Result<Vec<u32>, ModelError> {
        match self.drawn {
            None => Ok(self.ids.to_vec()),
            Some((holes, drawn)) => {
                let tokens = be.read_drawn(drawn).map_err(ModelError::op)?;
                headroom_core::ops::fill_holes(self.ids, holes, &tokens).map_err(ModelError::op)
            }
        }
    }
}

impl<B: Backend> StepModel<B> for Qwen35Model<B>
where
    Qwen35Model<B>: Send,
    ModelState<B>: Send,
{
    type State = ModelState<B>;

    fn lead(&self) -> &Qwen35Model<B> {
        self
    }

    fn world(&self) -> usize {
        1
    }

    fn rank_memory(&self) -> Vec<(usize, usize)> {
        vec![self.backend().memory()]
    }

    fn rank_memory_reserved(&self) -> Vec<usize> {
        vec![self.backend().memory_reserved()]
    }

    fn release_cached_memory(&self) {
        self.backend().release_cached_memory()
    }

    fn reset_peak_memory(&self) {
        self.backend().reset_peak_memory()
    }

    fn new_state(
        &self,
        slots: usize,
        capacity: usize,
        kv_blocks: Option<usize>,
    ) -> Result<Self::State, ModelError> {
        Qwen35Model::new_paged_state(self, slots, capacity, kv_blocks)
    }

    fn reset_slot(&self, state: &mut Self::State, slot: usize) -> Result<(), ModelError> {
        state
            .reset_slot(self.backend(), slot)
            .map_err(ModelError::op)
    }

    fn copy_state_slot(
        &self,
        state: &mut Self::State,
        from: usize,
        to: usize,
    ) -> Result<(), ModelError> {
        state
            .copy_slot(self.backend(), from, to)
            .map_err(ModelError::op)
    }

    fn step(
        &self,
        state: &mut Self::State,
        ids: &[u32],
        batch: &Batch,
        routes: &[Option<RouteRequest>],
        rows: LogitsRows,
    ) -> Result<StepOutput<B>, ModelError> {
        Qwen35Model::step(self, state, ids, batch, routes, rows)
    }

    fn step_drawn(
        &self,
        state: &mut Self::State,
        ids: StepIds<'_, B::Drawn>,
        batch: &Batch,
        routes: &[Option<RouteRequest>],
        rows: LogitsRows,
    ) -> Result<StepOutput<B>, ModelError> {
        Qwen35Model::step_drawn(self, state, ids, batch, routes, rows)
    }
}

/// Runs `f` on each rank's state with that rank's backend (one state per rank).
fn on_every_rank<B: Backend>(
    group: &TpGroup<B>,
    state: &mut [ModelState<B>],
    mut f: impl FnMut(&mut ModelState<B>, &B) -> Result<(), headroom_core::OpError>,
) -> Result<(), ModelError> {
    if state.len() != group.world() {
        return Err(ModelError::Unsupported("one state per rank".into()));
    }
    for (r, st) in state.iter_mut().enumerate() {
        let m = group
            .rank(r)
            .ok_or_else(|| ModelError::Unsupported("no rank".into()))?;
        f(st, m.backend()).map_err(ModelError::op)?;
    }
    Ok(())
}

impl<B: Backend> StepModel<B> for TpGroup<B>
where
    TpGroup<B>: Send,
    ModelState<B>: Send,
{
    type State = Vec<ModelState<B>>;

    fn lead(&self) -> &Qwen35Model<B> {
        self.rank(0).expect("a group has at least one rank")
    }

    fn world(&self) -> usize {
        TpGroup::world(self)
    }

    fn rank_memory(&self) -> Vec<(usize, usize)> {
        self.memory()
    }

    fn rank_memory_reserved(&self) -> Vec<usize> {
        self.memory_reserved()
    }

    fn release_cached_memory(&self) {
        TpGroup::release_cached_memory(self)
    }

    fn reset_peak_memory(&self) {
        TpGroup::reset_peak_memory(self)
    }

    fn new_state(
        &self,
        slots: usize,
        capacity: usize,
        kv_blocks: Option<usize>,
    ) -> Result<Self::State, ModelError> {
        TpGroup::new_state(self, slots, capacity, kv_blocks)
    }

    fn reset_slot(&self, state: &mut Self::State, slot: usize) -> Result<(), ModelError> {
        on_every_rank(self, state, |st, be| st.reset_slot(be, slot))
    }

    fn copy_state_slot(
        &self,
        state: &mut Self::State,
        from: usize,
        to: usize,
    ) -> Result<(), ModelError> {
        on_every_rank(self, state, |st, be| st.copy_slot(be, from, to))
    }

    fn step(
        &self,
        state: &mut Self::State,
        ids: &[u32],
        batch: &Batch,
        routes: &[Option<RouteRequest>],
        rows: LogitsRows,
    ) -> Result<StepOutput<B>, ModelError> {
        TpGroup::step(self, state, ids, batch, routes, rows)
    }
}

/// What a [`ForwardingStepModel`] calls before each step.
pub trait StepHook: Send {
    /// Called before each step of the wrapped model; an error fails that
    /// step (the wrapped model does not run it).
    fn before_step(&self) -> Result<(), ModelError>;
}

/// A [`StepModel`] that forwards every call to `inner`, calling
/// `hook.before_step()` before each step. Dropping it drops `inner`, then
/// `hook`.
pub struct ForwardingStepModel<M, H> {
    pub inner: M,
    pub hook: H,
}

impl<B: Backend, M: StepModel<B>, H: StepHook> StepModel<B> for ForwardingStepModel<M, H> {
    type State = M::State;

    fn lead(&self) -> &Qwen35Model<B> {
        self.inner.lead()
    }

    fn world(&self) -> usize {
        self.inner.world()
    }

    fn rank_memory(&self) -> Vec<(usize, usize)> {
        self.inner.rank_memory()
    }

    fn rank_memory_reserved(&self) -> Vec<usize> {
        self.inner.rank_memory_reserved()
    }

    fn release_cached_memory(&self) {
        self.inner.release_cached_memory()
    }

    fn reset_peak_memory(&self) {
        self.inner.reset_peak_memory()
    }

    fn routes(&self, plan: &AttentionPlan) -> Result<Vec<Option<RouteRequest>>, ModelError> {
        self.inner.routes(plan)
    }

    fn new_state(
        &self,
        slots: usize,
        capacity: usize,
        kv_blocks: Option<usize>,
    ) -> Result<Self::State, ModelError> {
        self.inner.new_state(slots, capacity, kv_blocks)
    }

    fn reset_slot(&self, state: &mut Self::State, slot: usize) -> Result<(), ModelError> {
        self.inner.reset_slot(state, slot)
    }

    fn copy_state_slot(
        &self,
        state: &mut Self::State,
        from: usize,
        to: usize,
    ) -> Result<(), ModelError> {
        self.inner.copy_state_slot(state, from, to)
    }

    fn step(
        &self,
        state: &mut Self::State,
        ids: &[u32],
        batch: &Batch,
        routes: &[Option<RouteRequest>],
        rows: LogitsRows,
    ) -> Result<StepOutput<B>, ModelError> {
        self.hook.before_step()?;
        self.inner.step(state, ids, batch, routes, rows)
    }

    fn step_drawn(
        &self,
        state: &mut Self::State,
        ids: StepIds<'_, B::Drawn>,
        batch: &Batch,
        routes: &[Option<RouteRequest>],
        rows: LogitsRows,
    ) -> Result<StepOutput<B>, ModelError> {
        self.hook.before_step()?;
        self.inner.step_drawn(state, ids, batch, routes, rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ModelConfig, Weights};
    use headroom_cpu::CpuBackend;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts the steps it is called for and fails the second.
    struct FailSecond(AtomicUsize);

    impl StepHook for FailSecond {
        fn before_step(&self) -> Result<(), ModelError> {
            match self.0.fetch_add(1, Ordering::SeqCst) {
                1 => Err(ModelError::Unsupported("hook".into())),
                _ => Ok(()),
            }
        }
    }

    fn tiny() -> Qwen35Model<CpuBackend> {
        let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
        Qwen35Model::load(CpuBackend::new(), &cfg, Weights::synthetic(&cfg, 7)).unwrap()
    }

    /// Three steps of one sequence in slot 1 (a 3-token prompt, then token 8
    /// after it twice): the last row's logits of each, or the step's error.
    fn run<M: StepModel<CpuBackend>>(m: &M) -> Vec<Result<Vec<f32>, ModelError>> {
        let plan = AttentionPlan::Uniform(RouteRequest::Composed { query_block: 16 });
        let routes = m.routes(&plan).unwrap();
        let mut st = m.new_state(2, 64, None).unwrap();
        m.reset_slot(&mut st, 1).unwrap();
        let steps: [(&[u32], Batch); 3] = [
            (&[5, 6, 7], Batch::single(1, 0, 3)),
            (&[8], Batch::single(1, 3, 1)),
            (&[8], Batch::single(1, 3, 1)),
        ];
        steps
            .iter()
            .map(|(ids, batch)| {
                let out = m.step(&mut st, ids, batch, &routes, LogitsRows::Last)?;
                Ok(m.lead().backend().act_to_f32(&out.logits.unwrap()).unwrap())
            })
            .collect()
    }

    #[test]
    fn forwarding_model_runs_the_inner_steps_unless_the_hook_fails_one() {
        let plain = tiny();
        let wrapped = ForwardingStepModel {
            inner: tiny(),
            hook: FailSecond(AtomicUsize::new(0)),
        };
        assert_eq!(wrapped.world(), 1);
        assert_eq!(wrapped.rank_memory().len(), 1);
        let want = run(&plain);
        let got = run(&wrapped);
        assert_eq!(wrapped.hook.0.load(Ordering::SeqCst), 3);
        assert_eq!(got[0].as_ref().unwrap(), want[0].as_ref().unwrap());
        assert!(
            matches!(&got[1], Err(ModelError::Unsupported(m)) if m == "hook"),
            "the hook's error fails the second step"
        );
        // The failed step never reached the model: its third step sees the
        // state after the first, as the plain model's second step did.
        assert_eq!(got[2].as_ref().unwrap(), want[1].as_ref().unwrap());
    }
}
