//! Attention over the KV block pool on the per-sequence kernels (the
//! mma.sync fused kernel, the composed route): the sequences' K/V are
//! gathered out of the pool into a bounded workspace, one gather launch per
//! group of sequences ([`groups`]), then each sequence runs as before:
//! q to head-major, one `prefill_raw` call (fused or composed as requested)
//! per KV head with its query group, the output back to token-major (gated
//! there when the call has a gate). This path loops on the host over the
//! sequences and their KV heads; it never synchronises the device.

use super::{prefill_raw, RawBuffers};
use crate::device::CudaDevice;
use crate::launch::dev_err;
use crate::ops::kv::{gather, gather_bytes, transpose, Way};
use crate::tensor::{new_act, CudaAct, CudaKvCache};
use headroom_core::ops::{Batch, BlockTables, OpError, OpResult};
use headroom_core::{AttentionReport, AttentionShape, Dtype, RouteRequest};
use std::ops::Range;

/// Bytes of bf16 element.
const ES: u64 = 2;
/// The gather workspace holds at most this many bytes (K and V), or one
/// sequence when that alone is larger.
pub(crate) const GATHER_LIMIT_BYTES: usize = 512 << 20;

/// Consecutive groups of sequences whose gathered K/V (`row_bytes` per key
/// row, `kv_lens` rows each) fit `limit` bytes; a sequence larger than the
/// limit is a group of its own.
pub(crate) fn groups(kv_lens: &[usize], row_bytes: usize, limit: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0usize);
    for (i, &len) in kv_lens.iter().enumerate() {
        let b = len.saturating_mul(row_bytes);
        if i > start && bytes.saturating_add(b) > limit {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes = bytes.saturating_add(b);
    }
    if start < kv_lens.len() {
        out.push(start..kv_lens.len());
    }
    out
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

/// What every sequence of a call shares.
struct Call<'a> {
    dev: &'a CudaDevice,
    q: &'a CudaAct,
    gate: Option<&'a CudaAct>,
    out: &'a CudaAct,
    q_hm: &'a CudaAct,
    o_hm: &'a CudaAct,
    nq: usize,
    kv_heads: usize,
    d: usize,
}

/// Runs the gathered route into `out` (token-major like `q`); returns the
/// merged report of the kernels.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    dev: &CudaDevice,
    q: &CudaAct,
    cache: &CudaKvCache,
    batch: &Batch,
    tables: &BlockTables,
    route: RouteRequest,
    gate: Option<&CudaAct>,
    out: &CudaAct,
    nq: usize,
) -> OpResult<AttentionReport> {
    let op = "attention";
    let spec = cache.spec;
    let longest = (0..batch.sequences())
        .map(|i| batch.seq_len(i))
        .max()
        .unwrap_or(0);
    let q_hm = new_act(dev, op, longest, q.cols, Dtype::Bf16)?;
    let o_hm = new_act(dev, op, longest, q.cols, Dtype::Bf16)?;
    let call = Call {
        dev,
        q,
        gate,
        out,
        q_hm: &q_hm,
        o_hm: &o_hm,
        nq,
        kv_heads: spec.kv_heads,
        d: spec.head_dim,
    };
    let kv_lens: Vec<usize> = (0..batch.sequences())
        .map(|i| batch.history[i] + batch.seq_len(i))
        .collect();
    let row_bytes = gather_bytes(spec.kv_heads, spec.head_dim, 1);
    let mut report = None;
    for group in groups(&kv_lens, row_bytes, GATHER_LIMIT_BYTES) {
        let seqs: Vec<usize> = group.clone().collect();
        let g = gather(dev, cache, tables, &seqs, &kv_lens)?;
        for (j, &i) in seqs.iter().enumerate() {
            let rows = batch.seq_rows(i);
            let kv = RawKv {
                k: g.k.ptr() + g.offset(j),
                v: g.v.ptr() + g.offset(j),
                len: kv_lens[i],
            };
            let rep = call.per_kv_head(rows.start, rows.len(), kv, route)?;
            report = Some(merge(report, rep));
        }
    }
    report.ok_or_else(|| OpError::Batch("no sequence".into()))
}

/// One sequence's gathered K and V (`[kv_heads][len][d]` each).
#[derive(Clone, Copy)]
struct RawKv {
    k: u64,
    v: u64,
    len: usize,
}

impl Call<'_> {
    /// Byte offset of token row `row` in the token-major tensors.
    fn row_off(&self, row: usize) -> u64 {
        (row * self.q.cols) as u64 * ES
    }

    /// One sequence (rows `[row, row + t)`) as one `prefill_raw` call per KV
    /// head with its query group, on the route asked for.
    fn per_kv_head(
        &self,
        row: usize,
        t: usize,
        kv: RawKv,
        route: RouteRequest,
    ) -> OpResult<AttentionReport> {
        let d = self.d;
        let group = self.nq / self.kv_heads;
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
            )?;
        }
        let shape = AttentionShape {
            q_len: t,
            kv_len: kv.len,
            q_heads: group,
            kv_heads: 1,
            head_dim: d,
            scale: None,
        };
        let mut report = None;
        for h in 0..self.kv_heads {
            let kv_off = (h * kv.len * d) as u64 * ES;
            let q_off = (h * group * t * d) as u64 * ES;
            let bufs = RawBuffers {
                q: self.q_hm.ptr() + q_off,
                k: kv.k + kv_off,
                v: kv.v + kv_off,
                out: self.o_hm.ptr() + q_off,
            };
            // SAFETY: q/out ranges are this group's `group·t·d` elements of the
            // head-major buffers; k/v this head's `kv_len·d` gathered rows.
            let rep = unsafe { prefill_raw(self.dev, &shape, Dtype::Bf16, route, &bufs) }
                .map_err(dev_err)?;
            report = Some(merge(report, rep));
        }
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
            )?;
        }
        report.ok_or_else(|| OpError::shape("attention", "no kv heads"))
    }
}

#[cfg(test)]
mod tests {
    use super::groups;

    #[test]
    fn groups_fill_the_limit_in_order_and_a_large_sequence_stands_alone() {
        assert_eq!(groups(&[10, 10, 10, 10], 1, 25), vec![0..2, 2..4]);
        assert_eq!(groups(&[10, 100, 10], 1, 25), vec![0..1, 1..2, 2..3]);
        assert_eq!(groups(&[1, 2, 3], 4, 1 << 20), vec![0..3]);
        assert!(groups(&[], 4, 10).is_empty());
        // Sizes saturate instead of overflowing.
        assert_eq!(groups(&[usize::MAX, 1], usize::MAX, 10), vec![0..1, 1..2]);
    }
}
