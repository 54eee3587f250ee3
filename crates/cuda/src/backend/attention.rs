//! Attention over the KV cache: per sequence, q goes head-major (a one-row
//! sequence already is), then the verified prefill kernels run: the fused
//! route on the wgmma kernel in one launch over every head of the slot
//! (`crate::attention::fused_strided_raw`: K/V head stride `capacity`, the
//! split-KV schedule its shape picks, packed GQA rows for short chunks);
//! otherwise one `prefill_raw` call (fused or composed exactly as requested)
//! per KV head with its query group (contiguous in head-major q). The output
//! goes back to token-major.

use super::launch::{dev_err, grid_dim, int, launch, Args, GRID_X, GRID_YZ};
use super::memory::new_act;
use super::types::{CudaAct, CudaKvCache};
use super::validate::{batch_rows, bf16, groups_of};
use crate::attention::{fused_impl, fused_strided_raw, prefill_raw, FusedImpl, RawBuffers};
use crate::device::CudaDevice;
use headroom_core::ops::{Batch, OpError, OpResult};
use headroom_core::{AttentionReport, AttentionShape, Dtype, RouteRequest};

/// Transposes `t` rows of `heads × d` between token-major and head-major.
fn transpose(
    dev: &CudaDevice,
    entry: &'static str,
    src: u64,
    dst: u64,
    t: usize,
    heads: usize,
    d: usize,
) -> OpResult<()> {
    let op = "attention";
    let args = Args::new()
        .ptr(src)
        .ptr(dst)
        .i32(int(op, "rows", t)?)
        .i32(int(op, "heads", heads)?)
        .i32(int(op, "head_dim", d)?);
    let grid = (grid_dim(op, t, GRID_X)?, grid_dim(op, heads, GRID_YZ)?, 1);
    // SAFETY: callers pass t·heads·d-element ranges of live buffers.
    unsafe { launch(dev, entry, grid, d.clamp(32, 256) as u32, args) }
}

/// Runs attention; returns the output and the report of the kernels that
/// ran (same route for every call; transient bytes the largest call's).
pub(crate) fn attention(
    dev: &CudaDevice,
    q: &CudaAct,
    cache: &CudaKvCache,
    batch: &Batch,
    route: RouteRequest,
) -> OpResult<(CudaAct, AttentionReport)> {
    let op = "attention";
    let spec = cache.spec;
    let d = spec.head_dim;
    bf16(op, q)?;
    groups_of(op, q, d)?;
    batch_rows(op, q, batch, spec.slots)?;
    let nq = q.cols / d;
    if !nq.is_multiple_of(spec.kv_heads) {
        return Err(OpError::shape(
            op,
            format!("{nq} q heads not a multiple of {} kv heads", spec.kv_heads),
        ));
    }
    let group = nq / spec.kv_heads;
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
    let out = new_act(dev, op, q.rows, q.cols, Dtype::Bf16)?;
    // Head-major staging only for sequences of more than one row.
    let longest = (0..batch.sequences())
        .map(|i| batch.seq_len(i))
        .filter(|&t| t > 1)
        .max()
        .unwrap_or(0);
    let q_hm = new_act(dev, op, longest, q.cols, Dtype::Bf16)?;
    let o_hm = new_act(dev, op, longest, q.cols, Dtype::Bf16)?;
    let es = 2u64;
    let one_launch = route == RouteRequest::Fused && fused_impl(&dev.arch) == FusedImpl::Wgmma;
    let mut combined: Option<AttentionReport> = None;
    let mut merge = |rep: AttentionReport| {
        combined = Some(match combined {
            None => rep,
            Some(c) => AttentionReport {
                transient_bytes: c.transient_bytes.max(rep.transient_bytes),
                ..c
            },
        });
    };
    for i in 0..batch.sequences() {
        let (r, t, slot) = (batch.seq_rows(i), batch.seq_len(i), batch.slots[i]);
        let row_off = (r.start * q.cols) as u64 * es;
        if one_launch {
            // A one-row sequence: token-major [1][heads][d] is head-major.
            let (q_in, o_at) = if t == 1 {
                (q.ptr() + row_off, out.ptr() + row_off)
            } else {
                transpose(
                    dev,
                    "tokens_to_heads_bf16",
                    q.ptr() + row_off,
                    q_hm.ptr(),
                    t,
                    nq,
                    d,
                )?;
                (q_hm.ptr(), o_hm.ptr())
            };
            let shape = AttentionShape {
                q_len: t,
                kv_len: cache.lens[slot],
                q_heads: nq,
                kv_heads: spec.kv_heads,
                head_dim: d,
                scale: None,
            };
            let kv_off = (slot * spec.kv_heads * cache.head_elems()) as u64 * es;
            let bufs = RawBuffers {
                q: q_in,
                k: cache.k.ptr() + kv_off,
                v: cache.v.ptr() + kv_off,
                out: o_at,
            };
            // SAFETY: q/out address t·nq·d elements (the sequence's rows or the
            // head-major staging); k/v the slot's kv_heads rows of `capacity`,
            // kv_len <= capacity, so the last head ends inside the slot.
            let rep =
                unsafe { fused_strided_raw(dev, &shape, Dtype::Bf16, &bufs, cache.head_elems()) }
                    .map_err(dev_err)?;
            merge(rep);
            if t > 1 {
                transpose(
                    dev,
                    "heads_to_tokens_bf16",
                    o_hm.ptr(),
                    out.ptr() + row_off,
                    t,
                    nq,
                    d,
                )?;
            }
            continue;
        }
        transpose(
            dev,
            "tokens_to_heads_bf16",
            q.ptr() + row_off,
            q_hm.ptr(),
            t,
            nq,
            d,
        )?;
        let shape = AttentionShape {
            q_len: t,
            kv_len: cache.lens[slot],
            q_heads: group,
            kv_heads: 1,
            head_dim: d,
            scale: None,
        };
        for h in 0..spec.kv_heads {
            let kv_off = ((slot * spec.kv_heads + h) * cache.head_elems()) as u64 * es;
            let q_off = (h * group * t * d) as u64 * es;
            let bufs = RawBuffers {
                q: q_hm.ptr() + q_off,
                k: cache.k.ptr() + kv_off,
                v: cache.v.ptr() + kv_off,
                out: o_hm.ptr() + q_off,
            };
            // SAFETY: q/out ranges are this group's `group·t·d` elements of the
            // head-major buffers; k/v the slot's head rows, kv_len <= capacity.
            let rep =
                unsafe { prefill_raw(dev, &shape, Dtype::Bf16, route, &bufs) }.map_err(dev_err)?;
            merge(rep);
        }
        transpose(
            dev,
            "heads_to_tokens_bf16",
            o_hm.ptr(),
            out.ptr() + row_off,
            t,
            nq,
            d,
        )?;
    }
    let report = combined.ok_or_else(|| OpError::Batch("no sequence".into()))?;
    Ok((out, report))
}
