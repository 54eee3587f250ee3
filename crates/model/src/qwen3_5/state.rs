//! Per-layer state of the model: a KV cache pool for each full-attention
//! layer and a GDN state pool for each linear-attention layer, with one slot
//! per running sequence ([`ModelState`]); and the single-sequence
//! [`Session`] the CLI and tests use (one slot plus its position).

use headroom_core::ops::Backend;

/// The state pools of one layer.
pub enum LayerState<B: Backend> {
    Full(B::KvCache),
    Linear(B::GdnState),
}

/// Every layer's state pool, `slots` sequences of up to `capacity` tokens.
pub struct ModelState<B: Backend> {
    pub(crate) layers: Vec<LayerState<B>>,
    pub(crate) slots: usize,
    pub(crate) capacity: usize,
}

impl<B: Backend> ModelState<B> {
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Most tokens one slot may hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn layers(&self) -> &[LayerState<B>] {
        &self.layers
    }

    /// Empties `slot` in every layer (KV length 0, GDN state zero), so a new
    /// sequence can take it.
    pub fn reset_slot(&mut self, be: &B, slot: usize) -> Result<(), headroom_core::OpError> {
        for l in &mut self.layers {
            match l {
                LayerState::Full(c) => be.reset_kv_slot(c, slot)?,
                LayerState::Linear(s) => be.reset_gdn_slot(s, slot)?,
            }
        }
        Ok(())
    }
}

impl<B: Backend> ModelState<B> {
    /// Makes slot `to` resume where slot `from` is: every GDN layer's conv
    /// and recurrent state copied, every full-attention layer's KV length
    /// (its rows stay in the shared blocks). Prefix-cache snapshots and hits.
    pub fn copy_slot(
        &mut self,
        be: &B,
        from: usize,
        to: usize,
    ) -> Result<(), headroom_core::OpError> {
        let mut gdn = Vec::new();
        for l in &mut self.layers {
            match l {
                LayerState::Full(c) => be.copy_kv_slot(c, from, to)?,
                LayerState::Linear(s) => gdn.push(s),
            }
        }
        be.copy_gdn_slots(&mut gdn, from, to)
    }
}

/// One sequence's state: slot 0 of a one-slot [`ModelState`] and the
/// number of tokens it has seen.
pub struct Session<B: Backend> {
    pub(crate) position: usize,
    pub(crate) state: ModelState<B>,
}

impl<B: Backend> Session<B> {
    /// Tokens processed so far (the position of the next token).
    pub fn position(&self) -> usize {
        self.position
    }

    pub fn state(&self) -> &ModelState<B> {
        &self.state
    }
}
