//! FP8 weights kept FP8 on the device, through the backend's ops (issue
//! #26): an FP8 tensor uploads as e4m3 + block scales (its device bytes
//! one an element plus the scales); `linear`, `linear_many` and
//! `linear_with` on FP8 weights (the FP8 GEMV at 1 ..= 8 rows, the
//! block-scaled GEMM or its fallback above, the dequantized weight where the
//! grid restarts off the block boundary, bf16 and f32 outputs, mixed bf16 /
//! FP8 sets, more matrices than one GEMV launch takes) and the MoE block on
//! FP8 experts (the decode kernels' FP8 instantiation at 1 ..= 8 rows, the
//! FP8 decode to 32, the dequantized grouped-GEMM path above, expert
//! parallelism; `fused`: the FP8 decode kernels on block scales 2^12 apart,
//! tails, refusals) against f64 on the dequantized weights,
//! on fresh random inputs, outputs NaN-poisoned first. Needs a GPU: run by
//! bench/gpu/check_fp8wire.sh.

use half::bf16;
use headroom_core::fp8::{e4m3_to_f32, f32_to_e4m3, Fp8Block, E4M3_MAX};
use headroom_core::ops::{Backend, MoeSpec, MoeWeights};
use headroom_core::{Dtype, Tensor, TensorData};
use headroom_cuda::backend::{CudaAct, CudaBackend, CudaWeight, CudaWeightFormat};
use headroom_cuda::ops::fp8::gemm::lt_takes;
use headroom_cuda::ops::fp8::moe::MAX_DECODE_ROWS;
use headroom_cuda::ops::moe::fp8::native_takes;
use rand::{Rng, SeedableRng};

mod support;
use support::rel_err;

fn backend() -> CudaBackend {
    CudaBackend::open(0).expect("a CUDA device (run by bench/gpu/check_fp8wire.sh)")
}

/// `n` values uniform in `[-scale, scale)`, rounded to bf16.
fn uniform(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut g = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| bf16::from_f32((g.random::<f32>() * 2.0 - 1.0) * scale).to_f32())
        .collect()
}

/// An FP8 weight `[rows][cols]` quantized from `v` with its grid restarting
/// every `grid_rows` rows, uploaded; and its dequantized values.
fn fp8(
    be: &CudaBackend,
    rows: usize,
    cols: usize,
    grid_rows: usize,
    v: &[f32],
) -> (CudaWeight, Vec<f32>) {
    let q = Fp8Block::quantize(v, [128, 128], grid_rows, cols).unwrap();
    let scales = q.scale_inv.len();
    let t = Tensor::new(vec![rows, cols], TensorData::Fp8E4m3(q));
    let deq = t.to_f32_vec();
    let w = be.upload_matrix(t).unwrap();
    assert!(w.is_fp8());
    assert_eq!(w.format(), CudaWeightFormat::Fp8Block128);
    assert_eq!((w.rows, w.cols), (rows, cols));
    assert_eq!(w.device_bytes(), rows * cols + 4 * scales);
    (w, deq)
}

fn bf16_matrix(be: &CudaBackend, rows: usize, cols: usize, v: &[f32]) -> CudaWeight {
    let w = be
        .upload_matrix(Tensor::from_f32(vec![rows, cols], v.to_vec()))
        .unwrap();
    assert!(!w.is_fp8());
    w
}

/// Leaves NaN-filled (0xFF) blocks of each size in the pool, so the next
/// outputs and workspaces of those sizes start as NaN.
fn poison_pool(be: &CudaBackend, sizes: &[usize]) {
    let dev = be.device();
    let bufs: Vec<_> = sizes
        .iter()
        .flat_map(|&b| (0..4).map(move |_| b))
        .map(|b| dev.alloc(b.max(1)).unwrap())
        .collect();
    for b in &bufs {
        dev.fill_bytes(b, 0xFF).unwrap();
    }
    dev.synchronize().unwrap();
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&p, &q)| p as f64 * q as f64).sum()
}

