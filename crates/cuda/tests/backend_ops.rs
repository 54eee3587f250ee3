//! `CudaBackend` op by op against f64 host references on fresh random inputs.
//! GPU tests are ignored here and run by `bench/gpu/check_backend_ops.sh`;
//! outputs come from NaN-poisoned pool blocks, lengths are not multiples of
//! 64, batches are varlen with history, state is carried across chunks.

use half::bf16;
use headroom_core::ops::{
    rng, Backend, Batch, GdnSpec, KvSpec, MoeSpec, MoeWeights, OpError, RopeSpec, SamplingParams,
    WeightInit,
};
use headroom_core::{OpKey, RouteRequest, Tensor};
use headroom_cuda::backend::{CudaAct, CudaBackend};
use rand::{Rng, SeedableRng};

fn backend() -> CudaBackend {
    CudaBackend::open(0).expect("a CUDA device")
}

fn rng_of(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// `n` values uniform in `[-scale, scale)`, rounded to bf16 (what the device holds).
fn uniform(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut g = rng_of(seed);
    (0..n)
        .map(|_| bf16::from_f32((g.random::<f32>() * 2.0 - 1.0) * scale).to_f32())
        .collect()
}

fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let (mut num, mut den) = (0.0, 0.0);
    for (&g, &w) in got.iter().zip(want) {
        assert!(g.is_finite(), "non-finite output where {w} was expected");
        num += (g as f64 - w).powi(2);
        den += w * w;
    }
    (num / den.max(1e-30)).sqrt()
}

/// Leaves `count` poisoned (0xFF: NaN) blocks of `bytes` in the pool, so the
/// next outputs of that size start as NaN.
fn poison_pool(be: &CudaBackend, bytes: usize) {
    let dev = be.device();
    let bufs: Vec<_> = (0..8).map(|_| dev.alloc(bytes).unwrap()).collect();
    for b in &bufs {
        dev.fill_bytes(b, 0xFF).unwrap();
    }
    dev.synchronize().unwrap();
}

fn act(be: &CudaBackend, rows: usize, cols: usize, data: &[f32]) -> CudaAct {
    be.act_from_f32(rows, cols, data).unwrap()
}

fn vector(be: &CudaBackend, v: &[f32]) -> headroom_cuda::backend::CudaWeight {
    be.upload_vector(Tensor::from_f32(vec![v.len()], v.to_vec()))
        .unwrap()
}

