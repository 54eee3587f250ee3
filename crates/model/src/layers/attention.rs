//! Gated full attention (`Qwen3_5Attention`).
//!
//! `q_proj` yields, per head, the query (`D` rows) and, with
//! `attn_output_gate`, an output gate (the next `D` rows); the loader splits
//! those rows into two matrices (`q_proj`, `gate_proj`). q and k get the
//! per-head zero-centred RMSNorm, then partial RoPE at their absolute
//! positions; k and v are appended to the layer's KV cache; attention runs
//! the route the caller passes; the output is multiplied by `sigmoid(gate)`
//! and projected by `o_proj`.

use crate::profile::{Part, Profiler};
use headroom_core::ops::{AttentionPrepWeights, Backend, Batch, OpError, OpResult, RopeSpec};
use headroom_core::{AttentionReport, RouteRequest};

/// One full-attention layer's weights and shape.
pub struct FullAttention<B: Backend> {
    pub q_proj: B::Weight,
    /// The sigmoid output gate's rows of `q_proj` (with `attn_output_gate`).
    pub gate_proj: Option<B::Weight>,
    pub k_proj: B::Weight,
    pub v_proj: B::Weight,
    pub o_proj: B::Weight,
    pub q_norm: B::Weight,
    pub k_norm: B::Weight,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub eps: f32,
    pub rope: RopeSpec,
}

impl<B: Backend> FullAttention<B> {
    /// Runs the batch's rows `x` (`[t][hidden]`), appending their keys and
    /// values to `cache`; returns `[t][hidden]` and the attention report.
    /// `x` (the normed rows, and any FP8 codes a backend attached to them)
    /// is freed once projected, before the attention.
    pub fn forward(
        &self,
        be: &B,
        x: B::Act,
        cache: &mut B::KvCache,
        batch: &Batch,
        route: RouteRequest,
        prof: &Profiler,
    ) -> OpResult<(B::Act, AttentionReport)> {
        let d = self.head_dim;
        let (mut q, mut k, v, gate) = prof.time(be, Part::AttentionProjections, || {
            // q, k, v (and the gate) in one call: one pass on backends that fuse it.
            let mut ws = vec![&self.q_proj, &self.k_proj, &self.v_proj];
            ws.extend(self.gate_proj.as_ref());
            let n = ws.len();
            let mut ys = be.linear_many(&x, &ws)?.into_iter();
            let mut next = || {
                ys.next()
                    .ok_or_else(|| OpError::shape("linear_many", format!("fewer outputs than {n}")))
            };
            let (q, k, v) = (next()?, next()?, next()?);
            let gate = match self.gate_proj {
                Some(_) => Some(next()?),
                None => None,
            };
            OpResult::Ok((q, k, v, gate))
        })?;
        drop(x);
        let prep = AttentionPrepWeights {
            q_norm: &self.q_norm,
            k_norm: &self.k_norm,
            eps: self.eps,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: d,
            rope: &self.rope,
        };
        prof.time(be, Part::AttentionPrep, || {
            be.attention_prep(&mut q, &mut k, &v, &prep, cache, batch)
        })?;
        // The output gate goes with the attention (a backend may apply it in
        // the attention's output pass).
        let (y, report) = prof.time(be, Part::Attention, || match &gate {
            Some(g) => be.attention_gated(&q, cache, batch, route, g),
            None => be.attention(&q, cache, batch, route),
        })?;
        let out = prof.time(be, Part::AttentionProjections, || {
            be.linear_partial(&y, &self.o_proj)
        })?;
        Ok((super::reduce(be, out, prof)?, report))
    }
}
