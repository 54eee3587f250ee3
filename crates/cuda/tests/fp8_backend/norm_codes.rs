//! The add + RMSNorm of a backend with FP8 weights writes its rows' e4m3
//! codes beside them (`ops/norm/ops_norm.cu` `add_rms_norm_quad_f32res_fp8`;
//! the GDN's gated norm likewise, `gated_rms_norm_g16x1_fp8`, per value head
//! of 128):
//! the normed rows and the residual bit for bit those of the plain norm (the
//! same backend before its first FP8 upload), the codes and scales those the
//! quantization kernel makes from the normed rows, NaN rows and all-zero
//! rows included; no codes at the GEMV's 8 rows or for widths not of whole
//! 128-column groups; and the FP8 GEMMs and the MoE block that read the
//! codes give the bits they give on the act without them.

use super::*;
use headroom_cuda::ops::fp8::gemm::QuantizedX;

/// An f32 residual `[t][h]` (the model's stream starts at `embed`).
pub(super) fn residual(be: &CudaBackend, t: usize, h: usize, v: &[f32]) -> CudaAct {
    let ids: Vec<u32> = (0..t as u32).collect();
    let table = be
        .upload_matrix(Tensor::from_f32(vec![t, h], v.to_vec()))
        .unwrap();
    let r = be.embed(&table, &ids).unwrap();
    assert_eq!(r.dtype, Dtype::F32);
    r
}

