//! Attention of the CPU backend. Per sequence, its keys and values are
//! gathered from the KV block pool through its block table into the
//! head-major form the verified CPU kernels (`headroom_attention_cpu`) take,
//! token-major q goes head-major, one kernel call runs the requested route
//! over every KV head, and the output comes back token-major.
//! [`attend_one_bf16_p`] is the bf16 emulation's form (probabilities rounded
//! to bf16 before `P · V`, as the CUDA kernels multiply them).
//! [`CpuWorkspace`] answers what one call allocates, before it runs.

use super::{batch_rows, groups_of, CpuAct, CpuBackend};
use crate::precision::ActRounding;
use crate::state::CpuKvCache;
use headroom_attention_cpu::{attention_prefill, workspace_bytes};
use headroom_core::ops::{AttentionCall, Batch, KvSpec, OpError, OpResult, WorkspaceModel};
use headroom_core::{AttentionReport, AttentionShape, RouteRequest};

pub(crate) fn attention(
    be: &CpuBackend,
    q: &CpuAct,
    cache: &CpuKvCache,
    batch: &Batch,
    route: RouteRequest,
) -> OpResult<(CpuAct, AttentionReport)> {
    let spec = cache.spec;
    let d = spec.head_dim;
    groups_of("attention", q, d)?;
    batch_rows("attention", q, batch, spec.slots)?;
    let tables = super::kv::tables("attention", &spec, batch)?;
    for i in 0..batch.sequences() {
        let (slot, held) = (batch.slots[i], cache.len(batch.slots[i]));
        if held != batch.history[i] + batch.seq_len(i) {
            return Err(OpError::State {
                slot,
                detail: format!(
                    "holds {held} tokens; attention needs history {} + {} new (kv_write first)",
                    batch.history[i],
                    batch.seq_len(i)
                ),
            });
        }
    }
    let nq = q.cols / d;
    let mut out = CpuAct::zeros(q.rows, q.cols);
    let mut combined: Option<AttentionReport> = None;
    for i in 0..batch.sequences() {
        let r = batch.seq_rows(i);
        let len = batch.history[i] + r.len();
        let (k, v) = cache
            .gather(tables.table(i), len)
            .map_err(|id| OpError::State {
                slot: batch.slots[i],
                detail: format!("sequence {i}: block {id} of its table was never written"),
            })?;
        let qr = q.rows_of(r.clone());
        let (y, rep) = attend_one(qr, r.len(), nq, &k, &v, spec, route)?;
        // bf16 emulation: the same route ran (its report stands), the
        // output is the form with bf16 probabilities.
        let y = if be.precision().act.contains(ActRounding::ATTENTION_P) {
            attend_one_bf16_p(qr, r.len(), nq, &k, &v, spec)
        } else {
            y
        };
        out.data[r.start * q.cols..r.end * q.cols].copy_from_slice(&y);
        // The gathered keys and values are workspace too.
        let rep = AttentionReport {
            transient_bytes: rep.transient_bytes + gathered_bytes(len, spec.kv_heads, d),
            ..rep
        };
        be.note_transient(rep.transient_bytes as usize);
        combined = Some(match combined {
            None => rep,
            Some(c) => AttentionReport {
                transient_bytes: c.transient_bytes.max(rep.transient_bytes),
                ..c
            },
        });
    }
    be.round(ActRounding::ATTENTION, &mut out.data);
    Ok((out, combined.expect("a validated batch has a sequence")))
}

/// Bytes of one sequence's keys and values gathered from the pool (f32).
fn gathered_bytes(kv_len: usize, kv_heads: usize, head_dim: usize) -> u64 {
    [kv_len, kv_heads, head_dim]
        .iter()
        .fold(8u64, |n, &x| n.saturating_mul(x as u64))
}