fn matrix(
    be: &CudaBackend,
    rows: usize,
    cols: usize,
    v: &[f32],
) -> headroom_cuda::backend::CudaWeight {
    be.upload_matrix(Tensor::from_f32(vec![rows, cols], v.to_vec()))
        .unwrap()
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

// ---- without a GPU --------------------------------------------------------

#[test]
fn open_without_a_driver_is_an_error_not_a_panic() {
    let driver = headroom_cuda::libs::probe_driver();
    match (CudaBackend::open(0), driver) {
        (Err(e), Err(_)) => assert!(e.to_string().contains("libcuda"), "{e}"),
        (Ok(be), Ok(())) => assert_eq!(be.act_dtype(), headroom_core::Dtype::Bf16),
        (Err(e), Ok(())) => assert!(!e.to_string().is_empty()),
        (Ok(_), Err(e)) => panic!("opened a device without a driver ({e})"),
    }
}

// ---- on the GPU -----------------------------------------------------------

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn linear_matches_f64_and_rejects_bad_shapes() {
    let be = backend();
    let (t, k, n) = (67, 200, 130);
    let x = uniform(1, t * k, 1.0);
    let w = uniform(2, n * k, 0.5);
    poison_pool(&be, t * n * 2);
    let y = be
        .act_to_f32(
            &be.linear(&act(&be, t, k, &x), &matrix(&be, n, k, &w))
                .unwrap(),
        )
        .unwrap();
    let want: Vec<f64> = (0..t * n)
        .map(|i| {
            (0..k)
                .map(|j| x[i / n * k + j] as f64 * w[i % n * k + j] as f64)
                .sum()
        })
        .collect();
    let e = rel_err(&y, &want);
    assert!(e < 8e-3, "linear rel err {e}");
    let bad = be.linear(
        &act(&be, t, k - 1, &x[..t * (k - 1)]),
        &matrix(&be, n, k, &w),
    );
    assert!(matches!(bad, Err(OpError::Shape { .. })));
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn embed_and_gather_rows_copy_exact_rows() {
    let be = backend();
    let (vocab, h) = (1000, 130);
    let table = uniform(3, vocab * h, 1.0);
    let ids = [7u32, 999, 0, 7, 513];
    poison_pool(&be, ids.len() * h * 2);
    let e = be.embed(&matrix(&be, vocab, h, &table), &ids).unwrap();
    let got = be.act_to_f32(&e).unwrap();
    for (r, &id) in ids.iter().enumerate() {
        assert_eq!(
            &got[r * h..(r + 1) * h],
            &table[id as usize * h..(id as usize + 1) * h]
        );
    }
    let g = be.gather_rows(&e, &[4, 1]).unwrap();
    let gr = be.act_to_f32(&g).unwrap();
    assert_eq!(&gr[..h], &got[4 * h..5 * h]);
    assert_eq!(&gr[h..], &got[h..2 * h]);
    assert!(be.embed(&matrix(&be, vocab, h, &table), &[1000]).is_err());
    assert!(be.gather_rows(&e, &[5]).is_err());
}

/// Zero-centred RMSNorm of each group of `w.len()` in f64 (`gate`: the gated form).
fn norm_ref(x: &[f32], w: &[f32], gate: Option<&[f32]>, eps: f64) -> Vec<f64> {
    let d = w.len();
    let mut out = Vec::with_capacity(x.len());
    for (r, row) in x.chunks(d).enumerate() {
        let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / d as f64;
        let inv = 1.0 / (ms + eps).sqrt();
        for (i, &v) in row.iter().enumerate() {
            out.push(match gate {
                None => v as f64 * inv * (1.0 + w[i] as f64),
                Some(z) => w[i] as f64 * v as f64 * inv * silu(z[r * d + i] as f64),
            });
        }
    }
    out
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn norms_match_f64_and_nan_poisons_only_its_row() {
    let be = backend();
    let (t, h) = (45, 1000);
    let res = uniform(4, t * h, 2.0);
    let delta = uniform(5, t * h, 1.0);
    let w = uniform(6, h, 0.5);
    let mut r = act(&be, t, h, &res);
    poison_pool(&be, t * h * 2);
    let y = be
        .add_rms_norm(
            &mut r,
            Some(&act(&be, t, h, &delta)),
            &vector(&be, &w),
            1e-6,
        )
        .unwrap();
    let summed: Vec<f32> = res
        .iter()
        .zip(&delta)
        .map(|(a, b)| bf16::from_f32(a + b).to_f32())
        .collect();
    assert_eq!(
        be.act_to_f32(&r).unwrap(),
        summed,
        "residual += delta, rounded to bf16"
    );
    let e = rel_err(
        &be.act_to_f32(&y).unwrap(),
        &norm_ref(&summed, &w, None, 1e-6),
    );
    assert!(e < 8e-3, "add_rms_norm {e}");

    // Per-head q/k norm (d 256), then the gated norm (d 128).
    let (rows, d) = (37, 256);
    let x = uniform(7, rows * 4 * d, 3.0);
    let wq = uniform(8, d, 0.5);
    let mut xa = act(&be, rows, 4 * d, &x);
    be.rms_norm_groups(&mut xa, &vector(&be, &wq), 1e-6)
        .unwrap();
    let e = rel_err(&be.act_to_f32(&xa).unwrap(), &norm_ref(&x, &wq, None, 1e-6));
    assert!(e < 8e-3, "rms_norm_groups {e}");
    let z = uniform(9, rows * 4 * d, 4.0);
    let wg = uniform(10, 128, 1.5);
    let mut xg = act(&be, rows, 4 * d, &x);
    be.gated_rms_norm(&mut xg, &act(&be, rows, 4 * d, &z), &vector(&be, &wg), 1e-6)
        .unwrap();
    let e = rel_err(
        &be.act_to_f32(&xg).unwrap(),
        &norm_ref(&x, &wg, Some(&z), 1e-6),
    );
    assert!(e < 8e-3, "gated_rms_norm {e}");

    let mut bad = res.clone();
    bad[3 * h + 17] = f32::NAN;
    let mut r = act(&be, t, h, &bad);
    let y = be
        .act_to_f32(
            &be.add_rms_norm(&mut r, None, &vector(&be, &w), 1e-6)
                .unwrap(),
        )
        .unwrap();
    for (row, vals) in y.chunks(h).enumerate() {
        assert_eq!(vals.iter().all(|v| v.is_nan()), row == 3, "row {row}");
        assert_eq!(vals.iter().any(|v| v.is_nan()), row == 3, "row {row}");
    }
    assert!(be
        .rms_norm_groups(&mut xa, &vector(&be, &wq[..100]), 1e-6)
        .is_err());
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn rope_rotates_each_row_at_its_batch_position() {
    let be = backend();
    let (heads, d, rd, theta) = (4, 256, 64, 1e7);
    let batch = Batch::packed(&[(0, 5, 37), (2, 100, 29), (1, 0, 3)]);
    let t = batch.rows();
    let x = uniform(11, t * heads * d, 1.0);
    let mut xa = act(&be, t, heads * d, &x);
    be.rope(
        &mut xa,
        heads,
        d,
        &RopeSpec {
            rotary_dim: rd,
            theta,
        },
        &batch,
    )
    .unwrap();
    let got = be.act_to_f32(&xa).unwrap();
    let half = rd / 2;
    let mut want: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for (row, p) in batch.positions().into_iter().enumerate() {
        for h in 0..heads {
            let o = (row * heads + h) * d;
            for i in 0..half {
                let inv = 1.0 / (theta as f32).powf((2 * i) as f32 / rd as f32);
                let ang = (p as f32 * inv) as f64;
                let (x1, x2) = (x[o + i] as f64, x[o + i + half] as f64);
                want[o + i] = x1 * ang.cos() - x2 * ang.sin();
                want[o + i + half] = x2 * ang.cos() + x1 * ang.sin();
            }
        }
    }
    let e = rel_err(&got, &want);
    assert!(e < 8e-3, "rope {e}");
    for (a, b) in got.chunks(d).zip(x.chunks(d)) {
        assert_eq!(&a[rd..], &b[rd..], "pass-through dims untouched");
    }
    let mut bad = act(&be, t, heads * d, &x);
    assert!(be
        .rope(
            &mut bad,
            heads,
            d,
            &RopeSpec {
                rotary_dim: 63,
                theta
            },
            &batch
        )
        .is_err());
}

fn gdn_spec(slots: usize) -> GdnSpec {
    GdnSpec {
        slots,
        k_heads: 2,
        v_heads: 4,
        k_dim: 16,
        v_dim: 24,
        kernel: 4,
    }
}

/// The f64 conv of one sequence given its earlier inputs (`prior`, oldest first).
fn conv_ref(prior: &[f32], x: &[f32], c: usize, w: &[f32], k: usize) -> Vec<f64> {
    let all: Vec<f32> = prior.iter().chain(x).copied().collect();
    let p = prior.len() / c;
    let t = x.len() / c;
    let mut out = Vec::with_capacity(x.len());
    for r in 0..t {
        for ch in 0..c {
            let mut acc = 0.0;
            for j in 0..k {
                let s = (p + r) as isize - (k as isize - 1) + j as isize;
                if s >= 0 {
                    acc += w[ch * k + j] as f64 * all[s as usize * c + ch] as f64;
                }
            }
            out.push(silu(acc));
        }
    }
    out
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn conv1d_varlen_with_state_and_chunks_equal_one_pass() {
    let be = backend();
    let spec = gdn_spec(4);
    let (c, k) = (spec.conv_dim(), spec.kernel);
    let w = uniform(12, c * k, 1.0);
    let wv = vector(&be, &w);
    // Slot 3 first sees 2 rows (fewer than kernel - 1), then a varlen batch of three sequences.
    let mut st = be.new_gdn_state(&spec).unwrap();
    let first = uniform(13, 2 * c, 2.0);
    be.conv1d_silu(
        &act(&be, 2, c, &first),
        &wv,
        &mut st,
        &Batch::single(3, 0, 2),
    )
    .unwrap();
    let batch = Batch::packed(&[(3, 2, 37), (0, 0, 1), (1, 0, 29)]);
    let x = uniform(14, batch.rows() * c, 2.0);
    poison_pool(&be, batch.rows() * c * 2);
    let y = be
        .act_to_f32(
            &be.conv1d_silu(&act(&be, batch.rows(), c, &x), &wv, &mut st, &batch)
                .unwrap(),
        )
        .unwrap();
    let mut want = conv_ref(&first, &x[..37 * c], c, &w, k);
    want.extend(conv_ref(&[], &x[37 * c..38 * c], c, &w, k));
    want.extend(conv_ref(&[], &x[38 * c..], c, &w, k));
    let e = rel_err(&y, &want);
    assert!(e < 8e-3, "conv1d {e}");

    // One chunk of 67 rows vs chunks of 20, 1 and 46: same outputs and state, bit for bit.
    let long = uniform(15, 67 * c, 2.0);
    let mut s1 = be.new_gdn_state(&spec).unwrap();
    let whole = be
        .act_to_f32(
            &be.conv1d_silu(
                &act(&be, 67, c, &long),
                &wv,
                &mut s1,
                &Batch::single(2, 0, 67),
            )
            .unwrap(),
        )
        .unwrap();
    let mut s3 = be.new_gdn_state(&spec).unwrap();
    let mut pieces = Vec::new();
    let mut at = 0;
    for len in [20, 1, 46] {
        let part = &long[at * c..(at + len) * c];
        let b = Batch::single(2, at, len);
        pieces.extend(
            be.act_to_f32(
                &be.conv1d_silu(&act(&be, len, c, part), &wv, &mut s3, &b)
                    .unwrap(),
            )
            .unwrap(),
        );
        at += len;
    }
    assert_eq!(pieces, whole);
    // The next row after either run sees the same state.
    let next = uniform(16, c, 2.0);
    let b = Batch::single(2, 67, 1);
    let a1 = be
        .act_to_f32(
            &be.conv1d_silu(&act(&be, 1, c, &next), &wv, &mut s1, &b)
                .unwrap(),
        )
        .unwrap();
    let a3 = be
        .act_to_f32(
            &be.conv1d_silu(&act(&be, 1, c, &next), &wv, &mut s3, &b)
                .unwrap(),
        )
        .unwrap();
    assert_eq!(a1, a3);
    assert!(rel_err(&a1, &conv_ref(&long, &next, c, &w, k)) < 8e-3);
    // A reset slot starts from zeros again.
    be.reset_gdn_slot(&mut s1, 2).unwrap();
    let fresh = be
        .act_to_f32(
            &be.conv1d_silu(
                &act(&be, 1, c, &next),
                &wv,
                &mut s1,
                &Batch::single(2, 0, 1),
            )
            .unwrap(),
        )
        .unwrap();
    assert!(rel_err(&fresh, &conv_ref(&[], &next, c, &w, k)) < 8e-3);
    assert!(be.reset_gdn_slot(&mut s1, 4).is_err());
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn gating_and_gates_match_f64() {
    let be = backend();
    let (t, h) = (45, 32);
    let a = uniform(17, t * h, 4.0);
    let b = uniform(18, t * h, 4.0);
    let a_log = uniform(19, h, 1.0);
    let dt = uniform(20, h, 1.0);
    poison_pool(&be, t * h * 4);
    let (g, beta) = be
        .gdn_gating(
            &act(&be, t, h, &a),
            &act(&be, t, h, &b),
            &vector(&be, &a_log),
            &vector(&be, &dt),
        )
        .unwrap();
    let softplus = |x: f64| if x > 20.0 { x } else { x.exp().ln_1p() };
    let want_g: Vec<f64> = (0..t * h)
        .map(|i| -(a_log[i % h] as f64).exp() * softplus(a[i] as f64 + dt[i % h] as f64))
        .collect();
    let want_b: Vec<f64> = b.iter().map(|&v| sigmoid(v as f64)).collect();
    assert!(rel_err(&be.act_to_f32(&g).unwrap(), &want_g) < 1e-5);
    assert!(rel_err(&be.act_to_f32(&beta).unwrap(), &want_b) < 1e-5);

    let (r, c) = (33, 300);
    let x = uniform(21, r * c, 3.0);
    let gate = uniform(22, r * c, 3.0);
    let mut xa = act(&be, r, c, &x);
    be.mul_sigmoid(&mut xa, &act(&be, r, c, &gate)).unwrap();
    let want: Vec<f64> = x
        .iter()
        .zip(&gate)
        .map(|(&v, &g)| v as f64 * sigmoid(g as f64))
        .collect();
    assert!(rel_err(&be.act_to_f32(&xa).unwrap(), &want) < 8e-3);
    poison_pool(&be, r * c * 2);
    let s = be
        .swiglu(&act(&be, r, c, &gate), &act(&be, r, c, &x))
        .unwrap();
    let want: Vec<f64> = x
        .iter()
        .zip(&gate)
        .map(|(&u, &g)| silu(g as f64) * u as f64)
        .collect();
    assert!(rel_err(&be.act_to_f32(&s).unwrap(), &want) < 8e-3);
    assert!(be
        .swiglu(
            &act(&be, r, c, &gate),
            &act(&be, r, c - 1, &x[..r * (c - 1)])
        )
        .is_err());
}

/// Causal attention of one sequence in f64: `q` `[t][nq][d]` over `k`, `v`
/// `[kv][nkv][d]` (token-major), queries the last `t` rows.
#[allow(clippy::too_many_arguments)]
fn attention_ref(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    t: usize,
    kv: usize,
    nq: usize,
    nkv: usize,
    d: usize,
) -> Vec<f64> {
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
                    (0..d)
                        .map(|e| qv[e] as f64 * k[(j * nkv + kh) * d + e] as f64)
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let p: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = p.iter().sum();
            for e in 0..d {
                out[(i * nq + h) * d + e] = (0..visible)
                    .map(|j| p[j] * v[(j * nkv + kh) * d + e] as f64)
                    .sum::<f64>()
                    / z;
            }
        }
    }
    out
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn attention_over_the_cache_matches_f64_for_both_routes_gqa_16_2_d256() {
    let be = backend();
    let (nq, nkv, d) = (16, 2, 256);
    let spec = KvSpec {
        slots: 3,
        kv_heads: nkv,
        head_dim: d,
        capacity: 300,
    };
    for route in [
        RouteRequest::Fused,
        RouteRequest::Composed { query_block: 64 },
    ] {
        let mut cache = be.new_kv_cache(&spec).unwrap();
        // History: slot 2 gets 70 rows, slot 0 gets 5, then a varlen step of 37 and 29 rows.
        let mut keys: Vec<Vec<f32>> = vec![Vec::new(); 3];
        let mut vals: Vec<Vec<f32>> = vec![Vec::new(); 3];
        let mut seed = 30;
        let mut write = |cache: &mut headroom_cuda::backend::CudaKvCache,
                         batch: &Batch,
                         keys: &mut Vec<Vec<f32>>,
                         vals: &mut Vec<Vec<f32>>| {
            let n = batch.rows() * nkv * d;
            seed += 2;
            let (k, v) = (uniform(seed, n, 1.0), uniform(seed + 1, n, 1.0));
            be.kv_write(
                cache,
                &act(&be, batch.rows(), nkv * d, &k),
                &act(&be, batch.rows(), nkv * d, &v),
                batch,
            )
            .unwrap();
            for i in 0..batch.sequences() {
                let r = batch.seq_rows(i);
                keys[batch.slots[i]].extend(&k[r.start * nkv * d..r.end * nkv * d]);
                vals[batch.slots[i]].extend(&v[r.start * nkv * d..r.end * nkv * d]);
            }
        };
        write(
            &mut cache,
            &Batch::packed(&[(2, 0, 70), (0, 0, 5)]),
            &mut keys,
            &mut vals,
        );
        let batch = Batch::packed(&[(2, 70, 37), (0, 5, 29)]);
        write(&mut cache, &batch, &mut keys, &mut vals);
        assert_eq!(be.kv_len(&cache, 2), 107);
        let q = uniform(40, batch.rows() * nq * d, 1.0);
        poison_pool(&be, batch.rows() * nq * d * 2);
        let (y, rep) = be
            .attention(&act(&be, batch.rows(), nq * d, &q), &cache, &batch, route)
            .unwrap();
        assert_eq!(
            rep.route,
            match route {
                RouteRequest::Fused => headroom_core::Route::Fused,
                _ => headroom_core::Route::Composed,
            }
        );
        let got = be.act_to_f32(&y).unwrap();
        for i in 0..batch.sequences() {
            let r = batch.seq_rows(i);
            let s = batch.slots[i];
            let kv = keys[s].len() / (nkv * d);
            let want = attention_ref(
                &q[r.start * nq * d..r.end * nq * d],
                &keys[s],
                &vals[s],
                r.len(),
                kv,
                nq,
                nkv,
                d,
            );
            let e = rel_err(&got[r.start * nq * d..r.end * nq * d], &want);
            assert!(e < 1.5e-2, "{route:?} sequence {i}: rel err {e}");
        }
        // History must match what the slot holds; capacity is enforced.
        let wrong = Batch::single(1, 3, 2);
        let two = uniform(50, 2 * nkv * d, 1.0);
        let e = be.kv_write(
            &mut cache,
            &act(&be, 2, nkv * d, &two),
            &act(&be, 2, nkv * d, &two),
            &wrong,
        );
        assert!(matches!(e, Err(OpError::State { slot: 1, .. })), "{e:?}");
        let big = uniform(51, 301 * nkv * d, 1.0);
        let over = Batch::single(1, 0, 301);
        let e = be.kv_write(
            &mut cache,
            &act(&be, 301, nkv * d, &big),
            &act(&be, 301, nkv * d, &big),
            &over,
        );
        assert!(matches!(e, Err(OpError::State { .. })), "{e:?}");
        be.reset_kv_slot(&mut cache, 2).unwrap();
        assert_eq!(be.kv_len(&cache, 2), 0);
    }
}

/// The CPU backend's sampling rule in f64 (greedy, then top-k, top-p, walk).
fn sample_ref(logits: &[f32], p: &SamplingParams, step: u64) -> Option<u32> {
    let finite = || logits.iter().enumerate().filter(|(_, x)| x.is_finite());
    let (best, &max) = finite().fold(None, |acc: Option<(usize, &f32)>, (i, x)| match acc {
        Some((_, m)) if *m >= *x => acc,
        _ => Some((i, x)),
    })?;
    if p.temperature <= 0.0 {
        return Some(best as u32);
    }
    let t = p.temperature as f64;
    let mut probs: Vec<(usize, f64)> = finite()
        .map(|(i, &x)| (i, ((x as f64 - max as f64) / t).exp()))
        .collect();
    probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    if p.top_k > 0 && probs.len() > p.top_k {
        probs.truncate(p.top_k);
    }
    let total: f64 = probs.iter().map(|q| q.1).sum();
    let (mut kept, mut n) = (0.0, 0);
    for q in &probs {
        kept += q.1;
        n += 1;
        if kept >= p.top_p as f64 * total {
            break;
        }
    }
    probs.truncate(n);
    let mut u = rng::uniform(p.seed, step) * kept;
    for &(i, q) in &probs {
        if u < q {
            return Some(i as u32);
        }
        u -= q;
    }
    probs.last().map(|q| q.0 as u32)
}

fn params(temperature: f32, top_p: f32, top_k: usize, seed: u64) -> SamplingParams {
    SamplingParams {
        temperature,
        top_p,
        top_k,
        seed,
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn sampling_is_greedy_on_ties_deterministic_and_follows_the_cpu_rule() {
    let be = backend();
    // Greedy: lowest index among equal maxima; NaN and -inf ignored.
    let row = [0.5f32, f32::NAN, 3.0, 1.0, 3.0, f32::NEG_INFINITY];
    let l = act(&be, 1, row.len(), &row);
    assert_eq!(
        be.sample(&l, &[params(0.0, 1.0, 0, 1)], &[0]).unwrap(),
        vec![2]
    );
    let dead = act(&be, 1, 2, &[f32::NAN, f32::NAN]);
    assert!(be.sample(&dead, &[params(1.0, 1.0, 0, 1)], &[0]).is_err());

    // Distribution: p = (0.25, 0.75, 0) over 2000 steps; top-p / top-k cuts.
    let n = 2000;
    let three = [0.0f32, 3f32.ln(), f32::NEG_INFINITY];
    let rows: Vec<f32> = (0..n).flat_map(|_| three).collect();
    let la = act(&be, n, 3, &rows);
    let steps: Vec<u64> = (0..n as u64).collect();
    let draw = |p: SamplingParams| be.sample(&la, &vec![p; n], &steps).unwrap();
    let a = draw(params(1.0, 1.0, 0, 7));
    assert_eq!(
        a,
        draw(params(1.0, 1.0, 0, 7)),
        "same seed and steps, same tokens"
    );
    assert_ne!(a, draw(params(1.0, 1.0, 0, 8)));
    let ones = a.iter().filter(|&&t| t == 1).count() as f64 / n as f64;
    assert!((ones - 0.75).abs() < 0.04, "p(1) = {ones}");
    assert!(!a.contains(&2));
    assert!(
        draw(params(1.0, 0.7, 0, 3)).iter().all(|&t| t == 1),
        "top_p 0.7 keeps only the 0.75 token"
    );
    assert!(
        draw(params(1.0, 1.0, 1, 3)).iter().all(|&t| t == 1),
        "top_k 1 is greedy"
    );

    // Random bf16 logits (many ties), mixed parameters: agree with the CPU rule.
    let (rows_n, vocab) = (300, 1000);
    let logits = uniform(60, rows_n * vocab, 6.0);
    let ps: Vec<SamplingParams> = (0..rows_n)
        .map(|i| match i % 4 {
            0 => params(0.0, 1.0, 0, i as u64),
            1 => params(0.8, 1.0, 0, i as u64),
            2 => params(1.2, 0.9, 50, i as u64),
            _ => params(0.5, 0.6, 0, i as u64),
        })
        .collect();
    let st: Vec<u64> = (0..rows_n as u64).map(|i| i * 3 + 1).collect();
    let got = be
        .sample(&act(&be, rows_n, vocab, &logits), &ps, &st)
        .unwrap();
    let agree = (0..rows_n)
        .filter(|&i| Some(got[i]) == sample_ref(&logits[i * vocab..(i + 1) * vocab], &ps[i], st[i]))
        .count();
    assert!(
        agree >= rows_n - 3,
        "{agree} of {rows_n} rows agree with the CPU rule"
    );

    // A 262144-token vocabulary, greedy and sampled.
    let big = 262_144;
    let mut lg = uniform(61, big, 4.0);
    lg[200_001] = 9.0;
    lg[250_000] = 9.0;
    let lb = act(&be, 2, big, &[lg.clone(), lg.clone()].concat());
    let t = be
        .sample(
            &lb,
            &[params(0.0, 1.0, 0, 0), params(0.7, 0.95, 40, 9)],
            &[0, 5],
        )
        .unwrap();
    assert_eq!(t[0], 200_001);
    assert_eq!(Some(t[1]), sample_ref(&lg, &params(0.7, 0.95, 40, 9), 5));
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn init_matrix_draws_the_shared_counter_based_normals() {
    let be = backend();
    let (rows, cols) = (1001, 515);
    let init = WeightInit {
        seed: 99,
        mean: 0.1,
        std: 0.02,
    };
    let w = be.init_matrix(rows, cols, init).unwrap();
    // Read it back through linear with identity-like rows: x = e_j picks column j.
    let pick = 3;
    let mut x = vec![0.0f32; cols];
    x[pick] = 1.0;
    let y = be
        .act_to_f32(&be.linear(&act(&be, 1, cols, &x), &w).unwrap())
        .unwrap();
    let mut exact = 0;
    for (r, &v) in y.iter().enumerate() {
        let want =
            bf16::from_f32(init.mean + init.std * rng::normal(init.seed, (r * cols + pick) as u64))
                .to_f32();
        // Device logf/cosf may differ from the host's in the last f32 bit: one bf16 step at most.
        assert!(
            (v - want).abs() <= 8e-3 * want.abs() + 1e-7,
            "row {r}: {v} vs {want}"
        );
        exact += usize::from(v == want);
    }
    assert!(exact >= rows * 99 / 100, "{exact} of {rows} exact");
    assert!(be.init_matrix(usize::MAX, 2, init).is_err());
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn moe_shared_expert_matches_f64_and_bad_top_k_is_refused() {
    let be = backend();
    let (t, h, inter, e, si) = (19, 64, 32, 4, 48);
    let x = uniform(70, t * h, 1.0);
    let wg = uniform(71, si * h, 0.3);
    let wu = uniform(72, si * h, 0.3);
    let wd = uniform(73, h * si, 0.3);
    let w = MoeWeights {
        router: matrix(&be, e, h, &uniform(74, e * h, 0.3)),
        gate_up: matrix(&be, e * 2 * inter, h, &uniform(75, e * 2 * inter * h, 0.3)),
        down: matrix(&be, e * h, inter, &uniform(76, e * h * inter, 0.3)),
        shared_gate_proj: matrix(&be, si, h, &wg),
        shared_up_proj: matrix(&be, si, h, &wu),
        shared_down_proj: matrix(&be, h, si, &wd),
        shared_gate: matrix(&be, 1, h, &uniform(77, h, 0.3)),
    };
    let xa = act(&be, t, h, &x);
    let got = be.act_to_f32(&be.shared_expert(&xa, &w).unwrap()).unwrap();
    let mut want = vec![0.0f64; t * h];
    for r in 0..t {
        let mid: Vec<f64> = (0..si)
            .map(|j| {
                let dot = |m: &[f32]| {
                    (0..h)
                        .map(|c| x[r * h + c] as f64 * m[j * h + c] as f64)
                        .sum::<f64>()
                };
                // The device rounds gate, up and their product to bf16.
                let (g, u) = (
                    bf16::from_f64(dot(&wg)).to_f64(),
                    bf16::from_f64(dot(&wu)).to_f64(),
                );
                bf16::from_f64(silu(g) * u).to_f64()
            })
            .collect();
        for c in 0..h {
            want[r * h + c] = (0..si).map(|j| mid[j] * wd[c * si + j] as f64).sum();
        }
    }
    let err = rel_err(&got, &want);
    assert!(err < 1e-2, "shared expert {err}");
    let spec = MoeSpec {
        num_experts: e,
        top_k: 2,
        intermediate: inter,
        renormalise: true,
    };
    let bad = MoeSpec { top_k: 5, ..spec };
    assert!(be.moe(&xa, &w, &bad).is_err());
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn memory_counts_state_and_keeps_the_peak_across_attention() {
    let be = backend();
    let (active0, _) = be.memory();
    let spec = KvSpec {
        slots: 2,
        kv_heads: 2,
        head_dim: 128,
        capacity: 1000,
    };
    let cache = be.new_kv_cache(&spec).unwrap();
    let (active1, _) = be.memory();
    assert!(
        active1 - active0 >= 2 * 2 * 2 * 1000 * 128 * 2,
        "K and V allocated up front"
    );
    be.reset_peak_memory();
    {
        let _big = be.act_from_f32(1000, 1000, &vec![0.0; 1_000_000]).unwrap();
    }
    let (_, peak) = be.memory();
    assert!(peak >= active1 + 2_000_000);
    // Attention restarts the allocator's own mark; the backend's peak survives it.
    let mut c = cache;
    let b = Batch::single(0, 0, 3);
    let kv = be.act_from_f32(3, 256, &[0.5; 768]).unwrap();
    be.kv_write(&mut c, &kv, &kv, &b).unwrap();
    let q = be.act_from_f32(3, 512, &[0.5; 1536]).unwrap();
    be.attention(&q, &c, &b, RouteRequest::Composed { query_block: 0 })
        .unwrap();
    assert!(be.memory().1 >= peak);
}

/// The gated delta rule of one sequence in f64 (the recurrent form), state
/// `[hv][dk][dv]` carried in `s`.
fn gdn_ref(spec: &GdnSpec, qkv: &[f32], g: &[f32], beta: &[f32], s: &mut [f64]) -> Vec<f64> {
    let (hk, hv, dk, dv) = (spec.k_heads, spec.v_heads, spec.k_dim, spec.v_dim);
    let c = spec.conv_dim();
    let t = qkv.len() / c;
    let norm = |x: &[f32], scale: f64| -> Vec<f64> {
        let ss: f64 = x.iter().map(|&a| (a as f64).powi(2)).sum();
        x.iter()
            .map(|&a| a as f64 / (ss + 1e-6).sqrt() * scale)
            .collect()
    };
    let mut out = vec![0.0; t * hv * dv];
    for r in 0..t {
        let row = &qkv[r * c..(r + 1) * c];
        for h in 0..hv {
            let kh = h / (hv / hk);
            let q = norm(&row[kh * dk..(kh + 1) * dk], 1.0 / (dk as f64).sqrt());
            let k = norm(&row[hk * dk + kh * dk..hk * dk + (kh + 1) * dk], 1.0);
            let v = &row[2 * hk * dk + h * dv..2 * hk * dk + (h + 1) * dv];
            let st = &mut s[h * dk * dv..(h + 1) * dk * dv];
            let decay = (g[r * hv + h] as f64).exp();
            st.iter_mut().for_each(|x| *x *= decay);
            for j in 0..dv {
                let mem: f64 = (0..dk).map(|i| st[i * dv + j] * k[i]).sum();
                let delta = (v[j] as f64 - mem) * beta[r * hv + h] as f64;
                for i in 0..dk {
                    st[i * dv + j] += k[i] * delta;
                }
                out[(r * hv + h) * dv + j] = (0..dk).map(|i| st[i * dv + j] * q[i]).sum();
            }
        }
    }
    out
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn gated_delta_rule_matches_f64_across_varlen_chunks_or_reports_unmerged() {
    let be = backend();
    // The 35B-A3B GDN shape: 16 key heads, 32 value heads, head dims 128.
    let spec = GdnSpec {
        slots: 3,
        k_heads: 16,
        v_heads: 32,
        k_dim: 128,
        v_dim: 128,
        kernel: 4,
    };
    let (c, hv) = (spec.conv_dim(), spec.v_heads);
    let mut st = be.new_gdn_state(&spec).unwrap();
    let one = Batch::single(0, 0, 5);
    let qkv5 = act(&be, 5, c, &uniform(80, 5 * c, 1.0));
    let gb = act(&be, 5, hv, &uniform(81, 5 * hv, 1.0));
    // bf16 g / beta are refused: they must come from gdn_gating (f32).
    assert!(matches!(
        be.gated_delta_rule(&qkv5, &gb, &gb, &mut st, &one),
        Err(OpError::Shape { .. })
    ));
    let a_log = vector(&be, &uniform(82, hv, 1.0));
    let dt = vector(&be, &uniform(83, hv, 1.0));
    let mut refs = vec![vec![0.0f64; spec.recurrent_len()]; spec.slots];
    // Two steps: slot 2 and 0 start (37 and 70 rows), then continue with 29 and 1 rows.
    let steps = [
        Batch::packed(&[(2, 0, 37), (0, 0, 70)]),
        Batch::packed(&[(0, 70, 29), (2, 37, 1)]),
    ];
    for (n, batch) in steps.iter().enumerate() {
        let t = batch.rows();
        let qkv = uniform(84 + n as u64, t * c, 1.0);
        let a = act(&be, t, hv, &uniform(90 + n as u64, t * hv, 3.0));
        let b = act(&be, t, hv, &uniform(95 + n as u64, t * hv, 3.0));
        let (g, beta) = be.gdn_gating(&a, &b, &a_log, &dt).unwrap();
        poison_pool(&be, t * hv * spec.v_dim * 2);
        let out = match be.gated_delta_rule(&act(&be, t, c, &qkv), &g, &beta, &mut st, batch) {
            Err(OpError::Unsupported { reason, .. }) => {
                assert!(reason.contains("not merged yet"), "{reason}");
                return;
            }
            other => be.act_to_f32(&other.unwrap()).unwrap(),
        };
        let (gh, bh) = (be.act_to_f32(&g).unwrap(), be.act_to_f32(&beta).unwrap());
        for i in 0..batch.sequences() {
            let r = batch.seq_rows(i);
            let want = gdn_ref(
                &spec,
                &qkv[r.start * c..r.end * c],
                &gh[r.start * hv..r.end * hv],
                &bh[r.start * hv..r.end * hv],
                &mut refs[batch.slots[i]],
            );
            let got = &out[r.start * hv * spec.v_dim..r.end * hv * spec.v_dim];
            let e = rel_err(got, &want);
            assert!(e < 2e-2, "step {n} sequence {i}: rel err {e}");
        }
    }
}

/// The sparse MoE block in f64 (router softmax, top-k, renormalise, SwiGLU
/// experts, shared expert with its sigmoid gate).
#[allow(clippy::too_many_arguments)]
fn moe_ref(
    x: &[f32],
    h: usize,
    spec: &MoeSpec,
    router: &[f32],
    gate_up: &[f32],
    down: &[f32],
    shared: &[f64],
    sgate: &[f32],
) -> Vec<f64> {
    let (e, i_dim) = (spec.num_experts, spec.intermediate);
    let t = x.len() / h;
    let dot = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(&p, &q)| p as f64 * q as f64)
            .sum::<f64>()
    };
    let mut out = vec![0.0; t * h];
    for r in 0..t {
        let xr = &x[r * h..(r + 1) * h];
        let logits: Vec<f64> = (0..e)
            .map(|j| dot(xr, &router[j * h..(j + 1) * h]))
            .collect();
        let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = logits.iter().map(|l| (l - m).exp()).sum();
        let mut order: Vec<usize> = (0..e).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let chosen = &order[..spec.top_k];
        let kept: f64 = chosen.iter().map(|&j| (logits[j] - m).exp() / z).sum();
        for &ex in chosen {
            let mut w = (logits[ex] - m).exp() / z;
            if spec.renormalise {
                w /= kept;
            }
            let mid: Vec<f64> = (0..i_dim)
                .map(|k| {
                    let g = dot(xr, &gate_up[(ex * 2 * i_dim + k) * h..][..h]);
                    let u = dot(xr, &gate_up[(ex * 2 * i_dim + i_dim + k) * h..][..h]);
                    silu(g) * u
                })
                .collect();
            for col in 0..h {
                let row = &down[(ex * h + col) * i_dim..][..i_dim];
                out[r * h + col] += w * mid
                    .iter()
                    .zip(row)
                    .map(|(&a, &b)| a * b as f64)
                    .sum::<f64>();
            }
        }
        let sg = sigmoid(dot(xr, sgate));
        for col in 0..h {
            out[r * h + col] += sg * shared[r * h + col];
        }
    }
    out
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn moe_block_matches_f64_or_reports_unmerged() {
    let be = backend();
    let (t, h, inter, e, si) = (67, 256, 128, 16, 128);
    let spec = MoeSpec {
        num_experts: e,
        top_k: 4,
        intermediate: inter,
        renormalise: true,
    };
    let x = uniform(100, t * h, 1.0);
    let router = uniform(101, e * h, 0.2);
    let gate_up = uniform(102, e * 2 * inter * h, 0.1);
    let down = uniform(103, e * h * inter, 0.1);
    let sgate = uniform(104, h, 0.1);
    let w = MoeWeights {
        router: matrix(&be, e, h, &router),
        gate_up: matrix(&be, e * 2 * inter, h, &gate_up),
        down: matrix(&be, e * h, inter, &down),
        shared_gate_proj: matrix(&be, si, h, &uniform(105, si * h, 0.1)),
        shared_up_proj: matrix(&be, si, h, &uniform(106, si * h, 0.1)),
        shared_down_proj: matrix(&be, h, si, &uniform(107, h * si, 0.1)),
        shared_gate: matrix(&be, 1, h, &sgate),
    };
    let xa = act(&be, t, h, &x);
    // The shared expert (checked against f64 in its own test) as the device computes it.
    let shared: Vec<f64> = be
        .act_to_f32(&be.shared_expert(&xa, &w).unwrap())
        .unwrap()
        .iter()
        .map(|&v| v as f64)
        .collect();
    poison_pool(&be, t * h * 2);
    match be.moe(&xa, &w, &spec) {
        Err(OpError::Unsupported { reason, .. }) => {
            assert!(reason.contains("not merged yet"), "{reason}")
        }
        other => {
            let got = be.act_to_f32(&other.unwrap()).unwrap();
            let want = moe_ref(&x, h, &spec, &router, &gate_up, &down, &shared, &sgate);
            let err = rel_err(&got, &want);
            assert!(err < 2e-2, "moe rel err {err}");
            assert!(be
                .supports(&OpKey::Moe {
                    num_experts: e,
                    top_k: 4
                })
                .is_ok());
        }
    }
}

/// A small case of every kernel, for compute-sanitizer (memcheck) runs.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn small_every_kernel_once() {
    let be = backend();
    let spec = gdn_spec(2);
    let c = spec.conv_dim();
    let b = Batch::packed(&[(1, 0, 3), (0, 0, 2)]);
    let x = act(&be, 5, c, &uniform(90, 5 * c, 1.0));
    let mut st = be.new_gdn_state(&spec).unwrap();
    let y = be
        .conv1d_silu(&x, &vector(&be, &uniform(91, c * 4, 1.0)), &mut st, &b)
        .unwrap();
    let mut r = be
        .linear(&y, &matrix(&be, 70, c, &uniform(92, 70 * c, 0.1)))
        .unwrap();
    let n = be
        .add_rms_norm(&mut r, None, &vector(&be, &[0.1; 70]), 1e-6)
        .unwrap();
    let mut q = be
        .linear(&n, &matrix(&be, 128, 70, &uniform(93, 128 * 70, 0.1)))
        .unwrap();
    be.rms_norm_groups(&mut q, &vector(&be, &[0.0; 64]), 1e-6)
        .unwrap();
    be.rope(
        &mut q,
        2,
        64,
        &RopeSpec {
            rotary_dim: 16,
            theta: 1e4,
        },
        &b,
    )
    .unwrap();
    let kvs = KvSpec {
        slots: 2,
        kv_heads: 1,
        head_dim: 64,
        capacity: 8,
    };
    let mut cache = be.new_kv_cache(&kvs).unwrap();
    let k = be.gather_rows(&q, &[0, 1, 2, 3, 4]).unwrap();
    let k1 = be
        .linear(&k, &matrix(&be, 64, 128, &uniform(94, 64 * 128, 0.1)))
        .unwrap();
    be.kv_write(&mut cache, &k1, &k1, &b).unwrap();
    for route in [
        RouteRequest::Fused,
        RouteRequest::Composed { query_block: 2 },
    ] {
        let (mut o, _) = be.attention(&q, &cache, &b, route).unwrap();
        let z = be.swiglu(&o, &q).unwrap();
        be.gated_rms_norm(&mut o, &z, &vector(&be, &[1.0; 64]), 1e-6)
            .unwrap();
        be.mul_sigmoid(&mut o, &z).unwrap();
    }
    let e = be
        .embed(&matrix(&be, 10, 70, &uniform(95, 700, 1.0)), &[1, 9])
        .unwrap();
    let t = be
        .sample(
            &e,
            &[params(0.0, 1.0, 0, 1), params(0.9, 0.8, 5, 2)],
            &[0, 1],
        )
        .unwrap();
    assert!(t.iter().all(|&v| v < 70));
    be.synchronize().unwrap();
}
