//! The block-scaled FP8 ops (`ops/fp8/`) against f64 host references on
//! fresh random inputs: weights of random finite e4m3 codes with block
//! scales 2^U(-8, 8) (orders of magnitude apart), outputs filled with 0xFF
//! (NaN) before each kernel and every one checked written, tails in k and n
//! (k = 2048 + 64, n = 320; k not a multiple of 16 for the GEMV's scalar
//! path) and k = 4096 exactly.
//! * the GEMV at 1 ..= 8 rows, one and several matrices a launch, bf16 and
//!   f32 out; its batched-experts variant (shared and own input rows, an
//!   expert index out of range);
//! * the activation quantization (codes and scales exact, both scale orders),
//!   the weight dequantization (exact) and the scale transpose;
//! * (in `fp8_ops/gemm.rs`) the GEMM at m = 1, 37, 512 on cuBLASLt's block-scaled matmul (on
//!   quantized activations read back, and end to end) and on the bf16
//!   fallback, and the probe of the scale order cuBLASLt reads.
//!
//! Then the timings (`fp8_timing:` lines, `fp8_ops/timing.rs`).
//! Run by bench/gpu/check_fp8.sh on the GPU machine.

#[path = "fp8_ops/gemm.rs"]
mod gemm;
#[path = "fp8_ops/host.rs"]
mod host;
#[path = "fp8_ops/timing.rs"]
mod timing;

use headroom_core::Dtype;
use headroom_cuda::alloc::DeviceBuffer;
use headroom_cuda::device::CudaDevice;
use headroom_cuda::ops::fp8::experts::{fp8_gemv_experts, ExpertsShape, Fp8Experts};
use headroom_cuda::ops::fp8::gemm::{
    fp8_gemm, fp8_gemm_quantized, fp8_gemm_set, fp8_gemm_set_from, fp8_gemm_with, lt_rows,
    lt_takes, Fp8GemmPath, LtScaleOrder, QuantizedX, LT_ROW_MULTIPLE, LT_SCALE_ORDER,
};
use headroom_cuda::ops::fp8::gemv::{fp8_gemv, Fp8Gemv};
use headroom_cuda::ops::fp8::quant::{dequantize, quantize, transpose_f32, ScaleLayout};
use headroom_cuda::ops::fp8::Fp8Matrix;
use host::*;

/// Output rounding to bf16 (half an ulp is 2^-9 of the value; 4e-3 leaves room).
const BF16_OUT: f64 = 4e-3;
/// The GEMV's summation error: f32 sums of 16 products, scaled, summed per
/// lane and over the warp: well under 3e-5 · Σ|x·w| for k ≤ 4096.
const GEMV_SUM: f64 = 3e-5;
/// cuBLASLt's FP8 matmul: Hopper's FP8 MMA aligns the products of a
/// k-step to the largest and keeps about 14 bits before the f32 promotion
/// with the block's scales; measured 2.1e-4 · Σ|x·w| off on the H200.
const LT_SUM: f64 = 1e-3;
/// cuBLAS's bf16 GEMM (the fallback) with f32 compute (as tests/gemv.rs measured).
const BF16_GEMM_SUM: f64 = 3e-4;

pub fn device() -> CudaDevice {
    CudaDevice::open(0).expect("a CUDA device (run by bench/gpu/check_fp8.sh)")
}

/// A device copy of a weight.
pub struct DevFp8 {
    pub w: DeviceBuffer,
    pub s: DeviceBuffer,
    pub n: usize,
    pub k: usize,
}

impl DevFp8 {
    pub fn upload(dev: &CudaDevice, h: &HostFp8) -> DevFp8 {
        DevFp8 {
            w: dev.upload(&h.w).unwrap(),
            s: dev.upload(&h.s).unwrap(),
            n: h.n,
            k: h.k,
        }
    }

    pub fn matrix(&self) -> Fp8Matrix<'_> {
        Fp8Matrix {
            w: &self.w,
            scale_inv: &self.s,
            n: self.n,
            k: self.k,
        }
    }
}

/// A fresh buffer of `bytes` filled with 0xFF (NaN in bf16 and f32).
pub fn poisoned(dev: &CudaDevice, bytes: usize) -> DeviceBuffer {
    let b = dev.alloc(bytes).unwrap();
    dev.fill_bytes(&b, 0xFF).unwrap();
    b
}

/// The first `n` bf16 of `buf` as f32.
pub fn read_bf16(dev: &CudaDevice, buf: &DeviceBuffer, n: usize) -> Vec<f32> {
    let mut bits = vec![0u16; n];
    dev.read(buf, &mut bits).unwrap();
    from_bf16_bits(&bits)
}

