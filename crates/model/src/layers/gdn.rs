//! The Gated DeltaNet layer (`Qwen3_5GatedDeltaNet`).
//!
//! `in_proj_qkv` → causal depthwise conv1d + SiLU (state: the last
//! `kernel - 1` rows per slot) → q, k, v heads; `β = sigmoid(in_proj_b·x)`,
//! `g = -exp(A_log) · softplus(in_proj_a·x + dt_bias)`; the gated delta rule
//! (recurrent state `[v_heads][d_k][d_v]` per slot); gated RMSNorm with
//! `z = in_proj_z·x` per value head; `out_proj`.

use crate::profile::{Part, Profiler};
use headroom_core::ops::{
    gdn_core_steps, Backend, Batch, GdnCoreInputs, GdnCoreWeights, GdnSpec, GdnStep, GdnStepTimer,
    OpError, OpResult,
};

/// One linear-attention layer's weights and shape.
pub struct GatedDeltaNet<B: Backend> {
    pub in_proj_qkv: B::Weight,
    pub in_proj_z: B::Weight,
    pub in_proj_b: B::Weight,
    pub in_proj_a: B::Weight,
    pub out_proj: B::Weight,
    /// `[conv_dim][kernel]` as a vector.
    pub conv_weight: B::Weight,
    pub a_log: B::Weight,
    pub dt_bias: B::Weight,
    /// Gated RMSNorm weight `[v_dim]`.
    pub norm: B::Weight,
    /// Shape of the state (its `slots` is set per state pool).
    pub spec: GdnSpec,
    pub eps: f32,
}

impl<B: Backend> GatedDeltaNet<B> {
    /// Runs the batch's rows `x` (`[t][hidden]`), advancing each slot's state;
    /// returns `[t][hidden]`. `x` (the normed rows, and any FP8 codes a
    /// backend attached to them) is freed once projected, before the core.
    pub fn forward(
        &self,
        be: &B,
        x: B::Act,
        state: &mut B::GdnState,
        batch: &Batch,
        prof: &Profiler,
    ) -> OpResult<B::Act> {
        let (mixed, z, b, a) = prof.time(be, Part::GdnProjections, || {
            let ws = [
                &self.in_proj_qkv,
                &self.in_proj_z,
                &self.in_proj_b,
                &self.in_proj_a,
            ];
            let [mixed, z, b, a] =
                <[B::Act; 4]>::try_from(be.linear_many(&x, &ws)?).map_err(|ys| {
                    OpError::shape("linear_many", format!("{} outputs for 4", ys.len()))
                })?;
            OpResult::Ok((mixed, z, b, a))
        })?;
        drop(x);
        let weights = GdnCoreWeights {
            conv: &self.conv_weight,
            a_log: &self.a_log,
            dt_bias: &self.dt_bias,
            norm: &self.norm,
            eps: self.eps,
        };
        let inputs = GdnCoreInputs {
            mixed,
            z: &z,
            b: &b,
            a: &a,
        };
        let core = if batch.rows() == batch.sequences() {
            // Decode (every sequence one row): conv, gating, delta rule and
            // gated norm as one op (a backend may fuse them), timed as the rule.
            prof.time(be, Part::GdnRule, || {
                be.gdn_core(inputs, &weights, state, batch)
            })?
        } else {
            // Prefill: the same ops, timed apart for the breakdown.
            gdn_core_steps(be, inputs, &weights, state, batch, &StepParts { be, prof })?
        };
        let out = prof.time(be, Part::GdnProjections, || {
            be.linear_partial(&core, &self.out_proj)
        })?;
        super::reduce(be, out, prof)
    }
}

/// The profiler's part for each step of the GDN core (prefill's breakdown).
struct StepParts<'a, B> {
    be: &'a B,
    prof: &'a Profiler,
}

impl<B: Backend> GdnStepTimer for StepParts<'_, B> {
    fn time<R>(&self, step: GdnStep, f: impl FnOnce() -> R) -> R {
        let part = match step {
            GdnStep::Conv => Part::Conv,
            GdnStep::Gating => Part::GdnGating,
            GdnStep::Rule => Part::GdnRule,
            GdnStep::GatedNorm => Part::GatedNorm,
        };
        self.prof.time(self.be, part, f)
    }
}
