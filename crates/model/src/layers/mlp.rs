//! The MLP of a decoder layer: dense SwiGLU (`Qwen3_5MLP`) or the sparse
//! MoE block with its shared expert (the backend's `moe` op).

use crate::profile::{Part, Profiler};
use headroom_core::ops::{Backend, MoeSpec, MoeWeights, OpResult};

/// The MLP of one decoder layer.
pub enum Mlp<B: Backend> {
    /// `down · (silu(gate·x) ⊙ up·x)`.
    Dense {
        gate: B::Weight,
        up: B::Weight,
        down: B::Weight,
    },
    Moe {
        weights: MoeWeights<B::Weight>,
        spec: MoeSpec,
    },
}

/// What a decoder layer hands the next one.
pub enum LayerOut<A> {
    /// Its MLP's output, for the next norm to add to the residual stream.
    Delta(A),
    /// The next layer's normed input, the residual stream already updated
    /// (a MoE block that took the next norm: `add_rms_norm_moe_add_rms_norm`).
    Normed(A),
}

impl<B: Backend> Mlp<B> {
    /// `x += delta` and the zero-centred RMSNorm of the new `x` (`norm`,
    /// `eps`), then [`Self::forward`] of the normed rows; a MoE block takes
    /// both in one backend call (`add_rms_norm_moe_partial`: the norm's time
    /// is then counted in the MoE part), and with `next_norm` (the next
    /// layer's input norm; world size 1 only) that norm too
    /// (`add_rms_norm_moe_add_rms_norm`), returning its rows.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_after_norm(
        &self,
        be: &B,
        x: &mut B::Act,
        delta: &B::Act,
        norm: &B::Weight,
        eps: f32,
        next_norm: Option<&B::Weight>,
        prof: &Profiler,
    ) -> OpResult<LayerOut<B::Act>> {
        match (self, next_norm) {
            (Mlp::Dense { .. }, _) => {
                let normed = prof.time(be, Part::Norm, || {
                    be.add_rms_norm(x, Some(delta), norm, eps)
                })?;
                self.forward(be, &normed, prof).map(LayerOut::Delta)
            }
            (Mlp::Moe { weights, spec }, Some(next)) => prof
                .time(be, Part::Moe, || {
                    be.add_rms_norm_moe_add_rms_norm(x, delta, norm, eps, weights, spec, next)
                })
                .map(LayerOut::Normed),
            (Mlp::Moe { weights, spec }, None) => {
                let out = prof.time(be, Part::Moe, || {
                    be.add_rms_norm_moe_partial(x, delta, norm, eps, weights, spec)
                })?;
                super::reduce(be, out, prof).map(LayerOut::Delta)
            }
        }
    }

    /// `x`: `[t][hidden]` → `[t][hidden]`.
    pub fn forward(&self, be: &B, x: &B::Act, prof: &Profiler) -> OpResult<B::Act> {
        let out = match self {
            Mlp::Dense { gate, up, down } => prof.time(be, Part::DenseMlp, || {
                let g = be.linear(x, gate)?;
                let u = be.linear(x, up)?;
                be.linear_partial(&be.swiglu(&g, &u)?, down)
            }),
            Mlp::Moe { weights, spec } => {
                prof.time(be, Part::Moe, || be.moe_partial(x, weights, spec))
            }
        }?;
        // Local experts + the shared expert's shard (or the dense MLP's
        // intermediate shard): one all-reduce per block.
        super::reduce(be, out, prof)
    }
}
