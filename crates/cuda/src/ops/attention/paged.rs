//! Attention of every sequence of a batch over the KV block pool in one
//! launch on Hopper (`attention_paged.cu`), plus one split combine when the
//! keys are split. The host lists the work items (one per 64-row tile of a
//! sequence's query rows and query head, or of its whole GQA group when the
//! chunk is shorter than a tile), longest first with the thin decode tiles
//! spread among the full ones ([`ItemOrder`]), and picks one split count
//! for the launch ([`paged_plan`]); the kernel reads Q and writes O
//! token-major, reads K/V tiles through the block tables, and applies the
//! gate in its epilogue (or the combine's). No host loop over sequences
//! launches anything and nothing synchronises the device.

use super::fused::{
    splits_for, wgmma_smem_bytes, COMBINE_QUADS, COMBINE_THREADS, WGMMA_CTAS_PER_SM, WGMMA_THREADS,
};
use super::{MAX_SPLITS, WGMMA_BLOCK_M};
use crate::device::CudaDevice;
use crate::launch::{dev_err, grid_dim, int, mul, GRID_X, GRID_YZ};
use crate::ops::kv::table_words;
use headroom_core::ops::{BlockTables, OpError, OpResult, KV_BLOCK_ROWS};
use headroom_core::{AttentionReport, Dtype};
use std::ffi::c_void;

const LOG2_E: f32 = std::f32::consts::LOG2_E;

/// The paged kernel for `head_dim` and `dtype`, if one is compiled.
pub fn paged_entry(head_dim: usize, dtype: Dtype) -> Option<&'static str> {
    Some(match (head_dim, dtype) {
        (256, Dtype::Bf16) => "attn_paged_wgmma_d256_bf16",
        (256, Dtype::F16) => "attn_paged_wgmma_d256_f16",
        (128, Dtype::Bf16) => "attn_paged_wgmma_d128_bf16",
        (128, Dtype::F16) => "attn_paged_wgmma_d128_f16",
        (64, Dtype::Bf16) => "attn_paged_wgmma_d64_bf16",
        (64, Dtype::F16) => "attn_paged_wgmma_d64_f16",
        _ => return None,
    })
}

/// Which kernel combines a split launch's partials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CombineForm {
    /// `attn_paged_combine_*`: a CTA per (row, 64 columns), the splits shared
    /// by its threads: for few rows over many splits (a decode row over long keys).
    Quads,
    /// `attn_paged_combine_rows_*`: a warp per row summing its splits one by
    /// one: for many rows over few splits (a chunk of rows after long history).
    Rows,
}

/// Most splits [`CombineForm::Rows`] is chosen for.
pub const ROWS_COMBINE_MAX_SPLITS: usize = 8;
/// Output rows per CTA of the rows combine (`COMBINE_ROW_WARPS`).
const COMBINE_ROW_WARPS: usize = 8;

/// The combine a launch of `splits` runs: rows for at most
/// [`ROWS_COMBINE_MAX_SPLITS`], else quads.
pub fn combine_form(splits: usize) -> CombineForm {
    if splits <= ROWS_COMBINE_MAX_SPLITS {
        CombineForm::Rows
    } else {
        CombineForm::Quads
    }
}

fn combine_entry(form: CombineForm, head_dim: usize, dtype: Dtype) -> Option<&'static str> {
    Some(match (form, head_dim, dtype) {
        (CombineForm::Quads, _, Dtype::Bf16) => "attn_paged_combine_bf16",
        (CombineForm::Quads, _, Dtype::F16) => "attn_paged_combine_f16",
        (CombineForm::Rows, 256, Dtype::Bf16) => "attn_paged_combine_rows_d256_bf16",
        (CombineForm::Rows, 256, Dtype::F16) => "attn_paged_combine_rows_d256_f16",
        (CombineForm::Rows, 128, Dtype::Bf16) => "attn_paged_combine_rows_d128_bf16",
        (CombineForm::Rows, 128, Dtype::F16) => "attn_paged_combine_rows_d128_f16",
        (CombineForm::Rows, 64, Dtype::Bf16) => "attn_paged_combine_rows_d64_bf16",
        (CombineForm::Rows, 64, Dtype::F16) => "attn_paged_combine_rows_d64_f16",
        _ => return None,
    })
}

