//! The whole MoE op of the CUDA backend (router, routed experts, shared
//! expert with its sigmoid gate folded into the routed combine, bf16 out in
//! one pass) against an f64 reference, on every grouped-GEMM kernel family
//! the device runs, and its timing on the 35B-A3B shape.

use super::{median, Event};
use half::bf16;
use headroom_core::ops::{Backend, MoeSpec, MoeWeights, WeightInit};
use headroom_core::Tensor;
use headroom_cuda::backend::{CudaAct, CudaBackend, CudaWeight};
use headroom_cuda::ops::moe::{GemmImpl, CHUNK_TOKENS};
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

fn backend() -> CudaBackend {
    CudaBackend::open(0).expect("a CUDA device (this test is run by bench/gpu/check_moe.sh)")
}

/// `n` values uniform in `[-scale, scale)`, rounded to bf16, seeded, in parallel.
fn uniform(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut v = vec![0f32; n];
    v.par_chunks_mut(1 << 16).enumerate().for_each(|(c, out)| {
        let mut rng =
            rand::rngs::StdRng::seed_from_u64(seed ^ (c as u64).wrapping_mul(0x9E37_79B9));
        for x in out {
            *x = bf16::from_f32((rng.random::<f32>() * 2.0 - 1.0) * scale).to_f32();
        }
    });
    v
}

/// Host copies of one MoE block's weights (bf16 values held as f32).
struct HostWeights {
    router: Vec<f32>,
    gate_up: Vec<f32>,
    down: Vec<f32>,
    sg: Vec<f32>,
    su: Vec<f32>,
    sd: Vec<f32>,
    sgate: Vec<f32>,
}

#[derive(Debug, Clone, Copy)]
struct Block {
    h: usize,
    i: usize,
    e: usize,
    k: usize,
    si: usize,
}

impl HostWeights {
    /// `local` experts' gate_up / down (of `b.e` routed over).
    fn random(b: Block, local: usize, seed: u64) -> HostWeights {
        let (h, i, si) = (b.h, b.i, b.si);
        HostWeights {
            router: uniform(seed, b.e * h, 0.2),
            gate_up: uniform(seed + 1, local * 2 * i * h, 0.1),
            down: uniform(seed + 2, local * h * i, 0.1),
            sg: uniform(seed + 3, si * h, 0.1),
            su: uniform(seed + 4, si * h, 0.1),
            sd: uniform(seed + 5, h * si, 0.1),
            sgate: uniform(seed + 6, h, 0.1),
        }
    }

    fn upload(&self, be: &CudaBackend, b: Block) -> MoeWeights<CudaWeight> {
        let m = |rows: usize, cols: usize, v: &[f32]| {
            be.upload_matrix(Tensor::from_f32(vec![rows, cols], v.to_vec()))
                .unwrap()
        };
        let local = self.down.len() / (b.h * b.i);
        MoeWeights {
            router: m(b.e, b.h, &self.router),
            gate_up: m(local * 2 * b.i, b.h, &self.gate_up),
            down: m(local * b.h, b.i, &self.down),
            shared_gate_proj: m(b.si, b.h, &self.sg),
            shared_up_proj: m(b.si, b.h, &self.su),
            shared_down_proj: m(b.h, b.si, &self.sd),
            shared_gate: m(1, b.h, &self.sgate),
        }
    }
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&p, &q)| p as f64 * q as f64).sum()
}

