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

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn small_shapes_with_tails_and_expert_parallel_slices_match_f64() {
    let be = backend();
    // hidden 200: not a multiple of 256 (the lanes' k loop has a tail);
    // inter 24 and shared 40: not multiples of 16 (column tails); 6 experts.
    let base = Shape {
        hidden: 200,
        experts: 6,
        top_k: 2,
        inter: 24,
        shared: 40,
        renormalise: false,
        first: 0,
        local: 6,
    };
    let cases = [
        base,
        Shape {
            renormalise: true,
            top_k: 3,
            ..base
        },
        // A rank holding experts 2..5 of 6.
        Shape {
            first: 2,
            local: 3,
            ..base
        },
        // The shared intermediate smaller than the routed one.
        Shape {
            shared: 8,
            hidden: 136,
            ..base
        },
    ];
    check_cases(&be, &cases, &[1, 2, 5, 8], 100);
}

/// Shapes the tensor-core kernels take (`moe_decode_gate_up_mma` at one row
/// and its `_rows` twin from three: hidden whole 32-column rounds up to
/// 2,048; `moe_decode_down_mma`: both
/// intermediates whole 64-column rounds up to 512) with their edges: hidden
/// 96 (most warps without a round), 1,056 (a warp's second stage of one
/// round, the last warps without rounds) and 1,024 (one stage a tile); tiles
/// of 8 columns cut short (intermediate 64 and 192 against 24 columns a
/// CTA); a shared intermediate longer and shorter than the routed one; 11
/// slots over the down kernel's 9 warps (warps with two slots); a rank's
/// slice of the experts. 1, 2, 5 and 8 rows; then a NaN in one row of the
/// 35B shape stays in that row.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn tensor_core_shapes_with_tails_match_f64() {
    let be = backend();
    let base = Shape {
        hidden: 96,
        experts: 12,
        top_k: 3,
        inter: 64,
        shared: 192,
        renormalise: true,
        first: 0,
        local: 12,
    };
    let cases = [
        base,
        Shape {
            first: 4,
            local: 5,
            ..base
        },
        Shape {
            hidden: 1056,
            experts: 40,
            top_k: 8,
            inter: 192,
            shared: 64,
            ..base
        },
        Shape {
            hidden: 1024,
            experts: 64,
            top_k: 10,
            inter: 128,
            shared: 512,
            renormalise: false,
            ..base
        },
        Shape {
            hidden: 2048,
            experts: 64,
            top_k: 10,
            inter: 512,
            shared: 128,
            ..base
        },
    ];
    check_cases(&be, &cases, &[1, 2, 5, 8], 1100);
    let s = QWEN35B;
    let w = weights(&be, s, 12);
    let (rows, h) = (3, s.hidden);
    let mut x = inputs(&w, s, rows, 5);
    x[h + 1000] = f32::NAN;
    let mut clean = x.clone();
    clean[h..2 * h].fill(0.0);
    let want = reference(&clean, &w, s);
    let xa = be.act_from_f32(rows, h, &x).unwrap();
    let got = run_decode(&be, &w, s, rows, &xa);
    assert!(got[h..2 * h].iter().all(|v| v.is_nan()), "row 1 is NaN");
    for r in [0, 2] {
        let e = rel_err(&got[r * h..(r + 1) * h], &want[r * h..(r + 1) * h]);
        assert!(e < 1e-2, "row {r}: rel err {e}");
    }
}

/// The MoE blocks of the model fixtures (crates/model/tests/fixtures):
/// moe_d256 (hidden 64, top-2 of 8 experts, intermediate 16, shared 24: its
/// one-token-per-step decode hit an illegal address in the whole model) and
/// moe_d64 (top-3), with neighbours: intermediate 8, shared 8 / 16 / 40,
/// without renormalisation, a rank's half of the experts; rows 1..=8.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn model_fixture_shapes_match_f64() {
    let be = backend();
    let d256 = Shape {
        hidden: 64,
        experts: 8,
        top_k: 2,
        inter: 16,
        shared: 24,
        renormalise: true,
        first: 0,
        local: 8,
    };
    let cases = [
        d256,
        Shape { top_k: 3, ..d256 },
        Shape { inter: 8, ..d256 },
        Shape { shared: 8, ..d256 },
        Shape {
            shared: 40,
            inter: 8,
            ..d256
        },
        Shape {
            renormalise: false,
            ..d256
        },
        Shape {
            first: 4,
            local: 4,
            ..d256
        },
        Shape {
            top_k: 8,
            shared: 16,
            ..d256
        },
    ];
    check_cases(&be, &cases, &[1, 2, 3, 4, 5, 6, 7, 8], 300);
}

