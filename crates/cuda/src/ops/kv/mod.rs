//! The KV cache op and the layout changes around attention (`ops_kv.cu`).
//! The cache is a block pool (`[blocks][kv_heads][KV_BLOCK_ROWS][head_dim]`,
//! `crate::tensor::CudaKvCache`): [`kv_write`] puts each sequence's new rows
//! into the blocks of its table (`Batch::resolved_blocks`) after the host
//! checks history and capacity; [`gather`] copies sequences' K/V out of the
//! pool into a contiguous workspace; [`transpose`] moves rows between
//! token-major and head-major.

mod gather;
pub mod sources;
mod transpose;

pub(crate) use gather::{gather, gather_bytes};
pub(crate) use transpose::{transpose, Way};

use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::launch::{grid_dim, int, launch, seq_table, upload, Args, GRID_X};
use crate::tensor::{CudaAct, CudaKvCache};
use crate::validate::{batch_rows, bf16, same_shape};
use headroom_core::ops::{Batch, BlockTables, OpError, OpResult, KV_BLOCK_ROWS};
use std::sync::Arc;

/// The block tables as the kernels read them, i32: `[starts (n + 1)][ids]`.
pub(crate) fn table_words(op: &'static str, t: &BlockTables) -> OpResult<Vec<i32>> {
    let mut words = Vec::with_capacity(t.starts.len() + t.ids.len());
    for &s in &t.starts {
        words.push(int(op, "block-table start", s)?);
    }
    for &id in &t.ids {
        words.push(int(op, "block id", id as usize)?);
    }
    Ok(words)
}

/// Uploads [`table_words`] (shared with earlier identical uploads).
pub(crate) fn upload_tables(
    dev: &CudaDevice,
    op: &'static str,
    t: &BlockTables,
) -> OpResult<Arc<DeviceBuffer>> {
    upload(dev, &table_words(op, t)?)
}

/// Checks that each sequence's slot holds its history and that the new rows
/// fit the capacity.
fn check_lengths(cache: &CudaKvCache, batch: &Batch) -> OpResult<()> {
    batch.check_kv_append(|slot| cache.lens[slot], cache.spec.capacity)
}

/// Appends each sequence's rows of `k` and `v` to the blocks of its table.
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
    check_lengths(cache, batch)?;
    let tables = batch.resolved_blocks(op, &spec)?;
    if spec.head_dim.is_multiple_of(8) {
        let seq = seq_table(dev, op, batch)?;
        let bt = upload_tables(dev, op, &tables)?;
        let args = Args::new()
            .ptr(k.ptr())
            .ptr(v.ptr())
            .ptr(cache.k.ptr())
            .ptr(cache.v.ptr())
            .ptr(seq.ptr())
            .ptr(bt.ptr())
            .i32(int(op, "sequences", batch.sequences())?)
            .i32(int(op, "kv_heads", spec.kv_heads)?)
            .i32(int(op, "head_dim", spec.head_dim)?);
        let grid = (grid_dim(op, k.rows, GRID_X)?, 1, 1);
        // SAFETY: every row's block is a block of the pool (resolved_blocks)
        // and its table covers the row's position; rows and cache rows of
        // head_dim % 8 == 0 bf16 are 16-byte aligned.
        unsafe { launch(dev, "kv_write_seq_v8_bf16", grid, 64, args)? };
    } else {
        let (mut blocks, mut offs) = (Vec::with_capacity(k.rows), Vec::with_capacity(k.rows));
        for i in 0..batch.sequences() {
            let table = tables.table(i);
            for p in batch.history[i]..batch.history[i] + batch.seq_len(i) {
                blocks.push(int(op, "block", table[p / KV_BLOCK_ROWS] as usize)?);
                offs.push(int(op, "row", p % KV_BLOCK_ROWS)?);
            }
        }
        let (blocks_dev, offs_dev) = (upload(dev, &blocks)?, upload(dev, &offs)?);
        let args = Args::new()
            .ptr(k.ptr())
            .ptr(v.ptr())
            .ptr(cache.k.ptr())
            .ptr(cache.v.ptr())
            .ptr(blocks_dev.ptr())
            .ptr(offs_dev.ptr())
            .i32(int(op, "kv_heads", spec.kv_heads)?)
            .i32(int(op, "head_dim", spec.head_dim)?);
        let grid = (grid_dim(op, k.rows, GRID_X)?, 1, 1);
        // SAFETY: every (block, row) is inside the pool (resolved_blocks).
        unsafe { launch(dev, "kv_write_bf16", grid, 256, args)? };
    }
    for i in 0..batch.sequences() {
        cache.lens[batch.slots[i]] += batch.seq_len(i);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_tables_go_to_the_kernels_as_starts_then_ids() {
        let t = BlockTables::from_tables(&[vec![7u32, 2], vec![], vec![9]]);
        assert_eq!(table_words("t", &t).unwrap(), vec![0, 2, 2, 3, 7, 2, 9]);
        let huge = BlockTables::from_tables(&[vec![u32::MAX]]);
        assert!(table_words("t", &huge).is_err(), "ids past i32 are refused");
    }

    #[test]
    fn the_block_rows_constant_matches_the_kernels() {
        let src = sources::OPS_KV.source;
        assert_eq!(
            crate::kernels::source_constant(src, "KV_ROWS"),
            KV_BLOCK_ROWS
        );
    }
}