fn read_out(dev: &CudaDevice, buf: &DeviceBuffer, n: usize, out: Dtype) -> Vec<f32> {
    match out {
        Dtype::F32 => {
            let mut v = vec![0f32; n];
            dev.read(buf, &mut v).unwrap();
            v
        }
        _ => read_bf16(dev, buf, n),
    }
}

/// The GEMV of `rows` rows of k columns by matrices of `ns` outputs, in one
/// launch, against f64.
fn check_gemv(dev: &CudaDevice, rows: usize, k: usize, ns: &[usize], seed: u64) {
    let x = uniform_bf16(seed, rows * k);
    let xd = dev.upload(&bf16_bits(&x)).unwrap();
    let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let hs: Vec<HostFp8> = ns
        .iter()
        .enumerate()
        .map(|(i, &n)| HostFp8::random(seed * 31 + i as u64 + 1, n, k))
        .collect();
    let ds: Vec<DevFp8> = hs.iter().map(|h| DevFp8::upload(dev, h)).collect();
    let want: Vec<_> = hs
        .iter()
        .map(|h| reference(&x64, &h.dequant_f64(), rows, h.n, k))
        .collect();
    for out in [Dtype::Bf16, Dtype::F32] {
        let ys: Vec<DeviceBuffer> = ns
            .iter()
            .map(|&n| poisoned(dev, rows * n * out.size_bytes()))
            .collect();
        let ms: Vec<Fp8Gemv> = ds
            .iter()
            .zip(&ys)
            .map(|(d, y)| Fp8Gemv { w: d.matrix(), y })
            .collect();
        fp8_gemv(dev, &xd, rows, k, &ms, out).unwrap();
        for (j, (y, (w, l1))) in ys.iter().zip(&want).enumerate() {
            let got = read_out(dev, y, rows * ns[j], out);
            let rel = if out == Dtype::Bf16 { BF16_OUT } else { 1e-6 };
            let what = format!("fp8_gemv rows {rows} k {k} n {} {out}", ns[j]);
            assert_close(&what, &got, w, l1, rel, GEMV_SUM);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8.sh"]
fn the_gemv_matches_f64_for_1_to_8_rows_with_tails() {
    let dev = device();
    for rows in 1..=8 {
        // k: a 64-column tail block (2048 + 64), exactly 4096; n: 320 (a
        // 64-row tail block), 1 and 33 (odd, fewer than a warp's outputs).
        check_gemv(&dev, rows, 2048 + 64, &[320], rows as u64);
        check_gemv(&dev, rows, 4096, &[320, 1, 33], 100 + rows as u64);
        // k not a multiple of 16: the scalar path, with a 3-column tail block.
        check_gemv(&dev, rows, 2048 + 131, &[130, 5], 200 + rows as u64);
    }
    // Fewer chunks than a warp's lanes, and k < 128 (one partial block).
    check_gemv(&dev, 3, 16 * 9, &[3, 257], 300);
    check_gemv(&dev, 1, 40, &[7], 301);
    // Six matrices in one launch: the 35B-A3B attention projections' widths.
    check_gemv(&dev, 2, 2048, &[4096, 512, 512, 32, 32, 129], 302);
    // One row of a wide launch: two outputs a unit (fp8_gemv_c2_r1), odd n,
    // and its scalar path.
    check_gemv(&dev, 1, 2048, &[4096, 33], 303);
    check_gemv(&dev, 1, 2048 + 131, &[2200, 1], 304);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8.sh"]
fn small_case_for_memcheck() {
    let dev = device();
    check_gemv(&dev, 3, 2048 + 64, &[3, 33], 7);
    check_gemv(&dev, 1, 37, &[5], 8);
    check_quant(&dev, 3, 200, 9);
    gemm::check_gemm_paths(&dev, 5, 256, 160, 10);
    check_experts(
        &dev,
        ExpertCase {
            rows: 2,
            top_k: 4,
            experts: 5,
            n: 70,
            k: 203,
            shared: true,
        },
        11,
    );
    check_experts(
        &dev,
        ExpertCase {
            rows: 2,
            top_k: 2,
            experts: 3,
            n: 40,
            k: 2048 + 64,
            shared: false,
        },
        12,
    );
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8.sh"]
fn a_nan_input_row_poisons_its_row_only() {
    let dev = device();
    let (rows, k, n) = (4, 2048 + 64, 70);
    let mut x = uniform_bf16(1, rows * k);
    x[2 * k + 77] = f32::NAN;
    let h = HostFp8::random(2, n, k);
    let d = DevFp8::upload(&dev, &h);
    let xd = dev.upload(&bf16_bits(&x)).unwrap();
    let y = poisoned(&dev, rows * n * 2);
    fp8_gemv(
        &dev,
        &xd,
        rows,
        k,
        &[Fp8Gemv {
            w: d.matrix(),
            y: &y,
        }],
        Dtype::Bf16,
    )
    .unwrap();
    let got = read_bf16(&dev, &y, rows * n);
    let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let (want, l1) = reference(&x64, &h.dequant_f64(), rows, n, k);
    for r in 0..rows {
        let s = r * n..(r + 1) * n;
        if r == 2 {
            let row = &got[s];
            assert!(row.iter().all(|v| v.is_nan()), "row 2 {row:?}");
        } else {
            let what = format!("row {r}");
            assert_close(
                &what,
                &got[s.clone()],
                &want[s.clone()],
                &l1[s],
                BF16_OUT,
                GEMV_SUM,
            );
        }
    }
}

/// Activations whose 128-column groups differ by orders of magnitude, one
/// group all zero.
fn varied_activations(seed: u64, m: usize, k: usize) -> Vec<f32> {
    let mut x = uniform_bf16(seed, m * k);
    let g = host::uniform_bf16(seed + 7, m * k.div_ceil(BLOCK));
    for (i, v) in x.iter_mut().enumerate() {
        let (r, c) = (i / k, i % k);
        let e = (g[r * k.div_ceil(BLOCK) + c / BLOCK] * 8.0).round();
        *v = half::bf16::from_f32(*v * 2f32.powf(e)).to_f32();
        if r == 0 && c / BLOCK == 1 {
            *v = 0.0;
        }
    }
    x
}

/// The quantization of an `m × k` activation: codes and scales exact
/// against the host, in both scale orders.
fn check_quant(dev: &CudaDevice, m: usize, k: usize, seed: u64) {
    let x = varied_activations(seed, m, k);
    let (want_q, want_s) = host::quantize(&x, m, k);
    let kb = k.div_ceil(BLOCK);
    let xd = dev.upload(&bf16_bits(&x)).unwrap();
    for layout in [ScaleLayout::RowMajor, ScaleLayout::ColMajor { ld: m + 3 }] {
        let q = poisoned(dev, m * k);
        let (_, _, span) = layout.strides(m, kb).unwrap();
        let s = poisoned(dev, span * 4);
        quantize(dev, &xd, m, k, &q, &s, layout).unwrap();
        let mut got_q = vec![0u8; m * k];
        dev.read(&q, &mut got_q).unwrap();
        let mut got_s = vec![0f32; span];
        dev.read(&s, &mut got_s).unwrap();
        for r in 0..m {
            for g in 0..kb {
                let at = match layout {
                    ScaleLayout::RowMajor => r * kb + g,
                    ScaleLayout::ColMajor { ld } => g * ld + r,
                };
                assert_eq!(
                    got_s[at].to_bits(),
                    want_s[r * kb + g].to_bits(),
                    "{layout:?} m {m} k {k}: scale ({r}, {g})"
                );
            }
        }
        for (i, (&g, &w)) in got_q.iter().zip(&want_q).enumerate() {
            assert_eq!(g, w, "m {m} k {k}: code {i} of x {}", x[i]);
        }
    }
    if kb > 1 {
        assert_eq!(want_s[1], 1.0, "row 0's group 1 is all zero: scale 1");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8.sh"]
fn quantization_codes_and_scales_equal_the_hosts() {
    let dev = device();
    check_quant(&dev, 1, 4096, 1);
    check_quant(&dev, 37, 2048 + 64, 2);
    check_quant(&dev, 5, 200, 3);
    check_quant(&dev, 2, 7, 4);
    // k % 4 == 0 but not % 8: the 8-byte kernel (k % 8 == 0 takes the 16-byte one).
    check_quant(&dev, 3, 132, 5);
    check_quant(&dev, 9, 2048 + 4, 6);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8.sh"]
fn dequantization_and_the_scale_transpose_are_exact() {
    let dev = device();
    for (n, k, seed) in [(320, 2048 + 64, 1), (130, 200, 2), (256, 4096, 3)] {
        let h = HostFp8::random(seed, n, k);
        let d = DevFp8::upload(&dev, &h);
        let out = poisoned(&dev, n * k * 2);
        dequantize(&dev, d.matrix(), &out).unwrap();
        let got = read_bf16(&dev, &out, n * k);
        let want = h.dequant_bf16();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "n {n} k {k}: weight {i}");
        }
        let (nb, kb) = (n.div_ceil(BLOCK), k.div_ceil(BLOCK));
        let ld = nb + 2;
        let t = poisoned(&dev, ld * kb * 4);
        transpose_f32(&dev, &d.s, nb, kb, &t, ld).unwrap();
        let mut got_t = vec![0f32; ld * kb];
        dev.read(&t, &mut got_t).unwrap();
        for i in 0..nb {
            for j in 0..kb {
                assert_eq!(got_t[j * ld + i], h.s[i * kb + j], "transpose ({i}, {j})");
            }
        }
    }
}

/// The batched-experts GEMV: `pairs = rows · top_k` pairs, experts of
/// random ids (with repeats; one out of range when `bad`), input rows
/// shared by a row's experts (`shared`: gate/up) or one per pair (down).
/// One batched-experts case: `rows` rows of `top_k` experts each among
/// `experts`, matrices `[n][k]`, input rows shared by a row's experts or not.
#[derive(Clone, Copy)]
struct ExpertCase {
    rows: usize,
    top_k: usize,
    experts: usize,
    n: usize,
    k: usize,
    shared: bool,
}

fn check_experts(dev: &CudaDevice, c: ExpertCase, seed: u64) {
    let ExpertCase {
        rows,
        top_k,
        experts: e,
        n,
        k,
        shared,
    } = c;
    let pairs = rows * top_k;
    let x_group = if shared { top_k } else { 1 };
    let x = uniform_bf16(seed, pairs / x_group * k);
    let hs: Vec<HostFp8> = (0..e)
        .map(|i| HostFp8::random(seed * 131 + i as u64, n, k))
        .collect();
    let w: Vec<u8> = hs.iter().flat_map(|h| h.w.iter().copied()).collect();
    let s: Vec<f32> = hs.iter().flat_map(|h| h.s.iter().copied()).collect();
    let mut ids: Vec<i32> = (0..pairs)
        .map(|q| ((q * 7 + seed as usize) % e) as i32)
        .collect();
    ids[pairs - 1] = ids[0];
    let bad = pairs > 2;
    if bad {
        ids[1] = e as i32;
    }
    let (wd, sd) = (dev.upload(&w).unwrap(), dev.upload(&s).unwrap());
    let xd = dev.upload(&bf16_bits(&x)).unwrap();
    let idd = dev.upload(&ids).unwrap();
    let deq: Vec<Vec<f64>> = hs.iter().map(|h| h.dequant_f64()).collect();
    let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    for out in [Dtype::Bf16, Dtype::F32] {
        let y = poisoned(dev, pairs * n * out.size_bytes());
        let experts = Fp8Experts {
            w: &wd,
            scale_inv: &sd,
            experts: e,
            n,
            k,
        };
        let shape = ExpertsShape { pairs, x_group };
        fp8_gemv_experts(dev, &xd, &idd, shape, experts, &y, out).unwrap();
        let got = read_out(dev, &y, pairs * n, out);
        for q in 0..pairs {
            let row = &got[q * n..(q + 1) * n];
            let what = format!(
                "fp8_gemv_experts pair {q} of {pairs} (expert {}) n {n} k {k} {out}",
                ids[q]
            );
            if bad && q == 1 {
                assert!(row.iter().all(|v| v.is_nan()), "{what}: {row:?}");
                continue;
            }
            let xr = &x64[(q / x_group) * k..(q / x_group + 1) * k];
            let (want, l1) = reference(xr, &deq[ids[q] as usize], 1, n, k);
            let rel = if out == Dtype::Bf16 { BF16_OUT } else { 1e-6 };
            assert_close(&what, row, &want, &l1, rel, GEMV_SUM);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8.sh"]
fn the_experts_gemv_matches_f64_with_shared_and_own_inputs() {
    let dev = device();
    for rows in [1, 3, 8] {
        // gate/up: 8 experts of a row share its input; n 320 (a tail block), k 2048 + 64.
        check_experts(
            &dev,
            ExpertCase {
                rows,
                top_k: 8,
                experts: 16,
                n: 320,
                k: 2048 + 64,
                shared: true,
            },
            rows as u64,
        );
        // down: each pair its own activation row; k 320 (a tail block), n 2048.
        check_experts(
            &dev,
            ExpertCase {
                rows,
                top_k: 8,
                experts: 16,
                n: 2048,
                k: 320,
                shared: false,
            },
            10 + rows as u64,
        );
    }
    // k not a multiple of 16: the scalar path.
    check_experts(
        &dev,
        ExpertCase {
            rows: 2,
            top_k: 4,
            experts: 5,
            n: 70,
            k: 203,
            shared: true,
        },
        30,
    );
    check_experts(
        &dev,
        ExpertCase {
            rows: 1,
            top_k: 1,
            experts: 3,
            n: 33,
            k: 40,
            shared: false,
        },
        31,
    );
}
