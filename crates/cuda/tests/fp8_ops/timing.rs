//! Timings of the FP8 ops for docs/perf (`fp8_timing:` lines): the FP8
//! GEMV at one row on the 35B-A3B decode shapes beside the bf16 GEMV on the
//! same shapes (µs and GB/s of the bytes each reads), and the FP8 GEMM
//! (quantization + cuBLASLt, or its fallback) beside cuBLAS bf16 at 8,192
//! rows (TFLOP/s). Each timed call takes the next of enough weight copies
//! to exceed the 50 MB L2, so weights stream from HBM as in a decode step.

use super::{device, DevFp8, HostFp8};
use headroom_core::ops::{Backend, WeightInit};
use headroom_core::Dtype;
use headroom_cuda::backend::{CudaBackend, CudaWeight};
use headroom_cuda::blas::Linear;
use headroom_cuda::event::StreamEvent;
use headroom_cuda::ops::fp8::gemm::{fp8_gemm, fp8_gemm_with};
use headroom_cuda::ops::fp8::gemv::{fp8_gemv, Fp8Gemv};
use headroom_cuda::ops::fp8::quant::{quantize, ScaleLayout};

/// Bytes of weight copies a timing cycles through (past the L2).
const ROTATE_BYTES: usize = 256 << 20;
const ITERS: usize = 100;

/// Copies of a weight of `bytes` that a timing cycles through.
fn copies(bytes: usize) -> usize {
    ROTATE_BYTES.div_ceil(bytes.max(1)).clamp(2, 64)
}

/// Mean ms of `f(i)` over [`ITERS`] calls after 5 warm-up calls.
fn time_ms(dev: &headroom_cuda::device::CudaDevice, mut f: impl FnMut(usize)) -> f64 {
    for i in 0..5 {
        f(i);
    }
    dev.synchronize().unwrap();
    let start = StreamEvent::record(dev).unwrap();
    for i in 0..ITERS {
        f(i);
    }
    let end = StreamEvent::record(dev).unwrap();
    end.ms_since(&start).unwrap() / ITERS as f64
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8.sh (timing, prints fp8_timing: lines)"]
fn timing_fp8_gemv_vs_bf16_gemv_at_one_row() {
    let be = CudaBackend::open(0).expect("a CUDA device");
    let dev = be.device();
    for (n, k) in [
        (2048, 4096),
        (8192, 2048),
        (4096, 2048),
        (512, 2048),
        (12288, 2048),
    ] {
        let h = HostFp8::random(1, n, k);
        let fp8_bytes = n * k + h.s.len() * 4;
        let ws: Vec<DevFp8> = (0..copies(fp8_bytes))
            .map(|_| DevFp8::upload(dev, &h))
            .collect();
        let x = be.act_from_f32(1, k, &vec![0.01; k]).unwrap();
        let y = dev.alloc(n * 2).unwrap();
        let fp8 = time_ms(dev, |i| {
            let m = Fp8Gemv {
                w: ws[i % ws.len()].matrix(),
                y: &y,
            };
            fp8_gemv(dev, x.buffer(), 1, k, &[m], Dtype::Bf16).unwrap();
        });
        let bf16_bytes = n * k * 2;
        let bws: Vec<CudaWeight> = (0..copies(bf16_bytes))
            .map(|i| {
                let init = WeightInit {
                    seed: i as u64,
                    mean: 0.0,
                    std: 0.02,
                    window: None,
                };
                be.init_matrix(n, k, init).unwrap()
            })
            .collect();
        let bf16 = time_ms(dev, |i| {
            be.linear_with(&x, &[&bws[i % bws.len()]], true, Dtype::Bf16)
                .unwrap();
        });
        let io = (k + n) * 2;
        let gbs = |bytes: usize, ms: f64| bytes as f64 / (ms * 1e-3) / 1e9;
        println!(
            "fp8_timing: gemv rows 1 n {n} k {k}: fp8 {:.2} us ({:.0} GB/s), bf16 gemv {:.2} us ({:.0} GB/s), bf16/fp8 time {:.2}x",
            fp8 * 1e3,
            gbs(fp8_bytes + io, fp8),
            bf16 * 1e3,
            gbs(bf16_bytes + io, bf16),
            bf16 / fp8
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8.sh (timing, prints fp8_timing: lines)"]
fn timing_fp8_gemm_vs_cublas_bf16() {
    let dev = device();
    let m = 8192;
    for (n, k) in [(2048, 2048), (512 * 8, 2048)] {
        let h = HostFp8::random(2, n, k);
        let w = DevFp8::upload(&dev, &h);
        let x = dev.alloc(m * k * 2).unwrap();
        dev.fill_bytes(&x, 0x3c).unwrap();
        let y = dev.alloc(m * n * 2).unwrap();
        let path = fp8_gemm(&dev, &x, m, w.matrix(), &y).unwrap();
        let fp8 = time_ms(&dev, |_| {
            fp8_gemm(&dev, &x, m, w.matrix(), &y).unwrap();
        });
        let q = dev.alloc(m * k).unwrap();
        let s = dev.alloc(m * k.div_ceil(128) * 4).unwrap();
        let quant = time_ms(&dev, |_| {
            quantize(&dev, &x, m, k, &q, &s, ScaleLayout::RowMajor).unwrap();
        });
        let fallback = time_ms(&dev, |_| {
            fp8_gemm_with(&dev, &x, m, w.matrix(), &y, None).unwrap();
        });
        let wb = dev.alloc(n * k * 2).unwrap();
        dev.fill_bytes(&wb, 0x3c).unwrap();
        let blas = dev.blas().unwrap();
        let l = Linear {
            x: x.ptr(),
            x_dtype: Dtype::Bf16,
            w: wb.ptr(),
            w_dtype: Dtype::Bf16,
            y: y.ptr(),
            y_dtype: Dtype::Bf16,
            rows: m,
            in_features: k,
            out_features: n,
            accumulate: false,
        };
        // SAFETY: x, wb and y hold m · k, n · k and m · n bf16.
        let bf16 = time_ms(&dev, |_| unsafe { blas.linear(&l).unwrap() });
        let tf = |ms: f64| 2.0 * (m * n * k) as f64 / (ms * 1e-3) / 1e12;
        println!(
            "fp8_timing: gemm m {m} n {n} k {k}: fp8 ({path:?}, with quantization) {:.1} us ({:.0} TFLOP/s), quantization alone {:.1} us, dequant fallback {:.1} us ({:.0} TFLOP/s), cuBLAS bf16 {:.1} us ({:.0} TFLOP/s)",
            fp8 * 1e3,
            tf(fp8),
            quant * 1e3,
            fallback * 1e3,
            tf(fallback),
            bf16 * 1e3,
            tf(bf16)
        );
    }
}
