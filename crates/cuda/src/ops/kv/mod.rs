//! The KV cache op and the layout changes around attention (`ops_kv.cu`):
//! each sequence's new rows go to its slot at the slot's length, after the
//! host checks history and capacity ([`kv_write`]); [`transpose`] moves
//! rows between token-major and head-major.

pub mod sources;
mod transpose;

pub(crate) use transpose::{transpose, Way};

use crate::device::CudaDevice;
use crate::launch::{grid_dim, int, launch, seq_table, upload, Args, GRID_X};
use crate::tensor::{CudaAct, CudaKvCache};
use crate::validate::{batch_rows, bf16, same_shape};
use headroom_core::ops::{Batch, OpError, OpResult};

/// Appends each sequence's rows of `k` and `v` to its slot of `cache`.
pub(crate) fn kv_write(
    dev: &CudaDevice,
    cache: &mut CudaKvCache,
    k: &CudaAct,
    v: &CudaAct,
    batch: &Batch,
) -> OpResult<()> {
    let op = "kv_write";
    let spec = cache.spec;
    bf16(op, k)?;
    same_shape(op, k, v)?;
    if k.cols != spec.kv_heads * spec.head_dim {
        return Err(OpError::shape(
            op,
            format!(
                "{} columns for {} kv heads × {}",
                k.cols, spec.kv_heads, spec.head_dim
            ),
        ));
    }
    batch_rows(op, k, batch, spec.slots)?;
    for i in 0..batch.sequences() {
        let slot = batch.slots[i];
        let held = cache.lens[slot];
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
    if spec.head_dim.is_multiple_of(8) {
        let table = seq_table(dev, op, batch)?;
        let args = Args::new()
            .ptr(k.ptr())
            .ptr(v.ptr())
            .ptr(cache.k.ptr())
            .ptr(cache.v.ptr())
            .ptr(table.ptr())
            .i32(int(op, "sequences", batch.sequences())?)
            .i32(int(op, "kv_heads", spec.kv_heads)?)
            .i32(int(op, "head_dim", spec.head_dim)?)
            .i32(int(op, "capacity", spec.capacity)?);
        let grid = (grid_dim(op, k.rows, GRID_X)?, 1, 1);
        // SAFETY: every (slot, position) is inside the cache (checked above);
        // rows and cache rows of head_dim % 8 == 0 bf16 are 16-byte aligned.
        unsafe { launch(dev, "kv_write_seq_v8_bf16", grid, 64, args)? };
    } else {
        let (mut slots, mut pos) = (Vec::with_capacity(k.rows), Vec::with_capacity(k.rows));
        for i in 0..batch.sequences() {
            let s = int(op, "slot", batch.slots[i])?;
            for p in batch.history[i]..batch.history[i] + batch.seq_len(i) {
                slots.push(s);
                pos.push(int(op, "position", p)?);
            }
        }
        let (slots_dev, pos_dev) = (upload(dev, &slots)?, upload(dev, &pos)?);
        let args = Args::new()
            .ptr(k.ptr())
            .ptr(v.ptr())
            .ptr(cache.k.ptr())
            .ptr(cache.v.ptr())
            .ptr(slots_dev.ptr())
            .ptr(pos_dev.ptr())
            .i32(int(op, "kv_heads", spec.kv_heads)?)
            .i32(int(op, "head_dim", spec.head_dim)?)
            .i32(int(op, "capacity", spec.capacity)?);
        let grid = (grid_dim(op, k.rows, GRID_X)?, 1, 1);
        // SAFETY: every (slot, position) is inside the cache (checked above).
        unsafe { launch(dev, "kv_write_bf16", grid, 256, args)? };
    }
    for i in 0..batch.sequences() {
        cache.lens[batch.slots[i]] += batch.seq_len(i);
    }
    Ok(())
}