/// `x · Wᵀ` in f64.
fn linear_ref(x: &[f32], w: &[f32], k: usize) -> Vec<f64> {
    x.chunks(k)
        .flat_map(|xr| w.chunks(k).map(move |wr| dot(xr, wr)))
        .collect()
}

/// Rows `[..][k]` quantized as the block-scaled GEMM quantizes its
/// activations (`fp8_quant_bf16`): per row and 128-column group, scale =
/// amax / 448 (1 for zeros), e4m3 of x / scale, nearest; the values the
/// GEMM then multiplies.
fn quantized(x: &[f32], k: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(k) {
        for g in row.chunks(128) {
            let amax = g.iter().fold(0f32, |a, v| a.max(v.abs()));
            let scale = if amax > 0.0 { amax / E4M3_MAX } else { 1.0 };
            out.extend(
                g.iter()
                    .map(|&v| e4m3_to_f32(f32_to_e4m3(v / scale)) * scale),
            );
        }
    }
    out
}

/// Whether `linear` of `rows` rows by `[n][k]` into `out` may run the
/// block-scaled GEMM (e4m3 activations): more than 8 rows, bf16 out, a shape
/// `lt_takes`; cuBLASLt may still have no algorithm (on the H200 it had
/// none at 9 or 37 rows, one at 36, 40, 64, 300, 512), and the
/// dequantizing fallback runs on the unquantized activations.
fn may_scale(rows: usize, n: usize, k: usize, out: Dtype) -> bool {
    rows > 8 && out == Dtype::Bf16 && lt_takes(rows, n, k)
}

/// The error of `got` against `x · Wᵀ` on the activations the path that
/// ran multiplies: as given, or (where the block-scaled GEMM may run)
/// quantized to e4m3 per 128-group, whichever it matches; and a word for
/// the path.
fn linear_err(
    got: &[f32],
    x: &[f32],
    w: &[f32],
    dims: (usize, usize, usize),
    out: Dtype,
) -> (f64, String) {
    let (rows, n, k) = dims;
    let plain = rel_err(got, &linear_ref(x, w, k));
    if !may_scale(rows, n, k, out) {
        return (plain, "gemv/fallback".into());
    }
    let scaled = rel_err(got, &linear_ref(&quantized(x, k), w, k));
    let path = if scaled < plain {
        format!("block-scaled (unquantized x: {plain:.2e})")
    } else {
        format!("fallback (e4m3 x: {scaled:.2e})")
    };
    (scaled.min(plain), path)
}

