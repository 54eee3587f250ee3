//! The cuBLAS linear for more than 8 rows (`crate::blas`): cuBLASLt with one
//! cached plan per shape against `cublasGemmEx` — the same outputs (bf16 and
//! f32 out, accumulate, odd sizes, 2-byte-aligned operands), one plan per
//! distinct shape however often it runs, and the host microseconds per call
//! of both on the 35B-A3B decode shapes at 200 rows (`linear_host:` lines).
//! Run on the GPU machine (`--ignored`).

use headroom_core::ops::{Backend, WeightInit};
use headroom_core::Dtype;
use headroom_cuda::alloc::DeviceBuffer;
use headroom_cuda::backend::CudaBackend;
use headroom_cuda::blas::{Blas, Linear};
use std::time::Instant;

fn backend() -> CudaBackend {
    CudaBackend::open(0).expect("a CUDA device")
}

fn init(seed: u64, std: f32) -> WeightInit {
    WeightInit {
        seed,
        mean: 0.0,
        std,
        window: None,
    }
}

/// Reads `n` values of `dtype` (bf16 or f32) at the start of `buf` as f32.
fn read(be: &CudaBackend, buf: &DeviceBuffer, n: usize, dtype: Dtype) -> Vec<f32> {
    match dtype {
        Dtype::F32 => {
            let mut v = vec![0f32; n];
            be.device().read(buf, &mut v).unwrap();
            v
        }
        _ => {
            let mut v = vec![0u16; n];
            be.device().read(buf, &mut v).unwrap();
            v.iter()
                .map(|&b| half::bf16::from_bits(b).to_f32())
                .collect()
        }
    }
}

/// One product of `rows` × `k` by `n` × `k` into a fresh `y` of `out`: the
/// weight and x from `init_matrix` (x at `x_offset` bytes into its buffer).
struct Case {
    w: DeviceBuffer,
    x: DeviceBuffer,
    x_offset: u64,
    rows: usize,
    k: usize,
    n: usize,
}

impl Case {
    fn new(be: &CudaBackend, rows: usize, k: usize, n: usize, x_offset: u64, seed: u64) -> Self {
        let dev = be.device();
        let w = dev.alloc(n * k * 2).unwrap();
        let x = dev.alloc(rows * k * 2 + x_offset as usize).unwrap();
        // Fill both from weights made on the device (bf16, std 0.02 and 1).
        let wm = be.init_matrix(n, k, init(seed, 0.02)).unwrap();
        let xm = be.init_matrix(rows, k, init(seed + 1, 1.0)).unwrap();
        copy(be, wm.ptr(), w.ptr(), n * k * 2);
        copy(be, xm.ptr(), x.ptr() + x_offset, rows * k * 2);
        dev.synchronize().unwrap();
        Case {
            w,
            x,
            x_offset,
            rows,
            k,
            n,
        }
    }

    fn linear(&self, y: &DeviceBuffer, out: Dtype, accumulate: bool) -> Linear {
        Linear {
            x: self.x.ptr() + self.x_offset,
            x_dtype: Dtype::Bf16,
            w: self.w.ptr(),
            w_dtype: Dtype::Bf16,
            y: y.ptr(),
            y_dtype: out,
            rows: self.rows,
            in_features: self.k,
            out_features: self.n,
            accumulate,
        }
    }
}

/// Device-to-device copy of `bytes` (synchronous).
fn copy(be: &CudaBackend, from: u64, to: u64, bytes: usize) {
    be.device().synchronize().unwrap();
    // SAFETY: both ranges are live device allocations of at least `bytes`.
    unsafe { cudarc::driver::result::memcpy_dtod_sync(to, from, bytes).unwrap() };
}

