//! Attention over the KV cache (`Backend::attention`): per sequence, q goes
//! head-major (a one-row sequence already is), then the verified prefill
//! kernels run: on the wgmma kernel, the fused route in one launch over every
//! head of the slot (`fused_strided_raw`: K/V head stride `capacity`, the
//! split-KV schedule its shape picks, packed GQA rows for short chunks);
//! otherwise one `prefill_raw` call (fused or composed exactly as requested)
//! per KV head with its query group (contiguous in head-major q). The output
//! goes back to token-major.

use super::{fused_impl, fused_strided_raw, prefill_raw, FusedImpl, RawBuffers};
use crate::device::CudaDevice;
use crate::launch::{dev_err, int};
use crate::ops::kv::{transpose, Way};
use crate::ops::pointwise::{mul_sigmoid_raw, mul_sigmoid_rows};
use crate::tensor::{new_act, CudaAct, CudaKvCache};
use crate::validate::{batch_rows, bf16, groups_of, same_shape};
use headroom_core::ops::{Batch, OpError, OpResult};
use headroom_core::{AttentionReport, AttentionShape, Dtype, RouteRequest};

/// Bytes of a bf16 element.
const ES: u64 = 2;

/// What every sequence of a call shares: the query, the cache, the output,
/// the gate and the head-major staging buffers.
struct Call<'a> {
    dev: &'a CudaDevice,
    q: &'a CudaAct,
    cache: &'a CudaKvCache,
    gate: Option<&'a CudaAct>,
    out: &'a CudaAct,
    q_hm: &'a CudaAct,
    o_hm: &'a CudaAct,
    /// Query heads.
    nq: usize,
}