/// One CTA row of the launch (for every KV head and split): a 64-row tile
/// of a sequence's virtual rows — `heads` query heads of a KV head's group
/// stacked, each the sequence's `q_len` rows, from query head `first_head`
/// of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkItem {
    pub seq: usize,
    pub first_head: usize,
    pub heads: usize,
    pub m0: usize,
    /// Valid virtual rows of the tile (64 but for a sequence's last tile).
    pub rows: usize,
    /// Key tiles the tile's rows see (its causal limit).
    pub key_tiles: usize,
}

/// The order of a launch's work items (CTAs start in grid order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ItemOrder {
    /// Longest first (key tiles seen), so the short items fill the tail
    /// (the baseline the timing test compares with).
    LongestFirst,
    /// Longest first within each kind, the thin items (at most a quarter of
    /// the tile's rows valid: packed decode rows, whose CTAs wait on K/V
    /// loads) spread evenly over the first three quarters of the full ones,
    /// so an SM's two CTAs are more often one of each kind:
    /// W1's mixed step (8 × 1,024 prompt rows + 345 decode rows) 449.4 →
    /// 413.6 µs a layer (docs/perf/cuda-paged-attention.md, session 15).
    #[default]
    Mixed,
}

/// Whether an item of `rows` valid rows counts as thin for [`ItemOrder::Mixed`].
fn is_thin(rows: usize) -> bool {
    rows * 4 <= WGMMA_BLOCK_M
}

/// `items` (longest first) reordered as `order` says.
fn order_items(items: Vec<WorkItem>, order: ItemOrder) -> Vec<WorkItem> {
    if order == ItemOrder::LongestFirst {
        return items;
    }
    let (thin, full): (Vec<WorkItem>, Vec<WorkItem>) =
        items.into_iter().partition(|i| is_thin(i.rows));
    if thin.is_empty() || full.is_empty() {
        return if thin.is_empty() { full } else { thin };
    }
    // Before full item f, thin items up to ceil((f + 1) · T / span).
    let span = (full.len() * 3 / 4).max(1);
    let mut out = Vec::with_capacity(thin.len() + full.len());
    let mut thin = thin.into_iter().peekable();
    let total = thin.len();
    let mut emitted = 0;
    for (f, item) in full.into_iter().enumerate() {
        let target = ((f + 1) * total).div_ceil(span).min(total);
        while emitted < target {
            out.extend(thin.next());
            emitted += 1;
        }
        out.push(item);
    }
    out.extend(thin);
    out
}

/// What one launch runs: its work items (in [`ItemOrder::default`]) and key splits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagedPlan {
    pub items: Vec<WorkItem>,
    pub splits: usize,
}

/// Key tiles seen by virtual rows `[m0, m0 + 64)` (of `vrows`) of a
/// sequence of `q_len` rows after `kv_len - q_len` of history (the kernel's
/// causal limit).
fn key_tiles(m0: usize, vrows: usize, q_len: usize, kv_len: usize) -> usize {
    let last = (m0 + WGMMA_BLOCK_M).min(vrows) - 1;
    let history = kv_len - q_len;
    let last_pos = if m0 / q_len != last / q_len {
        history + q_len - 1
    } else {
        history + last % q_len
    };
    kv_len.min(last_pos + 1).div_ceil(KV_BLOCK_ROWS)
}

/// The launch of sequences of `q_lens` query rows holding `kv_lens` keys
/// (history + new rows) with `q_heads` over `kv_heads`, on a GPU of
/// `sm_count` SMs: a chunk shorter than a tile packs its GQA group into the
/// tile's rows, longer ones get one item per query head and tile; items run
/// in `order`; the splits fill one wave as [`splits_for`] decides for the
/// longest item (`forced`: that many, clamped to `1..=MAX_SPLITS`).
pub fn paged_plan(
    q_lens: &[usize],
    kv_lens: &[usize],
    q_heads: usize,
    kv_heads: usize,
    sm_count: usize,
    forced: Option<usize>,
    order: ItemOrder,
) -> PagedPlan {
    let group = (q_heads / kv_heads.max(1)).max(1);
    let mut items = Vec::new();
    for (seq, (&t, &kv)) in q_lens.iter().zip(kv_lens).enumerate() {
        if t == 0 {
            continue;
        }
        let packed = group > 1 && t < WGMMA_BLOCK_M;
        let (heads, firsts) = if packed { (group, 1) } else { (1, group) };
        let vrows = heads * t;
        for first_head in 0..firsts {
            for m0 in (0..vrows).step_by(WGMMA_BLOCK_M) {
                items.push(WorkItem {
                    seq,
                    first_head,
                    heads,
                    m0,
                    rows: (vrows - m0).min(WGMMA_BLOCK_M),
                    key_tiles: key_tiles(m0, vrows, t, kv),
                });
            }
        }
    }
    items.sort_by_key(|i| std::cmp::Reverse(i.key_tiles));
    let longest = items.first().map_or(0, |i| i.key_tiles);
    let items = order_items(items, order);
    let splits = match forced {
        Some(s) => s.clamp(1, MAX_SPLITS),
        None => splits_for(
            items.len().saturating_mul(kv_heads),
            longest,
            sm_count.saturating_mul(WGMMA_CTAS_PER_SM),
        ),
    };
    PagedPlan { items, splits }
}

