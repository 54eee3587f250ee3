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

use super::fused::{wgmma_smem_bytes, COMBINE_QUADS, COMBINE_THREADS, WGMMA_THREADS};
use super::paged_plan::{paged_plan, ItemOrder, PagedPlan};
use super::WGMMA_BLOCK_M;
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

/// Which paged kernel runs a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PagedKernel {
    /// `attn_paged_wgmma_*`: one warpgroup a CTA, one item (a query head's
    /// 64-row tile, or a short chunk's packed group) each; every launch.
    Heads,
    /// `attn_paged_pairs_d256_*`: two query heads of a KV group a CTA,
    /// sharing the key tiles a producer warpgroup streams; head dim 256,
    /// launches of whole-head items without key splits (long prompts).
    Pairs,
}

/// The pairs kernel for `head_dim` and `dtype`, if one is compiled.
pub fn pairs_entry(head_dim: usize, dtype: Dtype) -> Option<&'static str> {
    Some(match (head_dim, dtype) {
        (256, Dtype::Bf16) => "attn_paged_pairs_d256_bf16",
        (256, Dtype::F16) => "attn_paged_pairs_d256_f16",
        _ => return None,
    })
}

/// Threads of a pairs CTA: a producer and two MMA warpgroups.
const PAIRS_THREADS: u32 = 384;

/// Dynamic shared memory of a pairs CTA (`PairSmem<D>::BYTES`): two Q tiles,
/// a ring of two stages of K and V (64 rows of `head_dim` each), eight
/// mbarriers and the 1024-byte alignment.
pub fn pairs_smem_bytes(head_dim: usize) -> usize {
    let tile = WGMMA_BLOCK_M * head_dim * 2;
    2 * tile + 2 * 2 * tile + 4 * 2 * 8 + 1024
}

/// Whether the pairs kernel can run `plan`: a compiled head dim, no key
/// splits, an even GQA group and every item one query head's tile.
fn pairs_fit(plan: &PagedPlan, shape: &PagedShape<'_>, dtype: Dtype) -> bool {
    let group = shape.q_heads / shape.kv_heads;
    pairs_entry(shape.head_dim, dtype).is_some()
        && plan.splits == 1
        && group.is_multiple_of(2)
        && plan.items.iter().all(|i| i.heads == 1)
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
    /// The kernel that ran.
    pub kernel: PagedKernel,
}

/// The paged kernels' parameters by value, in their signatures' order: the
/// pointers (q, k, v, out, gate, items, sequences, block tables), the
/// sequences and head counts, the softmax scale, then the heads kernel's
/// split count and partials (the pairs kernel takes the first
/// [`PAIRS_PARAMS`]).
struct LaunchArgs {
    ptrs: [u64; 8],
    ints: [i32; 3],
    scale: f32,
    splits: i32,
    parts: [u64; 2],
}

/// Parameters of the heads kernel, and of the pairs kernel (all but the
/// split count and the partials).
const LAUNCH_PARAMS: usize = 15;
const PAIRS_PARAMS: usize = 12;

impl LaunchArgs {
    /// Pointers to each value, as the driver takes them (valid while `self` is).
    fn params(&mut self) -> [*mut c_void; LAUNCH_PARAMS] {
        let [p0, p1, p2, p3, p4, p5, p6, p7] = &mut self.ptrs;
        let [i0, i1, i2] = &mut self.ints;
        let [o0, o1] = &mut self.parts;
        [
            param(p0),
            param(p1),
            param(p2),
            param(p3),
            param(p4),
            param(p5),
            param(p6),
            param(p7),
            param(i0),
            param(i1),
            param(i2),
            param(&mut self.scale),
            param(&mut self.splits),
            param(o0),
            param(o1),
        ]
    }
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
    let opts = PagedOptions {
        splits,
        ..PagedOptions::default()
    };
    // SAFETY: the caller's promise, passed on.
    unsafe { paged_raw_with(dev, dtype, shape, bufs, opts) }
}

/// What a caller may force on a paged launch (tests and benches; the
/// engine forces nothing): the key splits (`None`: the plan's), the combine
/// of a split launch (`None`: [`combine_form`]), the items' order and the
/// kernel (`None`: pairs where they fit, else heads; pairs forced where
/// they do not fit is an error).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PagedOptions {
    pub splits: Option<usize>,
    pub combine: Option<CombineForm>,
    pub order: ItemOrder,
    pub kernel: Option<PagedKernel>,
}

