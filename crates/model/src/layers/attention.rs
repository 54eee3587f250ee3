//! Gated full attention (`Qwen3_5Attention`) with a KV cache.
//!
//! `q_proj` yields, per head, the query (`D` rows) and, with
//! `attn_output_gate`, an output gate (the next `D` rows); q and k get the
//! per-head zero-centred RMSNorm, then partial RoPE at their absolute
//! positions. Attention runs through [`headroom_attention_cpu::attention_prefill`]
//! with the route the caller passes (head-major, the new queries being the
//! last rows of the cached KV sequence); the output is multiplied by
//! `sigmoid(gate)` and projected by `o_proj`.

use super::kv_cache::KvCache;
use crate::ops::activation::sigmoid;
use crate::ops::rms_norm::rms_norm_offset;
use crate::ops::rope::Rope;
use crate::ops::{linear, WeightView};
use headroom_attention_cpu::attention_prefill;
use headroom_core::{AttentionError, AttentionReport, AttentionShape, RouteRequest};

/// One full-attention layer's weights and shape.
#[derive(Debug, Clone)]
pub struct FullAttention<'w> {
    pub q_proj: WeightView<'w>,
    pub k_proj: WeightView<'w>,
    pub v_proj: WeightView<'w>,
    pub o_proj: WeightView<'w>,
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// `q_proj` also yields the sigmoid output gate.
    pub gated: bool,
    pub eps: f32,
    pub rope: Rope,
}

impl FullAttention<'_> {
    /// Runs `t` tokens (`x`: `[t][hidden]`) at positions `pos0..pos0 + t`,
    /// appending their keys and values to `cache`; returns `[t][hidden]` and
    /// the attention kernel's report.
    pub fn forward(
        &self,
        x: &[f32],
        t: usize,
        pos0: usize,
        cache: &mut KvCache,
        route: RouteRequest,
    ) -> Result<(Vec<f32>, AttentionReport), AttentionError> {
        let (nq, nkv, d) = (self.heads, self.kv_heads, self.head_dim);
        let per_head = if self.gated { 2 * d } else { d };
        let mut qg = vec![0.0f32; t * nq * per_head];
        linear(x, t, self.q_proj, &mut qg);
        let mut q = vec![0.0f32; t * nq * d];
        let mut gate = vec![0.0f32; if self.gated { t * nq * d } else { 0 }];
        for (s, row) in qg.chunks_exact(nq * per_head).enumerate() {
            for h in 0..nq {
                let src = &row[h * per_head..(h + 1) * per_head];
                q[(s * nq + h) * d..][..d].copy_from_slice(&src[..d]);
                if self.gated {
                    gate[(s * nq + h) * d..][..d].copy_from_slice(&src[d..]);
                }
            }
        }
        let mut k = vec![0.0f32; t * nkv * d];
        let mut v = vec![0.0f32; t * nkv * d];
        linear(x, t, self.k_proj, &mut k);
        linear(x, t, self.v_proj, &mut v);
        rms_norm_offset(&mut q, &self.q_norm, self.eps);
        rms_norm_offset(&mut k, &self.k_norm, self.eps);
        self.rope.apply(&mut q, nq, d, pos0);
        self.rope.apply(&mut k, nkv, d, pos0);
        cache.append(&k, &v, t, nkv, d);

        let mut q_hm = vec![0.0f32; q.len()];
        for s in 0..t {
            for h in 0..nq {
                q_hm[(h * t + s) * d..][..d].copy_from_slice(&q[(s * nq + h) * d..][..d]);
            }
        }
        let shape = AttentionShape {
            q_len: t,
            kv_len: cache.len(),
            q_heads: nq,
            kv_heads: nkv,
            head_dim: d,
            scale: None,
        };
        let mut att = vec![f32::NAN; q_hm.len()];
        let report = match cache.contiguous() {
            Some((k, v)) => attention_prefill(&shape, route, &q_hm, k, v, &mut att)?,
            None => {
                // One call per KV head and its query group (head-major q and
                // out hold each group contiguously); the calls run one after
                // another, so the peak workspace is the largest call's.
                let group = nq / nkv;
                let per_group = group * t * d;
                let head_shape = AttentionShape {
                    q_heads: group,
                    kv_heads: 1,
                    ..shape
                };
                let mut combined: Option<AttentionReport> = None;
                for h in 0..nkv {
                    let (k, v) = cache.head(h);
                    let r = attention_prefill(
                        &head_shape,
                        route,
                        &q_hm[h * per_group..(h + 1) * per_group],
                        k,
                        v,
                        &mut att[h * per_group..(h + 1) * per_group],
                    )?;
                    combined = Some(match combined {
                        None => r,
                        Some(c) => AttentionReport {
                            transient_bytes: c.transient_bytes.max(r.transient_bytes),
                            ..c
                        },
                    });
                }
                combined.expect("at least one KV head")
            }
        };

        // Back to token-major, gated.
        let mut y = vec![0.0f32; t * nq * d];
        for s in 0..t {
            for h in 0..nq {
                let dst = &mut y[(s * nq + h) * d..][..d];
                dst.copy_from_slice(&att[(h * t + s) * d..][..d]);
                if self.gated {
                    let g = &gate[(s * nq + h) * d..][..d];
                    for (o, gv) in dst.iter_mut().zip(g) {
                        *o *= sigmoid(*gv);
                    }
                }
            }
        }
        let mut out = vec![0.0f32; t * self.o_proj.rows];
        linear(&y, t, self.o_proj, &mut out);
        Ok((out, report))
    }
}