/// Device addresses of a paged call: token-major `q`, `out` (and `gate`)
/// `[rows][q_heads][head_dim]`, the pool's `k` and `v`
/// `[blocks][kv_heads][64][head_dim]`, all of the call's dtype.
#[derive(Debug, Clone, Copy)]
pub struct PagedBuffers {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub out: u64,
    pub gate: Option<u64>,
}

/// A paged call's batch: each sequence's query rows (`cu_seqlens`,
/// prefix sums) and keys held (history + new rows), its block table, and
/// the heads.
#[derive(Debug, Clone, Copy)]
pub struct PagedShape<'a> {
    pub cu_seqlens: &'a [usize],
    pub kv_lens: &'a [usize],
    pub tables: &'a BlockTables,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl PagedShape<'_> {
    /// Checks the shape's own consistency (not the buffers): one kv length
    /// and one table per sequence, each sequence's keys at least its rows
    /// and covered by its table, integer GQA, a compiled head dim.
    fn check(&self, dtype: Dtype) -> OpResult<usize> {
        let op = "attention";
        let n = self.kv_lens.len();
        let bad = |why: String| Err(OpError::shape(op, why));
        if self.cu_seqlens.len() != n + 1 || self.tables.sequences() != n || n == 0 {
            return bad(format!(
                "{} cu_seqlens, {} kv lengths, {} tables",
                self.cu_seqlens.len(),
                n,
                self.tables.sequences()
            ));
        }
        if self.kv_heads == 0 || !self.q_heads.is_multiple_of(self.kv_heads) {
            return bad(format!(
                "{} q heads over {} kv heads",
                self.q_heads, self.kv_heads
            ));
        }
        if paged_entry(self.head_dim, dtype).is_none() {
            return bad(format!(
                "no paged kernel for head dim {} {dtype:?}",
                self.head_dim
            ));
        }
        for i in 0..n {
            let t = self.cu_seqlens[i + 1]
                .checked_sub(self.cu_seqlens[i])
                .ok_or_else(|| OpError::shape(op, "cu_seqlens must not decrease"))?;
            let kv = self.kv_lens[i];
            if kv < t || self.tables.table(i).len() * KV_BLOCK_ROWS < kv {
                return bad(format!(
                    "sequence {i}: {t} rows, {kv} keys, a table of {} blocks",
                    self.tables.table(i).len()
                ));
            }
        }
        Ok(n)
    }
}

/// What a paged call ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagedRun {
    pub report: AttentionReport,
    pub splits: usize,
    pub items: usize,
    /// The combine that ran (`None`: one split, no combine).
    pub combine: Option<CombineForm>,
}

fn param<T>(v: &mut T) -> *mut c_void {
    v as *mut T as *mut c_void
}

/// Runs the paged kernel (and the combine when split) on the stream.
///
/// # Safety
/// `bufs.q`, `bufs.out` (and `bufs.gate`) must address `rows × q_heads ×
/// head_dim` elements of `dtype` (rows = the last of `cu_seqlens`), `k` and
/// `v` a pool holding every block the tables name; all live device memory
/// of `dev` until the queued work has run.
pub unsafe fn paged_raw(
    dev: &CudaDevice,
    dtype: Dtype,
    shape: &PagedShape<'_>,
    bufs: &PagedBuffers,
    splits: Option<usize>,
) -> OpResult<PagedRun> {
    // SAFETY: the caller's promise, passed on.
    unsafe { paged_raw_with(dev, dtype, shape, bufs, splits, None) }
}

