//! Attention over the KV cache: per sequence, q goes head-major (a one-row
//! sequence already is), then the verified prefill kernels run: the fused
//! route on the wgmma kernel in one launch over every head of the slot
//! (`crate::attention::fused_strided_raw`: K/V head stride `capacity`, the
//! split-KV schedule its shape picks, packed GQA rows for short chunks);
//! otherwise one `prefill_raw` call (fused or composed exactly as requested)
//! per KV head with its query group (contiguous in head-major q). The output
//! goes back to token-major.

use super::launch::{dev_err, grid_dim, int, launch, stride_grid, upload, Args, GRID_X, GRID_YZ};
use super::memory::new_act;
use super::types::{CudaAct, CudaKvCache};
use super::validate::{batch_rows, bf16, groups_of, same_shape};
use crate::attention::{fused_impl, fused_strided_raw, prefill_raw, FusedImpl, RawBuffers};
use crate::device::CudaDevice;
use headroom_core::ops::{Batch, OpError, OpResult};
use headroom_core::{AttentionReport, AttentionShape, Dtype, RouteRequest};

/// Which way a transpose goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    TokensToHeads,
    HeadsToTokens,
}

/// Transposes `t` rows of `heads × d` between token-major and head-major;
/// with `gate` (head-major to token-major only) the output is also
/// multiplied by `sigmoid(gate)` (`gate` token-major like the output).
#[allow(clippy::too_many_arguments)]
fn transpose(
    dev: &CudaDevice,
    way: Way,
    src: u64,
    dst: u64,
    gate: Option<u64>,
    t: usize,
    heads: usize,
    d: usize,
) -> OpResult<()> {
    let op = "attention";
    let ints = |args: Args| -> OpResult<Args> {
        Ok(args
            .i32(int(op, "rows", t)?)
            .i32(int(op, "heads", heads)?)
            .i32(int(op, "head_dim", d)?))
    };
    if d.is_multiple_of(8) {
        // 16 bytes per thread (every row of d bf16 is 16-byte aligned).
        let entry = match (way, gate.is_some()) {
            (Way::TokensToHeads, _) => "tokens_to_heads_v8_bf16",
            (Way::HeadsToTokens, false) => "heads_to_tokens_v8_bf16",
            (Way::HeadsToTokens, true) => "heads_to_tokens_gated_v8_bf16",
        };
        let args = match gate {
            Some(g) => Args::new().ptr(src).ptr(g).ptr(dst),
            None => Args::new().ptr(src).ptr(dst),
        };
        let chunks = t
            .checked_mul(d / 8)
            .ok_or_else(|| OpError::shape(op, "rows overflow"))?;
        let grid = (
            grid_dim(op, chunks.div_ceil(256), GRID_X)?,
            grid_dim(op, heads, GRID_YZ)?,
            1,
        );
        // SAFETY: callers pass t·heads·d-element ranges of live buffers (and of
        // the gate), 16-byte aligned: d % 8 == 0 and the bases are row starts.
        return unsafe { launch(dev, entry, grid, 256, ints(args)?) };
    }
    let entry = match way {
        Way::TokensToHeads => "tokens_to_heads_bf16",
        Way::HeadsToTokens => "heads_to_tokens_bf16",
    };
    let args = ints(Args::new().ptr(src).ptr(dst))?;
    let grid = (grid_dim(op, t, GRID_X)?, grid_dim(op, heads, GRID_YZ)?, 1);
    // SAFETY: callers pass t·heads·d-element ranges of live buffers.
    unsafe { launch(dev, entry, grid, d.clamp(32, 256) as u32, args)? };
    if let Some(g) = gate {
        let n = (t * heads * d) as i64;
        let args = Args::new().ptr(dst).ptr(g).i64(n);
        // SAFETY: dst and the gate hold these t·heads·d elements.
        unsafe {
            launch(
                dev,
                "mul_sigmoid_bf16",
                stride_grid(n as usize, 256),
                256,
                args,
            )?
        };
    }
    Ok(())
}