fn check_linear(be: &CudaBackend, x: &CudaAct, xh: &[f32], w: &CudaWeight, wh: &[f32], what: &str) {
    let (rows, k, n) = (x.rows, x.cols, w.rows);
    for out in [Dtype::Bf16, Dtype::F32] {
        poison_pool(be, &[rows * n * out.size_bytes()]);
        let y = if out == Dtype::Bf16 {
            be.linear(x, w).unwrap()
        } else {
            be.linear_with(x, &[w], true, Dtype::F32).unwrap().remove(0)
        };
        assert_eq!((y.rows, y.cols, y.dtype), (rows, n, out));
        let got = be.act_to_f32(&y).unwrap();
        let (err, path) = linear_err(&got, xh, wh, (rows, n, k), out);
        println!("fp8_linear: {what} rows {rows} out {out}: rel err {err:.2e} ({path})");
        assert!(err < 1e-2, "{what} rows {rows} {out}: {err:.3e} ({path})");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8wire.sh"]
fn fp8_weights_stay_fp8_and_linear_matches_f64_at_every_row_count() {
    let be = backend();
    // (n, k, grid rows): whole blocks (the block-scaled GEMM: k 2048, and
    // the 35B shared expert's down, k 512), k 384 (whole blocks cuBLASLt
    // got wrong: the fallback), tails in n and k (the fixture's hidden
    // 192), a small shared expert, and a grid restarting every 192 rows
    // (stacked parts: dequantized).
    let cases = [
        (256, 2048, 256),
        (2048, 512, 2048),
        (256, 384, 256),
        (320, 192, 320),
        (96, 192, 96),
        (384, 256, 192),
    ];
    for (c, &(n, k, grid)) in cases.iter().enumerate() {
        let wv = uniform(100 + c as u64, n * k, 1.0 / (k as f32).sqrt());
        let (w, wh) = fp8(&be, n, k, grid, &wv);
        for (j, rows) in [1usize, 3, 8, 9, 64, 300].into_iter().enumerate() {
            let xh = uniform(1000 * c as u64 + j as u64, rows * k, 1.0);
            let x = be.act_from_f32(rows, k, &xh).unwrap();
            check_linear(&be, &x, &xh, &w, &wh, &format!("[{n}][{k}] grid {grid}"));
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8wire.sh"]
fn linear_many_takes_fp8_sets_larger_than_a_launch_and_mixed_sets() {
    let be = backend();
    let k = 512;
    let ns = [128, 256, 96, 128, 200, 384, 64];
    let mut ws = Vec::new();
    for (i, &n) in ns.iter().enumerate() {
        let v = uniform(7 + i as u64, n * k, 0.05);
        // The fourth one bf16: a mixed set.
        ws.push(if i == 3 {
            (bf16_matrix(&be, n, k, &v), v)
        } else {
            fp8(&be, n, k, n, &v)
        });
    }
    for (set, take) in [
        ("fp8 x7", vec![0, 1, 2, 4, 5, 6, 0]),
        ("mixed", vec![0, 3, 5]),
    ] {
        let refs: Vec<&CudaWeight> = take.iter().map(|&i| &ws[i].0).collect();
        for rows in [1usize, 3, 8, 40] {
            let xh = uniform(rows as u64, rows * k, 1.0);
            let x = be.act_from_f32(rows, k, &xh).unwrap();
            poison_pool(
                &be,
                &take.iter().map(|&i| rows * ns[i] * 2).collect::<Vec<_>>(),
            );
            let ys = be.linear_many(&x, &refs).unwrap();
            assert_eq!(ys.len(), take.len());
            for (y, &i) in ys.iter().zip(&take) {
                let got = be.act_to_f32(y).unwrap();
                let dims = (rows, ns[i], k);
                let (err, path) = linear_err(&got, &xh, &ws[i].1, dims, Dtype::Bf16);
                assert!(
                    err < 1e-2,
                    "{set} matrix {i} rows {rows}: {err:.3e} ({path})"
                );
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Shape {
    hidden: usize,
    experts: usize,
    top_k: usize,
    inter: usize,
    shared: usize,
    first: usize,
    local: usize,
}

/// Qwen3.6-35B-A3B's MoE block, all experts on this rank.
const QWEN35B: Shape = Shape {
    hidden: 2048,
    experts: 256,
    top_k: 8,
    inter: 512,
    shared: 512,
    first: 0,
    local: 256,
};

/// Host values (dequantized where FP8) and the device weights: router and
/// shared gate bf16, the experts and the shared expert's projections FP8.
struct Weights {
    router: Vec<f32>,
    gate_up: Vec<f32>,
    down: Vec<f32>,
    sg: Vec<f32>,
    su: Vec<f32>,
    sd: Vec<f32>,
    gate: Vec<f32>,
    dev: MoeWeights<CudaWeight>,
}

fn weights(be: &CudaBackend, s: Shape, seed: u64) -> Weights {
    let (h, i, si, l) = (s.hidden, s.inter, s.shared, s.local);
    let sc = 1.7 / (h as f32).sqrt();
    let router = uniform(seed, s.experts * h, 4.0 * sc);
    let gate = uniform(seed + 6, h, sc);
    let (gate_up_w, gate_up) = fp8(
        be,
        l * 2 * i,
        h,
        2 * i,
        &uniform(seed + 1, l * 2 * i * h, sc),
    );
    let down_v = uniform(seed + 2, l * h * i, 1.7 / (i as f32).sqrt());
    let (down_w, down) = fp8(be, l * h, i, h, &down_v);
    let (sg_w, sg) = fp8(be, si, h, si, &uniform(seed + 3, si * h, sc));
    let (su_w, su) = fp8(be, si, h, si, &uniform(seed + 4, si * h, sc));
    let sd_v = uniform(seed + 5, h * si, 1.7 / (si as f32).sqrt());
    let (sd_w, sd) = fp8(be, h, si, h, &sd_v);
    let dev = MoeWeights {
        router: bf16_matrix(be, s.experts, h, &router),
        gate_up: gate_up_w,
        down: down_w,
        shared_gate_proj: sg_w,
        shared_up_proj: su_w,
        shared_down_proj: sd_w,
        shared_gate: bf16_matrix(be, 1, h, &gate),
    };
    Weights {
        router,
        gate_up,
        down,
        sg,
        su,
        sd,
        gate,
        dev,
    }
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn bf16_round(v: f64) -> f32 {
    bf16::from_f64(v).to_f32()
}

/// The MoE block in f64: softmax over all experts, top-k renormalised, the
/// rank's experts only, SwiGLU experts, the shared expert gated by
/// sigmoid(x · gate). With `quant`, the shared expert's projections that
/// may run the block-scaled GEMM at `rows` rows take their inputs as it
/// does: e4m3 per 128-group (gate/up: x; down: the bf16 SwiGLU of bf16 gate
/// and up); as given elsewhere.
fn reference(x: &[f32], w: &Weights, s: Shape, rows: usize, quant: bool) -> Vec<f64> {
    let (h, i, si) = (s.hidden, s.inter, s.shared);
    let (q_gu, q_down) = (
        quant && may_scale(rows, si, h, Dtype::Bf16),
        quant && may_scale(rows, h, si, Dtype::Bf16),
    );
    // The routed experts on the native FP8 grouped GEMMs (past the decode
    // paths' rows, on Hopper, whole 128-blocks): e4m3 activations too.
    let q_native = quant && rows > MAX_DECODE_ROWS && native_takes("sm_90a", h, i);
    let mut out = vec![0.0; x.len()];
    for (r, xr) in x.chunks(h).enumerate() {
        let logits: Vec<f64> = w.router.chunks(h).map(|row| dot(xr, row)).collect();
        let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = logits.iter().map(|l| (l - m).exp()).sum();
        let mut order: Vec<usize> = (0..s.experts).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let chosen = &order[..s.top_k];
        let kept: f64 = chosen.iter().map(|&j| (logits[j] - m).exp() / z).sum();
        let o = &mut out[r * h..(r + 1) * h];
        let xq = if q_native {
            quantized(xr, h)
        } else {
            Vec::new()
        };
        for &ex in chosen {
            if ex < s.first || ex >= s.first + s.local {
                continue;
            }
            let le = ex - s.first;
            let wt = (logits[ex] - m).exp() / z / kept;
            let xe = if q_native { &xq[..] } else { xr };
            let mid: Vec<f64> = (0..i)
                .map(|c| {
                    let g = dot(xe, &w.gate_up[(le * 2 * i + c) * h..][..h]);
                    let u = dot(xe, &w.gate_up[(le * 2 * i + i + c) * h..][..h]);
                    silu(g) * u
                })
                .collect();
            // The native path quantizes the SwiGLU output, rounded to bf16,
            // per 128-group before the down GEMM.
            let mid: Vec<f64> = if q_native {
                let b: Vec<f32> = mid.iter().map(|&v| bf16_round(v)).collect();
                quantized(&b, i).into_iter().map(f64::from).collect()
            } else {
                mid
            };
            for (n, on) in o.iter_mut().enumerate() {
                let row = &w.down[(le * h + n) * i..][..i];
                *on += wt * mid.iter().zip(row).map(|(a, &b)| a * b as f64).sum::<f64>();
            }
        }
        let sgate = 1.0 / (1.0 + (-dot(xr, &w.gate)).exp());
        let xs = if q_gu { quantized(xr, h) } else { xr.to_vec() };
        let gu = |c: usize| (dot(&xs, &w.sg[c * h..][..h]), dot(&xs, &w.su[c * h..][..h]));
        let mid: Vec<f64> = if q_down {
            let m: Vec<f32> = (0..si)
                .map(|c| {
                    let (g, u) = gu(c);
                    let (g, u) = (bf16_round(g) as f64, bf16_round(u) as f64);
                    bf16_round(silu(g) * u)
                })
                .collect();
            quantized(&m, si).into_iter().map(f64::from).collect()
        } else {
            (0..si)
                .map(|c| {
                    let (g, u) = gu(c);
                    silu(g) * u
                })
                .collect()
        };
        for (n, on) in o.iter_mut().enumerate() {
            let row = &w.sd[n * si..][..si];
            *on += sgate * mid.iter().zip(row).map(|(a, &b)| a * b as f64).sum::<f64>();
        }
    }
    out
}

/// The smallest gap between the k-th and (k+1)-th router logits over the rows.
fn routing_gap(x: &[f32], w: &Weights, s: Shape) -> f64 {
    x.chunks(s.hidden)
        .map(|xr| {
            let mut l: Vec<f64> = w.router.chunks(s.hidden).map(|r| dot(xr, r)).collect();
            l.sort_by(|a, b| b.total_cmp(a));
            l[s.top_k - 1] - l.get(s.top_k).copied().unwrap_or(f64::NEG_INFINITY)
        })
        .fold(f64::INFINITY, f64::min)
}

fn spec(s: Shape) -> MoeSpec {
    MoeSpec {
        first_expert: s.first,
        local_experts: s.local,
        ..MoeSpec::all_experts(s.experts, s.top_k, s.inter, true)
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8wire.sh"]
fn the_moe_block_on_fp8_experts_matches_f64_on_decode_and_prefill_rows() {
    let be = backend();
    let fixture = Shape {
        hidden: 192,
        experts: 8,
        top_k: 3,
        inter: 256,
        shared: 96,
        first: 0,
        local: 8,
    };
    let cases = [
        fixture,
        // Expert parallelism: this rank holds experts 2 .. 6.
        Shape {
            first: 2,
            local: 4,
            ..fixture
        },
        QWEN35B,
        // The tensor-core down kernel (whole 64-column rounds): with
        // another rank's experts among a row's slots, and with more slots
        // (12 + the shared one) than its 9 warps.
        Shape {
            first: 64,
            local: 96,
            ..QWEN35B
        },
        Shape {
            hidden: 64,
            experts: 16,
            top_k: 12,
            inter: 128,
            shared: 64,
            first: 0,
            local: 16,
        },
    ];
    for (c, &s) in cases.iter().enumerate() {
        let w = weights(&be, s, 50 + 10 * c as u64);
        for rows in [1usize, 2, 5, 8, 9, 40] {
            let x = (0..64)
                .map(|n| {
                    uniform(
                        9000 * c as u64 + 100 * rows as u64 + n,
                        rows * s.hidden,
                        1.0,
                    )
                })
                .find(|x| routing_gap(x, &w, s) > 1e-3)
                .expect("an input with a clear routing in 64 draws");
            let xa = be.act_from_f32(rows, s.hidden, &x).unwrap();
            poison_pool(&be, &[rows * s.hidden * 2, rows * s.top_k * s.hidden * 4]);
            let out = be.moe(&xa, &w.dev, &spec(s)).unwrap();
            assert_eq!(
                (out.rows, out.cols, out.dtype),
                (rows, s.hidden, Dtype::Bf16)
            );
            let got = be.act_to_f32(&out).unwrap();
            let plain = rel_err(&got, &reference(&x, &w, s, rows, false));
            let scaled = rel_err(&got, &reference(&x, &w, s, rows, true));
            let err = plain.min(scaled);
            println!(
                "fp8_moe: case {c} rows {rows}: rel err {err:.2e} (unquantized shared-expert \
                 inputs {plain:.2e}, e4m3 where the block-scaled GEMM may run {scaled:.2e})"
            );
            // The routed experts on FP8 GEMVs (to 32 rows) or their
            // dequantized bf16 GEMMs, the shared expert on the block-scaled
            // GEMM's e4m3 activations where it runs (in the reference too).
            assert!(err < 1e-2, "case {c} {s:?} rows {rows}: {err:.3e}");
        }
    }
}

/// The device time per call (µs) of `calls` back-to-back calls of `f`.
fn device_us(be: &CudaBackend, calls: usize, mut f: impl FnMut()) -> f64 {
    use headroom_cuda::event::StreamEvent as Event;
    f();
    be.synchronize().unwrap();
    let start = Event::record(be.device()).unwrap();
    for _ in 0..calls {
        f();
    }
    let end = Event::record(be.device()).unwrap();
    be.synchronize().unwrap();
    end.ms_since(&start).unwrap() * 1e3 / calls as f64
}

/// The 35B-A3B MoE block at 1 ..= 64 rows: the decode kernels' FP8
/// instantiation (to 8 rows: the `moe` op's path there), the FP8 decode
/// path (to `MAX_DECODE_ROWS`), the FP8 experts dequantized for the grouped
/// GEMMs, and the bf16 block (its decode kernels to 8 rows, the grouped
/// GEMMs above) on the same values: where the FP8 paths cross, and FP8
/// against bf16 (`fp8_moe_timing:` lines).
#[test]
#[ignore = "needs a CUDA GPU: timing, run by bench/gpu/check_fp8wire.sh"]
fn fp8_moe_timing() {
    let be = backend();
    let s = QWEN35B;
    let w = weights(&be, s, 3);
    let m = |r, c, v: &Vec<f32>| bf16_matrix(&be, r, c, v);
    let (h, i, si) = (s.hidden, s.inter, s.shared);
    let bf = MoeWeights {
        router: m(s.experts, h, &w.router),
        gate_up: m(s.local * 2 * i, h, &w.gate_up),
        down: m(s.local * h, i, &w.down),
        shared_gate_proj: m(si, h, &w.sg),
        shared_up_proj: m(si, h, &w.su),
        shared_down_proj: m(h, si, &w.sd),
        shared_gate: m(1, h, &w.gate),
    };
    let sp = spec(s);
    for rows in [1usize, 2, 4, 8, 16, 32, 64] {
        let x = be
            .act_from_f32(rows, h, &uniform(rows as u64, rows * h, 1.0))
            .unwrap();
        let fused = (rows <= 8).then(|| {
            device_us(&be, 50, || {
                be.moe_decode(&x, &w.dev, &sp).unwrap();
            })
        });
        let fp8 = (rows <= 32).then(|| {
            device_us(&be, 20, || {
                be.moe_fp8_decode(&x, &w.dev, &sp).unwrap();
            })
        });
        let grouped = device_us(&be, 10, || {
            be.moe_marked(&x, &w.dev, &sp, None, &mut |_| {}).unwrap();
        });
        let bf16 = device_us(&be, 50, || {
            be.moe(&x, &bf, &sp).unwrap();
        });
        let us = |t: Option<f64>| t.map_or("-".into(), |t| format!("{t:.1}"));
        println!(
            "fp8_moe_timing: rows {rows}: fp8 fused decode {} us, bf16 block {bf16:.1} us, \
             fp8 9-launch decode path {} us, fp8 dequant + grouped {grouped:.1} us",
            us(fused),
            us(fp8)
        );
    }
}

#[path = "fp8_backend/fused.rs"]
mod fused;

#[path = "fp8_backend/norm_codes.rs"]
mod norm_codes;

#[path = "fp8_backend/norm_fold.rs"]
mod norm_fold;
