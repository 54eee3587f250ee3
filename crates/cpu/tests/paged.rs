//! The CPU KV block pool read through block tables: shuffled tables give
//! bit-identical attention to the identity layout for mixed batches (decode,
//! chunk after history, fresh prompt; GQA; lengths ending mid-block), bad
//! tables are errors that name the sequence, a NaN in one sequence stays
//! there, blocks cost memory only once written, and the workspace model
//! predicts what attention allocates.

mod support;

use headroom_core::ops::{
    blocks_for, AttentionCall, Backend, Batch, BlockTables, KvSpec, KV_BLOCK_ROWS,
};
use headroom_core::{AttentionKind, Dtype, LayerKind, OpError, RouteRequest};
use headroom_cpu::{ActRounding, CpuAct, CpuBackend, CpuKvCache, Precision};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use support::{act, values};

const NQ: usize = 8;
const NKV: usize = 2;
const D: usize = 64;
const SLOTS: usize = 4;
const CAPACITY: usize = 300;

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// A pool of `blocks` blocks (no identity layout when fewer than
/// `SLOTS · blocks_for(CAPACITY)`).
fn paged_spec(blocks: usize) -> KvSpec {
    KvSpec {
        blocks,
        ..KvSpec::contiguous(SLOTS, NKV, D, CAPACITY)
    }
}

/// Every slot's table: `blocks_for(CAPACITY)` distinct blocks of a pool of
/// `pool` blocks, drawn in shuffled order.
fn shuffled_tables(pool: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut ids: Vec<u32> = (0..pool as u32).collect();
    ids.shuffle(&mut rand::rngs::StdRng::seed_from_u64(seed));
    ids.chunks(blocks_for(CAPACITY))
        .take(SLOTS)
        .map(|c| c.to_vec())
        .collect()
}

/// `batch` with each sequence's slot table (all of it: a table may hold
/// blocks beyond the rows in use), or unchanged for the identity layout.
fn with_tables(batch: Batch, tables: Option<&[Vec<u32>]>) -> Batch {
    match tables {
        None => batch,
        Some(t) => {
            let per_seq: Vec<&[u32]> = batch.slots.iter().map(|&s| &t[s][..]).collect();
            batch.with_blocks(BlockTables::from_tables(&per_seq))
        }
    }
}

const WARM: [(usize, usize, usize); 3] = [(2, 0, 130), (0, 0, 64), (1, 0, 63)];
const STEP: [(usize, usize, usize); 4] = [(2, 130, 1), (0, 64, 70), (3, 0, 129), (1, 63, 1)];

/// The mixed batch's steps: a warm-up writing every slot's history, then
/// slot 2 decoding after 130 rows, slot 0 a 70-row chunk after 64, slot 3 a
/// fresh 129-row prompt and slot 1 a 1-row chunk after 63 (ending on a block
/// edge). Returns the second step's attention output for each route.
fn mixed_run(
    be: &CpuBackend,
    spec: KvSpec,
    tables: Option<&[Vec<u32>]>,
) -> Vec<(RouteRequest, Vec<f32>)> {
    let mut cache = be.new_kv_cache(&spec).unwrap();
    let warm = with_tables(Batch::packed(&WARM), tables);
    let t = warm.rows();
    be.kv_write(
        &mut cache,
        &act(be, t, NKV * D, 1),
        &act(be, t, NKV * D, 2),
        &warm,
    )
    .unwrap();
    let step = with_tables(Batch::packed(&STEP), tables);
    let t = step.rows();
    be.kv_write(
        &mut cache,
        &act(be, t, NKV * D, 3),
        &act(be, t, NKV * D, 4),
        &step,
    )
    .unwrap();
    let q = act(be, t, NQ * D, 5);
    [
        RouteRequest::Fused,
        RouteRequest::Composed { query_block: 0 },
        RouteRequest::Composed { query_block: 32 },
    ]
    .into_iter()
    .map(|route| {
        let (out, _) = be.attention(&q, &cache, &step, route).unwrap();
        assert!(out.data.iter().all(|v| v.is_finite()), "{route}");
        (route, out.data)
    })
    .collect()
}