/// The MoE block in f64: router softmax and top-k (ties to the lower index),
/// SwiGLU experts, the shared expert (its gate, up and product rounded to bf16
/// as the device's cuBLAS path stores them) scaled by its sigmoid gate.
fn reference(x: &[f32], b: Block, spec: &MoeSpec, w: &HostWeights) -> Vec<f64> {
    let (h, i, si) = (b.h, b.i, b.si);
    let r16 = |v: f64| bf16::from_f64(v).to_f64();
    let mut out = vec![0f64; x.len()];
    out.par_chunks_mut(h).enumerate().for_each(|(t, o)| {
        let xr = &x[t * h..(t + 1) * h];
        let logits: Vec<f64> = (0..b.e)
            .map(|j| dot(xr, &w.router[j * h..(j + 1) * h]))
            .collect();
        let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = logits.iter().map(|l| (l - m).exp()).sum();
        let mut order: Vec<usize> = (0..b.e).collect();
        order.sort_by(|&p, &q| logits[q].total_cmp(&logits[p]).then(p.cmp(&q)));
        let chosen = &order[..b.k];
        let kept: f64 = chosen.iter().map(|&j| (logits[j] - m).exp() / z).sum();
        for &ex in chosen {
            if ex < spec.first_expert || ex >= spec.first_expert + spec.local_experts {
                continue;
            }
            let le = ex - spec.first_expert;
            let mut wk = (logits[ex] - m).exp() / z;
            if spec.renormalise {
                wk /= kept;
            }
            let mid: Vec<f64> = (0..i)
                .map(|j| {
                    let g = dot(xr, &w.gate_up[(le * 2 * i + j) * h..][..h]);
                    let u = dot(xr, &w.gate_up[(le * 2 * i + i + j) * h..][..h]);
                    silu(g) * u
                })
                .collect();
            for (c, oc) in o.iter_mut().enumerate() {
                let row = &w.down[(le * h + c) * i..][..i];
                *oc += wk
                    * mid
                        .iter()
                        .zip(row)
                        .map(|(&a, &d)| a * d as f64)
                        .sum::<f64>();
            }
        }
        let mid: Vec<f64> = (0..si)
            .map(|j| {
                let g = r16(dot(xr, &w.sg[j * h..(j + 1) * h]));
                let u = r16(dot(xr, &w.su[j * h..(j + 1) * h]));
                r16(silu(g) * u)
            })
            .collect();
        let gate = 1.0 / (1.0 + (-dot(xr, &w.sgate)).exp());
        for (c, oc) in o.iter_mut().enumerate() {
            let s: f64 = mid
                .iter()
                .zip(&w.sd[c * si..(c + 1) * si])
                .map(|(&a, &d)| a * d as f64)
                .sum();
            *oc += gate * s;
        }
    });
    out
}

/// Fills a few pool blocks of `bytes` with NaN and frees them: the op's
/// output comes from one of them, so an element it does not write stays NaN.
fn poison_pool(be: &CudaBackend, bytes: usize) {
    let dev = be.device();
    let bufs: Vec<_> = (0..4).map(|_| dev.alloc(bytes).unwrap()).collect();
    for b in &bufs {
        dev.fill_bytes(b, 0xFF).unwrap();
    }
    dev.synchronize().unwrap();
}

fn run(
    be: &CudaBackend,
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    spec: &MoeSpec,
    imp: Option<GemmImpl>,
) -> Vec<f32> {
    poison_pool(be, x.rows * x.cols * 2);
    let y = be.moe_marked(x, w, spec, imp, &mut |_| {}).unwrap();
    be.act_to_f32(&y).unwrap()
}

/// Relative Frobenius error of `got` against `want` over the rows not in
/// `nan_rows` (which must be all NaN); every other element must be finite.
fn rel_err(got: &[f32], want: &[f64], h: usize, nan_rows: &[usize]) -> f64 {
    let (mut num, mut den) = (0f64, 0f64);
    for (t, (g, w)) in got.chunks(h).zip(want.chunks(h)).enumerate() {
        if nan_rows.contains(&t) {
            assert!(g.iter().all(|v| v.is_nan()), "row {t} should be NaN");
            continue;
        }
        assert!(g.iter().all(|v| v.is_finite()), "row {t}: {:?}", &g[..4]);
        num += g
            .iter()
            .zip(w)
            .map(|(&a, &b)| (a as f64 - b).powi(2))
            .sum::<f64>();
        den += w.iter().map(|b| b * b).sum::<f64>();
    }
    (num / den).sqrt()
}

fn as_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&a| a as f64).collect()
}

