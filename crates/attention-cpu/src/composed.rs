//! The composed route: per (KV head, block of `qL` query rows), for each query
//! head of the group: scores = Q·Kᵀ (GEMM), lower-right causal mask, softmax
//! in f32, · V (GEMM). The score block is `qL × kv_len`, so the workspace grows
//! with both.

use crate::convert::{all_finite, as_f32, load, load_scaled, store_scaled};
use crate::matmul::{p_v, q_kt};
use crate::simd::{axpy, exp_sub_sum, feature_dispatch, row_max, Level};
use crate::tasks::{Grid, OutRows, Task};
use crate::workspace::{Pool, Workspace};
use headroom_core::{AttentionReport, AttentionShape, Element, Route};
use rayon::prelude::*;

/// Per-worker buffers.
struct Scratch {
    /// Scaled query rows of one head, `qL × d`.
    q: Vec<f32>,
    /// Scores, then unnormalised probabilities, `qL × kv_end`.
    s: Vec<f32>,
    /// Unnormalised output rows, `qL × d`.
    o: Vec<f32>,
    /// `1 / Σ p` per row.
    inv: Vec<f32>,
}

/// Read-only inputs shared by every task.
struct Ctx<'a, T> {
    shape: AttentionShape,
    level: Level,
    q: &'a [T],
    /// K and V of every KV head as f32.
    k: &'a [f32],
    v: &'a [f32],
}

/// The query block `run` uses for `query_block` (0: one block of all rows).
fn block_rows(shape: &AttentionShape, query_block: usize) -> usize {
    if query_block == 0 {
        shape.q_len
    } else {
        query_block.min(shape.q_len)
    }
}

/// The bytes `run` allocates for `shape` on `threads` workers, K/V stored in
/// `T` (converted to f32 first unless f32): the per-worker scratch of
/// [`Scratch`] for one query block.
pub(crate) fn workspace_bytes<T: Element>(
    shape: &AttentionShape,
    query_block: usize,
    threads: usize,
) -> u64 {
    let qb = block_rows(shape, query_block) as u64;
    let workers = threads.min(Grid::new(shape, qb as usize).len()) as u64;
    let (d, kv) = (shape.head_dim as u64, shape.kv_len as u64);
    let f32s = std::mem::size_of::<f32>() as u64;
    let converted = if T::DTYPE == headroom_core::Dtype::F32 {
        0
    } else {
        2 * shape.kv_elems() as u64 * f32s
    };
    converted + workers * (2 * qb * d + qb * kv + qb) * f32s
}

pub(crate) fn run<T: Element>(
    shape: &AttentionShape,
    query_block: usize,
    q: &[T],
    k: &[T],
    v: &[T],
    out: &mut [T],
    level: Level,
) -> AttentionReport {
    let qb = block_rows(shape, query_block);
    let ws = Workspace::default();
    let (k_own, v_own);
    let kf = match as_f32(k) {
        Some(s) => s,
        None => {
            k_own = converted(&ws, k);
            &k_own[..]
        }
    };
    let vf = match as_f32(v) {
        Some(s) => s,
        None => {
            v_own = converted(&ws, v);
            &v_own[..]
        }
    };
    let ctx = Ctx {
        shape: *shape,
        level,
        q,
        k: kf,
        v: vf,
    };
    let grid = Grid::new(shape, qb);
    let outs = OutRows::new(shape, out);
    let workers = rayon::current_num_threads().min(grid.len());
    let d = shape.head_dim;
    let pool = Pool::new(&ws, workers, |w| Scratch {
        q: w.alloc(qb * d),
        s: w.alloc(qb * shape.kv_len),
        o: w.alloc(qb * d),
        inv: w.alloc(qb),
    });
    (0..grid.len())
        .into_par_iter()
        .for_each(|idx| pool.with(|s| dispatch(&ctx, grid.task(idx), &outs, s)));
    AttentionReport {
        route: Route::Composed,
        query_block: Some(qb),
        transient_bytes: ws.bytes(),
    }
}

fn converted<T: Element>(ws: &Workspace, x: &[T]) -> Vec<f32> {
    let mut f = ws.alloc(x.len());
    load(x, &mut f);
    f
}

feature_dispatch!();

#[inline(always)]
fn task<T: Element>(ctx: &Ctx<'_, T>, t: Task, outs: &OutRows<'_, T>, s: &mut Scratch) {
    let sh = &ctx.shape;
    let (d, hist, g) = (sh.head_dim, sh.history(), sh.group());
    let rows = t.r1 - t.r0;
    let kv_end = hist + t.r1;
    // Columns < `full` are visible to every row of the block.
    let full = hist + t.r0 + 1;
    let kh = &ctx.k[t.kv_head * sh.kv_len * d..][..kv_end * d];
    let vh = &ctx.v[t.kv_head * sh.kv_len * d..][..kv_end * d];
    // Masked probabilities are exact zeros, but 0 · NaN = NaN: when a value row
    // in the masked triangle is not finite, that part is summed row by row.
    let triangle_finite = all_finite(&vh[full * d..]);
    for j in 0..g {
        let h = t.kv_head * g + j;
        let qs = &mut s.q[..rows * d];
        load_scaled(
            &ctx.q[(h * sh.q_len + t.r0) * d..][..rows * d],
            qs,
            sh.scale_or_default(),
        );
        let sc = &mut s.s[..rows * kv_end];
        q_kt(rows, kv_end, d, sc, qs, kh);
        for (i, row) in sc.chunks_exact_mut(kv_end).enumerate() {
            let visible = full + i;
            let m = row_max(ctx.level, &row[..visible]);
            let l = exp_sub_sum(ctx.level, &mut row[..visible], m);
            row[visible..].fill(0.0);
            s.inv[i] = 1.0 / l;
        }
        let o = &mut s.o[..rows * d];
        let pv_cols = if triangle_finite { kv_end } else { full };
        p_v(rows, pv_cols, d, o, false, sc, kv_end, vh);
        if !triangle_finite {
            for (i, orow) in o.chunks_exact_mut(d).enumerate() {
                let prow = &sc[i * kv_end..];
                for c in full..full + i {
                    axpy(orow, prow[c], &vh[c * d..(c + 1) * d]);
                }
            }
        }
        // SAFETY: this task is the only one writing rows r0..r1 of head h.
        let out = unsafe { outs.rows(h, t.r0, t.r1) };
        for (i, (orow, dst)) in o.chunks_exact(d).zip(out.chunks_exact_mut(d)).enumerate() {
            store_scaled(orow, s.inv[i], dst);
        }
    }
}