/// Runs attention; returns the output and the report of the kernels that
/// ran (same route for every call; transient bytes the largest call's).
/// With `gate` (same shape as `q`) the output is `attention · sigmoid(gate)`,
/// the gate applied in the transpose back to token-major where there is one.
pub(crate) fn attention(
    dev: &CudaDevice,
    q: &CudaAct,
    cache: &CudaKvCache,
    batch: &Batch,
    route: RouteRequest,
    gate: Option<&CudaAct>,
) -> OpResult<(CudaAct, AttentionReport)> {
    let op = "attention";
    let spec = cache.spec;
    let d = spec.head_dim;
    bf16(op, q)?;
    groups_of(op, q, d)?;
    batch_rows(op, q, batch, spec.slots)?;
    if let Some(g) = gate {
        same_shape(op, q, g)?;
    }
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
    let es = 2u64;
    let one_launch = route == RouteRequest::Fused && fused_impl(&dev.arch) == FusedImpl::Wgmma;
    let longest = staging_rows(batch, one_launch);
    let q_hm = new_act(dev, op, longest, q.cols, Dtype::Bf16)?;
    let o_hm = new_act(dev, op, longest, q.cols, Dtype::Bf16)?;
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
    // The gate of one-row sequences of the one-launch route (written straight
    // to `out`, no transpose) is applied after the loop, in one launch.
    let mut gate_after = false;
    for i in 0..batch.sequences() {
        let (r, t, slot) = (batch.seq_rows(i), batch.seq_len(i), batch.slots[i]);
        let row_off = (r.start * q.cols) as u64 * es;
        let gate_at = gate.map(|g| g.ptr() + row_off);
        if one_launch {
            // A one-row sequence: token-major [1][heads][d] is head-major.
            let (q_in, o_at) = if t == 1 {
                gate_after |= gate.is_some();
                (q.ptr() + row_off, out.ptr() + row_off)
            } else {
                transpose(
                    dev,
                    Way::TokensToHeads,
                    q.ptr() + row_off,
                    q_hm.ptr(),
                    None,
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
                    Way::HeadsToTokens,
                    o_hm.ptr(),
                    out.ptr() + row_off,
                    gate_at,
                    t,
                    nq,
                    d,
                )?;
            }
            continue;
        }
        transpose(
            dev,
            Way::TokensToHeads,
            q.ptr() + row_off,
            q_hm.ptr(),
            None,
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
            Way::HeadsToTokens,
            o_hm.ptr(),
            out.ptr() + row_off,
            gate_at,
            t,
            nq,
            d,
        )?;
    }
    if gate_after {
        gate_one_row_sequences(dev, &out, gate, batch)?;
    }
    let report = combined.ok_or_else(|| OpError::Batch("no sequence".into()))?;
    Ok((out, report))
}

/// Rows of the head-major staging buffers: the longest sequence that is
/// transposed. The one-launch route reads a one-row sequence in place (its
/// token-major row is head-major); every other route stages every sequence,
/// one-row ones included — sizing the buffers by the multi-row sequences
/// alone let an all-decode batch on the composed route write past them.
fn staging_rows(batch: &Batch, one_launch: bool) -> usize {
    (0..batch.sequences())
        .map(|i| batch.seq_len(i))
        .filter(|&t| !one_launch || t > 1)
        .max()
        .unwrap_or(0)
}

/// `out *= sigmoid(gate)` on the rows of the batch's one-row sequences: the
/// whole output in one launch when every sequence is one row (decode), else
/// one launch over those rows through a row table.
fn gate_one_row_sequences(
    dev: &CudaDevice,
    out: &CudaAct,
    gate: Option<&CudaAct>,
    batch: &Batch,
) -> OpResult<()> {
    let op = "attention";
    let Some(g) = gate else { return Ok(()) };
    let rows: Vec<i32> = (0..batch.sequences())
        .filter(|&i| batch.seq_len(i) == 1)
        .map(|i| int(op, "row", batch.cu_seqlens[i]))
        .collect::<OpResult<_>>()?;
    if rows.len() == out.rows {
        let n = out.elems();
        let args = Args::new().ptr(out.ptr()).ptr(g.ptr()).i64(n as i64);
        // SAFETY: out and the gate hold n bf16 elements.
        return unsafe { launch(dev, "mul_sigmoid_bf16", stride_grid(n, 256), 256, args) };
    }
    let table = upload(dev, &rows)?;
    let args = Args::new()
        .ptr(out.ptr())
        .ptr(g.ptr())
        .ptr(table.ptr())
        .i32(int(op, "columns", out.cols)?);
    let grid = (grid_dim(op, rows.len(), GRID_X)?, 1, 1);
    // SAFETY: every listed row is a row of out and of the gate (same shape).
    unsafe { launch(dev, "mul_sigmoid_rows_bf16", grid, 256, args) }
}

#[cfg(test)]
mod tests {
    use super::staging_rows;
    use headroom_core::ops::Batch;

    #[test]
    fn every_sequence_is_staged_unless_the_one_launch_route_reads_it_in_place() {
        let decode = Batch::packed(&[(0, 77, 1), (1, 4, 1), (2, 21, 1)]);
        assert_eq!(
            staging_rows(&decode, false),
            1,
            "composed decode stages its rows"
        );
        assert_eq!(
            staging_rows(&decode, true),
            0,
            "one launch reads one-row sequences in place"
        );
        let mixed = Batch::packed(&[(1, 3, 1), (0, 40, 37), (2, 1, 20)]);
        assert_eq!(staging_rows(&mixed, false), 37);
        assert_eq!(staging_rows(&mixed, true), 37);
    }
}
