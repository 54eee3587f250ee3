//! The MoE decode path (`ops/moe/decode.rs`, three launches for 1..=8 rows)
//! against an f64 host reference and against the grouped-GEMM
//! path, on fresh random inputs with NaN-poisoned outputs and workspaces:
//! the 35B-A3B shape at 1, 3 and 8 rows, the moe_d256 / moe_d64 fixtures'
//! blocks (hidden 64, 8 experts, top-2/3, intermediate 16, shared 24) and
//! neighbours at 1..=8 rows, small shapes with tails in every dimension,
//! expert parallelism (a rank's slice of the experts), shapes past one pass
//! of each kernel's loops (hidden over 2048, intermediate over 512, top-k
//! over 8, more than 256 experts), a NaN input row, and repeated calls;
//! `cases` (the 35B shape at 1..=8 rows, tied router rows, a NaN router row,
//! tails at 1024 / 512, 8 rows of hidden 4096); and `timing` (each kernel's
//! median time and bandwidth at the 35B-A3B shape, and the whole block back
//! to back against the grouped-GEMM path).
//! Run by bench/gpu/check_decode.sh on the GPU machine.

use half::bf16;
use headroom_core::ops::{Backend, MoeSpec, MoeWeights, WeightInit};
use headroom_core::Tensor;
use headroom_cuda::backend::{CudaAct, CudaBackend, CudaWeight};
use headroom_cuda::event::StreamEvent as Event;
use rand::{Rng, SeedableRng};

mod support;
use support::rel_err;

fn backend() -> CudaBackend {
    CudaBackend::open(0).expect("a CUDA device (run by bench/gpu/check_decode.sh)")
}

/// `n` values uniform in `[-scale, scale)`, rounded to bf16 (what the device holds).
fn uniform(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut g = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| bf16::from_f32((g.random::<f32>() * 2.0 - 1.0) * scale).to_f32())
        .collect()
}

fn matrix(be: &CudaBackend, rows: usize, cols: usize, v: &[f32]) -> CudaWeight {
    be.upload_matrix(Tensor::from_f32(vec![rows, cols], v.to_vec()))
        .unwrap()
}

/// Leaves NaN-filled (0xFF) blocks of each size in the pool, so the next
/// outputs and workspaces of those sizes start as NaN.
fn poison_pool(be: &CudaBackend, sizes: &[usize]) {
    fill_pool(be, sizes, 0xFF)
}

/// Leaves blocks of each size filled with `byte` in the pool.
fn fill_pool(be: &CudaBackend, sizes: &[usize], byte: u8) {
    let dev = be.device();
    let bufs: Vec<_> = sizes
        .iter()
        .flat_map(|&b| (0..4).map(move |_| b))
        .map(|b| dev.alloc(b).unwrap())
        .collect();
    for b in &bufs {
        dev.fill_bytes(b, byte).unwrap();
    }
    dev.synchronize().unwrap();
}

#[derive(Clone, Copy, Debug)]
struct Shape {
    hidden: usize,
    experts: usize,
    top_k: usize,
    inter: usize,
    shared: usize,
    renormalise: bool,
    /// The rank's experts: first .. first + local.
    first: usize,
    local: usize,
}

/// Host copies of the weights (bf16-exact f32) and their device uploads.
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
    let sc = 1.0 / (h as f32).sqrt() * 1.7;
    let router = uniform(seed, s.experts * h, 4.0 * sc);
    let gate_up = uniform(seed + 1, l * 2 * i * h, sc);
    let down = uniform(seed + 2, l * h * i, 1.7 / (i as f32).sqrt());
    let sg = uniform(seed + 3, si * h, sc);
    let su = uniform(seed + 4, si * h, sc);
    let sd = uniform(seed + 5, h * si, 1.7 / (si as f32).sqrt());
    let gate = uniform(seed + 6, h, sc);
    let dev = MoeWeights {
        router: matrix(be, s.experts, h, &router),
        gate_up: matrix(be, l * 2 * i, h, &gate_up),
        down: matrix(be, l * h, i, &down),
        shared_gate_proj: matrix(be, si, h, &sg),
        shared_up_proj: matrix(be, si, h, &su),
        shared_down_proj: matrix(be, h, si, &sd),
        shared_gate: matrix(be, 1, h, &gate),
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

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&p, &q)| p as f64 * q as f64).sum()
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// The smallest gap between the k-th and (k+1)-th router logits over the rows
/// (the routing is well defined when it is far above f32 rounding).
fn routing_gap(x: &[f32], w: &Weights, s: Shape) -> f64 {
    router_gap(x, &w.router, s)
}