/// Runs `l` on cuBLASLt (`lt`) or `cublasGemmEx` and waits for it.
fn run(be: &CudaBackend, blas: &Blas, l: &Linear, lt: bool) {
    // SAFETY: the case's buffers were sized for its dims.
    unsafe {
        if lt {
            blas.linear(l).unwrap();
        } else {
            blas.linear_gemm_ex(l).unwrap();
        }
    }
    be.device().synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on the GPU machine"]
fn lt_plans_match_gemm_ex_and_are_made_once_per_shape() {
    let be = backend();
    let dev = be.device();
    let blas = dev.blas().unwrap();
    let before = blas.lt_plans().expect("cuBLASLt is loaded");
    // (rows, k, n, x offset in bytes): the 200-row decode shapes, odd sizes,
    // and x at 2-byte alignment.
    let cases = [
        (200, 2048, 8192, 0),
        (200, 4096, 2048, 0),
        (9, 2048, 256, 0),
        (1000, 2048, 512, 0),
        (37, 1030, 130, 0),
        (64, 2047, 33, 2),
    ];
    for (i, &(rows, k, n, off)) in cases.iter().enumerate() {
        let c = Case::new(&be, rows, k, n, off, 40 + i as u64);
        for out in [Dtype::Bf16, Dtype::F32] {
            let bytes = rows * n * out.size_bytes();
            let (ya, yb) = (dev.alloc(bytes).unwrap(), dev.alloc(bytes).unwrap());
            for y in [&ya, &yb] {
                dev.fill_bytes(y, 0).unwrap();
            }
            run(&be, blas, &c.linear(&ya, out, false), true);
            run(&be, blas, &c.linear(&yb, out, false), false);
            let (a, b) = (read(&be, &ya, rows * n, out), read(&be, &yb, rows * n, out));
            let what = format!("rows {rows} k {k} n {n} off {off} {out}");
            assert_close(&what, &a, &b, out);
            // Accumulate: y += x · Wᵀ on both, from the outputs above.
            run(&be, blas, &c.linear(&ya, out, true), true);
            run(&be, blas, &c.linear(&yb, out, true), false);
            let (a2, b2) = (read(&be, &ya, rows * n, out), read(&be, &yb, rows * n, out));
            assert_close(&format!("{what} accumulate"), &a2, &b2, out);
            for (x2, x1) in b2.iter().zip(&b) {
                assert!((x2 - 2.0 * x1).abs() <= 0.02 * x1.abs() + 1e-2, "{what}");
            }
        }
    }
    // Two dtypes of out per case, 2-byte x on the last: 12 plans, made once
    // each however often they ran.
    let made = blas.lt_plans().unwrap() - before;
    assert_eq!(made, 2 * cases.len(), "plans made");
}

/// Both outputs finite and within two bf16 roundings (bf16 out) or 1e-3
/// relative (f32 out: the sum orders of two algorithms) of each other.
fn assert_close(what: &str, a: &[f32], b: &[f32], out: Dtype) {
    let rel = if out == Dtype::Bf16 { 8e-3 } else { 1e-3 };
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(x.is_finite() && y.is_finite(), "{what}: {i}: {x} vs {y}");
        assert!(
            (x - y).abs() <= rel * y.abs() + 1e-3 * scale,
            "{what}: {i}: cuBLASLt {x} vs cublasGemmEx {y}"
        );
    }
}

/// Median host µs of one call of `f` over 50 rounds of `calls` calls (the
/// stream drained between rounds, so no call waits for queue space).
fn host_us(be: &CudaBackend, calls: usize, mut f: impl FnMut(usize)) -> f64 {
    for i in 0..calls {
        f(i);
    }
    let mut each = Vec::with_capacity(50 * calls);
    for _ in 0..50 {
        be.device().synchronize().unwrap();
        for i in 0..calls {
            let t = Instant::now();
            f(i);
            each.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    each.sort_by(f64::total_cmp);
    each[each.len() / 2]
}

#[test]
#[ignore = "needs a CUDA GPU: run with --ignored on the GPU machine"]
fn linear_host_us_per_call_at_200_rows() {
    let be = backend();
    let dev = be.device();
    let blas = dev.blas().unwrap();
    let rows = 200;
    // The dense projections of a 35B-A3B decode step at 200 running sequences.
    let shapes: [(&str, usize, &[usize], Dtype); 6] = [
        (
            "gdn in_proj qkv,z,b,a",
            2048,
            &[8192, 4096, 32, 32],
            Dtype::Bf16,
        ),
        ("gdn out_proj", 4096, &[2048], Dtype::Bf16),
        ("attn q,k,v", 2048, &[8192, 512, 512], Dtype::Bf16),
        ("attn o_proj", 4096, &[2048], Dtype::Bf16),
        ("moe router", 2048, &[256], Dtype::F32),
        ("shared expert gate", 2048, &[1], Dtype::F32),
    ];
    for (s, (name, k, ns, out)) in shapes.into_iter().enumerate() {
        let cases: Vec<Case> = ns
            .iter()
            .enumerate()
            .map(|(i, &n)| Case::new(&be, rows, k, n, 0, 100 + 10 * s as u64 + i as u64))
            .collect();
        let ys: Vec<DeviceBuffer> = ns
            .iter()
            .map(|&n| dev.alloc(rows * n * out.size_bytes()).unwrap())
            .collect();
        let ls: Vec<Linear> = cases
            .iter()
            .zip(&ys)
            .map(|(c, y)| c.linear(y, out, false))
            .collect();
        // SAFETY: each Linear addresses its case's buffers.
        let gemm_ex = host_us(&be, ls.len(), |i| unsafe {
            blas.linear_gemm_ex(&ls[i]).unwrap()
        });
        let lt = host_us(&be, ls.len(), |i| unsafe { blas.linear(&ls[i]).unwrap() });
        // The backend's whole call (output allocation included), one per matrix.
        let xa = be.act_from_f32(rows, k, &vec![0.01; rows * k]).unwrap();
        let ws: Vec<_> = ns
            .iter()
            .enumerate()
            .map(|(i, &n)| be.init_matrix(n, k, init(i as u64, 0.02)).unwrap())
            .collect();
        let refs: Vec<_> = ws.iter().collect();
        let backend_us = host_us(&be, 1, |_| {
            drop(be.linear_with(&xa, &refs, false, out).unwrap());
        }) / ns.len() as f64;
        println!(
            "linear_host: {name:<22} rows {rows} [{}]x{k} {out}: cublasGemmEx {gemm_ex:.2} us/call, \
             cuBLASLt cached {lt:.2} us/call ({:.1}x), backend linear {backend_us:.2} us/matrix",
            ns.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(","),
            gemm_ex / lt
        );
    }
    println!(
        "linear_host: {} cuBLASLt plans kept",
        blas.lt_plans().unwrap_or(0)
    );
}
