//! Dense and element-wise ops: linear, embed / gather, the norms, the
//! GDN gating and gates, synthetic weight draws.

use super::*;

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
    assert_eq!(
        e.dtype,
        headroom_core::Dtype::F32,
        "the residual stream is f32"
    );
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

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn gather_rows_copies_exact_rows_by_16_bytes_and_by_element() {
    let be = backend();
    // bf16 rows of 1,024 (the 16-byte kernel) and 1,004 columns (2,008
    // bytes: by element); f32 rows (the residual stream, from `embed`) of
    // 128 (16-byte kernel) and 130 columns.
    let rows = 9;
    let pick = [8usize, 0, 3, 3, 7];
    for (cols, f32_rows) in [(1024, false), (1004, false), (128, true), (130, true)] {
        let vals = uniform(11 + cols as u64, rows * cols, 3.0);
        let x = if f32_rows {
            let ids: Vec<u32> = (0..rows as u32).collect();
            be.embed(&matrix(&be, rows, cols, &vals), &ids).unwrap()
        } else {
            act(&be, rows, cols, &vals)
        };
        poison_pool(&be, pick.len() * cols * 4);
        let g = be.gather_rows(&x, &pick).unwrap();
        assert_eq!((g.rows, g.cols, g.dtype), (pick.len(), cols, x.dtype));
        let want = be.act_to_f32(&x).unwrap();
        let got = be.act_to_f32(&g).unwrap();
        for (i, &r) in pick.iter().enumerate() {
            assert_eq!(
                &got[i * cols..(i + 1) * cols],
                &want[r * cols..(r + 1) * cols],
                "{cols} columns of {:?}, output row {i}",
                x.dtype
            );
        }
    }
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

/// The f32 residual stream (`embed` → `add_rms_norm`): the sums stay f32
/// (exactly the host's f32 additions, in order), the normed rows match f64,
/// a NaN poisons only its row; the 16-byte register-cached kernel (widths
/// % 4 up to 4096), the pair one (even widths up to 4096) and the general
/// one (odd or wider) alike.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn f32_residual_add_norm_matches_f64() {
    let be = backend();
    // 1000 and 2048 (the model's): the 16-byte kernel; 1002: the pair kernel;
    // 999 and 4098: the general one.
    for (t, h) in [(45, 1000), (9, 2048), (11, 1002), (13, 999), (7, 4098)] {
        let res = uniform(40 + h as u64, t * h, 2.0);
        let d1 = uniform(41 + h as u64, t * h, 1.0);
        let d2 = uniform(42 + h as u64, t * h, 0.01);
        let w = uniform(43 + h as u64, h, 0.5);
        let ids: Vec<u32> = (0..t as u32).collect();
        let mut r = be.embed(&matrix(&be, t, h, &res), &ids).unwrap();
        let (wv, a1, a2) = (vector(&be, &w), act(&be, t, h, &d1), act(&be, t, h, &d2));
        poison_pool(&be, t * h * 2);
        let y1 = be.add_rms_norm(&mut r, Some(&a1), &wv, 1e-6).unwrap();
        poison_pool(&be, t * h * 2);
        let y2 = be.add_rms_norm(&mut r, Some(&a2), &wv, 1e-6).unwrap();
        assert_eq!(y2.dtype, headroom_core::Dtype::Bf16);
        let s1: Vec<f32> = res.iter().zip(&d1).map(|(a, b)| a + b).collect();
        let s2: Vec<f32> = s1.iter().zip(&d2).map(|(a, b)| a + b).collect();
        assert_eq!(be.act_to_f32(&r).unwrap(), s2, "[{t}][{h}] f32 sums");
        for (y, s) in [(&y1, &s1), (&y2, &s2)] {
            let e = rel_err(&be.act_to_f32(y).unwrap(), &norm_ref(s, &w, None, 1e-6));
            assert!(e < 5e-3, "[{t}][{h}] add_rms_norm f32 residual {e}");
        }
        // No delta: the residual is only read.
        let y0 = be.add_rms_norm(&mut r, None, &wv, 1e-6).unwrap();
        assert_eq!(be.act_to_f32(&r).unwrap(), s2);
        assert_eq!(be.act_to_f32(&y0).unwrap(), be.act_to_f32(&y2).unwrap());
        // A NaN in the delta poisons its row of the residual and the output only.
        let mut bad = d2.clone();
        bad[(t / 2) * h + 5] = f32::NAN;
        let y = be
            .act_to_f32(
                &be.add_rms_norm(&mut r, Some(&act(&be, t, h, &bad)), &wv, 1e-6)
                    .unwrap(),
            )
            .unwrap();
        for (row, vals) in y.chunks(h).enumerate() {
            assert_eq!(vals.iter().all(|v| v.is_nan()), row == t / 2, "row {row}");
            assert_eq!(vals.iter().any(|v| v.is_nan()), row == t / 2, "row {row}");
        }
        // The delta must be a bf16 activation of the residual's shape.
        let f32_delta = be.embed(&matrix(&be, t, h, &d1), &ids).unwrap();
        assert!(be
            .add_rms_norm(&mut r, Some(&f32_delta), &wv, 1e-6)
            .is_err());
        assert!(be
            .add_rms_norm(
                &mut r,
                Some(&act(&be, t - 1, h, &d1[..(t - 1) * h])),
                &wv,
                1e-6
            )
            .is_err());
    }
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

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn init_matrix_draws_the_shared_counter_based_normals() {
    let be = backend();
    let (rows, cols) = (1001, 515);
    let init = WeightInit::new(99, 0.1, 0.02);
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
