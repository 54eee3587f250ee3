//! One decoder layer's pass over a packed batch (`decoder_layer`: input
//! norm, token mixer, post norm and MLP, the next norm carried into a MoE
//! block where it folds) and the final norm with the LM head (`head`): what
//! [`Qwen35Model::step`]'s layer loop and its end run.

use super::{
    op, Decoder, LayerAttentionReport, LayerState, LogitsRows, Mixer, ModelError, Qwen35Model,
};
use crate::layers::LayerOut;
use crate::profile::Part;
use headroom_core::ops::{Backend, Batch};
use headroom_core::RouteRequest;

impl<B: Backend> Qwen35Model<B> {
    /// Decoder layer `l` over the residual stream `x` (first adding the
    /// previous layer's MLP output, or taking the normed input the previous
    /// layer's MoE block made: `carry`): input norm, token mixer (its
    /// attention reports appended to `reports`), post norm, MLP. Returns the
    /// MLP's output, which the next norm adds to `x`, or — a MoE block at
    /// world size 1 that is not the last layer — the next layer's normed
    /// input (the next norm folded into the block's call).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decoder_layer(
        &self,
        l: usize,
        dec: &Decoder<B>,
        layer_state: &mut LayerState<B>,
        x: &mut B::Act,
        carry: Option<LayerOut<B::Act>>,
        batch: &Batch,
        routes: &[Option<RouteRequest>],
        reports: &mut Vec<LayerAttentionReport>,
    ) -> Result<LayerOut<B::Act>, ModelError> {
        let (be, prof) = (&self.backend, &self.profiler);
        let eps = self.cfg.rms_norm_eps as f32;
        let normed = match carry {
            Some(LayerOut::Normed(n)) => n,
            pending => {
                let pending = match &pending {
                    Some(LayerOut::Delta(d)) => Some(d),
                    _ => None,
                };
                prof.time(be, Part::Norm, || {
                    be.add_rms_norm(x, pending, &dec.input_norm, eps)
                })
                .map_err(op(Some(l)))?
            }
        };
        let mixed = match (&dec.mixer, layer_state) {
            (Mixer::Full(att), LayerState::Full(cache)) => {
                let route = routes[l].ok_or(ModelError::NoRoute { layer: l })?;
                let (y, report) = att
                    .forward(be, normed, cache, batch, route, prof)
                    .map_err(op(Some(l)))?;
                for i in 0..batch.sequences() {
                    reports.push(LayerAttentionReport {
                        layer: l,
                        chunk_start: batch.history[i],
                        chunk_len: batch.seq_len(i),
                        report,
                    });
                }
                y
            }
            (Mixer::Linear(gdn), LayerState::Linear(st)) => gdn
                .forward(be, normed, st, batch, prof)
                .map_err(op(Some(l)))?,
            _ => {
                return Err(ModelError::Unsupported(
                    "state built for another model".into(),
                ))
            }
        };
        // The next layer's input norm, for a MoE block to take with it.
        let next_norm = self
            .layers
            .get(l + 1)
            .filter(|_| be.world_size() == 1)
            .map(|d| &d.input_norm);
        dec.mlp
            .forward_after_norm(be, x, &mixed, &dec.post_norm, eps, next_norm, prof)
            .map_err(op(Some(l)))
    }

    /// The final norm and the LM head over the rows `rows` selects (after
    /// adding the last MLP output `pending` to `x`); `None` when no logits
    /// are wanted (no final norm, no LM head).
    pub(super) fn head(
        &self,
        x: &mut B::Act,
        pending: Option<&B::Act>,
        batch: &Batch,
        rows: LogitsRows,
    ) -> Result<Option<B::Act>, ModelError> {
        let (be, prof) = (&self.backend, &self.profiler);
        let eps = self.cfg.rms_norm_eps as f32;
        let last = match rows {
            // A prefill chunk whose logits nobody reads.
            LogitsRows::None => return Ok(None),
            LogitsRows::All => None,
            // Every sequence one row (decode): the last rows are all rows, in order.
            LogitsRows::Last if batch.rows() == batch.sequences() => None,
            LogitsRows::Last => Some(batch.last_rows()),
        };
        // The final norm only over the rows whose logits are wanted.
        let normed = match &last {
            None => be.add_rms_norm(x, pending, &self.final_norm, eps),
            Some(last) => {
                let mut xs = be.gather_rows(x, last).map_err(op(None))?;
                let ps = pending
                    .map(|p| be.gather_rows(p, last))
                    .transpose()
                    .map_err(op(None))?;
                be.add_rms_norm(&mut xs, ps.as_ref(), &self.final_norm, eps)
            }
        }
        .map_err(op(None))?;
        let head = self.lm_head.as_ref().unwrap_or(&self.embed);
        let mut logits = prof
            .time(be, Part::LmHead, || be.linear(&normed, head))
            .map_err(op(None))?;
        if self.shard.vocab.is_some() {
            logits = prof
                .time(be, Part::Comm, || be.all_gather_cols(logits))
                .map_err(op(None))?;
        }
        Ok(Some(logits))
    }
}
