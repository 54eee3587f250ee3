//! Copies sequences' keys and values out of the KV block pool into one
//! contiguous workspace (`kv_gather_bf16`, one launch for a group of
//! sequences): each sequence's K and V become plain head-major
//! `[kv_heads][kv_len][head_dim]` tensors that the per-sequence attention
//! kernels (mma.sync fused, composed) read.

use super::upload_tables;
use crate::alloc::DeviceBuffer;
use crate::device::CudaDevice;
use crate::launch::{alloc, grid_dim, int, launch, mul, upload, Args, GRID_X, GRID_YZ};
use crate::tensor::CudaKvCache;
use headroom_core::ops::{BlockTables, OpResult};

/// Threads per gather CTA (one key row of one head).
const THREADS: u32 = 64;

/// The gathered K and V of a group of sequences.
pub(crate) struct Gathered {
    pub k: DeviceBuffer,
    pub v: DeviceBuffer,
    /// Prefix sums of the group's kv lengths (`len() == group + 1`).
    pub rows: Vec<usize>,
    /// Elements of one key row of every head (`kv_heads · head_dim`).
    row_elems: usize,
}

impl Gathered {
    /// Byte offset of the `j`-th sequence of the group in `k` and `v`.
    pub fn offset(&self, j: usize) -> u64 {
        (self.rows[j] * self.row_elems * 2) as u64
    }
}

/// Bytes of the gather workspace (K and V) for `rows` key rows.
pub(crate) fn gather_bytes(kv_heads: usize, head_dim: usize, rows: usize) -> usize {
    rows.saturating_mul(kv_heads)
        .saturating_mul(head_dim)
        .saturating_mul(4)
}

/// Gathers the sequences `seqs` (indices into `tables`), holding `kv_lens[i]`
/// tokens each (indexed like `tables`), in one launch. The tables must have
/// been checked against the pool (`Batch::resolved_blocks`) and cover each
/// sequence's `kv_lens[i]` rows.
pub(crate) fn gather(
    dev: &CudaDevice,
    cache: &CudaKvCache,
    tables: &BlockTables,
    seqs: &[usize],
    kv_lens: &[usize],
) -> OpResult<Gathered> {
    let op = "attention";
    let spec = cache.spec;
    let row_elems = mul(op, spec.kv_heads, spec.head_dim)?;
    let mut rows = Vec::with_capacity(seqs.len() + 1);
    rows.push(0usize);
    for &i in seqs {
        let next = rows[rows.len() - 1] + kv_lens[i];
        rows.push(next);
    }
    let total = rows[seqs.len()];
    let bytes = mul(op, mul(op, total.max(1), row_elems)?, 2)?;
    let (k, v) = (alloc(dev, bytes)?, alloc(dev, bytes)?);
    if total > 0 {
        let group: Vec<&[u32]> = seqs.iter().map(|&i| tables.table(i)).collect();
        let bt = upload_tables(dev, op, &BlockTables::from_tables(&group))?;
        let cu: Vec<i32> = rows
            .iter()
            .map(|&r| int(op, "key row", r))
            .collect::<OpResult<_>>()?;
        let cu = upload(dev, &cu)?;
        let args = Args::new()
            .ptr(cache.k.ptr())
            .ptr(cache.v.ptr())
            .ptr(k.ptr())
            .ptr(v.ptr())
            .ptr(cu.ptr())
            .ptr(bt.ptr())
            .i32(int(op, "sequences", seqs.len())?)
            .i32(int(op, "kv_heads", spec.kv_heads)?)
            .i32(int(op, "head_dim", spec.head_dim)?);
        let grid = (
            grid_dim(op, total, GRID_X)?,
            grid_dim(op, spec.kv_heads, GRID_YZ)?,
            1,
        );
        // SAFETY: the tables name blocks of the pool and cover each
        // sequence's kv_len rows (resolved_blocks); the workspace holds
        // `total` rows of every head.
        unsafe { launch(dev, "kv_gather_bf16", grid, THREADS, args)? };
    }
    Ok(Gathered {
        k,
        v,
        rows,
        row_elems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_holds_k_and_v_of_every_row() {
        assert_eq!(gather_bytes(2, 256, 100), 2 * 256 * 100 * 2 * 2);
        assert_eq!(gather_bytes(usize::MAX, 2, 2), usize::MAX, "saturates");
    }
}