/// [`paged_raw`] with the combine of a split launch forced (`None`: [`combine_form`]).
///
/// # Safety
/// As [`paged_raw`].
pub unsafe fn paged_raw_with(
    dev: &CudaDevice,
    dtype: Dtype,
    shape: &PagedShape<'_>,
    bufs: &PagedBuffers,
    splits: Option<usize>,
    combine: Option<CombineForm>,
) -> OpResult<PagedRun> {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        paged_raw_ordered(
            dev,
            dtype,
            shape,
            bufs,
            splits,
            combine,
            ItemOrder::default(),
        )
    }
}

/// [`paged_raw_with`] with the work items in `order`.
///
/// # Safety
/// As [`paged_raw`].
pub unsafe fn paged_raw_ordered(
    dev: &CudaDevice,
    dtype: Dtype,
    shape: &PagedShape<'_>,
    bufs: &PagedBuffers,
    splits: Option<usize>,
    combine: Option<CombineForm>,
    order: ItemOrder,
) -> OpResult<PagedRun> {
    let op = "attention";
    let n = shape.check(dtype)?;
    let Some(entry) = paged_entry(shape.head_dim, dtype) else {
        return Err(OpError::shape(op, "no paged kernel"));
    };
    // The epilogue stores 16-byte chunks of out and loads the gate's.
    if !bufs.out.is_multiple_of(16) || bufs.gate.is_some_and(|g| !g.is_multiple_of(16)) {
        return Err(OpError::shape(
            op,
            "the output and gate must start on 16-byte boundaries",
        ));
    }
    let q_lens: Vec<usize> = shape.cu_seqlens.windows(2).map(|w| w[1] - w[0]).collect();
    let plan = paged_plan(
        &q_lens,
        shape.kv_lens,
        shape.q_heads,
        shape.kv_heads,
        dev.sm_count,
        splits,
        order,
    );
    if plan.items.is_empty() {
        return Err(OpError::Batch("no query rows".into()));
    }
    let form = (plan.splits > 1).then(|| combine.unwrap_or(combine_form(plan.splits)));
    let combine_fn = match form {
        None => None,
        Some(f) => match combine_entry(f, shape.head_dim, dtype) {
            Some(e) => Some((f, e)),
            None => return Err(OpError::shape(op, "no paged combine kernel")),
        },
    };
    let mut words = Vec::with_capacity(4 * plan.items.len());
    for it in &plan.items {
        for v in [it.seq, it.first_head, it.heads, it.m0] {
            words.push(int(op, "work item", v)?);
        }
    }
    let mut seq = Vec::with_capacity(2 * n + 1);
    for &c in shape.cu_seqlens {
        seq.push(int(op, "row", c)?);
    }
    for &kv in shape.kv_lens {
        seq.push(int(op, "kv length", kv)?);
    }
    let rows = shape.cu_seqlens[n];
    let out_rows = mul(op, rows, shape.q_heads)?;
    int(op, "output rows", out_rows)?;
    let items_dev = crate::launch::upload(dev, &words)?;
    let seq_dev = crate::launch::upload(dev, &seq)?;
    let bt_dev = crate::launch::upload(dev, &table_words(op, shape.tables)?)?;
    dev.bind().map_err(dev_err)?;
    let alloc = dev.allocator();
    let before = alloc.stats().active;
    alloc.reset_peak();
    let d = shape.head_dim;
    let parts = if plan.splits > 1 {
        let prow = mul(op, plan.splits, out_rows)?;
        Some((
            crate::launch::alloc(dev, mul(op, mul(op, prow, d)?, 4)?)?,
            crate::launch::alloc(dev, mul(op, prow, 4)?)?,
        ))
    } else {
        None
    };
    let f = dev.function(entry).map_err(dev_err)?;
    let smem = wgmma_smem_bytes(d);
    dev.set_dynamic_smem(f, smem).map_err(dev_err)?;
    let (mut q, mut k, mut v, mut o) = (bufs.q, bufs.k, bufs.v, bufs.out);
    let mut gate = bufs.gate.unwrap_or(0);
    let (mut it, mut sq, mut bt) = (items_dev.ptr(), seq_dev.ptr(), bt_dev.ptr());
    let mut nn = int(op, "sequences", n)?;
    let mut qh = int(op, "q heads", shape.q_heads)?;
    let mut kvh = int(op, "kv heads", shape.kv_heads)?;
    let mut scale = (d as f32).sqrt().recip() * LOG2_E;
    let mut sp = plan.splits as i32;
    let mut po = parts.as_ref().map_or(0, |p| p.0.ptr());
    let mut pl = parts.as_ref().map_or(0, |p| p.1.ptr());
    let mut params: [*mut c_void; 15] = [
        param(&mut q),
        param(&mut k),
        param(&mut v),
        param(&mut o),
        param(&mut gate),
        param(&mut it),
        param(&mut sq),
        param(&mut bt),
        param(&mut nn),
        param(&mut qh),
        param(&mut kvh),
        param(&mut scale),
        param(&mut sp),
        param(&mut po),
        param(&mut pl),
    ];
    let grid = (
        grid_dim(op, plan.items.len(), GRID_X)?,
        grid_dim(op, shape.kv_heads, GRID_YZ)?,
        grid_dim(op, plan.splits, GRID_YZ)?,
    );
    // SAFETY: the caller promises the buffers; the tables were checked to
    // cover every sequence's keys; the partials hold splits × rows × q_heads
    // rows; params match the kernel signature.
    unsafe { dev.launch(f, grid, (WGMMA_THREADS, 1, 1), smem, &mut params) }.map_err(dev_err)?;
    if let (Some((part_o, part_lse)), Some((form, centry))) = (&parts, combine_fn) {
        combine_launch(
            dev,
            form,
            centry,
            (part_o.ptr(), part_lse.ptr()),
            (bufs.out, gate),
            out_rows,
            d,
            plan.splits,
        )?;
    }
    Ok(PagedRun {
        report: AttentionReport {
            route: headroom_core::Route::Fused,
            query_block: None,
            transient_bytes: alloc.stats().peak.saturating_sub(before),
        },
        splits: plan.splits,
        items: plan.items.len(),
        combine: form,
    })
}

