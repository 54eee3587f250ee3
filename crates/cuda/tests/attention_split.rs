//! The split-KV / packed-GQA schedule of the wgmma fused kernel (short query
//! chunks and decode over long keys) against an f64 reference on fresh random
//! inputs, outputs NaN-poisoned before the kernels write them: through
//! `attention::prefill` (q_len 1, tails, GQA 16/2 and 8/1, MHA, history,
//! a NaN key) and through the backend's attention over a KV cache (several
//! sequences of one row and a chunk in one batch). GPU tests: ignored here,
//! run by `bench/gpu/check_decode.sh`; each asserts the shape really splits.

use half::bf16;
use headroom_core::ops::{Backend, Batch, KvSpec};
use headroom_core::{AttentionShape, Dtype, RouteRequest};
use headroom_cuda::attention::split_plan_for;
use headroom_cuda::backend::{CudaAct, CudaBackend, CudaKvCache};
use headroom_cuda::check::{run_case, CheckCase};
use headroom_cuda::device::CudaDevice;
use rand::{Rng, SeedableRng};

mod support;
use support::rel_err;

fn shape_of(c: &CheckCase) -> AttentionShape {
    AttentionShape {
        q_len: c.q_len,
        kv_len: c.kv_len,
        q_heads: c.q_heads,
        kv_heads: c.kv_heads,
        head_dim: c.head_dim,
        scale: None,
    }
}

