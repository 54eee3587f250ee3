//! A full-attention layer's prep (`Backend::attention_prep`) for all-decode
//! batches in one launch (`attention_prep.cu`): q/k norms, RoPE, KV write.
//! Other batches and other shapes run the composition of the plain ops.
//! Each sequence's KV block (from its block table) and position and the
//! rotary frequencies go to the kernel by value (no host-to-device copy per
//! call).

use crate::device::CudaDevice;
use crate::launch::{grid_dim, int, launch_packed_pdl, GRID_X, GRID_YZ};
use crate::ops::rope::inv_freq;
use crate::tensor::{CudaAct, CudaKvCache, CudaWeight};
use headroom_core::ops::{
    AttentionPrepWeights, Batch, BlockTables, OpError, OpResult, KV_BLOCK_ROWS,
};
use headroom_core::Dtype;
use std::ffi::c_void;

/// Largest head dim (`MAX_D`); head dims must be multiples of 8.
const MAX_D: usize = 256;
/// Sequences per launch (`MAX_SEQS`).
const MAX_SEQS: usize = 256;
const ENTRY: &str = "attention_prep_decode_bf16";

#[repr(C)]
struct PrepTable {
    inv_freq: [f32; MAX_D / 2],
    block: [i32; MAX_SEQS],
    pos: [i32; MAX_SEQS],
}

// The table and the 12 arguments before it fit the 4 KiB of kernel parameters.
const _: () = assert!(std::mem::size_of::<PrepTable>() + 12 * 8 <= 4096);

/// Whether the dispatch sends this call to the fused kernel.
pub(crate) fn takes(
    q: &CudaAct,
    k: &CudaAct,
    v: &CudaAct,
    w: &AttentionPrepWeights<'_, CudaWeight>,
    cache: &CudaKvCache,
    batch: &Batch,
) -> bool {
    eligible(q, k, v, w, cache, batch).is_ok()
}

/// The batch's block tables when the fused kernel runs this call exactly
/// (every sequence one row, head dim a multiple of 8 up to 256, the
/// composition's shapes, each slot holding its history with room for one
/// more token, tables covering it); else why not.
pub(crate) fn eligible(
    q: &CudaAct,
    k: &CudaAct,
    v: &CudaAct,
    w: &AttentionPrepWeights<'_, CudaWeight>,
    cache: &CudaKvCache,
    batch: &Batch,
) -> Result<BlockTables, String> {
    let spec = cache.spec;
    let (d, n) = (w.head_dim, batch.sequences());
    batch.validate(spec.slots).map_err(|e| e.to_string())?;
    if batch.rows() != n {
        return Err("not every sequence is one row".into());
    }
    if !d.is_multiple_of(8) || d == 0 || d > MAX_D || spec.head_dim != d {
        return Err(format!("head dim {d} (cache {})", spec.head_dim));
    }
    if w.kv_heads != spec.kv_heads || w.heads == 0 {
        return Err("heads do not match the cache".into());
    }
    let act = |a: &CudaAct, cols: usize| a.dtype == Dtype::Bf16 && a.rows == n && a.cols == cols;
    if !act(q, w.heads * d) || !act(k, w.kv_heads * d) || !act(v, w.kv_heads * d) {
        return Err("q, k, v are not bf16 [rows][heads·head_dim]".into());
    }
    let vector = |x: &CudaWeight| x.dtype == Dtype::F32 && x.elems() == d;
    if !vector(w.q_norm) || !vector(w.k_norm) {
        return Err("q/k norm weights are not f32 [head_dim]".into());
    }
    let r = w.rope;
    if r.rotary_dim > d
        || !r.rotary_dim.is_multiple_of(2)
        || !(r.theta.is_finite() && r.theta > 0.0)
    {
        return Err(format!("rope {r:?}"));
    }
    for i in 0..n {
        let slot = batch.slots[i];
        let held = cache.lens[slot];
        if held != batch.history[i] || held + 1 > spec.capacity || held > i32::MAX as usize {
            return Err(format!("slot {slot} holds {held} of {}", spec.capacity));
        }
    }
    batch
        .resolved_blocks("attention_prep", &spec)
        .map_err(|e| e.to_string())
}