/// [`paged_raw`] with `opts`.
///
/// # Safety
/// As [`paged_raw`].
pub unsafe fn paged_raw_with(
    dev: &CudaDevice,
    dtype: Dtype,
    shape: &PagedShape<'_>,
    bufs: &PagedBuffers,
    opts: PagedOptions,
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
        opts.splits,
        opts.order,
    );
    if plan.items.is_empty() {
        return Err(OpError::Batch("no query rows".into()));
    }
    let form = (plan.splits > 1).then(|| opts.combine.unwrap_or(combine_form(plan.splits)));
    let combine_fn = match form {
        None => None,
        Some(f) => match combine_entry(f, shape.head_dim, dtype) {
            Some(e) => Some((f, e)),
            None => return Err(OpError::shape(op, "no paged combine kernel")),
        },
    };
    let fits = pairs_fit(&plan, shape, dtype);
    let kernel = match opts.kernel {
        None if fits => PagedKernel::Pairs,
        None => PagedKernel::Heads,
        Some(PagedKernel::Pairs) if !fits => {
            return Err(OpError::shape(
                op,
                "the pairs kernel takes unsplit launches of one-head items at head dim 256 with an even group",
            ))
        }
        Some(k) => k,
    };
    // A pairs CTA takes an even first head and the next one.
    let items: Vec<_> = plan
        .items
        .iter()
        .filter(|i| kernel == PagedKernel::Heads || i.first_head.is_multiple_of(2))
        .collect();
    let mut words = Vec::with_capacity(4 * items.len());
    for it in &items {
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
    // The kernels' parameters, the heads kernel's last three (the split
    // count and the partials) past the pairs kernel's twelve.
    let mut args = LaunchArgs {
        ptrs: [
            bufs.q,
            bufs.k,
            bufs.v,
            bufs.out,
            bufs.gate.unwrap_or(0),
            items_dev.ptr(),
            seq_dev.ptr(),
            bt_dev.ptr(),
        ],
        ints: [
            int(op, "sequences", n)?,
            int(op, "q heads", shape.q_heads)?,
            int(op, "kv heads", shape.kv_heads)?,
        ],
        scale: (d as f32).sqrt().recip() * LOG2_E,
        splits: int(op, "splits", plan.splits)?,
        parts: [
            parts.as_ref().map_or(0, |p| p.0.ptr()),
            parts.as_ref().map_or(0, |p| p.1.ptr()),
        ],
    };
    // The pairs kernel runs only unsplit launches (pairs_fit): one grid
    // layer, no partials, no combine; it takes the first PAIRS_PARAMS.
    let (kentry, smem, threads, nparams) = match kernel {
        PagedKernel::Heads => (entry, wgmma_smem_bytes(d), WGMMA_THREADS, LAUNCH_PARAMS),
        PagedKernel::Pairs => {
            let Some(pentry) = pairs_entry(d, dtype) else {
                return Err(OpError::shape(op, "no pairs kernel"));
            };
            (pentry, pairs_smem_bytes(d), PAIRS_THREADS, PAIRS_PARAMS)
        }
    };
    let f = dev.function(kentry).map_err(dev_err)?;
    dev.set_dynamic_smem(f, smem).map_err(dev_err)?;
    let mut params = args.params();
    let grid = (
        grid_dim(op, items.len(), GRID_X)?,
        grid_dim(op, shape.kv_heads, GRID_YZ)?,
        grid_dim(op, plan.splits, GRID_YZ)?,
    );
    // SAFETY: the caller promises the buffers; the tables were checked to
    // cover every sequence's keys; the partials hold splits × rows × q_heads
    // rows; params match the kernel signature (the pairs kernel's are the
    // heads kernel's first PAIRS_PARAMS); a pairs item is one query head's
    // tile at an even first head of an even group (pairs_fit), so the
    // pair's second head exists; the kernel waits for the previous one
    // before it reads or writes anything (programmatic launch).
    unsafe { dev.launch_programmatic(f, grid, (threads, 1, 1), smem, &mut params[..nparams]) }
        .map_err(dev_err)?;
    if let (Some((part_o, part_lse)), Some((form, centry))) = (&parts, combine_fn) {
        combine_launch(
            dev,
            form,
            centry,
            (part_o.ptr(), part_lse.ptr()),
            (bufs.out, bufs.gate.unwrap_or(0)),
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
        items: items.len(),
        combine: form,
        kernel,
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
            // gate rows × d; d / 64 column blocks cover d (d ∈ {64, 128, 256});
            // the kernel waits for the previous one first (programmatic launch).
            unsafe { dev.launch_programmatic(cf, grid, (COMBINE_THREADS, 1, 1), 0, &mut params) }
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
            unsafe { dev.launch_programmatic(cf, grid, (threads, 1, 1), 0, &mut params) }
                .map_err(dev_err)
        }
    }
}

#[cfg(test)]
#[path = "paged_tests.rs"]
mod tests;