#[allow(clippy::too_many_arguments)]
fn case(
    dtype: Dtype,
    head_dim: usize,
    q_len: usize,
    kv_len: usize,
    q_heads: usize,
    kv_heads: usize,
    nan_key: Option<usize>,
) -> CheckCase {
    CheckCase {
        route: RouteRequest::Fused,
        dtype,
        head_dim,
        q_len,
        kv_len,
        q_heads,
        kv_heads,
        nan_key,
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn split_kv_matches_the_f64_reference_for_decode_tails_gqa_and_nan() {
    let dev = CudaDevice::open(0).expect("a CUDA device");
    assert_eq!(
        dev.arch, "sm_90a",
        "the split schedule is the wgmma kernel's"
    );
    let cases = [
        // Decode, GQA 16/2 packed into one tile per KV head, 4k keys.
        case(Dtype::Bf16, 256, 1, 4097, 16, 2, None),
        case(Dtype::Bf16, 256, 1, 4097, 16, 2, Some(1000)),
        case(Dtype::F16, 256, 1, 2049, 16, 2, None),
        // Short chunks with history, tails, packed groups (8/1 at d128).
        case(Dtype::Bf16, 256, 7, 3001, 16, 2, None),
        case(Dtype::F16, 128, 33, 2500, 8, 1, Some(2480)),
        // MHA decode (not packed), d64.
        case(Dtype::Bf16, 64, 1, 1500, 4, 4, None),
        // Unpacked chunks over long history, the NaN key in the causal region.
        case(Dtype::Bf16, 256, 200, 5000, 16, 2, Some(4900)),
        case(Dtype::Bf16, 256, 512, 8192, 16, 2, Some(7800)),
    ];
    for (i, c) in cases.iter().enumerate() {
        let plan = split_plan_for(&dev, &shape_of(c));
        assert!(plan.splits > 1, "case {i} does not split: {plan:?}");
        let r = run_case(&dev, c, 0x5117 + i as u64).unwrap();
        eprintln!(
            "case {i}: {plan:?} rel err {:.2e} (tol {:.1e}), {} rows, {} bad NaN rows",
            r.rel_err, r.tolerance, r.rows_compared, r.bad_nan_rows
        );
        assert!(r.passed, "case {i} {c:?}: {r:?}");
        assert!(r.rows_compared > 0);
    }
}

fn uniform(seed: u64, n: usize) -> Vec<f32> {
    let mut g = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| bf16::from_f32(g.random::<f32>() * 2.0 - 1.0).to_f32())
        .collect()
}

/// Causal attention of one sequence in f64: `q` `[t][nq][d]` over `k`, `v`
/// `[kv][nkv][d]` (token-major), queries the last `t` rows.
fn attention_ref(q: &[f32], k: &[f32], v: &[f32], t: usize, nq: usize, nkv: usize) -> Vec<f64> {
    let d = q.len() / (t * nq);
    let kv = k.len() / (nkv * d);
    let scale = 1.0 / (d as f64).sqrt();
    let g = nq / nkv;
    let mut out = vec![0.0; t * nq * d];
    for i in 0..t {
        let visible = kv - t + i + 1;
        for h in 0..nq {
            let kh = h / g;
            let qv = &q[(i * nq + h) * d..][..d];
            let s: Vec<f64> = (0..visible)
                .map(|j| {
                    let kr = &k[(j * nkv + kh) * d..][..d];
                    qv.iter()
                        .zip(kr)
                        .map(|(a, b)| *a as f64 * *b as f64)
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = p.iter().sum();
            let o = &mut out[(i * nq + h) * d..][..d];
            for (j, pj) in p.iter().enumerate() {
                let vr = &v[(j * nkv + kh) * d..][..d];
                for (oe, ve) in o.iter_mut().zip(vr) {
                    *oe += pj / z * *ve as f64;
                }
            }
        }
    }
    out
}

fn act(be: &CudaBackend, rows: usize, cols: usize, data: &[f32]) -> CudaAct {
    be.act_from_f32(rows, cols, data).unwrap()
}

/// Appends random keys and values of `batch` to the cache and to the host copies.
fn write(
    be: &CudaBackend,
    cache: &mut CudaKvCache,
    batch: &Batch,
    host: &mut [(Vec<f32>, Vec<f32>)],
    width: usize,
    seed: u64,
) {
    let n = batch.rows() * width;
    let (k, v) = (uniform(seed, n), uniform(seed + 1, n));
    be.kv_write(
        cache,
        &act(be, batch.rows(), width, &k),
        &act(be, batch.rows(), width, &v),
        batch,
    )
    .unwrap();
    for i in 0..batch.sequences() {
        let r = batch.seq_rows(i);
        let s = batch.slots[i];
        host[s].0.extend(&k[r.start * width..r.end * width]);
        host[s].1.extend(&v[r.start * width..r.end * width]);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn decode_batches_over_the_cache_match_f64_with_gqa_16_2_d256() {
    let be = CudaBackend::open(0).expect("a CUDA device");
    let (nq, nkv, d) = (16, 2, 256);
    let spec = KvSpec::contiguous(3, nkv, d, 5000);
    let mut cache = be.new_kv_cache(&spec).unwrap();
    let mut host = vec![(Vec::new(), Vec::new()); 3];
    // History: 4,500 rows in slot 0, 70 in slot 1, 2,000 in slot 2.
    write(
        &be,
        &mut cache,
        &Batch::packed(&[(0, 0, 4500), (1, 0, 70), (2, 0, 2000)]),
        &mut host,
        nkv * d,
        10,
    );
    // Two decode steps of all three, then a step mixing one row and a 40-row chunk.
    let steps = [
        Batch::packed(&[(0, 4500, 1), (1, 70, 1), (2, 2000, 1)]),
        Batch::packed(&[(2, 2001, 1), (0, 4501, 1), (1, 71, 1)]),
        Batch::packed(&[(1, 72, 1), (0, 4502, 40)]),
    ];
    for (n, batch) in steps.iter().enumerate() {
        write(
            &be,
            &mut cache,
            batch,
            &mut host,
            nkv * d,
            20 + 2 * n as u64,
        );
        let q = uniform(40 + n as u64, batch.rows() * nq * d);
        // Leave NaN-poisoned blocks of the output's size in the pool.
        let dev = be.device();
        let bufs: Vec<_> = (0..8)
            .map(|_| dev.alloc(batch.rows() * nq * d * 2).unwrap())
            .collect();
        for b in &bufs {
            dev.fill_bytes(b, 0xFF).unwrap();
        }
        drop(bufs);
        let (y, rep) = be
            .attention(
                &act(&be, batch.rows(), nq * d, &q),
                &cache,
                batch,
                RouteRequest::Fused,
            )
            .unwrap();
        assert_eq!(rep.route, headroom_core::Route::Fused);
        let got = be.act_to_f32(&y).unwrap();
        for i in 0..batch.sequences() {
            let r = batch.seq_rows(i);
            let (k, v) = &host[batch.slots[i]];
            let want = attention_ref(&q[r.start * nq * d..r.end * nq * d], k, v, r.len(), nq, nkv);
            let e = rel_err(&got[r.start * nq * d..r.end * nq * d], &want);
            eprintln!(
                "step {n} sequence {i}: {} rows, kv {}, rel err {e:.2e}",
                r.len(),
                k.len() / (nkv * d)
            );
            assert!(e < 1.5e-2, "step {n} sequence {i}: rel err {e}");
        }
    }
}

/// A small split case for compute-sanitizer memcheck (packed GQA 4/2, d64,
/// a tail of 3 rows, 1,100 keys: several splits and the combine).
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn small_split_case_for_memcheck() {
    let dev = CudaDevice::open(0).expect("a CUDA device");
    let c = case(Dtype::Bf16, 64, 3, 1100, 4, 2, Some(500));
    let plan = split_plan_for(&dev, &shape_of(&c));
    assert!(plan.splits > 1 && plan.packed(), "{plan:?}");
    let r = run_case(&dev, &c, 77).unwrap();
    assert!(r.passed, "{r:?}");
}
