//! KV writes and attention of the CPU backend. Per sequence, token-major q
//! goes head-major, the verified CPU kernels (`headroom_attention_cpu`) run the
//! requested route over the slot's KV cache (one call per KV head when the
//! cache is stored per head), and the output comes back token-major.
//! [`attend_one_bf16_p`] is the bf16 emulation's form (probabilities rounded
//! to bf16 before `P · V`, as the CUDA kernels multiply them).
//! [`CpuWorkspace`] answers what one call allocates, before it runs.

use crate::backend::{batch_rows, groups_of, same_shape, CpuAct, CpuBackend};
use crate::precision::ActRounding;
use crate::state::CpuKvCache;
use headroom_attention_cpu::{attention_prefill, workspace_bytes};
use headroom_core::ops::{AttentionCall, Batch, KvSpec, OpError, OpResult, WorkspaceModel};
use headroom_core::{AttentionReport, AttentionShape, RouteRequest};

pub(crate) fn kv_write(
    be: &CpuBackend,
    cache: &mut CpuKvCache,
    k: &CpuAct,
    v: &CpuAct,
    batch: &Batch,
) -> OpResult<()> {
    let spec = cache.spec;
    same_shape("kv_write", k, v)?;
    if k.cols != spec.kv_heads * spec.head_dim {
        return Err(OpError::shape(
            "kv_write",
            format!(
                "{} columns for {} kv heads × {}",
                k.cols, spec.kv_heads, spec.head_dim
            ),
        ));
    }
    batch_rows("kv_write", k, batch, spec.slots)?;
    for i in 0..batch.sequences() {
        let slot = batch.slots[i];
        let held = cache.slots[slot].len();
        if held != batch.history[i] {
            return Err(OpError::State {
                slot,
                detail: format!("holds {held} tokens, batch says {}", batch.history[i]),
            });
        }
        if held + batch.seq_len(i) > spec.capacity {
            return Err(OpError::State {
                slot,
                detail: format!(
                    "{held} + {} tokens exceed the capacity {}",
                    batch.seq_len(i),
                    spec.capacity
                ),
            });
        }
    }
    let added: usize = (0..batch.sequences())
        .map(|i| batch.seq_len(i) * 2 * k.cols * 4)
        .sum();
    for i in 0..batch.sequences() {
        let r = batch.seq_rows(i);
        cache.slots[batch.slots[i]].append(
            k.rows_of(r.clone()),
            v.rows_of(r.clone()),
            r.len(),
            spec.kv_heads,
            spec.head_dim,
        );
    }
    be.add_active(added);
    Ok(())
}

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
    let nq = q.cols / d;
    let mut out = CpuAct::zeros(q.rows, q.cols);
    let mut combined: Option<AttentionReport> = None;
    for i in 0..batch.sequences() {
        let r = batch.seq_rows(i);
        let kv = &cache.slots[batch.slots[i]];
        if kv.len() != batch.history[i] + r.len() {
            return Err(OpError::State {
                slot: batch.slots[i],
                detail: format!(
                    "holds {} tokens; attention needs history {} + {} new (kv_write first)",
                    kv.len(),
                    batch.history[i],
                    r.len()
                ),
            });
        }
        let (y, rep) = crate::backend_attention::attend_one(
            q.rows_of(r.clone()),
            r.len(),
            nq,
            kv,
            spec,
            route,
        )?;
        // bf16 emulation: the same route ran (its report stands), the
        // output is the form with bf16 probabilities.
        let y = if be.precision().act.contains(ActRounding::ATTENTION_P) {
            let qr = q.rows_of(r.clone());
            crate::backend_attention::attend_one_bf16_p(qr, r.len(), nq, kv, spec)
        } else {
            y
        };
        out.data[r.start * q.cols..r.end * q.cols].copy_from_slice(&y);
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

/// The causal attention of token-major `q` `[t][nq·d]` (the last `t` rows of
/// `kv`) with f32 scores, softmax and accumulation, the normalised
/// probabilities rounded to bf16 before `P · V` (the CUDA composed route's
/// masked softmax writes them so). Returns token-major `[t][nq·d]`.
pub(crate) fn attend_one_bf16_p(
    q: &[f32],
    t: usize,
    nq: usize,
    kv: &crate::KvCache,
    spec: KvSpec,
) -> Vec<f32> {
    let (nkv, d) = (spec.kv_heads, spec.head_dim);
    let group = nq / nkv.max(1);
    let hist = kv.len() - t;
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![0.0f32; q.len()];
    let mut p = vec![0.0f32; kv.len()];
    for s in 0..t {
        let keys = hist + s + 1;
        for h in 0..nq {
            let (k, v) = kv.head(h / group.max(1));
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

/// The CPU backend's [`WorkspaceModel`]: what `attention_prefill` allocates
/// on a pool of `threads` workers (the pool of the thread that asked the
/// backend). A sequence's attention is one call over every KV head when its
/// cache is contiguous, else one call per KV head; the answer is the
/// larger, the one over every head (the same scratch per worker, more tasks
/// and so up to more workers).
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
        workspace_bytes::<f32>(&shape, c.route, self.threads)
    }
}
