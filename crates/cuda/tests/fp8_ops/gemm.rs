//! The block-scaled FP8 GEMM (`ops/fp8/gemm.rs`) against f64: cuBLASLt on
//! quantized activations read back, end to end, and the bf16 fallback, at
//! m = 1, 37, 512 with tails; and the probe of the scale order and the
//! shapes cuBLASLt computes right.

use super::*;
/// The three GEMM paths at `m × k` by `n` against f64: cuBLASLt on
/// quantized activations read back (if it takes the shape), end to end
/// (reference by the path it reports), and the forced fallback.
pub(crate) fn check_gemm_paths(dev: &CudaDevice, m: usize, k: usize, n: usize, seed: u64) -> bool {
    let x = varied_activations(seed, m, k);
    let h = HostFp8::random(seed + 1, n, k);
    let d = DevFp8::upload(dev, &h);
    let w64 = h.dequant_f64();
    let xd = dev.upload(&bf16_bits(&x)).unwrap();
    let what = |p: &str| format!("fp8_gemm {p} m {m} k {k} n {n}");
    // cuBLASLt on the device's own quantization.
    let kb = k.div_ceil(BLOCK);
    let q = dev.alloc(m * k).unwrap();
    let s = dev.alloc(m * kb * 4).unwrap();
    quantize(dev, &xd, m, k, &q, &s, ScaleLayout::RowMajor).unwrap();
    let mut hq = vec![0u8; m * k];
    dev.read(&q, &mut hq).unwrap();
    let mut hs = vec![0f32; m * kb];
    dev.read(&s, &mut hs).unwrap();
    let (want_q, l1_q) = reference(&dequant_act(&hq, &hs, m, k), &w64, m, n, k);
    let y = poisoned(dev, m * n * 2);
    let lt_ran = fp8_gemm_quantized(dev, &q, &s, m, d.matrix(), &y, LT_SCALE_ORDER, false).unwrap();
    if lt_ran {
        let got = read_bf16(dev, &y, m * n);
        assert_close(&what("cublaslt"), &got, &want_q, &l1_q, BF16_OUT, LT_SUM);
    }
    // End to end: the reference of the path that ran.
    let y = poisoned(dev, m * n * 2);
    let path = fp8_gemm(dev, &xd, m, d.matrix(), &y).unwrap();
    println!("fp8_gemm: m {m} k {k} n {n}: {path:?} (cuBLASLt on quantized x: {lt_ran})");
    let got = read_bf16(dev, &y, m * n);
    let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let wb: Vec<f64> = h.dequant_bf16().iter().map(|&v| f64::from(v)).collect();
    match path {
        Fp8GemmPath::BlockScaled => {
            assert!(
                lt_ran,
                "end to end ran cuBLASLt where the quantized call did not"
            );
            let (hq, hs) = host::quantize(&x, m, k);
            let (want, l1) = reference(&dequant_act(&hq, &hs, m, k), &w64, m, n, k);
            assert_close(&what("end to end"), &got, &want, &l1, BF16_OUT, LT_SUM);
        }
        Fp8GemmPath::DequantBf16 => {
            assert!(
                !lt_ran,
                "end to end fell back where cuBLASLt took the shape"
            );
            let (want, l1) = reference(&x64, &wb, m, n, k);
            assert_close(
                &what("end to end"),
                &got,
                &want,
                &l1,
                BF16_OUT,
                BF16_GEMM_SUM,
            );
        }
        Fp8GemmPath::Gemv => {
            assert!(m <= 8, "{m} rows on the GEMV");
            let (want, l1) = reference(&x64, &w64, m, n, k);
            assert_close(&what("end to end"), &got, &want, &l1, BF16_OUT, GEMV_SUM);
        }
        Fp8GemmPath::Empty => panic!("{m} rows ran nothing"),
    }
    // The fallback forced.
    let y = poisoned(dev, m * n * 2);
    let path = fp8_gemm_with(dev, &xd, m, d.matrix(), &y, None).unwrap();
    assert_eq!(path, Fp8GemmPath::DequantBf16);
    let (want, l1) = reference(&x64, &wb, m, n, k);
    let got = read_bf16(dev, &y, m * n);
    assert_close(&what("fallback"), &got, &want, &l1, BF16_OUT, BF16_GEMM_SUM);
    lt_ran
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8.sh"]
fn the_gemm_matches_f64_on_every_path_with_tails() {
    let dev = device();
    let mut lt = Vec::new();
    for m in [1, 37, 512] {
        lt.push((m, 4096, 256, check_gemm_paths(&dev, m, 4096, 256, m as u64)));
        lt.push((
            m,
            2112,
            320,
            check_gemm_paths(&dev, m, 2048 + 64, 320, 10 + m as u64),
        ));
    }
    // k not a multiple of 16: the fallback.
    assert!(!check_gemm_paths(&dev, 3, 2048 + 131, 64, 99));
    // More rows of whole blocks: cuBLASLt where it has an algorithm.
    lt.push((520, 2048, 384, check_gemm_paths(&dev, 520, 2048, 384, 98)));
    println!("fp8_gemm cuBLASLt took (m, k, n, ran): {lt:?}");
    // The aligned prefill shape must run on cuBLASLt on Hopper.
    assert!(lt.contains(&(512, 4096, 256, true)), "{lt:?}");
    // No rows: nothing runs.
    let d = DevFp8::upload(&dev, &HostFp8::random(1, 8, 8));
    let (x, y) = (dev.alloc(2).unwrap(), dev.alloc(2).unwrap());
    let path = fp8_gemm(&dev, &x, 0, d.matrix(), &y).unwrap();
    assert_eq!(path, Fp8GemmPath::Empty);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8.sh"]
fn row_counts_off_the_multiple_of_four_run_cublaslt_padded_where_y_has_room() {
    // A serving step's row count is arbitrary; cuBLASLt has a block-scaled
    // algorithm only for multiples of LT_ROW_MULTIPLE. With room in y for
    // lt_rows(m) rows the GEMM runs there (the padding rows' outputs land
    // in the room); the m rows match f64 on the activations it multiplies,
    // every one written (y NaN-poisoned first). Without the room: the
    // fallback, as before.
    let dev = device();
    let (k, n) = (2048, 384);
    for m in [9usize, 37, 130, 662] {
        let x = varied_activations(40 + m as u64, m, k);
        let h = HostFp8::random(41 + m as u64, n, k);
        let d = DevFp8::upload(&dev, &h);
        let xd = dev.upload(&bf16_bits(&x)).unwrap();
        let rows = lt_rows(m);
        assert!(rows > m && rows.is_multiple_of(LT_ROW_MULTIPLE));
        let y = poisoned(&dev, rows * n * 2);
        let path = fp8_gemm(&dev, &xd, m, d.matrix(), &y).unwrap();
        println!("fp8_gemm padded: m {m} -> {rows} rows: {path:?}");
        assert_eq!(
            path,
            Fp8GemmPath::BlockScaled,
            "m {m} with room for {rows} rows"
        );
        let got = read_bf16(&dev, &y, m * n);
        assert!(
            got.iter().all(|v| v.is_finite()),
            "m {m}: a row left unwritten"
        );
        let (hq, hs) = host::quantize(&x, m, k);
        let (want, l1) = reference(&dequant_act(&hq, &hs, m, k), &h.dequant_f64(), m, n, k);
        assert_close(&format!("padded m {m}"), &got, &want, &l1, BF16_OUT, LT_SUM);
        let exact = poisoned(&dev, m * n * 2);
        let path = fp8_gemm(&dev, &xd, m, d.matrix(), &exact).unwrap();
        assert_eq!(path, Fp8GemmPath::DequantBf16, "m {m} without room");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8.sh"]
fn a_set_quantizes_its_input_once_and_gives_each_calls_bits() {
    // Three matrices on one x (n 256 and 512 on cuBLASLt, 320 on the
    // fallback: n not a multiple of 128), at a padded row count and an
    // aligned one: fp8_gemm_set's outputs bit for bit those of one
    // fp8_gemm call each, and the same paths.
    let dev = device();
    let k = 2048;
    for m in [37usize, 512] {
        let x = varied_activations(60 + m as u64, m, k);
        let xd = dev.upload(&bf16_bits(&x)).unwrap();
        let rows = lt_rows(m);
        let ns = [256usize, 320, 512];
        let mats: Vec<DevFp8> = ns
            .iter()
            .enumerate()
            .map(|(i, &n)| DevFp8::upload(&dev, &HostFp8::random(70 + i as u64, n, k)))
            .collect();
        let ys: Vec<DeviceBuffer> = ns.iter().map(|n| poisoned(&dev, rows * n * 2)).collect();
        let set: Vec<_> = mats.iter().zip(&ys).map(|(d, y)| (d.matrix(), y)).collect();
        let paths = fp8_gemm_set(&dev, &xd, m, &set, Some(LT_SCALE_ORDER)).unwrap();
        assert_eq!(
            paths,
            [
                Fp8GemmPath::BlockScaled,
                Fp8GemmPath::DequantBf16,
                Fp8GemmPath::BlockScaled
            ],
            "m {m}"
        );
        // The same set on x quantized beforehand (QuantizedX, as the MoE
        // block shares it with the routed experts), and with a `pre` of
        // another row count, which the set must not read.
        let pre = QuantizedX::new(&dev, &xd, m, k).unwrap();
        let other = QuantizedX::new(&dev, &xd, m - 1, k).unwrap();
        let from = |pre: &QuantizedX| {
            let ys: Vec<DeviceBuffer> = ns.iter().map(|n| poisoned(&dev, rows * n * 2)).collect();
            let set: Vec<_> = mats.iter().zip(&ys).map(|(d, y)| (d.matrix(), y)).collect();
            let p = fp8_gemm_set_from(&dev, &xd, m, &set, Some(LT_SCALE_ORDER), Some(pre));
            assert_eq!(p.unwrap(), paths, "m {m}: the paths with a quantized x");
            ys
        };
        let (ys_pre, ys_other) = (from(&pre), from(&other));
        for (i, ((d, y), &n)) in mats.iter().zip(&ys).zip(&ns).enumerate() {
            let alone = poisoned(&dev, rows * n * 2);
            fp8_gemm(&dev, &xd, m, d.matrix(), &alone).unwrap();
            let b = read_bf16(&dev, &alone, m * n);
            for (what, y) in [
                ("set", y),
                ("set on pre", &ys_pre[i]),
                ("set beside another pre", &ys_other[i]),
            ] {
                let a = read_bf16(&dev, y, m * n);
                assert!(
                    a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()),
                    "m {m} n {n}: the {what}'s output differs from the call's"
                );
            }
            assert!(b.iter().all(|v| v.is_finite()), "m {m} n {n}: unwritten");
        }
    }
}

/// Runs cuBLASLt (any shape) on the device's quantization of fresh inputs
/// in each of `orders`; returns whether it ran any and the orders that
/// matched f64 (printed).
fn probe(
    dev: &CudaDevice,
    (m, k, n): (usize, usize, usize),
    orders: &[LtScaleOrder],
) -> (bool, Vec<LtScaleOrder>) {
    let x = varied_activations(5, m, k);
    let h = HostFp8::random(6, n, k);
    let d = DevFp8::upload(dev, &h);
    let kb = k.div_ceil(BLOCK);
    let xd = dev.upload(&bf16_bits(&x)).unwrap();
    let q = dev.alloc(m * k).unwrap();
    let s = dev.alloc(m * kb * 4).unwrap();
    quantize(dev, &xd, m, k, &q, &s, ScaleLayout::RowMajor).unwrap();
    let mut hq = vec![0u8; m * k];
    dev.read(&q, &mut hq).unwrap();
    let mut hs = vec![0f32; m * kb];
    dev.read(&s, &mut hs).unwrap();
    let (want, l1) = reference(&dequant_act(&hq, &hs, m, k), &h.dequant_f64(), m, n, k);
    let mut ok = Vec::new();
    let mut any_ran = false;
    for &order in orders {
        let y = poisoned(dev, m * n * 2);
        let ran = fp8_gemm_quantized(dev, &q, &s, m, d.matrix(), &y, order, true).unwrap();
        let worst = if ran {
            worst_ratio(&read_bf16(dev, &y, m * n), &want, &l1, BF16_OUT, LT_SUM)
        } else {
            f64::NAN
        };
        any_ran |= ran;
        let pass = ran && worst <= 1.0;
        let verdict = if pass { "MATCHES" } else { "no" };
        println!(
            "fp8_probe: m {m} k {k} n {n} (lt_takes {}) {order:?}: ran {ran} worst/tol {worst:.3e} {verdict}",
            lt_takes(m, n, k)
        );
        if pass {
            ok.push(order);
        }
    }
    (any_ran, ok)
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8.sh"]
fn probe_the_scale_order_and_the_shapes_cublaslt_computes_right() {
    let dev = device();
    // Every candidate order on aligned shapes: LT_SCALE_ORDER must match.
    for shape in [(256, 512, 512), (512, 4096, 256)] {
        let (_, ok) = probe(&dev, shape, &LtScaleOrder::all());
        assert!(
            ok.contains(&LT_SCALE_ORDER),
            "LT_SCALE_ORDER {LT_SCALE_ORDER:?} does not match at {shape:?}; matching: {ok:?}"
        );
    }
    // Tails and row counts in LT_SCALE_ORDER: printed; every shape that
    // lt_takes and cuBLASLt runs must match.
    for (m, k, n) in [
        (512, 4096, 320),
        (512, 2048 + 64, 256),
        (36, 4096, 256),
        (520, 2048, 256),
        (8, 2048, 512),
        (1000, 2048, 384),
        // Small k (wrong sums at 40 rows in run 1 of docs/perf/cuda-fp8.md:
        // lt_takes refuses them; printed to see whether cuBLASLt still errs).
        (40, 128, 256),
        (40, 256, 128),
        (40, 384, 256),
        (40, 384, 128),
        (300, 384, 256),
        (40, 640, 256),
        (40, 1024, 256),
        (40, 512, 2048),
    ] {
        let (ran, ok) = probe(&dev, (m, k, n), &[LT_SCALE_ORDER]);
        if ran && lt_takes(m, n, k) {
            assert!(
                !ok.is_empty(),
                "lt_takes m {m} k {k} n {n}, cuBLASLt ran it wrong"
            );
        }
    }
}