/// Shapes past one pass of each loop: hidden > 2048 (x staging and the dots
/// loop), intermediate and shared > 512 (the down kernel's chunk passes),
/// top-k > 8 (its slot groups), more than 256 experts and counts that are not
/// multiples of 32 (the routing's per-thread experts and partial warps), the
/// largest top-k and expert count.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn shapes_past_one_pass_match_f64() {
    let be = backend();
    let cases = [
        Shape {
            hidden: 2312,
            experts: 12,
            top_k: 10,
            inter: 520,
            shared: 536,
            renormalise: true,
            first: 0,
            local: 12,
        },
        Shape {
            hidden: 64,
            experts: 300,
            top_k: 10,
            inter: 16,
            shared: 24,
            renormalise: false,
            first: 0,
            local: 300,
        },
        Shape {
            hidden: 64,
            experts: 1024,
            top_k: 32,
            inter: 8,
            shared: 8,
            renormalise: true,
            first: 500,
            local: 300,
        },
    ];
    check_cases(&be, &cases, &[1, 3, 8], 700);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn nan_row_stays_in_its_row_and_repeated_calls_agree() {
    let be = backend();
    let s = Shape {
        hidden: 256,
        experts: 16,
        top_k: 4,
        inter: 64,
        shared: 32,
        renormalise: true,
        first: 0,
        local: 16,
    };
    let w = weights(&be, s, 7);
    let rows = 4;
    let mut x = inputs(&w, s, rows, 3);
    x[s.hidden + 17] = f32::NAN;
    let xa = be.act_from_f32(rows, s.hidden, &x).unwrap();
    let h = s.hidden;
    let mut clean = x.clone();
    clean[h..2 * h].fill(0.0);
    let want = reference(&clean, &w, s);
    let first = run_decode(&be, &w, s, rows, &xa);
    assert!(first[h..2 * h].iter().all(|v| v.is_nan()), "row 1 is NaN");
    for r in [0, 2, 3] {
        let e = rel_err(&first[r * h..(r + 1) * h], &want[r * h..(r + 1) * h]);
        assert!(e < 1e-2, "row {r}: rel err {e}");
    }
    // Ten more calls at varying row counts: every call routes afresh.
    for c in 0..10 {
        let r = 1 + c % rows;
        let sub = be.act_from_f32(r, h, &clean[..r * h]).unwrap();
        let got = run_decode(&be, &w, s, r, &sub);
        let e = rel_err(&got, &want[..r * h]);
        assert!(e < 1e-2, "call {c} ({r} rows): rel err {e}");
    }
    let again = run_decode(&be, &w, s, rows, &xa);
    let same = first
        .iter()
        .zip(&again)
        .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
    assert!(same, "the same input gives the same bits");
}

