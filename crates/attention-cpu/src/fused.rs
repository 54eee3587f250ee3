//! The fused route: one pass per (KV head, query tile) with an online softmax
//! over KV tiles (flash-attention style).
//!
//! A query tile stacks the same rows of every query head of the KV head's
//! group (`group × rows_per_head ≈` [`FUSED_QUERY_ROWS`] rows), so each K/V
//! tile is converted to f32 once and multiplied against the whole group. Per
//! KV tile of [`FUSED_KV_TILE`] rows: S = Q·Kᵀ (GEMM on the tile), running max
//! and sum per row, rescale of the output accumulator, O += P·V (GEMM). No
//! score matrix larger than `max(FUSED_QUERY_ROWS, group) × FUSED_KV_TILE`
//! exists, and the workspace depends only on the tile sizes, `head_dim`, the
//! group and the number of worker threads — never on `kv_len`.

use crate::convert::{all_finite, load, load_scaled, store_scaled};
use crate::matmul::{p_v, q_kt};
use crate::simd::{axpy, exp_sub_sum, feature_dispatch, row_max, scale, Level};
use crate::tasks::{Grid, OutRows, Task};
use crate::workspace::{Pool, Workspace};
use headroom_core::fused_capability::{CPU_FUSED_DTYPES, FUSED_HEAD_DIMS};
use headroom_core::{AttentionError, AttentionReport, AttentionShape, Element, Route};
use rayon::prelude::*;

/// Target number of stacked query rows (all heads of a group) per tile.
pub const FUSED_QUERY_ROWS: usize = 256;
/// KV rows per tile.
pub const FUSED_KV_TILE: usize = 128;

/// Query rows of each head in one tile.
pub fn rows_per_head(group: usize) -> usize {
    (FUSED_QUERY_ROWS / group).max(1)
}

/// The typed error when the fused kernel cannot run `shape` with storage `T`.
pub(crate) fn check_supported<T: Element>(shape: &AttentionShape) -> Result<(), AttentionError> {
    if !FUSED_HEAD_DIMS.contains(&shape.head_dim) {
        return Err(AttentionError::UnsupportedHeadDim {
            head_dim: shape.head_dim,
            route: "fused",
            backend: "cpu",
            supported: FUSED_HEAD_DIMS.to_vec(),
        });
    }
    if !CPU_FUSED_DTYPES.contains(&T::DTYPE) {
        return Err(AttentionError::UnsupportedDtype {
            dtype: T::DTYPE,
            route: "fused",
            backend: "cpu",
        });
    }
    Ok(())
}

/// Per-worker buffers, all sized by the tile constants.
struct Scratch {
    /// Stacked scaled queries, `M × d` (row `j * rows + i` = head j, query row r0 + i).
    q: Vec<f32>,
    /// One K and one V tile, `FUSED_KV_TILE × d`.
    k: Vec<f32>,
    v: Vec<f32>,
    /// Scores then probabilities of one tile, `M × FUSED_KV_TILE`.
    s: Vec<f32>,
    /// Output accumulator, `M × d`.
    o: Vec<f32>,
    /// Running max and sum per stacked row.
    m: Vec<f32>,
    l: Vec<f32>,
}

struct Ctx<'a, T> {
    shape: AttentionShape,
    level: Level,
    q: &'a [T],
    k: &'a [T],
    v: &'a [T],
}

/// The bytes `run` allocates for `shape` on `threads` workers: the
/// per-worker scratch of [`Scratch`], sized by the tiles alone.
pub(crate) fn workspace_bytes(shape: &AttentionShape, threads: usize) -> u64 {
    let g = shape.group();
    let rows = rows_per_head(g).min(shape.q_len);
    let workers = threads.min(Grid::new(shape, rows).len()) as u64;
    let (d, m, t) = (
        shape.head_dim as u64,
        (g * rows) as u64,
        FUSED_KV_TILE as u64,
    );
    workers * (2 * m * d + 2 * t * d + m * t + 2 * m) * std::mem::size_of::<f32>() as u64
}