pub(super) fn bits(be: &CudaBackend, a: &CudaAct) -> Vec<u32> {
    be.act_to_f32(a)
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// The codes and scales of `q`, read back.
pub(super) fn read_codes(be: &CudaBackend, q: &QuantizedX) -> (Vec<u8>, Vec<u32>) {
    let dev = be.device();
    let mut c = vec![0u8; q.m * q.k];
    dev.read(&q.q, &mut c).unwrap();
    let mut s = vec![0f32; q.m * q.k / 128];
    dev.read(&q.s, &mut s).unwrap();
    (c, s.iter().map(|v| v.to_bits()).collect())
}

/// Asserts that the codes `a` carries are those the quantization kernel
/// makes from `a`'s rows; returns the scales' bits.
fn check_codes(be: &CudaBackend, a: &CudaAct, q: &QuantizedX, what: &str) -> Vec<u32> {
    assert_eq!((q.m, q.k), (a.rows, a.cols), "{what}: the codes' shape");
    let want = QuantizedX::new(be.device(), a.buffer(), a.rows, a.cols).unwrap();
    let (got_c, got_s) = read_codes(be, q);
    let (want_c, want_s) = read_codes(be, &want);
    assert_eq!(got_s, want_s, "{what}: scales");
    assert_eq!(got_c, want_c, "{what}: codes");
    got_s
}

/// Asserts that the FP8 GEMM by `w` gives the same bits on `a` (with its
/// codes) and on a copy of its rows without them.
fn check_gemm_on_codes(be: &CudaBackend, a: &CudaAct, w: &CudaWeight, what: &str) {
    let copy = be
        .act_from_f32(a.rows, a.cols, &be.act_to_f32(a).unwrap())
        .unwrap();
    assert!(copy.quantized().is_none());
    let (y, y0) = (be.linear(a, w).unwrap(), be.linear(&copy, w).unwrap());
    assert_eq!(bits(be, &y), bits(be, &y0), "{what}: the GEMM on the codes");
}

/// Rows `(t, h)`, each case's residual, delta and weight; row 1 all zero
/// (scale 1, zero codes), row 3's delta with a NaN (its row NaN).
fn inputs(t: usize, h: usize, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut res = uniform(seed, t * h, 2.0);
    let mut del = uniform(seed + 1, t * h, 0.5);
    for c in 0..h {
        res[h + c] = 0.0;
        del[h + c] = 0.0;
    }
    del[3 * h + 7] = f32::NAN;
    (res, del, uniform(seed + 2, h, 0.5))
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8wire.sh"]
fn the_norm_of_an_fp8_backend_writes_the_codes_its_gemms_would_make() {
    let be = backend();
    let cases = [
        (9, 2048),
        (37, 2048),
        (662, 2048),
        (40, 4096),
        (12, 256),
        (8, 2048),
        (20, 1000),
    ];
    // Case i's norm over fresh inputs, its output and the residual.
    let run = |i: usize, t: usize, h: usize| {
        let (res, del, w) = inputs(t, h, 900 + i as u64);
        let mut r = residual(&be, t, h, &res);
        let (wv, d) = (
            be.upload_vector(Tensor::from_f32(vec![h], w)).unwrap(),
            be.act_from_f32(t, h, &del).unwrap(),
        );
        poison_pool(&be, &[t * h, t * h * 2, t * (h / 128).max(1) * 4]);
        let y = be.add_rms_norm(&mut r, Some(&d), &wv, 1e-6).unwrap();
        (y, r)
    };
    // Before any FP8 upload: the plain norm.
    let mut plain = Vec::new();
    for (i, &(t, h)) in cases.iter().enumerate() {
        let (y, r) = run(i, t, h);
        assert!(
            y.quantized().is_none(),
            "[{t}][{h}]: codes before any FP8 weight"
        );
        plain.push((bits(&be, &y), bits(&be, &r)));
    }
    let (wq, _) = fp8(&be, 256, 2048, 256, &uniform(990, 256 * 2048, 0.05));
    for (i, &(t, h)) in cases.iter().enumerate() {
        let (y, r) = run(i, t, h);
        assert_eq!(
            (bits(&be, &y), bits(&be, &r)),
            plain[i],
            "[{t}][{h}]: the norm's bits changed"
        );
        let takes = t > 8 && h % 128 == 0;
        let Some(q) = y.quantized() else {
            assert!(!takes, "[{t}][{h}]: no codes");
            continue;
        };
        assert!(takes, "[{t}][{h}]: codes where no FP8 GEMM reads them");
        let what = format!("[{t}][{h}]");
        let scales = check_codes(&be, &y, q, &what);
        assert_eq!(
            scales[h / 128],
            1f32.to_bits(),
            "{what}: the zero row's scale"
        );
        if h == 2048 {
            check_gemm_on_codes(&be, &y, &wq, &what);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8wire.sh"]
fn the_moe_block_on_a_normed_act_with_codes_gives_the_bits_it_gives_without() {
    // The 35B block's widths (hidden 2,048, intermediate 512), fewer
    // experts: 40 rows (the native FP8 grouped GEMMs) and 20 (the FP8
    // decode path, whose shared expert reads the codes).
    let be = backend();
    let s = Shape {
        hidden: 2048,
        experts: 16,
        top_k: 4,
        inter: 512,
        shared: 512,
        first: 0,
        local: 16,
    };
    let w = weights(&be, s, 77);
    for t in [40usize, 20] {
        let (res, del, nw) = inputs(t, s.hidden, 70 + t as u64);
        let mut r = residual(&be, t, s.hidden, &res);
        let (wv, d) = (
            be.upload_vector(Tensor::from_f32(vec![s.hidden], nw))
                .unwrap(),
            be.act_from_f32(t, s.hidden, &del).unwrap(),
        );
        let y = be.add_rms_norm(&mut r, Some(&d), &wv, 1e-6).unwrap();
        assert!(y.quantized().is_some(), "{t} rows: no codes");
        let copy = be
            .act_from_f32(t, s.hidden, &be.act_to_f32(&y).unwrap())
            .unwrap();
        let a = be.moe(&y, &w.dev, &spec(s)).unwrap();
        let b = be.moe(&copy, &w.dev, &spec(s)).unwrap();
        let (a, b) = (bits(&be, &a), bits(&be, &b));
        assert_eq!(a, b, "{t} rows: the MoE block on the norm's codes");
        assert!(
            a.iter().any(|v| f32::from_bits(*v) != 0.0),
            "{t} rows: all zero"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8wire.sh"]
fn the_gated_norm_of_an_fp8_backend_writes_the_codes_its_gemm_would_make() {
    let be = backend();
    // (rows, value heads, group): the 35B's 32 heads of 128 at 9, 37 and 662
    // rows, 3 heads at 11 rows; no codes at 8 rows or for groups of 64.
    let cases = [
        (9, 32, 128),
        (37, 32, 128),
        (662, 32, 128),
        (11, 3, 128),
        (8, 32, 128),
        (20, 4, 64),
    ];
    let input = |i: usize, t: usize, n: usize| {
        let mut x = uniform(700 + i as u64, t * n, 1.5);
        for v in &mut x[n..2 * n] {
            *v = 0.0; // row 1 all zero: every group's scale 1
        }
        x[2 * n + 5] = f32::NAN; // row 2's first group NaN
        (x, uniform(710 + i as u64, t * n, 3.0))
    };
    let run = |i: usize, t: usize, n: usize, d: usize| {
        let (x, z) = input(i, t, n);
        let mut a = be.act_from_f32(t, n, &x).unwrap();
        let zd = be.act_from_f32(t, n, &z).unwrap();
        let w = be
            .upload_vector(Tensor::from_f32(vec![d], uniform(720 + d as u64, d, 0.5)))
            .unwrap();
        poison_pool(&be, &[t * n, t * n / d * 4]);
        be.gated_rms_norm(&mut a, &zd, &w, 1e-6).unwrap();
        a
    };
    let plain: Vec<_> = cases
        .iter()
        .enumerate()
        .map(|(i, &(t, h, d))| {
            let a = run(i, t, h * d, d);
            assert!(
                a.quantized().is_none(),
                "[{t}][{h} x {d}]: codes before any FP8 weight"
            );
            bits(&be, &a)
        })
        .collect();
    let (wq, _) = fp8(&be, 256, 4096, 256, &uniform(991, 256 * 4096, 0.05));
    for (i, &(t, h, d)) in cases.iter().enumerate() {
        let n = h * d;
        let a = run(i, t, n, d);
        assert_eq!(
            bits(&be, &a),
            plain[i],
            "[{t}][{h} x {d}]: the norm's bits changed"
        );
        let takes = t > 8 && d == 128;
        let Some(q) = a.quantized() else {
            assert!(!takes, "[{t}][{h} x {d}]: no codes");
            continue;
        };
        assert!(
            takes,
            "[{t}][{h} x {d}]: codes where no FP8 GEMM reads them"
        );
        let what = format!("[{t}][{h} x {d}]");
        let scales = check_codes(&be, &a, q, &what);
        assert!(
            scales[h..2 * h].iter().all(|&s| s == 1f32.to_bits()),
            "{what}: the zero row's scales"
        );
        if n == 4096 {
            check_gemm_on_codes(&be, &a, &wq, &what);
        }
    }
    // Codes an act carried are dropped when the gated norm rewrites it.
    let (t, n) = (20, 256);
    let (res, del, nw) = inputs(t, n, 730);
    let mut r = residual(&be, t, n, &res);
    let (wv, dd) = (
        be.upload_vector(Tensor::from_f32(vec![n], nw)).unwrap(),
        be.act_from_f32(t, n, &del).unwrap(),
    );
    let mut y = be.add_rms_norm(&mut r, Some(&dd), &wv, 1e-6).unwrap();
    assert!(y.quantized().is_some());
    let w64 = be
        .upload_vector(Tensor::from_f32(vec![64], uniform(731, 64, 0.5)))
        .unwrap();
    be.gated_rms_norm(&mut y, &dd, &w64, 1e-6).unwrap();
    assert!(
        y.quantized().is_none(),
        "stale codes kept after the gated norm"
    );
}