/// Launches the split combine `entry` of `form` over `(part_o, part_lse)`
/// into `(out, gate)` (gate 0: none) for `rows` output rows of `d`.
#[allow(clippy::too_many_arguments)]
fn combine_launch(
    dev: &CudaDevice,
    form: CombineForm,
    entry: &'static str,
    (mut po, mut pl): (u64, u64),
    (mut o, mut g): (u64, u64),
    rows: usize,
    d: usize,
    splits: usize,
) -> OpResult<()> {
    let op = "attention";
    let cf = dev.function(entry).map_err(dev_err)?;
    let mut r = int(op, "output rows", rows)?;
    let mut dd = int(op, "head dim", d)?;
    let mut sp = int(op, "splits", splits)?;
    match form {
        CombineForm::Quads => {
            let mut params: [*mut c_void; 7] = [
                param(&mut po),
                param(&mut pl),
                param(&mut o),
                param(&mut g),
                param(&mut r),
                param(&mut dd),
                param(&mut sp),
            ];
            let grid = (
                grid_dim(op, rows, GRID_X)?,
                (d / (4 * COMBINE_QUADS)) as u32,
                1,
            );
            // SAFETY: the partials hold splits × rows rows of d; out and the
            // gate rows × d; d / 64 column blocks cover d (d ∈ {64, 128, 256}).
            unsafe { dev.launch(cf, grid, (COMBINE_THREADS, 1, 1), 0, &mut params) }
                .map_err(dev_err)
        }
        CombineForm::Rows => {
            let mut params: [*mut c_void; 6] = [
                param(&mut po),
                param(&mut pl),
                param(&mut o),
                param(&mut g),
                param(&mut r),
                param(&mut sp),
            ];
            let grid = (
                grid_dim(op, rows.div_ceil(COMBINE_ROW_WARPS), GRID_X)?,
                1,
                1,
            );
            let threads = (COMBINE_ROW_WARPS * 32) as u32;
            // SAFETY: as above; the entry's head dim is d, a warp per row
            // (rows past `rows` return at once).
            unsafe { dev.launch(cf, grid, (threads, 1, 1), 0, &mut params) }.map_err(dev_err)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::sources::ATTENTION_PAGED;
    use super::*;
    use crate::kernels::source_constant;

    #[test]
    fn the_block_is_the_kernels_key_tile() {
        let s = ATTENTION_PAGED.source;
        assert_eq!(source_constant(s, "KV_ROWS"), KV_BLOCK_ROWS);
        assert_eq!(source_constant(s, "BLOCK_N"), KV_BLOCK_ROWS);
        assert_eq!(source_constant(s, "WG_ROWS"), WGMMA_BLOCK_M);
        assert_eq!(source_constant(s, "COMBINE_ROW_WARPS"), COMBINE_ROW_WARPS);
    }

    #[test]
    fn few_splits_combine_by_rows_and_many_by_quads_for_every_compiled_kernel() {
        assert_eq!(combine_form(2), CombineForm::Rows);
        assert_eq!(combine_form(ROWS_COMBINE_MAX_SPLITS), CombineForm::Rows);
        assert_eq!(
            combine_form(ROWS_COMBINE_MAX_SPLITS + 1),
            CombineForm::Quads
        );
        assert_eq!(combine_form(MAX_SPLITS), CombineForm::Quads);
        let entries = ATTENTION_PAGED.entry_points;
        for d in [64, 128, 256] {
            for dtype in [Dtype::Bf16, Dtype::F16] {
                for form in [CombineForm::Rows, CombineForm::Quads] {
                    let e = combine_entry(form, d, dtype).unwrap();
                    assert!(entries.contains(&e), "{e}");
                }
            }
        }
        assert_eq!(combine_entry(CombineForm::Rows, 96, Dtype::Bf16), None);
        assert_eq!(combine_entry(CombineForm::Quads, 256, Dtype::F32), None);
        // The 256-row follow-up over 32k of history: 4 splits, combined by rows.
        let p = paged_plan(&[256], &[33_024], 16, 2, 132, None, ItemOrder::default());
        assert_eq!((p.items.len(), p.splits), (32, 4));
        assert_eq!(combine_form(p.splits), CombineForm::Rows);
    }

    #[test]
    fn decode_rows_pack_their_group_and_chunks_get_an_item_per_head_and_tile() {
        // GQA 16/2: two decode rows, a 100-row chunk after 1,000, a fresh 64-row prompt.
        let p = paged_plan(
            &[1, 1, 100, 64],
            &[4097, 10, 1100, 64],
            16,
            2,
            132,
            None,
            ItemOrder::LongestFirst,
        );
        let per_seq = |s| p.items.iter().filter(|i| i.seq == s).count();
        assert_eq!((per_seq(0), per_seq(1)), (1, 1), "decode: one packed tile");
        let d = p.items.iter().find(|i| i.seq == 0).unwrap();
        assert_eq!((d.heads, d.first_head, d.m0), (8, 0, 0));
        assert_eq!(d.key_tiles, 4097usize.div_ceil(64));
        assert_eq!(per_seq(2), 8 * 2, "8 query heads × 2 tiles");
        assert_eq!(per_seq(3), 8, "a 64-row chunk is one tile a head");
        assert!(p.items.iter().filter(|i| i.seq >= 2).all(|i| i.heads == 1));
        // Longest first.
        assert!(p.items.windows(2).all(|w| w[0].key_tiles >= w[1].key_tiles));
        assert_eq!(p.items[0].seq, 0);
        // The chunk's first tile sees history + 64 keys, its second all.
        let first = p.items.iter().find(|i| i.seq == 2 && i.m0 == 0).unwrap();
        assert_eq!(first.key_tiles, 1064usize.div_ceil(64));
        let second = p.items.iter().find(|i| i.seq == 2 && i.m0 == 64).unwrap();
        assert_eq!(second.key_tiles, 1100usize.div_ceil(64));
    }

    #[test]
    fn the_mixed_order_spreads_decode_items_over_the_first_three_quarters() {
        // W1's mixed step: 8 fresh prompts of 1,024 and 40 decode rows after ~1.1k.
        let mut q = vec![1024; 8];
        let mut kv = vec![1024; 8];
        q.extend([1; 40]);
        kv.extend((0..40).map(|i| 1025 + 3 * i));
        let longest = paged_plan(&q, &kv, 16, 2, 132, None, ItemOrder::LongestFirst);
        let mixed = paged_plan(&q, &kv, 16, 2, 132, None, ItemOrder::Mixed);
        assert_eq!(longest.splits, mixed.splits);
        // The same items, a permutation.
        let key = |i: &WorkItem| (i.seq, i.first_head, i.m0);
        let mut a: Vec<_> = longest.items.iter().map(key).collect();
        let mut b: Vec<_> = mixed.items.iter().map(key).collect();
        assert_ne!(a, b);
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
        // Decode items are thin (8 of 64 rows), prompt tiles full.
        let thin: Vec<usize> = (0..mixed.items.len())
            .filter(|&p| is_thin(mixed.items[p].rows))
            .collect();
        assert_eq!(thin.len(), 40);
        assert!(mixed.items.iter().all(|i| is_thin(i.rows) == (i.seq >= 8)));
        // A thin item first; 1,024 full items → one thin every ≈ 19; the last
        // thin one before three quarters of the full ones have started.
        assert_eq!(thin[0], 0);
        assert!(thin.windows(2).all(|w| (17..=21).contains(&(w[1] - w[0]))));
        assert!(*thin.last().unwrap() <= 1024 * 3 / 4 + 40);
        // Each kind stays longest first.
        for kind in [true, false] {
            let tiles: Vec<usize> = mixed
                .items
                .iter()
                .filter(|i| is_thin(i.rows) == kind)
                .map(|i| i.key_tiles)
                .collect();
            assert!(tiles.windows(2).all(|w| w[0] >= w[1]));
        }
        // One kind alone keeps its longest-first order.
        let decode_only = paged_plan(
            &[1; 5],
            &[100, 900, 300, 2000, 64],
            16,
            2,
            132,
            Some(1),
            ItemOrder::LongestFirst,
        );
        assert_eq!(
            decode_only,
            paged_plan(
                &[1; 5],
                &[100, 900, 300, 2000, 64],
                16,
                2,
                132,
                Some(1),
                ItemOrder::default()
            )
        );
    }

    #[test]
    fn a_packed_tile_that_wraps_sees_the_last_rows_keys() {
        // 40 rows × group 4 = 160 virtual rows; tile 64..128 covers rows 24..39 and 0..23.
        let p = paged_plan(&[40], &[540], 4, 1, 132, Some(1), ItemOrder::default());
        let wrap = p.items.iter().find(|i| i.m0 == 64).unwrap();
        assert_eq!(wrap.key_tiles, 540usize.div_ceil(64));
        assert_eq!(p.items.len(), 3);
    }

    #[test]
    fn splits_fill_one_wave_for_few_long_sequences_and_none_for_many() {
        // One decode sequence over 32k: 2 CTAs of 264 slots → the most splits.
        let one = paged_plan(&[1], &[32_768], 16, 2, 132, None, ItemOrder::default());
        assert_eq!(one.splits, MAX_SPLITS);
        // 2k keys: each split keeps at least MIN_SPLIT_TILES tiles.
        let short = paged_plan(&[1], &[2048], 16, 2, 132, None, ItemOrder::default());
        assert_eq!(short.splits, 32 / super::super::fused::MIN_SPLIT_TILES);
        // 256 decode sequences already fill the GPU.
        let many = paged_plan(
            &[1; 256],
            &[4096; 256],
            16,
            2,
            132,
            None,
            ItemOrder::default(),
        );
        assert_eq!((many.items.len(), many.splits), (256, 1));
        // Short keys are never split; forced splits are clamped.
        assert_eq!(
            paged_plan(&[1], &[300], 16, 2, 132, None, ItemOrder::default()).splits,
            1
        );
        assert_eq!(
            paged_plan(&[1], &[300], 16, 2, 132, Some(0), ItemOrder::default()).splits,
            1
        );
        assert_eq!(
            paged_plan(&[1], &[300], 16, 2, 132, Some(9999), ItemOrder::default()).splits,
            MAX_SPLITS
        );
    }

    #[test]
    fn the_shape_check_refuses_short_tables_and_bad_heads() {
        let tables = BlockTables::from_tables(&[vec![3u32], vec![0, 1]]);
        let ok = PagedShape {
            cu_seqlens: &[0, 1, 11],
            kv_lens: &[64, 70],
            tables: &tables,
            q_heads: 4,
            kv_heads: 2,
            head_dim: 128,
        };
        assert_eq!(ok.check(Dtype::Bf16).unwrap(), 2);
        let short = PagedShape {
            kv_lens: &[65, 70],
            ..ok
        };
        assert!(short.check(Dtype::Bf16).is_err());
        let fewer_keys_than_rows = PagedShape {
            kv_lens: &[64, 9],
            ..ok
        };
        assert!(fewer_keys_than_rows.check(Dtype::Bf16).is_err());
        let heads = PagedShape { q_heads: 5, ..ok };
        assert!(heads.check(Dtype::Bf16).is_err());
        let dim = PagedShape { head_dim: 96, ..ok };
        assert!(dim.check(Dtype::F16).is_err());
        assert!(ok.check(Dtype::F32).is_err());
    }
}