/// Tokens of `tokens` the f64 reference covers: all of a small call, else
/// the first and last 16 (a large call's first and last pass).
fn sampled(tokens: usize) -> Vec<usize> {
    if tokens <= 512 {
        (0..tokens).collect()
    } else {
        (0..16).chain(tokens - 16..tokens).collect()
    }
}

/// The op on one block, on the default kernels and on each grouped-GEMM
/// family of the device, against f64 on the [`sampled`] tokens.
fn check_op(b: Block, spec: MoeSpec, tokens: usize, seed: u64) {
    let be = backend();
    let hw = HostWeights::random(b, spec.local_experts, seed);
    let w = hw.upload(&be, b);
    let x = uniform(seed + 10, tokens * b.h, 1.0);
    let xa = be.act_from_f32(tokens, b.h, &x).unwrap();
    let rows = sampled(tokens);
    let xs: Vec<f32> = rows
        .iter()
        .flat_map(|&t| x[t * b.h..(t + 1) * b.h].iter().copied())
        .collect();
    let want = reference(&xs, b, &spec, &hw);
    for imp in super::impls(be.device()) {
        let got = run(&be, &xa, &w, &spec, imp);
        let got: Vec<f32> = rows
            .iter()
            .flat_map(|&t| got[t * b.h..(t + 1) * b.h].iter().copied())
            .collect();
        let err = rel_err(&got, &want, b.h, &[]);
        println!(
            "moe op h={} i={} e={} k={} si={} local {}+{} t={tokens} {imp:?}: vs f64 {err:.2e}",
            b.h, b.i, b.e, b.k, b.si, spec.first_expert, spec.local_experts
        );
        assert!(err <= 2e-2, "{imp:?} vs f64 {err}");
    }
}

