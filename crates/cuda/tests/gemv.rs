//! The skinny GEMV (`ops/gemv/`) against an f64 host reference on fresh
//! random inputs with NaN-poisoned outputs: 1 ..= 8 rows, tails in both dimensions (k not a multiple of 8 or
//! of a lane stage; outputs not a multiple of a CTA's), bf16 and f32 out, a
//! NaN input row, `linear_many` equal to separate `linear`s, every 35B-A3B
//! decode shape at 1 ..= 8 rows; the decode step's add + RMSNorm against
//! f64 (a NaN input poisons its row only); then the side-by-side bench
//! against cuBLAS on the 35B-A3B decode shapes and the timings of the GEMV
//! (`gemv_timing:` lines) and of the norm (`norm_timing:` lines).
//! Run by bench/gpu/check_gemv.sh on the GPU machine.

use half::bf16;
use headroom_core::ops::{Backend, WeightInit};
use headroom_core::{Dtype, Tensor};
use headroom_cuda::backend::{CudaAct, CudaBackend, CudaWeight};
use headroom_cuda::event::StreamEvent as Event;
use rand::{Rng, SeedableRng};

fn backend() -> CudaBackend {
    CudaBackend::open(0).expect("a CUDA device (run by bench/gpu/check_gemv.sh)")
}

/// `n` values uniform in `[-1, 1)`, rounded to bf16 (what the device holds).
fn uniform(seed: u64, n: usize) -> Vec<f32> {
    let mut g = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| bf16::from_f32(g.random::<f32>() * 2.0 - 1.0).to_f32())
        .collect()
}

fn matrix(be: &CudaBackend, rows: usize, cols: usize, v: &[f32]) -> CudaWeight {
    be.upload_matrix(Tensor::from_f32(vec![rows, cols], v.to_vec()))
        .unwrap()
}

/// Leaves NaN-filled (0xFF) blocks of each size in the pool, so the next
/// outputs of those sizes start as NaN.
fn poison_pool(be: &CudaBackend, sizes: &[usize]) {
    let dev = be.device();
    let bufs: Vec<_> = sizes
        .iter()
        .flat_map(|&b| (0..4).map(move |_| b))
        .map(|b| dev.alloc(b).unwrap())
        .collect();
    for b in &bufs {
        dev.fill_bytes(b, 0xFF).unwrap();
    }
    dev.synchronize().unwrap();
}

/// `(y, Σ|x·w|)` per output, `[rows][n]`, in f64.
fn reference(x: &[f32], w: &[f32], rows: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; rows * n];
    let mut l1 = vec![0.0; rows * n];
    for r in 0..rows {
        for j in 0..n {
            let (mut s, mut a) = (0.0f64, 0.0f64);
            for i in 0..k {
                let p = x[r * k + i] as f64 * w[j * k + i] as f64;
                s += p;
                a += p.abs();
            }
            y[r * n + j] = s;
            l1[r * n + j] = a;
        }
    }
    (y, l1)
}

/// Every output finite and within bf16 rounding (bf16 out) plus `sum` ·
/// Σ|x·w| of summation error.
fn assert_close_to(what: &str, got: &[f32], want: &[f64], l1: &[f64], out: Dtype, sum: f64) {
    assert_eq!(got.len(), want.len(), "{what}");
    let round = if out == Dtype::Bf16 { 4e-3 } else { 1e-6 };
    for (i, ((&g, &w), &a)) in got.iter().zip(want).zip(l1).enumerate() {
        assert!(g.is_finite(), "{what}: output {i} is {g} (want {w})");
        let tol = round * w.abs() + sum * a + 1e-30;
        assert!(
            (g as f64 - w).abs() <= tol,
            "{what}: output {i}: {g} vs {w} (tol {tol})"
        );
    }
}

/// [`assert_close_to`] at the GEMV's bound: f32 sums in lane order, 3e-5 · Σ|x·w|.
fn assert_close(what: &str, got: &[f32], want: &[f64], l1: &[f64], out: Dtype) {
    assert_close_to(what, got, want, l1, out, 3e-5);
}

