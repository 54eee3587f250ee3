//! Ops over a varlen batch with state: RoPE, conv1d with its state, the KV
//! cache and attention, and the backend's memory counters.

use super::*;

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
    let spec = KvSpec::contiguous(3, nkv, d, 300);
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

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn memory_counts_state_and_keeps_the_peak_across_attention() {
    let be = backend();
    let (active0, _) = be.memory();
    let spec = KvSpec::contiguous(2, 2, 128, 1000);
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