const SMALL: Block = Block {
    h: 256,
    i: 128,
    e: 16,
    k: 4,
    si: 128,
};

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moe.sh"]
fn the_moe_op_matches_f64() {
    let spec = MoeSpec::all_experts(SMALL.e, SMALL.k, SMALL.i, true);
    for (n, tokens) in [1usize, 67, 333].into_iter().enumerate() {
        check_op(SMALL, spec, tokens, 1000 + 20 * n as u64);
    }
    // Not renormalised, top-1, and a shared expert narrower than the routed ones.
    let plain = MoeSpec {
        renormalise: false,
        ..spec
    };
    check_op(SMALL, plain, 45, 1100);
    let top1 = MoeSpec::all_experts(SMALL.e, 1, SMALL.i, true);
    check_op(
        Block {
            k: 1,
            si: 64,
            ..SMALL
        },
        top1,
        45,
        1120,
    );
    // Two passes (the combine's x, shared and out offsets of the second one).
    check_op(SMALL, spec, CHUNK_TOKENS + 5, 1140);
    // The 35B-A3B shape (h 2048, 256 experts top-8, i 512, shared 512).
    let big = Block {
        h: 2048,
        i: 512,
        e: 256,
        k: 8,
        si: 512,
    };
    check_op(big, MoeSpec::all_experts(256, 8, 512, true), 300, 1160);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moe.sh"]
fn the_moe_op_of_a_rank_holding_some_experts_matches() {
    // Expert parallelism: this rank holds experts 4..12 of 16.
    let spec = MoeSpec {
        first_expert: 4,
        local_experts: 8,
        ..MoeSpec::all_experts(SMALL.e, SMALL.k, SMALL.i, true)
    };
    check_op(SMALL, spec, 67, 1200);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moe.sh"]
fn a_nan_row_poisons_only_its_token_and_the_op_is_reproducible() {
    let be = backend();
    let spec = MoeSpec::all_experts(SMALL.e, SMALL.k, SMALL.i, true);
    let hw = HostWeights::random(SMALL, SMALL.e, 1300);
    let w = hw.upload(&be, SMALL);
    let tokens = 40;
    let mut x = uniform(1310, tokens * SMALL.h, 1.0);
    x[3 * SMALL.h + 17] = f32::NAN;
    let xa = be.act_from_f32(tokens, SMALL.h, &x).unwrap();
    let want = reference(&x, SMALL, &spec, &hw);
    for imp in super::impls(be.device()) {
        let got = run(&be, &xa, &w, &spec, imp);
        let again = run(&be, &xa, &w, &spec, imp);
        assert!(
            got.iter()
                .zip(&again)
                .all(|(p, q)| p.to_bits() == q.to_bits()),
            "{imp:?}"
        );
        let err = rel_err(&got, &want, SMALL.h, &[3]);
        assert!(err <= 2e-2, "{imp:?} vs f64 {err}");
        println!("moe op NaN row {imp:?}: vs f64 {err:.2e}, bitwise reproducible");
    }
}

/// The stages a bench reports, in the op's mark names.
const STAGES: [&str; 6] = ["router", "shared", "route", "gate_up", "down", "combine"];

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moe.sh"]
fn bench_the_35b_moe_op() {
    let be = backend();
    let (h, e, k, i, si) = (2048, 256, 8, 512, 512);
    let init = |rows: usize, cols: usize, seed: u64| {
        be.init_matrix(
            rows,
            cols,
            WeightInit {
                seed,
                mean: 0.0,
                std: 0.02,
                window: None,
            },
        )
        .unwrap()
    };
    let w = MoeWeights {
        router: init(e, h, 1),
        gate_up: init(e * 2 * i, h, 2),
        down: init(e * h, i, 3),
        shared_gate_proj: init(si, h, 4),
        shared_up_proj: init(si, h, 5),
        shared_down_proj: init(h, si, 6),
        shared_gate: init(1, h, 7),
    };
    let spec = MoeSpec::all_experts(e, k, i, true);
    let arms = super::impls(be.device());
    println!("| GEMMs | tokens | MoE op ms | router | shared expert | route | gate+up | down | combine | x40 layers ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for tokens in [2048usize, 8192, 32768] {
        let x = be
            .act_from_f32(tokens, h, &uniform(8, tokens * h, 1.0))
            .unwrap();
        let mut outs = Vec::new();
        for &how in &arms {
            for _ in 0..2 {
                be.moe_marked(&x, &w, &spec, how, &mut |_| {}).unwrap();
            }
            be.device().synchronize().unwrap();
            let mut total = vec![];
            let mut per: Vec<Vec<f64>> = vec![vec![]; STAGES.len()];
            for _ in 0..7 {
                let mut marks: Vec<(&'static str, Event)> = Vec::new();
                let start = Event::record(be.device()).unwrap();
                let y = be
                    .moe_marked(&x, &w, &spec, how, &mut |s| {
                        marks.push((s, Event::record(be.device()).unwrap()))
                    })
                    .unwrap();
                let end = Event::record(be.device()).unwrap();
                total.push(end.ms_since(&start).unwrap());
                marks.push(("end", end));
                let mut sums = vec![0f64; STAGES.len()];
                for pair in marks.windows(2) {
                    if let Some(j) = STAGES.iter().position(|&n| n == pair[0].0) {
                        sums[j] += pair[1].1.ms_since(&pair[0].1).unwrap();
                    }
                }
                for (p, s) in per.iter_mut().zip(sums) {
                    p.push(s);
                }
                drop(y);
            }
            let t = median(&mut total);
            let cols: Vec<String> = per
                .iter_mut()
                .map(|p| format!("{:.3}", median(p)))
                .collect();
            println!(
                "| {how:?} | {tokens} | {t:.3} | {} | {:.1} |",
                cols.join(" | "),
                40.0 * t
            );
            let y = be.moe_marked(&x, &w, &spec, how, &mut |_| {}).unwrap();
            outs.push(be.act_to_f32(&y).unwrap());
        }
        let base = as_f64(&outs[0]);
        for (how, o) in arms.iter().zip(&outs).skip(1) {
            println!(
                "  {tokens} tokens: {how:?} vs {:?}: rel err {:.2e}",
                arms[0],
                rel_err(o, &base, h, &[])
            );
        }
    }
}