/// [`routing_gap`] for the router weights `router` (`[experts][hidden]`).
fn router_gap(x: &[f32], router: &[f32], s: Shape) -> f64 {
    x.chunks(s.hidden)
        .map(|xr| {
            let mut l: Vec<f64> = router.chunks(s.hidden).map(|r| dot(xr, r)).collect();
            l.sort_by(|a, b| b.total_cmp(a));
            l[s.top_k - 1] - l.get(s.top_k).copied().unwrap_or(f64::NEG_INFINITY)
        })
        .fold(f64::INFINITY, f64::min)
}

/// The MoE block in f64: softmax over all experts, top-k (renormalised when
/// asked), the rank's experts only, SwiGLU experts, shared expert gated by
/// sigmoid(x . gate).
fn reference(x: &[f32], w: &Weights, s: Shape) -> Vec<f64> {
    reference_ties(x, w, s, true)
}

/// [`reference`] with equal logits ranked lower index first
/// (`lower_first`, the kernels' rule) or higher index first.
fn reference_ties(x: &[f32], w: &Weights, s: Shape, lower_first: bool) -> Vec<f64> {
    let (h, i, si) = (s.hidden, s.inter, s.shared);
    let mut out = vec![0.0; x.len()];
    for (r, xr) in x.chunks(h).enumerate() {
        let logits: Vec<f64> = w.router.chunks(h).map(|row| dot(xr, row)).collect();
        let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = logits.iter().map(|l| (l - m).exp()).sum();
        let mut order: Vec<usize> = (0..s.experts).collect();
        order.sort_by(|&a, &b| {
            let ties = if lower_first { a.cmp(&b) } else { b.cmp(&a) };
            logits[b].total_cmp(&logits[a]).then(ties)
        });
        let chosen = &order[..s.top_k];
        let kept: f64 = chosen.iter().map(|&j| (logits[j] - m).exp() / z).sum();
        let o = &mut out[r * h..(r + 1) * h];
        for &ex in chosen {
            if ex < s.first || ex >= s.first + s.local {
                continue;
            }
            let le = ex - s.first;
            let mut wt = (logits[ex] - m).exp() / z;
            if s.renormalise {
                wt /= kept;
            }
            let mid: Vec<f64> = (0..i)
                .map(|c| {
                    let g = dot(xr, &w.gate_up[(le * 2 * i + c) * h..][..h]);
                    let u = dot(xr, &w.gate_up[(le * 2 * i + i + c) * h..][..h]);
                    silu(g) * u
                })
                .collect();
            for (n, on) in o.iter_mut().enumerate() {
                let row = &w.down[(le * h + n) * i..][..i];
                *on += wt * mid.iter().zip(row).map(|(a, &b)| a * b as f64).sum::<f64>();
            }
        }
        let sgate = 1.0 / (1.0 + (-dot(xr, &w.gate)).exp());
        let mid: Vec<f64> = (0..si)
            .map(|c| silu(dot(xr, &w.sg[c * h..][..h])) * dot(xr, &w.su[c * h..][..h]))
            .collect();
        for (n, on) in o.iter_mut().enumerate() {
            let row = &w.sd[n * si..][..si];
            *on += sgate * mid.iter().zip(row).map(|(a, &b)| a * b as f64).sum::<f64>();
        }
    }
    out
}

fn spec(s: Shape) -> MoeSpec {
    MoeSpec {
        first_expert: s.first,
        local_experts: s.local,
        ..MoeSpec::all_experts(s.experts, s.top_k, s.inter, s.renormalise)
    }
}