/// The GEMV and cuBLAS (`linear_with`'s `gemv` flag).
const PATHS: [(&str, bool); 2] = [("gemv", true), ("cublas", false)];

/// Runs `x` (`rows × k`) by matrices of `ns` outputs on every path and
/// checks each output against f64.
fn check_case(be: &CudaBackend, rows: usize, k: usize, ns: &[usize], seed: u64) {
    let x = uniform(seed, rows * k);
    let xa = be.act_from_f32(rows, k, &x).unwrap();
    let ws: Vec<Vec<f32>> = ns
        .iter()
        .enumerate()
        .map(|(i, &n)| uniform(seed * 31 + i as u64 + 1, n * k))
        .collect();
    let dev_ws: Vec<CudaWeight> = ns
        .iter()
        .zip(&ws)
        .map(|(&n, w)| matrix(be, n, k, w))
        .collect();
    let refs: Vec<&CudaWeight> = dev_ws.iter().collect();
    let want: Vec<_> = ns
        .iter()
        .zip(&ws)
        .map(|(&n, w)| reference(&x, w, rows, n, k))
        .collect();
    for out in [Dtype::Bf16, Dtype::F32] {
        for (name, gemv) in PATHS {
            let sizes: Vec<usize> = ns.iter().map(|n| rows * n * out.size_bytes()).collect();
            poison_pool(be, &sizes);
            let ys = be.linear_with(&xa, &refs, gemv, out).unwrap();
            assert_eq!(ys.len(), ns.len());
            for (j, (y, (w, l1))) in ys.iter().zip(&want).enumerate() {
                assert_eq!((y.rows, y.cols, y.dtype), (rows, ns[j], out));
                let what = format!("{name} rows {rows} k {k} n {} {out}", ns[j]);
                // cuBLAS (the comparison path, not under test) at 8 rows and k
                // 2056 was measured 1e-4 · Σ|x·w| off (a bf16 split-K reduction?).
                let sum = if gemv { 3e-5 } else { 3e-4 };
                assert_close_to(&what, &be.act_to_f32(y).unwrap(), w, l1, out, sum);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gemv.sh"]
fn the_gemv_matches_f64_for_1_to_8_rows_with_tails() {
    let be = backend();
    // k: 8 · 9 chunks (fewer than a warp's lanes), 200 (25 chunks), 2056 (one
    // chunk past 8 full lane stages), 37 and 1030 (not multiples of 8: the
    // scalar loop). Outputs: 1, 3, 33, 130 (odd; not multiples of a CTA's).
    let ns = [1, 3, 33, 130];
    for rows in 1..=8 {
        for (i, k) in [72, 200, 2056, 37].into_iter().enumerate() {
            check_case(&be, rows, k, &ns, (rows * 10 + i) as u64);
        }
    }
    check_case(&be, 2, 1030, &[5, 17], 99);
    // A real shape at 1 and 8 rows: in_proj_b / a (32) and a slice of z.
    check_case(&be, 1, 2048, &[32, 32, 520], 100);
    check_case(&be, 8, 4096, &[96], 101);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gemv.sh"]
fn small_case_for_memcheck() {
    let be = backend();
    check_case(&be, 3, 200, &[3, 33], 7);
    check_case(&be, 1, 37, &[5], 8);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gemv.sh"]
fn nan_input_row_stays_in_its_row() {
    let be = backend();
    let (rows, k, n) = (4, 520, 70);
    let mut x = uniform(1, rows * k);
    x[2 * k + 77] = f32::NAN;
    let w = uniform(2, n * k);
    let (want, l1) = reference(&x, &w, rows, n, k);
    let wd = matrix(&be, n, k, &w);
    for rows_used in [1, rows] {
        let name = format!("gemv at {rows_used} rows");
        let xr = be.act_from_f32(rows_used, k, &x[..rows_used * k]).unwrap();
        poison_pool(&be, &[rows_used * n * 2]);
        let y = be.linear_with(&xr, &[&wd], true, Dtype::Bf16).unwrap();
        let got = be.act_to_f32(&y[0]).unwrap();
        for r in 0..rows_used {
            let row = &got[r * n..(r + 1) * n];
            if r == 2 {
                assert!(row.iter().all(|v| v.is_nan()), "{name}: row 2 {row:?}");
            } else {
                let s = r * n..(r + 1) * n;
                assert_close(name.as_str(), row, &want[s.clone()], &l1[s], Dtype::Bf16);
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gemv.sh"]
fn linear_many_equals_separate_linears() {
    let be = backend();
    let k = 2048;
    // The GDN projections of 35B-A3B (qkv, z, b, a) and three more: seven
    // matrices, two launches.
    let ns = [8192, 4096, 32, 32, 512, 512, 96];
    let init = |i: usize| WeightInit {
        seed: 500 + i as u64,
        mean: 0.0,
        std: 0.02,
        window: None,
    };
    let ws: Vec<CudaWeight> = ns
        .iter()
        .enumerate()
        .map(|(i, &n)| be.init_matrix(n, k, init(i)).unwrap())
        .collect();
    let refs: Vec<&CudaWeight> = ws.iter().collect();
    for rows in [1, 3, 8, 9] {
        let xa = be
            .act_from_f32(rows, k, &uniform(rows as u64, rows * k))
            .unwrap();
        let many = be.linear_many(&xa, &refs).unwrap();
        assert_eq!(many.len(), ns.len());
        for (i, w) in refs.iter().enumerate() {
            let one = be.act_to_f32(&be.linear(&xa, w).unwrap()).unwrap();
            assert_eq!(
                be.act_to_f32(&many[i]).unwrap(),
                one,
                "rows {rows} matrix {i}: linear_many vs linear"
            );
        }
        if rows > 8 {
            continue;
        }
        let grouped = be.linear_with(&xa, &refs, true, Dtype::Bf16).unwrap();
        for (i, w) in refs.iter().enumerate() {
            let alone = be.linear_with(&xa, &[w], true, Dtype::Bf16).unwrap();
            assert_eq!(
                be.act_to_f32(&grouped[i]).unwrap(),
                be.act_to_f32(&alone[0]).unwrap(),
                "rows {rows} matrix {i}: one launch vs alone"
            );
        }
    }
}

/// µs per call: median over 5 runs of `calls` back-to-back calls between two events.
fn per_call_us(be: &CudaBackend, calls: usize, mut f: impl FnMut(usize)) -> f64 {
    for i in 0..10 {
        f(i);
    }
    let mut t: Vec<f64> = (0..5)
        .map(|_| {
            let start = Event::record(be.device()).unwrap();
            for i in 0..calls {
                f(i);
            }
            Event::record(be.device())
                .unwrap()
                .ms_since(&start)
                .unwrap()
                * 1e3
                / calls as f64
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[2]
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gemv.sh"]
fn bench_gemv_vs_cublas() {
    let be = backend();
    // (name, in features, out features of the matrices of one call)
    let shapes: [(&str, usize, &[usize]); 11] = [
        ("gdn in_proj qkv+z+b+a", 2048, &[8192, 4096, 32, 32]),
        ("gdn in_proj_qkv", 2048, &[8192]),
        ("gdn in_proj_z", 2048, &[4096]),
        ("gdn in_proj_b", 2048, &[32]),
        ("gdn out_proj", 4096, &[2048]),
        ("attn q+gate+k+v", 2048, &[4096, 4096, 512, 512]),
        ("attn q_proj", 2048, &[4096]),
        ("attn k_proj", 2048, &[512]),
        ("attn o_proj", 4096, &[2048]),
        ("moe router", 2048, &[256]),
        ("lm head", 2048, &[248_320]),
    ];
    println!("us per call (median of 5 x 200 back-to-back calls; weights rotated past L2)");
    for (name, k, ns) in shapes {
        let bytes: usize = ns.iter().map(|n| n * k * 2).sum();
        // Copies so that one pass over them exceeds the 50 MB L2.
        let copies = (192usize << 20).div_ceil(bytes).clamp(1, 64);
        let sets: Vec<Vec<CudaWeight>> = (0..copies)
            .map(|c| {
                ns.iter()
                    .enumerate()
                    .map(|(i, &n)| {
                        let init = WeightInit {
                            seed: (c * 16 + i) as u64,
                            mean: 0.0,
                            std: 0.02,
                            window: None,
                        };
                        be.init_matrix(n, k, init).unwrap()
                    })
                    .collect()
            })
            .collect();
        let refs: Vec<Vec<&CudaWeight>> = sets.iter().map(|s| s.iter().collect()).collect();
        let rows_list: &[usize] = if ns.len() > 1 { &[1, 4, 8] } else { &[1] };
        for &rows in rows_list {
            let xa = be.act_from_f32(rows, k, &uniform(3, rows * k)).unwrap();
            let mut line = format!("{name:<28} rows {rows} [{}]x{k}:", join(ns));
            // cuBLAS, the GEMV, and the backend's own `linear_many` (the
            // GEMV, or cuBLAS past the size limit).
            let arms = [("cublas", false), ("gemv", true), ("backend", true)];
            let mut blas_us = 0.0;
            for (arm, gemv) in arms {
                let us = per_call_us(&be, 200, |i| {
                    let ys: Vec<CudaAct> = if arm == "backend" {
                        be.linear_many(&xa, &refs[i % copies]).unwrap()
                    } else {
                        be.linear_with(&xa, &refs[i % copies], gemv, Dtype::Bf16)
                            .unwrap()
                    };
                    drop(ys);
                });
                if arm == "cublas" {
                    blas_us = us;
                }
                let gbs = bytes as f64 / (us * 1e-6) / 1e9;
                line += &format!("  {arm} {us:.1} us {gbs:.0} GB/s");
                if arm != "cublas" {
                    line += &format!(" ({:.2}x)", blas_us / us);
                }
            }
            println!("{line}");
        }
    }
}

fn join(ns: &[usize]) -> String {
    ns.iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The dense decode projections of Qwen3.6-35B-A3B (hidden 2048): (name, in
/// features, out features of the matrices of one call, output dtype).
const DECODE_SHAPES: [(&str, usize, &[usize], Dtype); 7] = [
    (
        "gdn in_proj qkvz+ba",
        2048,
        &[8192, 4096, 32, 32],
        Dtype::Bf16,
    ),
    ("gdn out_proj", 4096, &[2048], Dtype::Bf16),
    ("attn q+k+v", 2048, &[8192, 512, 512], Dtype::Bf16),
    ("attn k_proj", 2048, &[512], Dtype::Bf16),
    ("attn o_proj", 4096, &[2048], Dtype::Bf16),
    ("moe router", 2048, &[256], Dtype::F32),
    ("shared expert gate", 2048, &[1], Dtype::F32),
];

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gemv.sh"]
fn every_decode_shape_matches_f64_at_1_to_8_rows() {
    let be = backend();
    for (s, &(name, k, ns, _)) in DECODE_SHAPES.iter().enumerate() {
        let seed = 700 + 10 * s as u64;
        let x = uniform(seed, 8 * k);
        let ws: Vec<Vec<f32>> = ns
            .iter()
            .enumerate()
            .map(|(i, &n)| uniform(seed + 1 + i as u64, n * k))
            .collect();
        let dev_ws: Vec<CudaWeight> = ns
            .iter()
            .zip(&ws)
            .map(|(&n, w)| matrix(&be, n, k, w))
            .collect();
        let refs: Vec<&CudaWeight> = dev_ws.iter().collect();
        // Rows are independent: the 8-row reference holds every smaller one.
        let want: Vec<_> = ns
            .iter()
            .zip(&ws)
            .map(|(&n, w)| reference(&x, w, 8, n, k))
            .collect();
        for rows in 1..=8 {
            let xa = be.act_from_f32(rows, k, &x[..rows * k]).unwrap();
            for out in [Dtype::Bf16, Dtype::F32] {
                let sizes: Vec<usize> = ns.iter().map(|n| rows * n * out.size_bytes()).collect();
                poison_pool(&be, &sizes);
                let ys = be.linear_with(&xa, &refs, true, out).unwrap();
                for (j, (y, (w, l1))) in ys.iter().zip(&want).enumerate() {
                    let m = rows * ns[j];
                    let what = format!("{name} rows {rows} n {} {out}", ns[j]);
                    assert_close(&what, &be.act_to_f32(y).unwrap(), &w[..m], &l1[..m], out);
                }
            }
        }
    }
}

/// `(median µs per launch within 50 back-to-back launches, median µs of a
/// launch alone)`: 9 runs of 50 launches between two events, and 51
/// launches each between two events after the stream drained.
fn launch_us(be: &CudaBackend, mut f: impl FnMut(usize)) -> (f64, f64) {
    const LAUNCHES: usize = 50;
    for i in 0..10 {
        f(i);
    }
    let mut streamed: Vec<f64> = (0..9)
        .map(|run| {
            let start = Event::record(be.device()).unwrap();
            for i in 0..LAUNCHES {
                f(run * LAUNCHES + i);
            }
            let end = Event::record(be.device()).unwrap();
            end.ms_since(&start).unwrap() * 1e3 / LAUNCHES as f64
        })
        .collect();
    let mut alone: Vec<f64> = (0..LAUNCHES + 1)
        .map(|i| {
            be.device().synchronize().unwrap();
            let start = Event::record(be.device()).unwrap();
            f(i);
            let end = Event::record(be.device()).unwrap();
            end.ms_since(&start).unwrap() * 1e3
        })
        .collect();
    streamed.sort_by(f64::total_cmp);
    alone.sort_by(f64::total_cmp);
    (streamed[streamed.len() / 2], alone[alone.len() / 2])
}

/// Copies of a call's matrices so that one pass over them exceeds the 50 MB
/// L2 (each launch reads its weights from HBM, as in a decode step).
fn weight_sets(be: &CudaBackend, k: usize, ns: &[usize]) -> Vec<Vec<CudaWeight>> {
    let bytes: usize = ns.iter().map(|n| n * k * 2).sum();
    let copies = (192usize << 20).div_ceil(bytes).clamp(2, 64);
    (0..copies)
        .map(|c| {
            ns.iter()
                .enumerate()
                .map(|(i, &n)| {
                    let init = WeightInit {
                        seed: (c * 16 + i) as u64,
                        mean: 0.0,
                        std: 0.02,
                        window: None,
                    };
                    be.init_matrix(n, k, init).unwrap()
                })
                .collect()
        })
        .collect()
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gemv.sh"]
fn gemv_timing() {
    let be = backend();
    for (name, k, ns, out) in DECODE_SHAPES {
        let bytes: usize = ns.iter().map(|n| n * k * 2).sum();
        let sets = weight_sets(&be, k, ns);
        let refs: Vec<Vec<&CudaWeight>> = sets.iter().map(|s| s.iter().collect()).collect();
        for rows in [1, 2, 4, 8] {
            let xa = be.act_from_f32(rows, k, &uniform(3, rows * k)).unwrap();
            let (streamed, alone) = launch_us(&be, |i| {
                let ys = be
                    .linear_with(&xa, &refs[i % refs.len()], true, out)
                    .unwrap();
                drop(ys);
            });
            let gbs = |us: f64| bytes as f64 / (us * 1e-6) / 1e9;
            println!(
                "gemv_timing: {name:<20} rows {rows} [{}]x{k} {out}: {streamed:.2} us {:.0} GB/s \
                 back-to-back, {alone:.2} us {:.0} GB/s alone ({:.1} MB of weights)",
                join(ns),
                gbs(streamed),
                gbs(alone),
                bytes as f64 / 1e6
            );
        }
    }
}

fn vector(be: &CudaBackend, v: &[f32]) -> CudaWeight {
    be.upload_vector(Tensor::from_f32(vec![v.len()], v.to_vec()))
        .unwrap()
}

/// An f32 residual stream of `rows` × `cols` holding `v` (as `embed` starts it).
fn residual(be: &CudaBackend, rows: usize, cols: usize, v: &[f32]) -> CudaAct {
    let ids: Vec<u32> = (0..rows as u32).collect();
    be.embed(&matrix(be, rows, cols, v), &ids).unwrap()
}

/// `r / sqrt(mean(r²) + eps) · (1 + w)` per row of `r`, in f64.
fn norm_reference(r: &[f32], w: &[f32], eps: f64) -> Vec<f64> {
    let cols = w.len();
    r.chunks(cols)
        .flat_map(|row| {
            let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / cols as f64;
            let inv = 1.0 / (ms + eps).sqrt();
            row.iter()
                .zip(w)
                .map(move |(&v, &wi)| v as f64 * inv * (1.0 + wi as f64))
        })
        .collect()
}

/// The decode step's add + RMSNorm (f32 residual, bf16 delta, hidden 2048)
/// at 1 ..= 8 rows against f64: the residual holds the f32 sums, the normed
/// rows are within bf16 rounding, and a NaN in the delta poisons its row of
/// both and nothing else.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gemv.sh"]
fn decode_norm_matches_f64_and_a_nan_stays_in_its_row() {
    let be = backend();
    let cols = 2048;
    for rows in 1..=8 {
        let seed = 900 + rows as u64;
        let res: Vec<f32> = uniform(seed, rows * cols).iter().map(|v| v * 2.0).collect();
        let mut delta = uniform(seed + 1, rows * cols);
        let w: Vec<f32> = uniform(seed + 2, cols).iter().map(|v| v * 0.5).collect();
        let nan_row = rows / 2;
        if rows > 1 {
            delta[nan_row * cols + 77] = f32::NAN;
        }
        let wv = vector(&be, &w);
        let mut r = residual(&be, rows, cols, &res);
        let d = be.act_from_f32(rows, cols, &delta).unwrap();
        poison_pool(&be, &[rows * cols * 2]);
        let y = be.add_rms_norm(&mut r, Some(&d), &wv, 1e-6).unwrap();
        let sums: Vec<f32> = res.iter().zip(&delta).map(|(a, b)| a + b).collect();
        let got_sums = be.act_to_f32(&r).unwrap();
        let want = norm_reference(&sums, &w, 1e-6);
        let got = be.act_to_f32(&y).unwrap();
        for row in 0..rows {
            let s = row * cols..(row + 1) * cols;
            if rows > 1 && row == nan_row {
                assert!(
                    got[s.clone()].iter().all(|v| v.is_nan()),
                    "rows {rows}: row {row}"
                );
                assert!(got_sums[s.clone()].iter().any(|v| v.is_nan()));
                continue;
            }
            for i in s {
                assert_eq!(
                    got_sums[i].to_bits(),
                    sums[i].to_bits(),
                    "rows {rows}: sum {i}"
                );
                let tol = 4e-3 * want[i].abs() + 1e-6;
                assert!(
                    (got[i] as f64 - want[i]).abs() <= tol,
                    "rows {rows}: output {i}: {} vs {}",
                    got[i],
                    want[i]
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gemv.sh"]
fn norm_timing() {
    let be = backend();
    let cols = 2048;
    let w = vector(&be, &uniform(5, cols));
    for rows in [1, 2, 4, 8, 64, 200] {
        let mut r = residual(&be, rows, cols, &uniform(6, rows * cols));
        // Small deltas keep the residual finite over the many launches.
        let small: Vec<f32> = uniform(7, rows * cols).iter().map(|v| v * 1e-3).collect();
        let d = be.act_from_f32(rows, cols, &small).unwrap();
        let (streamed, alone) = launch_us(&be, |_| {
            drop(be.add_rms_norm(&mut r, Some(&d), &w, 1e-6).unwrap());
        });
        // Residual read and written (f32), delta read and output written (bf16), w (f32).
        let bytes = (rows * cols * (8 + 2 + 2) + cols * 4) as f64;
        let gbs = |us: f64| bytes / (us * 1e-6) / 1e9;
        println!(
            "norm_timing: add_rms_norm f32 residual rows {rows} x {cols}: {streamed:.2} us {:.0} GB/s \
             back-to-back, {alone:.2} us {:.0} GB/s alone",
            gbs(streamed),
            gbs(alone)
        );
    }
}
