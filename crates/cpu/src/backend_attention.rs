//! One sequence's attention on the CPU backend: token-major q goes
//! head-major, the verified CPU kernels (`headroom_attention_cpu`) run the
//! requested route over the slot's KV cache (one call per KV head when the
//! cache is stored per head), and the output comes back token-major.

use headroom_attention_cpu::attention_prefill;
use headroom_core::ops::{KvSpec, OpError, OpResult};
use headroom_core::{AttentionReport, AttentionShape, RouteRequest};

/// One sequence's attention: token-major `q` `[t][nq·d]` over `kv`.
pub(crate) fn attend_one(
    q: &[f32],
    t: usize,
    nq: usize,
    kv: &crate::KvCache,
    spec: KvSpec,
    route: RouteRequest,
) -> OpResult<(Vec<f32>, AttentionReport)> {
    let (nkv, d) = (spec.kv_heads, spec.head_dim);
    let mut q_hm = vec![0.0f32; q.len()];
    for s in 0..t {
        for h in 0..nq {
            q_hm[(h * t + s) * d..][..d].copy_from_slice(&q[(s * nq + h) * d..][..d]);
        }
    }
    let shape = AttentionShape {
        q_len: t,
        kv_len: kv.len(),
        q_heads: nq,
        kv_heads: nkv,
        head_dim: d,
        scale: None,
    };
    let mut att = vec![f32::NAN; q_hm.len()];
    let report = match kv.contiguous() {
        Some((k, v)) => attention_prefill(&shape, route, &q_hm, k, v, &mut att)?,
        None => {
            // One call per KV head and its query group (head-major q and out
            // hold each group contiguously); the peak workspace is the largest call's.
            if nkv == 0 || !nq.is_multiple_of(nkv) {
                return Err(OpError::shape(
                    "attention",
                    "q heads not a multiple of kv heads",
                ));
            }
            let group = nq / nkv;
            let per_group = group * t * d;
            let head_shape = AttentionShape {
                q_heads: group,
                kv_heads: 1,
                ..shape
            };
            let mut combined: Option<AttentionReport> = None;
            for h in 0..nkv {
                let (k, v) = kv.head(h);
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
    let mut y = vec![0.0f32; q.len()];
    for s in 0..t {
        for h in 0..nq {
            y[(s * nq + h) * d..][..d].copy_from_slice(&att[(h * t + s) * d..][..d]);
        }
    }
    Ok((y, report))
}
