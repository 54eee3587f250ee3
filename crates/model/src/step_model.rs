//! [`StepModel`]: what the engine needs of a model — its state pools, one
//! packed [`Qwen35Model::step`], and the backend it samples on — so the same
//! engine runs one [`Qwen35Model`] or a tensor-parallel [`TpGroup`] of them.
//!
//! A group's step returns rank 0's output (after the LM head's gather every
//! rank holds the full logits), so the engine samples on rank 0's backend.
//! [`StepModel::lead`] is that rank's model: its shard's head counts are
//! what one rank's KV cache and GDN state hold, i.e. per-rank memory.

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
    /// KV length set; see `ModelState::copy_slot`).
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
}

fn op(source: headroom_core::OpError) -> ModelError {
    ModelError::Op {
        layer: None,
        source,
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

    fn new_state(
        &self,
        slots: usize,
        capacity: usize,
        kv_blocks: Option<usize>,
    ) -> Result<Self::State, ModelError> {
        Qwen35Model::new_paged_state(self, slots, capacity, kv_blocks)
    }

    fn reset_slot(&self, state: &mut Self::State, slot: usize) -> Result<(), ModelError> {
        state.reset_slot(self.backend(), slot).map_err(op)
    }

    fn copy_state_slot(
        &self,
        state: &mut Self::State,
        from: usize,
        to: usize,
    ) -> Result<(), ModelError> {
        state.copy_slot(self.backend(), from, to).map_err(op)
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

    fn new_state(
        &self,
        slots: usize,
        capacity: usize,
        kv_blocks: Option<usize>,
    ) -> Result<Self::State, ModelError> {
        TpGroup::new_state(self, slots, capacity, kv_blocks)
    }

    fn reset_slot(&self, state: &mut Self::State, slot: usize) -> Result<(), ModelError> {
        if state.len() != TpGroup::world(self) {
            return Err(ModelError::Unsupported("one state per rank".into()));
        }
        for (r, st) in state.iter_mut().enumerate() {
            let m = self
                .rank(r)
                .ok_or_else(|| ModelError::Unsupported("no rank".into()))?;
            st.reset_slot(m.backend(), slot).map_err(op)?;
        }
        Ok(())
    }

    fn copy_state_slot(
        &self,
        state: &mut Self::State,
        from: usize,
        to: usize,
    ) -> Result<(), ModelError> {
        if state.len() != TpGroup::world(self) {
            return Err(ModelError::Unsupported("one state per rank".into()));
        }
        for (r, st) in state.iter_mut().enumerate() {
            let m = self
                .rank(r)
                .ok_or_else(|| ModelError::Unsupported("no rank".into()))?;
            st.copy_slot(m.backend(), from, to).map_err(op)?;
        }
        Ok(())
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