/// The post-attention norm folded into the router
/// (`Backend::add_rms_norm_moe_partial` on the decode kernels:
/// `moe_decode_route_norm`) gives the bits of the two calls it replaces
/// (`add_rms_norm` then `moe`) — the new residual and the block's output —
/// at 1, 3 and 8 rows of the 35B-A3B shape and at hidden 4096 (4 rows: the
/// router's staging), with a NaN in one row's delta kept to that row; and a
/// bf16 residual (not the model's) takes the two calls.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn the_router_with_the_norm_folded_in_gives_the_two_launches_bits() {
    let be = backend();
    let wide = Shape {
        hidden: 4096,
        experts: 64,
        top_k: 4,
        inter: 256,
        shared: 384,
        renormalise: true,
        first: 0,
        local: 64,
    };
    for (n, (s, rows_list)) in [(QWEN35B, vec![1, 3, 8]), (wide, vec![4])]
        .into_iter()
        .enumerate()
    {
        let w = weights(&be, s, 900 + 10 * n as u64);
        let norm_w = uniform(901 + n as u64, s.hidden, 0.5);
        let norm = be
            .upload_vector(Tensor::from_f32(vec![s.hidden], norm_w))
            .unwrap();
        for rows in rows_list {
            let h = s.hidden;
            let res = uniform(910 + rows as u64, rows * h, 2.0);
            let mut delta = uniform(920 + rows as u64, rows * h, 1.0);
            if rows == 3 {
                delta[h + 17] = f32::NAN;
            }
            let d = be.act_from_f32(rows, h, &delta).unwrap();
            let mut r_two = be.act_from_f32_wide(rows, h, &res).unwrap();
            let mut r_one = be.act_from_f32_wide(rows, h, &res).unwrap();
            poison_pool(&be, &[rows * h * 2, rows * h * 4, workspace_bytes(s, rows)]);
            let normed = be.add_rms_norm(&mut r_two, Some(&d), &norm, 1e-6).unwrap();
            let two = be.moe(&normed, &w.dev, &spec(s)).unwrap();
            poison_pool(&be, &[rows * h * 2, rows * h * 4, workspace_bytes(s, rows)]);
            let one = be
                .add_rms_norm_moe_partial(&mut r_one, &d, &norm, 1e-6, &w.dev, &spec(s))
                .unwrap();
            let bits = |a: &CudaAct| -> Vec<u32> {
                be.act_to_f32(a)
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect()
            };
            assert_eq!(bits(&r_one), bits(&r_two), "{s:?} {rows} rows: residual");
            let (o1, o2) = (bits(&one), bits(&two));
            assert_eq!(o1, o2, "{s:?} {rows} rows: output");
            let out = be.act_to_f32(&one).unwrap();
            for (r, row) in out.chunks(h).enumerate() {
                let nan = row.iter().filter(|v| v.is_nan()).count();
                if rows == 3 && r == 1 {
                    assert!(nan > 0, "the NaN row");
                } else {
                    assert_eq!(nan, 0, "{s:?} {rows} rows: row {r} is finite");
                }
            }
        }
    }
    // A bf16 residual: not the fused form's; the two calls, the same values.
    let w = weights(&be, QWEN35B, 990);
    let norm = be
        .upload_vector(Tensor::from_f32(vec![2048], uniform(991, 2048, 0.5)))
        .unwrap();
    let res = uniform(992, 2048, 2.0);
    let d = be.act_from_f32(1, 2048, &uniform(993, 2048, 1.0)).unwrap();
    let mut r1 = be.act_from_f32(1, 2048, &res).unwrap();
    let mut r2 = be.act_from_f32(1, 2048, &res).unwrap();
    let one = be
        .add_rms_norm_moe_partial(&mut r1, &d, &norm, 1e-6, &w.dev, &spec(QWEN35B))
        .unwrap();
    let normed = be.add_rms_norm(&mut r2, Some(&d), &norm, 1e-6).unwrap();
    let two = be.moe(&normed, &w.dev, &spec(QWEN35B)).unwrap();
    assert_eq!(be.act_to_f32(&one).unwrap(), be.act_to_f32(&two).unwrap());
    assert_eq!(be.act_to_f32(&r1).unwrap(), be.act_to_f32(&r2).unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn refuses_what_it_does_not_take() {
    let be = backend();
    let s = Shape {
        hidden: 64,
        experts: 8,
        top_k: 2,
        inter: 16,
        shared: 16,
        renormalise: true,
        first: 0,
        local: 8,
    };
    let w = weights(&be, s, 9);
    let nine = be.act_from_f32(9, 64, &uniform(1, 9 * 64, 1.0)).unwrap();
    assert!(be.moe_decode(&nine, &w.dev, &spec(s)).is_err(), "9 rows");
    let one = be.act_from_f32(1, 64, &uniform(2, 64, 1.0)).unwrap();
    let bad_k = MoeSpec {
        top_k: 9,
        ..spec(s)
    };
    assert!(
        be.moe_decode(&one, &w.dev, &bad_k).is_err(),
        "top_k > experts"
    );
    let narrow = MoeSpec {
        intermediate: 12,
        ..spec(s)
    };
    assert!(
        be.moe_decode(&one, &w.dev, &narrow).is_err(),
        "weights of another shape"
    );
}

#[path = "decode_moe/cases.rs"]
mod cases;
#[path = "decode_moe/timing.rs"]
mod timing;
