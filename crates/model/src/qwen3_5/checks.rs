//! The checks a step passes before any layer runs: its ids inside the
//! vocabulary, its batch consistent with the state (slots, capacity) and
//! one route a layer.

use super::{op, ModelError, ModelState, Qwen35Model};
use headroom_core::ops::{Backend, Batch};
use headroom_core::{OpError, RouteRequest};

impl<B: Backend> Qwen35Model<B> {
    pub(super) fn check_ids(&self, ids: &[u32], position: usize) -> Result<(), ModelError> {
        let vocab = self.cfg.vocab_size;
        if let Some(pos) = ids.iter().position(|&id| id as usize >= vocab) {
            return Err(ModelError::TokenOutOfRange {
                id: ids[pos],
                position: position + pos,
                vocab,
            });
        }
        Ok(())
    }

    /// Refuses a step whose batch disagrees with `state` (slots, capacity),
    /// with `ids` or with the layers (one route each), before any layer runs.
    pub(super) fn check_step(
        &self,
        state: &ModelState<B>,
        ids: &[u32],
        batch: &Batch,
        routes: &[Option<RouteRequest>],
    ) -> Result<(), ModelError> {
        batch.validate(state.slots).map_err(op(None))?;
        if batch.rows() != ids.len() {
            return Err(ModelError::op(OpError::Batch(format!(
                "{} ids for {} rows",
                ids.len(),
                batch.rows()
            ))));
        }
        if routes.len() != self.layers.len() {
            return Err(ModelError::Unsupported(format!(
                "{} routes for {} layers",
                routes.len(),
                self.layers.len()
            )));
        }
        self.check_ids(ids, 0)?;
        for i in 0..batch.sequences() {
            if batch.history[i] + batch.seq_len(i) > state.capacity {
                return Err(ModelError::ContextFull {
                    have: batch.history[i],
                    adding: batch.seq_len(i),
                    capacity: state.capacity,
                });
            }
        }
        Ok(())
    }
}
