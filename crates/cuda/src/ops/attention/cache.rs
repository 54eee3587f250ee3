//! Attention over the KV block pool (`Backend::attention`,
//! `attention_gated`): checks the call, resolves the batch's block tables
//! and runs the gathered route (`super::gathered`: the pool's K/V gathered
//! into a bounded workspace, then the per-sequence kernels).

use super::gathered;
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
    let op = "attention";
    let nq = check(q, cache, batch, gate)?;
    let tables = batch.resolved_blocks(op, &cache.spec)?;
    let out = new_act(dev, op, q.rows, q.cols, Dtype::Bf16)?;
    let report = gathered::run(dev, q, cache, batch, &tables, route, gate, &out, nq)?;
    Ok((out, report))
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