fn param<T>(v: &mut T) -> *mut c_void {
    v as *mut T as *mut c_void
}

/// The fused prep; `Err` (nothing launched) unless [`eligible`].
pub(crate) fn attention_prep(
    dev: &CudaDevice,
    q: &mut CudaAct,
    k: &mut CudaAct,
    v: &CudaAct,
    w: &AttentionPrepWeights<'_, CudaWeight>,
    cache: &mut CudaKvCache,
    batch: &Batch,
) -> OpResult<()> {
    let op = "attention_prep";
    let tables =
        eligible(q, k, v, w, cache, batch).map_err(|reason| OpError::Unsupported { op, reason })?;
    let n = batch.sequences();
    let mut freq = [0f32; MAX_D / 2];
    for (f, v) in freq
        .iter_mut()
        .zip(inv_freq(w.rope.rotary_dim, w.rope.theta))
    {
        *f = v;
    }
    let ptrs = [
        q.ptr(),
        k.ptr(),
        v.ptr(),
        w.q_norm.ptr(),
        w.k_norm.ptr(),
        cache.k.ptr(),
        cache.v.ptr(),
    ];
    let mut ints = [
        int(op, "heads", w.heads)?,
        int(op, "kv_heads", w.kv_heads)?,
        int(op, "head_dim", w.head_dim)?,
        int(op, "rotary_dim", w.rope.rotary_dim)?,
    ];
    let mut eps = w.eps;
    for first in (0..n).step_by(MAX_SEQS) {
        let len = MAX_SEQS.min(n - first);
        let mut tab = PrepTable {
            inv_freq: freq,
            block: [0; MAX_SEQS],
            pos: [0; MAX_SEQS],
        };
        for j in 0..len {
            let pos = batch.history[first + j];
            let block = tables.table(first + j)[pos / KV_BLOCK_ROWS] as usize;
            tab.block[j] = int(op, "block", block)?;
            tab.pos[j] = int(op, "position", pos)?;
        }
        // Row offsets: the kernel takes sequence s as row s of the pointers.
        let row = |p: u64, cols: usize| p + (first * cols * 2) as u64;
        let dq = w.heads * w.head_dim;
        let dk = w.kv_heads * w.head_dim;
        let mut chunk_ptrs = ptrs;
        chunk_ptrs[0] = row(ptrs[0], dq);
        chunk_ptrs[1] = row(ptrs[1], dk);
        chunk_ptrs[2] = row(ptrs[2], dk);
        let mut params: Vec<*mut c_void> = chunk_ptrs.iter_mut().map(param).collect();
        params.extend(ints.iter_mut().map(param));
        params.push(param(&mut eps));
        params.push(param(&mut tab));
        let grid = (
            grid_dim(op, w.heads + w.kv_heads, GRID_X)?,
            grid_dim(op, len, GRID_YZ)?,
            1,
        );
        // SAFETY: eligible() checked q, k, v ([n][heads·d] bf16, d % 8 == 0 so
        // rows are 16-byte aligned), the norm vectors, and that every
        // sequence's table names blocks of the pool covering its position; params match the kernel signature;
        // the kernel waits for the previous one first (programmatic launch).
        unsafe { launch_packed_pdl(dev, ENTRY, grid, 32, &mut params)? };
    }
    for &slot in &batch.slots {
        cache.lens[slot] += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::sources::ATTENTION_PREP;
    use super::*;
    use crate::kernels::source_constant;

    #[test]
    fn launch_constants_match_the_kernel() {
        let src = ATTENTION_PREP.source;
        assert_eq!(source_constant(src, "MAX_D"), MAX_D);
        assert_eq!(source_constant(src, "MAX_SEQS"), MAX_SEQS);
        assert_eq!(source_constant(src, "KV_ROWS"), KV_BLOCK_ROWS);
    }
}