pub(crate) fn run<T: Element>(
    shape: &AttentionShape,
    q: &[T],
    k: &[T],
    v: &[T],
    out: &mut [T],
    level: Level,
) -> AttentionReport {
    let ws = Workspace::default();
    let g = shape.group();
    let rows = rows_per_head(g).min(shape.q_len);
    let grid = Grid::new(shape, rows);
    let outs = OutRows::new(shape, out);
    let workers = rayon::current_num_threads().min(grid.len());
    let (d, mrows) = (shape.head_dim, g * rows);
    let pool = Pool::new(&ws, workers, |w| Scratch {
        q: w.alloc(mrows * d),
        k: w.alloc(FUSED_KV_TILE * d),
        v: w.alloc(FUSED_KV_TILE * d),
        s: w.alloc(mrows * FUSED_KV_TILE),
        o: w.alloc(mrows * d),
        m: w.alloc(mrows),
        l: w.alloc(mrows),
    });
    let ctx = Ctx {
        shape: *shape,
        level,
        q,
        k,
        v,
    };
    (0..grid.len())
        .into_par_iter()
        .for_each(|idx| pool.with(|s| dispatch(&ctx, grid.task(idx), &outs, s)));
    AttentionReport {
        route: Route::Fused,
        query_block: None,
        transient_bytes: ws.bytes(),
    }
}

feature_dispatch!();

#[inline(always)]
fn task<T: Element>(ctx: &Ctx<'_, T>, t: Task, outs: &OutRows<'_, T>, s: &mut Scratch) {
    let sh = &ctx.shape;
    let (d, hist, g) = (sh.head_dim, sh.history(), sh.group());
    let rows = t.r1 - t.r0;
    let mrows = g * rows;
    for j in 0..g {
        let h = t.kv_head * g + j;
        load_scaled(
            &ctx.q[(h * sh.q_len + t.r0) * d..][..rows * d],
            &mut s.q[j * rows * d..][..rows * d],
            sh.scale_or_default(),
        );
    }
    let qs = &s.q[..mrows * d];
    let o = &mut s.o[..mrows * d];
    o.fill(0.0);
    s.m[..mrows].fill(f32::NEG_INFINITY);
    s.l[..mrows].fill(0.0);
    let kh = &ctx.k[t.kv_head * sh.kv_len * d..][..sh.kv_len * d];
    let vh = &ctx.v[t.kv_head * sh.kv_len * d..][..sh.kv_len * d];
    let kv_end = hist + t.r1;
    let mut c0 = 0;
    while c0 < kv_end {
        let n = FUSED_KV_TILE.min(kv_end - c0);
        let kt = &mut s.k[..n * d];
        let vt = &mut s.v[..n * d];
        load(&kh[c0 * d..(c0 + n) * d], kt);
        load(&vh[c0 * d..(c0 + n) * d], vt);
        // Some row of the tile cannot see its last column.
        let diagonal = c0 + n - 1 > hist + t.r0;
        // Masked probabilities are exact zeros, but 0 · NaN = NaN.
        let v_finite = !diagonal || all_finite(vt);
        let sc = &mut s.s[..mrows * n];
        q_kt(mrows, n, d, sc, qs, kt);
        for (r, (srow, orow)) in sc
            .chunks_exact_mut(n)
            .zip(o.chunks_exact_mut(d))
            .enumerate()
        {
            // Row r is query row r0 + i of head j = r / rows; it sees columns <= hist + r0 + i.
            let i = r % rows;
            let valid = (hist + t.r0 + i + 1).saturating_sub(c0).min(n);
            srow[valid..].fill(0.0);
            if valid == 0 {
                continue;
            }
            let m_old = s.m[r];
            let tile_max = row_max(ctx.level, &srow[..valid]);
            let m_new = if tile_max > m_old { tile_max } else { m_old };
            let sum = exp_sub_sum(ctx.level, &mut srow[..valid], m_new);
            let alpha = (m_old - m_new).exp();
            s.l[r] = s.l[r] * alpha + sum;
            s.m[r] = m_new;
            if alpha != 1.0 {
                scale(orow, alpha);
            }
        }
        if v_finite {
            p_v(mrows, n, d, o, true, sc, n, vt);
        } else {
            // 0 · NaN = NaN: sum only the columns each row may see.
            for (r, orow) in o.chunks_exact_mut(d).enumerate() {
                let valid = (hist + t.r0 + r % rows + 1).saturating_sub(c0).min(n);
                for c in 0..valid {
                    axpy(orow, sc[r * n + c], &vt[c * d..(c + 1) * d]);
                }
            }
        }
        c0 += n;
    }
    for j in 0..g {
        // SAFETY: this task is the only one writing rows r0..r1 of head j of its group.
        let out = unsafe { outs.rows(t.kv_head * g + j, t.r0, t.r1) };
        for i in 0..rows {
            let r = j * rows + i;
            store_scaled(
                &o[r * d..(r + 1) * d],
                1.0 / s.l[r],
                &mut out[i * d..(i + 1) * d],
            );
        }
    }
}