#[test]
fn shuffled_tables_equal_the_identity_layout_bit_for_bit() {
    for be in [
        CpuBackend::new(),
        CpuBackend::with_precision(Precision::bf16(ActRounding::ALL)),
    ] {
        let identity = mixed_run(&be, KvSpec::contiguous(SLOTS, NKV, D, CAPACITY), None);
        for (pool, seed) in [(SLOTS * blocks_for(CAPACITY), 1), (64, 2), (1000, 3)] {
            let tables = shuffled_tables(pool, seed);
            let paged = mixed_run(&be, paged_spec(pool), Some(&tables));
            for ((route, a), (_, b)) in identity.iter().zip(&paged) {
                assert_eq!(bits(a), bits(b), "{route}, pool {pool}");
            }
        }
    }
}

/// Causal attention in f64 of token-major `q` `[t][NQ·D]`, the last rows of
/// token-major `k`, `v` `[len][NKV·D]`.
fn reference(q: &[f32], k: &[f32], v: &[f32]) -> Vec<f32> {
    let (t, len) = (q.len() / (NQ * D), k.len() / (NKV * D));
    let scale = 1.0 / (D as f64).sqrt();
    let mut out = vec![0.0f32; q.len()];
    for s in 0..t {
        let keys = len - t + s + 1;
        for h in 0..NQ {
            let kh = h / (NQ / NKV);
            let qh = &q[(s * NQ + h) * D..][..D];
            let row = |x: &[f32], j: usize| x[(j * NKV + kh) * D..][..D].to_vec();
            let scores: Vec<f64> = (0..keys)
                .map(|j| {
                    let kj = row(k, j);
                    qh.iter()
                        .zip(&kj)
                        .map(|(a, b)| *a as f64 * *b as f64)
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
            let sum: f64 = w.iter().sum();
            for (j, wj) in w.iter().enumerate() {
                let vj = row(v, j);
                for (o, x) in out[(s * NQ + h) * D..][..D].iter_mut().zip(&vj) {
                    *o += (wj / sum * *x as f64) as f32;
                }
            }
        }
    }
    out
}

#[test]
fn paged_attention_equals_a_plain_reference() {
    let be = CpuBackend::new();
    let tables = shuffled_tables(64, 4);
    let out = mixed_run(&be, paged_spec(64), Some(&tables));
    let (warm, step) = (Batch::packed(&WARM), Batch::packed(&STEP));
    let (wk, wv) = (
        values(warm.rows() * NKV * D, 1),
        values(warm.rows() * NKV * D, 2),
    );
    let (sk, sv) = (
        values(step.rows() * NKV * D, 3),
        values(step.rows() * NKV * D, 4),
    );
    let q = values(step.rows() * NQ * D, 5);
    let row = NKV * D;
    for i in 0..step.sequences() {
        let r = step.seq_rows(i);
        let (mut k, mut v) = (Vec::new(), Vec::new());
        if let Some(w) = (0..warm.sequences()).find(|&w| warm.slots[w] == step.slots[i]) {
            let wr = warm.seq_rows(w);
            k.extend_from_slice(&wk[wr.start * row..wr.end * row]);
            v.extend_from_slice(&wv[wr.start * row..wr.end * row]);
        }
        k.extend_from_slice(&sk[r.start * row..r.end * row]);
        v.extend_from_slice(&sv[r.start * row..r.end * row]);
        let want = reference(&q[r.start * NQ * D..r.end * NQ * D], &k, &v);
        for (route, got) in &out {
            let got = &got[r.start * NQ * D..r.end * NQ * D];
            let err = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(err < 1e-5, "{route} sequence {i}: {err:.2e}");
        }
    }
}

/// The attention output of rows `r` of a batch's `kv` and `q`, run as one
/// sequence alone in a fresh pool.
fn alone(
    be: &CpuBackend,
    spec: KvSpec,
    table: &[u32],
    (slot, rows): (usize, usize),
    kv: (&CpuAct, &CpuAct),
    q: &CpuAct,
    r: std::ops::Range<usize>,
) -> Vec<f32> {
    let mut cache = be.new_kv_cache(&spec).unwrap();
    let b = Batch::single(slot, 0, rows).with_blocks(BlockTables::from_tables(&[table]));
    let pick = |x: &CpuAct| {
        be.act_from_f32(rows, x.cols, &x.data[r.start * x.cols..r.end * x.cols])
            .unwrap()
    };
    be.kv_write(&mut cache, &pick(kv.0), &pick(kv.1), &b)
        .unwrap();
    be.attention(&pick(q), &cache, &b, RouteRequest::Fused)
        .unwrap()
        .0
        .data
}

#[test]
fn a_nan_in_one_sequence_stays_in_that_sequence() {
    let be = CpuBackend::new();
    let spec = paged_spec(12);
    let tables = [vec![5u32, 3], vec![4u32, 11]];
    let batch =
        Batch::packed(&[(0, 0, 70), (1, 0, 66)]).with_blocks(BlockTables::from_tables(&tables));
    let t = batch.rows();
    let mut k = act(&be, t, NKV * D, 1);
    let v = act(&be, t, NKV * D, 2);
    k.data[10 * NKV * D + 3] = f32::NAN;
    let q = act(&be, t, NQ * D, 3);
    let mut cache = be.new_kv_cache(&spec).unwrap();
    be.kv_write(&mut cache, &k, &v, &batch).unwrap();
    let (out, _) = be
        .attention(&q, &cache, &batch, RouteRequest::Fused)
        .unwrap();
    let second = &out.data[70 * NQ * D..];
    assert!(out.data[..70 * NQ * D].iter().any(|v| v.is_nan()));
    assert_eq!(
        bits(second),
        bits(&alone(
            &be,
            spec,
            &tables[1],
            (1, 66),
            (&k, &v),
            &q,
            70..136
        )),
        "sequence 1 as if alone"
    );
    // Block 5 (slot 0's first, its row 10 NaN) handed to slot 2 for 5 rows
    // before slot 0 is reset: slot 2 reads only its own rows.
    let next = Batch::single(2, 0, 5).with_blocks(BlockTables::from_tables(&[[5u32]]));
    let (k2, v2) = (act(&be, 5, NKV * D, 4), act(&be, 5, NKV * D, 5));
    be.kv_write(&mut cache, &k2, &v2, &next).unwrap();
    let q2 = act(&be, 5, NQ * D, 6);
    let (out, _) = be
        .attention(&q2, &cache, &next, RouteRequest::Fused)
        .unwrap();
    assert!(out.data.iter().all(|v| v.is_finite()));
    // Resetting slot 0 keeps block 5, which slot 2 wrote last.
    be.reset_kv_slot(&mut cache, 0).unwrap();
    let (again, _) = be
        .attention(&q2, &cache, &next, RouteRequest::Fused)
        .unwrap();
    assert_eq!(bits(&again.data), bits(&out.data));
}

fn err_of(r: Result<impl Sized, OpError>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_tables_are_errors_that_name_the_sequence() {
    let be = CpuBackend::new();
    let spec = paged_spec(10);
    let mut cache = be.new_kv_cache(&spec).unwrap();
    let (k, q) = (act(&be, 70, NKV * D, 1), act(&be, 70, NQ * D, 2));
    let b = |t0: &[u32], t1: &[u32]| {
        Batch::packed(&[(0, 0, 5), (3, 0, 65)]).with_blocks(BlockTables::from_tables(&[t0, t1]))
    };
    let outside = b(&[0], &[1, 10]);
    let short = b(&[0], &[1]);
    let unpaged = Batch::packed(&[(0, 0, 5), (3, 0, 65)]);
    for e in [
        err_of(be.kv_write(&mut cache, &k, &k, &outside)),
        err_of(be.attention(&q, &cache, &outside, RouteRequest::Fused)),
    ] {
        assert!(e.contains("sequence 1") && e.contains("block 10"), "{e}");
    }
    for e in [
        err_of(be.kv_write(&mut cache, &k, &k, &short)),
        err_of(be.attention(&q, &cache, &short, RouteRequest::Fused)),
    ] {
        assert!(
            e.contains("sequence 1") && e.contains("needs 65 rows"),
            "{e}"
        );
    }
    let e = err_of(be.kv_write(&mut cache, &k, &k, &unpaged));
    assert!(e.contains("must carry block tables"), "{e}");
    let e = err_of(be.kv_write(&mut cache, &k, &k, &b(&[4], &[2, 4])));
    assert!(e.contains("block 4") && e.contains("sequence 1"), "{e}");
    assert_eq!(be.kv_len(&cache, 3), 0, "no refused write changed the pool");
    // Rows written, then read through a table naming a block never written.
    let good = b(&[0], &[1, 2]);
    be.kv_write(&mut cache, &k, &k, &good).unwrap();
    let e = err_of(be.attention(&q, &cache, &b(&[0], &[1, 7]), RouteRequest::Fused));
    assert!(e.contains("sequence 1") && e.contains("block 7"), "{e}");
}

#[test]
fn blocks_cost_memory_only_once_written() {
    let be = CpuBackend::new();
    let spec = KvSpec {
        blocks: 1 << 24,
        ..KvSpec::contiguous(2, NKV, D, 1 << 20)
    };
    let before = be.memory().0;
    let mut cache: CpuKvCache = be.new_kv_cache(&spec).unwrap();
    assert_eq!(be.memory().0, before, "an empty pool of 16M blocks");
    let block = KV_BLOCK_ROWS * NKV * D * 4 * 2;
    let table = [[9_000_000u32, 77, 123_456]];
    let b = Batch::single(1, 0, 65).with_blocks(BlockTables::from_tables(&table));
    let k = act(&be, 65, NKV * D, 1);
    be.kv_write(&mut cache, &k, &k, &b).unwrap();
    assert_eq!(be.memory().0 - before, 2 * block, "65 rows: two blocks");
    assert_eq!(cache.allocated_blocks(), 2);
    let b = Batch::single(1, 65, 63).with_blocks(BlockTables::from_tables(&table));
    let k = act(&be, 63, NKV * D, 2);
    be.kv_write(&mut cache, &k, &k, &b).unwrap();
    assert_eq!(be.memory().0 - before, 2 * block, "128 rows: still two");
    be.reset_kv_slot(&mut cache, 1).unwrap();
    assert_eq!(be.memory().0, before);
    assert_eq!((be.kv_len(&cache, 1), cache.allocated_blocks()), (0, 0));
}

#[test]
fn the_workspace_model_predicts_what_paged_attention_allocates() {
    let be = CpuBackend::new();
    let layer = LayerKind {
        attention: AttentionKind::Full,
        head_dim: D,
        q_heads: NQ,
        kv_heads: NKV,
        dtype: Dtype::F32,
    };
    let ws = be.workspace_model();
    let tables = shuffled_tables(40, 9);
    for route in [
        RouteRequest::Fused,
        RouteRequest::Composed { query_block: 16 },
    ] {
        let mut cache = be.new_kv_cache(&paged_spec(40)).unwrap();
        let warm = with_tables(Batch::packed(&[(1, 0, 100)]), Some(&tables));
        let k = act(&be, 100, NKV * D, 1);
        be.kv_write(&mut cache, &k, &k, &warm).unwrap();
        let seqs = [(1, 100, 1), (2, 0, 150)];
        let step = with_tables(Batch::packed(&seqs), Some(&tables));
        let t = step.rows();
        let k = act(&be, t, NKV * D, 2);
        be.kv_write(&mut cache, &k, &k, &step).unwrap();
        let (_, rep) = be
            .attention(&act(&be, t, NQ * D, 3), &cache, &step, route)
            .unwrap();
        let predicted = seqs
            .iter()
            .map(|&(_, h, n)| {
                ws.attention_bytes(&AttentionCall {
                    layer,
                    route,
                    q_len: n,
                    kv_len: h + n,
                    total_kv_len: h + n,
                })
            })
            .max()
            .unwrap();
        assert_eq!(rep.transient_bytes, predicted, "{route}");
    }
}