/// The reports of a call's kernels as one: the route of the first, the
/// largest transient bytes.
fn merge(acc: Option<AttentionReport>, rep: AttentionReport) -> AttentionReport {
    match acc {
        None => rep,
        Some(c) => AttentionReport {
            transient_bytes: c.transient_bytes.max(rep.transient_bytes),
            ..c
        },
    }
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
    let nq = check(q, cache, batch, gate)?;
    let out = new_act(dev, op, q.rows, q.cols, Dtype::Bf16)?;
    let one_launch = route == RouteRequest::Fused && fused_impl(&dev.arch) == FusedImpl::Wgmma;
    let longest = staging_rows(batch, one_launch);
    let q_hm = new_act(dev, op, longest, q.cols, Dtype::Bf16)?;
    let o_hm = new_act(dev, op, longest, q.cols, Dtype::Bf16)?;
    let call = Call {
        dev,
        q,
        cache,
        gate,
        out: &out,
        q_hm: &q_hm,
        o_hm: &o_hm,
        nq,
    };
    let mut report: Option<AttentionReport> = None;
    for i in 0..batch.sequences() {
        let (rows, slot) = (batch.seq_rows(i), batch.slots[i]);
        let rep = if one_launch {
            call.one_launch(rows.start, rows.len(), slot)?
        } else {
            call.per_kv_head(rows.start, rows.len(), slot, route)?
        };
        report = Some(merge(report, rep));
    }
    // The one-launch route writes one-row sequences straight to `out` (no
    // transpose to gate them in): their gate goes on in one launch here.
    let one_row = (0..batch.sequences()).any(|i| batch.seq_len(i) == 1);
    if let (true, true, Some(g)) = (one_launch, one_row, gate) {
        gate_one_row_sequences(dev, &out, g, batch)?;
    }
    let report = report.ok_or_else(|| OpError::Batch("no sequence".into()))?;
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

impl Call<'_> {
    /// Byte offset of token row `row` in the token-major tensors.
    fn row_off(&self, row: usize) -> u64 {
        (row * self.q.cols) as u64 * ES
    }

    /// Token-major rows `[row, row + t)` of `q` to the head-major staging.
    fn stage_q(&self, row: usize, t: usize) -> OpResult<()> {
        let d = self.cache.spec.head_dim;
        // SAFETY: the sequence's rows of q and the staging (longest rows) hold t·nq·d elements.
        unsafe {
            transpose(
                self.dev,
                Way::TokensToHeads,
                self.q.ptr() + self.row_off(row),
                self.q_hm.ptr(),
                None,
                t,
                self.nq,
                d,
            )
        }
    }

    /// The head-major output staging back to token-major rows `[row, row + t)`
    /// of `out`, gated where the call has a gate.
    fn unstage_out(&self, row: usize, t: usize) -> OpResult<()> {
        let d = self.cache.spec.head_dim;
        let gate_at = self.gate.map(|g| g.ptr() + self.row_off(row));
        // SAFETY: the staging, the sequence's rows of out and of the gate hold t·nq·d elements.
        unsafe {
            transpose(
                self.dev,
                Way::HeadsToTokens,
                self.o_hm.ptr(),
                self.out.ptr() + self.row_off(row),
                gate_at,
                t,
                self.nq,
                d,
            )
        }
    }

    /// One sequence (rows `[row, row + t)`, cache slot `slot`) on the wgmma
    /// kernel: every head of the slot in one launch.
    fn one_launch(&self, row: usize, t: usize, slot: usize) -> OpResult<AttentionReport> {
        let spec = self.cache.spec;
        // A one-row sequence: token-major [1][heads][d] is head-major.
        let (q_in, o_at) = if t == 1 {
            (
                self.q.ptr() + self.row_off(row),
                self.out.ptr() + self.row_off(row),
            )
        } else {
            self.stage_q(row, t)?;
            (self.q_hm.ptr(), self.o_hm.ptr())
        };
        let shape = AttentionShape {
            q_len: t,
            kv_len: self.cache.lens[slot],
            q_heads: self.nq,
            kv_heads: spec.kv_heads,
            head_dim: spec.head_dim,
            scale: None,
        };
        let kv_off = (slot * spec.kv_heads * self.cache.head_elems()) as u64 * ES;
        let bufs = RawBuffers {
            q: q_in,
            k: self.cache.k.ptr() + kv_off,
            v: self.cache.v.ptr() + kv_off,
            out: o_at,
        };
        let stride = self.cache.head_elems();
        // SAFETY: q/out address t·nq·d elements (the sequence's rows or the
        // head-major staging); k/v the slot's kv_heads rows of `capacity`,
        // kv_len <= capacity, so the last head ends inside the slot.
        let rep = unsafe { fused_strided_raw(self.dev, &shape, Dtype::Bf16, &bufs, stride) }
            .map_err(dev_err)?;
        if t > 1 {
            self.unstage_out(row, t)?;
        }
        Ok(rep)
    }

    /// One sequence as one `prefill_raw` call per KV head with its query
    /// group, on the route asked for.
    fn per_kv_head(
        &self,
        row: usize,
        t: usize,
        slot: usize,
        route: RouteRequest,
    ) -> OpResult<AttentionReport> {
        let spec = self.cache.spec;
        let d = spec.head_dim;
        let group = self.nq / spec.kv_heads;
        self.stage_q(row, t)?;
        let shape = AttentionShape {
            q_len: t,
            kv_len: self.cache.lens[slot],
            q_heads: group,
            kv_heads: 1,
            head_dim: d,
            scale: None,
        };
        let mut report = None;
        for h in 0..spec.kv_heads {
            let kv_off = ((slot * spec.kv_heads + h) * self.cache.head_elems()) as u64 * ES;
            let q_off = (h * group * t * d) as u64 * ES;
            let bufs = RawBuffers {
                q: self.q_hm.ptr() + q_off,
                k: self.cache.k.ptr() + kv_off,
                v: self.cache.v.ptr() + kv_off,
                out: self.o_hm.ptr() + q_off,
            };
            // SAFETY: q/out ranges are this group's `group·t·d` elements of the
            // head-major buffers; k/v the slot's head rows, kv_len <= capacity.
            let rep = unsafe { prefill_raw(self.dev, &shape, Dtype::Bf16, route, &bufs) }
                .map_err(dev_err)?;
            report = Some(merge(report, rep));
        }
        self.unstage_out(row, t)?;
        report.ok_or_else(|| OpError::shape("attention", "no kv heads"))
    }
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
    g: &CudaAct,
    batch: &Batch,
) -> OpResult<()> {
    let op = "attention";
    let rows: Vec<i32> = (0..batch.sequences())
        .filter(|&i| batch.seq_len(i) == 1)
        .map(|i| int(op, "row", batch.cu_seqlens[i]))
        .collect::<OpResult<_>>()?;
    if rows.len() == out.rows {
        // SAFETY: out and the gate (same shape, checked) hold its elements.
        return unsafe { mul_sigmoid_raw(dev, out.ptr(), g.ptr(), out.elems()) };
    }
    mul_sigmoid_rows(dev, out, g, &rows)
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