/// One sequence's attention: token-major `q` `[t][nq·d]` over head-major
/// keys and values `[kv_heads][kv_len][d]` (the queries their last `t` rows).
pub(crate) fn attend_one(
    q: &[f32],
    t: usize,
    nq: usize,
    k: &[f32],
    v: &[f32],
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
        kv_len: k.len() / (nkv * d),
        q_heads: nq,
        kv_heads: nkv,
        head_dim: d,
        scale: None,
    };
    let mut att = vec![f32::NAN; q_hm.len()];
    let report = attention_prefill(&shape, route, &q_hm, k, v, &mut att)?;
    let mut y = vec![0.0f32; q.len()];
    for s in 0..t {
        for h in 0..nq {
            y[(s * nq + h) * d..][..d].copy_from_slice(&att[(h * t + s) * d..][..d]);
        }
    }
    Ok((y, report))
}

/// The causal attention of token-major `q` `[t][nq·d]` (the last `t` rows of
/// head-major `k`, `v` `[kv_heads][kv_len][d]`) with f32 scores, softmax and accumulation, the normalised
/// probabilities rounded to bf16 before `P · V` (the CUDA composed route's
/// masked softmax writes them so). Returns token-major `[t][nq·d]`.
pub(crate) fn attend_one_bf16_p(
    q: &[f32],
    t: usize,
    nq: usize,
    k: &[f32],
    v: &[f32],
    spec: KvSpec,
) -> Vec<f32> {
    let (nkv, d) = (spec.kv_heads, spec.head_dim);
    let group = nq / nkv.max(1);
    let kv_len = k.len() / (nkv * d).max(1);
    let hist = kv_len - t;
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![0.0f32; q.len()];
    let mut p = vec![0.0f32; kv_len];
    for s in 0..t {
        let keys = hist + s + 1;
        for h in 0..nq {
            let kh = (h / group.max(1)) * kv_len * d;
            let (k, v) = (&k[kh..kh + kv_len * d], &v[kh..kh + kv_len * d]);
            let qh = &q[(s * nq + h) * d..][..d];
            let mut max = f32::NEG_INFINITY;
            for (j, pj) in p[..keys].iter_mut().enumerate() {
                let dot: f32 = qh.iter().zip(&k[j * d..][..d]).map(|(a, b)| a * b).sum();
                *pj = dot * scale;
                max = max.max(*pj);
            }
            let mut sum = 0.0f32;
            for pj in p[..keys].iter_mut() {
                *pj = (*pj - max).exp();
                sum += *pj;
            }
            for pj in p[..keys].iter_mut() {
                *pj /= sum;
            }
            crate::precision::round_bf16(&mut p[..keys]);
            let o = &mut out[(s * nq + h) * d..][..d];
            for (j, &pj) in p[..keys].iter().enumerate() {
                for (oi, vi) in o.iter_mut().zip(&v[j * d..][..d]) {
                    *oi += pj * vi;
                }
            }
        }
    }
    out
}

/// The CPU backend's [`WorkspaceModel`]: what one sequence's attention
/// allocates on a pool of `threads` workers (the pool of the thread that
/// asked the backend): its keys and values gathered from the block pool plus
/// the `attention_prefill` call over every KV head.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuWorkspace {
    threads: usize,
}

impl CpuWorkspace {
    pub(crate) fn on_current_pool() -> CpuWorkspace {
        CpuWorkspace {
            threads: rayon::current_num_threads(),
        }
    }
}

impl WorkspaceModel for CpuWorkspace {
    fn attention_bytes(&self, c: &AttentionCall) -> u64 {
        let l = c.layer;
        if l.kv_heads == 0 || l.head_dim == 0 || !l.q_heads.is_multiple_of(l.kv_heads) {
            return 0;
        }
        let q_len = c.q_len.max(1);
        let shape = AttentionShape {
            q_len,
            kv_len: c.kv_len.max(q_len),
            q_heads: l.q_heads,
            kv_heads: l.kv_heads,
            head_dim: l.head_dim,
            scale: None,
        };
        // The cache and q are f32 here whatever the checkpoint's dtype.
        workspace_bytes::<f32>(&shape, c.route, self.threads).saturating_add(gathered_bytes(
            shape.kv_len,
            l.kv_heads,
            l.head_dim,
        ))
    }
}
