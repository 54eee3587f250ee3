//! The CPU backend's KV write and the block tables it and attention read:
//! each sequence's rows go into its slot's blocks through the batch's tables
//! (or the identity layout when the batch carries none), every check made
//! before any row is written.

use super::{batch_rows, same_shape, CpuAct, CpuBackend};
use crate::state::CpuKvCache;
use headroom_core::ops::{
    blocks_for, Batch, BlockTables, KvSpec, OpError, OpResult, KV_BLOCK_ROWS,
};
use std::collections::HashMap;

/// The batch's block tables in a pool of `spec` ([`Batch::resolved_blocks`]),
/// a block outside the pool named with the sequence whose table holds it.
pub(crate) fn tables(op: &'static str, spec: &KvSpec, batch: &Batch) -> OpResult<BlockTables> {
    if let Some(t) = &batch.blocks {
        let n = batch.sequences();
        let well_formed = t.starts.len() == n + 1
            && t.starts.first() == Some(&0)
            && t.starts.windows(2).all(|w| w[0] <= w[1])
            && t.starts[n] == t.ids.len();
        if well_formed {
            for i in 0..n {
                if let Some(&id) = t.table(i).iter().find(|&&id| id as usize >= spec.blocks) {
                    return Err(OpError::shape(
                        op,
                        format!(
                            "sequence {i} (slot {}): block {id} outside the pool of {} blocks",
                            batch.slots[i], spec.blocks
                        ),
                    ));
                }
            }
        }
    }
    batch.resolved_blocks(op, spec)
}

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
    batch.check_kv_append(|slot| cache.len(slot), spec.capacity)?;
    let tables = tables("kv_write", &spec, batch)?;
    distinct_writes(batch, &tables)?;
    let mut added = 0;
    for i in 0..batch.sequences() {
        let r = batch.seq_rows(i);
        added += cache.append(
            batch.slots[i],
            tables.table(i),
            k.rows_of(r.clone()),
            v.rows_of(r),
        );
    }
    be.add_active(added);
    Ok(())
}

/// Refuses a write in which two sequences (or two positions of one) would
/// write the same block: the engine hands each sequence its own blocks.
fn distinct_writes(batch: &Batch, tables: &BlockTables) -> OpResult<()> {
    let mut writer: HashMap<u32, usize> = HashMap::new();
    for i in 0..batch.sequences() {
        let (from, to) = (batch.history[i], batch.history[i] + batch.seq_len(i));
        for &id in &tables.table(i)[from / KV_BLOCK_ROWS..blocks_for(to)] {
            if let Some(j) = writer.insert(id, i) {
                return Err(OpError::Batch(format!(
                    "block {id} written by sequence {j} and by sequence {i}"
                )));
            }
        }
    }
    Ok(())
}
