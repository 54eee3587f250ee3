//! Attention over the KV block pool (`Backend::attention`,
//! `attention_gated`): checks the call, resolves the batch's block tables
//! and runs it. The fused route on Hopper (wgmma) with a head dim of 64, 128
//! or 256 is one launch for every sequence (`super::paged`, plus one split
//! combine); every other call (the composed route, the mma.sync kernel)
//! takes the gathered route (`super::gathered`: the pool's K/V gathered into
//! a bounded workspace, then a host loop over the sequences and their KV
//! heads launching the per-sequence kernels).

use super::paged::{paged_entry, paged_raw, PagedBuffers, PagedRun, PagedShape};
use super::{fused_impl, gathered, FusedImpl};
use crate::device::CudaDevice;
use crate::tensor::{new_act, CudaAct, CudaKvCache};
use crate::validate::{batch_rows, bf16, groups_of, same_shape};
use headroom_core::ops::{Batch, OpError, OpResult};
use headroom_core::{AttentionReport, Dtype, RouteRequest};

/// Runs attention; returns the output and the report of the kernels that
/// ran. With `gate` (same shape as `q`) the output is
/// `attention · sigmoid(gate)`.
pub(crate) fn attention(
    dev: &CudaDevice,
    q: &CudaAct,
    cache: &CudaKvCache,
    batch: &Batch,
    route: RouteRequest,
    gate: Option<&CudaAct>,
) -> OpResult<(CudaAct, AttentionReport)> {
    if takes_paged(dev, cache, route) {
        let (out, run) = paged(dev, q, cache, batch, gate, None)?;
        return Ok((out, run.report));
    }
    let op = "attention";
    let nq = check(q, cache, batch, gate)?;
    let tables = batch.resolved_blocks(op, &cache.spec)?;
    let out = new_act(dev, op, q.rows, q.cols, Dtype::Bf16)?;
    let report = gathered::run(dev, q, cache, batch, &tables, route, gate, &out, nq)?;
    Ok((out, report))
}

/// Whether a call on `route` runs the one-launch paged kernel.
pub(crate) fn takes_paged(dev: &CudaDevice, cache: &CudaKvCache, route: RouteRequest) -> bool {
    route == RouteRequest::Fused
        && fused_impl(&dev.arch) == FusedImpl::Wgmma
        && paged_entry(cache.spec.head_dim, Dtype::Bf16).is_some()
}

/// The paged kernel over the whole batch (`splits`: force that many key
/// splits; `None`: the plan's choice).
pub(crate) fn paged(
    dev: &CudaDevice,
    q: &CudaAct,
    cache: &CudaKvCache,
    batch: &Batch,
    gate: Option<&CudaAct>,
    splits: Option<usize>,
) -> OpResult<(CudaAct, PagedRun)> {
    let op = "attention";
    let spec = cache.spec;
    let nq = check(q, cache, batch, gate)?;
    let tables = batch.resolved_blocks(op, &spec)?;
    let out = new_act(dev, op, q.rows, q.cols, Dtype::Bf16)?;
    let kv_lens: Vec<usize> = (0..batch.sequences())
        .map(|i| batch.history[i] + batch.seq_len(i))
        .collect();
    let shape = PagedShape {
        cu_seqlens: &batch.cu_seqlens[..=batch.sequences()],
        kv_lens: &kv_lens,
        tables: &tables,
        q_heads: nq,
        kv_heads: spec.kv_heads,
        head_dim: spec.head_dim,
    };
    let bufs = PagedBuffers {
        q: q.ptr(),
        k: cache.k.ptr(),
        v: cache.v.ptr(),
        out: out.ptr(),
        gate: gate.map(|g| g.ptr()),
    };
    // SAFETY: q, out and the gate are [rows][nq·d] bf16 (checked); the pool
    // holds every block of the resolved tables.
    let run = unsafe { paged_raw(dev, Dtype::Bf16, &shape, &bufs, splits)? };
    Ok((out, run))
}

/// Checks the shapes of a call and that every slot holds its sequence's
/// history and new rows; returns the number of query heads.
fn check(
    q: &CudaAct,
    cache: &CudaKvCache,
    batch: &Batch,
    gate: Option<&CudaAct>,
) -> OpResult<usize> {
    let op = "attention";
    let spec = cache.spec;
    bf16(op, q)?;
    groups_of(op, q, spec.head_dim)?;
    batch_rows(op, q, batch, spec.slots)?;
    if let Some(g) = gate {
        same_shape(op, q, g)?;
    }
    let nq = q.cols / spec.head_dim;
    if !nq.is_multiple_of(spec.kv_heads) {
        return Err(OpError::shape(
            op,
            format!("{nq} q heads not a multiple of {} kv heads", spec.kv_heads),
        ));
    }
    for i in 0..batch.sequences() {
        let slot = batch.slots[i];
        if cache.lens[slot] != batch.history[i] + batch.seq_len(i) {
            return Err(OpError::State {
                slot,
                detail: format!(
                    "holds {} tokens; attention needs history {} + {} new (kv_write first)",
                    cache.lens[slot],
                    batch.history[i],
                    batch.seq_len(i)
                ),
            });
        }
    }
    Ok(nq)
}