/// Fresh inputs of `rows` rows whose routing has a clear top-k (reseeded
/// until the k-th / (k+1)-th logit gap exceeds `1e-3`).
fn inputs(w: &Weights, s: Shape, rows: usize, seed: u64) -> Vec<f32> {
    (0..64)
        .map(|n| uniform(seed * 1000 + n, rows * s.hidden, 1.0))
        .find(|x| routing_gap(x, w, s) > 1e-3)
        .expect("an input with a clear routing in 64 draws")
}

/// The decode path's workspace bytes (`moe_decode.rs::workspace`).
fn workspace_bytes(s: Shape, rows: usize) -> usize {
    let up16 = |b: usize| b.div_ceil(16) * 16;
    let stride = s.inter.max(s.shared).div_ceil(4) * 4;
    up16(rows * (s.experts + 1) * 4)
        + 2 * up16(rows * s.top_k * 4)
        + rows * (s.top_k + 1) * stride * 4
}

/// The decode path on `x` (output and workspace blocks NaN-poisoned first).
fn run_decode(be: &CudaBackend, w: &Weights, s: Shape, rows: usize, x: &CudaAct) -> Vec<f32> {
    poison_pool(be, &[rows * s.hidden * 2, workspace_bytes(s, rows)]);
    let out = be.moe_decode(x, &w.dev, &spec(s)).unwrap();
    be.act_to_f32(&out).unwrap()
}

/// Every case at each row count: fresh inputs, the decode path (outputs
/// NaN-poisoned first) against f64.
fn check_cases(be: &CudaBackend, cases: &[Shape], rows_list: &[usize], seed: u64) {
    for (n, &s) in cases.iter().enumerate() {
        let w = weights(be, s, seed + 10 * n as u64);
        for &rows in rows_list {
            let x = inputs(&w, s, rows, seed + rows as u64);
            let xa = be.act_from_f32(rows, s.hidden, &x).unwrap();
            let want = reference(&x, &w, s);
            let got = run_decode(be, &w, s, rows, &xa);
            let err = rel_err(&got, &want);
            assert!(err < 1e-2, "case {n} {s:?}, {rows} rows: rel err {err}");
        }
    }
}

const QWEN35B: Shape = Shape {
    hidden: 2048,
    experts: 256,
    top_k: 8,
    inter: 512,
    shared: 512,
    renormalise: true,
    first: 0,
    local: 256,
};

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn qwen35b_shape_matches_f64_and_the_grouped_gemm_path() {
    let be = backend();
    let s = QWEN35B;
    let w = weights(&be, s, 11);
    // The grouped-GEMM path on its default kernels.
    let old = None;
    for rows in [1, 3, 8] {
        let x = inputs(&w, s, rows, rows as u64);
        let xa = be.act_from_f32(rows, s.hidden, &x).unwrap();
        let want = reference(&x, &w, s);
        let grouped = be
            .moe_marked(&xa, &w.dev, &spec(s), old, &mut |_| {})
            .unwrap();
        let grouped = be.act_to_f32(&grouped).unwrap();
        let e_old = rel_err(&grouped, &want);
        let grouped64: Vec<f64> = grouped.iter().map(|&v| v as f64).collect();
        let got = run_decode(&be, &w, s, rows, &xa);
        let err = rel_err(&got, &want);
        assert!(err < 1e-2, "{rows} rows: rel err {err} vs f64");
        let e_paths = rel_err(&got, &grouped64);
        println!("{rows} rows: decode {err:.2e}, grouped {e_old:.2e} vs f64, paths {e_paths:.2e}");
        assert!(e_paths < 2e-2, "{rows} rows: decode vs grouped {e_paths}");
        // The backend's moe op takes the decode path.
        let via_op = be
            .act_to_f32(&be.moe(&xa, &w.dev, &spec(s)).unwrap())
            .unwrap();
        assert_eq!(via_op, got, "{rows} rows: Backend::moe is the decode path");
    }
}

#[path = "decode_moe/cases.rs"]
mod cases;
#[path = "decode_moe/shapes.rs"]
mod shapes;
#[path = "decode_moe/timing.rs"]
mod timing;
