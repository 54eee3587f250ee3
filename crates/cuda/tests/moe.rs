//! The routed experts on the GPU against an f64 host reference (routing in
//! f32 exactly as the CPU `route`, experts in f64), and the timing of the
//! 35B-A3B shape. Run by bench/gpu/check_moe.sh on the GPU machine.

use half::bf16;
use headroom_cuda::alloc::DeviceBuffer;
use headroom_cuda::device::CudaDevice;
use headroom_cuda::event::StreamEvent as Event;
use headroom_cuda::ops::moe::{
    grouped_gemm_flops, routed_experts, routed_experts_marked, GemmImpl, MoeLaunch, CHUNK_TOKENS,
};
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

#[derive(Debug, Clone, Copy)]
struct Shape {
    tokens: usize,
    hidden: usize,
    experts: usize,
    top_k: usize,
    inter: usize,
    renormalise: bool,
}

const SMALL: Shape = Shape {
    tokens: 0,
    hidden: 256,
    experts: 8,
    top_k: 2,
    inter: 128,
    renormalise: true,
};
const QWEN35B: Shape = Shape {
    tokens: 0,
    hidden: 2048,
    experts: 256,
    top_k: 8,
    inter: 512,
    renormalise: true,
};

/// Router logits: multiples of 1/8 in about [-3, 3], so many exact ties and
/// no near-ties (device and host agree on every ranking).
fn random_logits(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| (rng.random::<f32>() * 48.0 - 24.0).round() / 8.0)
        .collect()
}

/// Host inputs of one case.
struct Case {
    s: Shape,
    x: Vec<u16>,
    logits: Vec<f32>,
    gate_up: Vec<u16>,
    down: Vec<u16>,
}

impl Case {
    fn random(s: Shape, seed: u64) -> Case {
        Case {
            s,
            x: random_bf16(s.tokens * s.hidden, 1.0, seed),
            logits: random_logits(s.tokens * s.experts, seed + 1),
            gate_up: random_bf16(
                s.experts * 2 * s.inter * s.hidden,
                2.0 / (s.hidden as f32).sqrt(),
                seed + 2,
            ),
            down: random_bf16(
                s.experts * s.hidden * s.inter,
                2.0 / (s.inter as f32).sqrt(),
                seed + 3,
            ),
        }
    }
}

/// The CPU `route` (crates/model/src/ops/moe.rs), verbatim in f32.
fn route(logits: &[f32], e: usize, k: usize, renormalise: bool) -> (Vec<usize>, Vec<f32>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut probs: Vec<f32> = logits.iter().map(|&l| (l - max).exp()).collect();
    let sum: f32 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= sum);
    let mut order: Vec<usize> = (0..e).collect();
    order.sort_by(|&a, &b| {
        let (pa, pb) = (probs[a], probs[b]);
        pb.partial_cmp(&pa)
            .unwrap_or_else(|| pa.is_nan().cmp(&pb.is_nan()))
            .then(a.cmp(&b))
    });
    let chosen = order[..k].to_vec();
    let kept: f32 = chosen.iter().map(|&c| probs[c]).sum();
    let w = chosen
        .iter()
        .map(|&c| {
            if renormalise {
                probs[c] / kept
            } else {
                probs[c]
            }
        })
        .collect();
    (chosen, w)
}

fn f(b: u16) -> f64 {
    bf16::from_bits(b).to_f64()
}

fn dot(a: &[u16], b: &[u16]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| f(x) * f(y)).sum()
}

/// f64 reference `[tokens][hidden]`.
fn reference(c: &Case) -> Vec<f64> {
    let Shape {
        hidden: h,
        experts: e,
        top_k: k,
        inter: i,
        renormalise,
        ..
    } = c.s;
    let mut out = vec![0f64; c.s.tokens * h];
    out.par_chunks_mut(h).enumerate().for_each(|(t, o)| {
        let (chosen, w) = route(&c.logits[t * e..(t + 1) * e], e, k, renormalise);
        let xr = &c.x[t * h..(t + 1) * h];
        for (&ex, &wk) in chosen.iter().zip(&w) {
            let gu = &c.gate_up[ex * 2 * i * h..(ex + 1) * 2 * i * h];
            let act: Vec<f64> = (0..i)
                .map(|j| {
                    let g = dot(xr, &gu[j * h..(j + 1) * h]);
                    let u = dot(xr, &gu[(i + j) * h..(i + j + 1) * h]);
                    g / (1.0 + (-g).exp()) * u
                })
                .collect();
            let dn = &c.down[ex * h * i..(ex + 1) * h * i];
            for (n, on) in o.iter_mut().enumerate() {
                let y: f64 = act
                    .iter()
                    .zip(&dn[n * i..(n + 1) * i])
                    .map(|(&a, &d)| a * f(d))
                    .sum();
                *on += wk as f64 * y;
            }
        }
    });
    out
}

/// Device copies of a case's inputs and a NaN-poisoned output.
struct Device {
    x: DeviceBuffer,
    logits: DeviceBuffer,
    gate_up: DeviceBuffer,
    down: DeviceBuffer,
    out: DeviceBuffer,
}

fn upload(dev: &CudaDevice, c: &Case) -> Device {
    let out = dev.alloc(c.s.tokens * c.s.hidden * 4).unwrap();
    dev.fill_bytes(&out, 0xFF).unwrap();
    Device {
        x: dev.upload(&c.x).unwrap(),
        logits: dev.upload(&c.logits).unwrap(),
        gate_up: dev.upload(&c.gate_up).unwrap(),
        down: dev.upload(&c.down).unwrap(),
        out,
    }
}

fn launch<'a>(s: &Shape, d: &'a Device) -> MoeLaunch<'a> {
    MoeLaunch {
        x: &d.x,
        router_logits: &d.logits,
        gate_up: &d.gate_up,
        down: &d.down,
        out: &d.out,
        tokens: s.tokens,
        hidden: s.hidden,
        experts: s.experts,
        top_k: s.top_k,
        intermediate: s.inter,
        renormalise: s.renormalise,
    }
}

/// The grouped-GEMM kernels this device runs, each forced, then the
/// default per-pass choice (`None`): every family on Hopper, mma.sync and
/// its streaming form elsewhere.
fn impls(dev: &CudaDevice) -> Vec<Option<GemmImpl>> {
    let forced = if dev.arch == "sm_90a" {
        vec![
            GemmImpl::MmaSync,
            GemmImpl::Wgmma,
            GemmImpl::Stream,
            GemmImpl::Ws,
        ]
    } else {
        vec![GemmImpl::MmaSync, GemmImpl::Stream]
    };
    forced.into_iter().map(Some).chain([None]).collect()
}

/// One call on `imp` (`None`: the default of `routed_experts`).
fn run(dev: &CudaDevice, c: &Case, imp: Option<GemmImpl>) -> Vec<f32> {
    let d = upload(dev, c);
    match imp {
        Some(_) => routed_experts_marked(dev, &launch(&c.s, &d), imp, &mut |_| Ok(())).unwrap(),
        None => routed_experts(dev, &launch(&c.s, &d)).unwrap(),
    }
    let mut out = vec![0f32; c.s.tokens * c.s.hidden];
    dev.read(&d.out, &mut out).unwrap();
    out
}

/// Relative Frobenius error over the tokens not in `nan_tokens` (which must be
/// all NaN); every other element must be finite; each token within 5e-2.
fn compare(c: &Case, got: &[f32], want: &[f64], nan_tokens: &[usize]) -> f64 {
    let h = c.s.hidden;
    let (mut num, mut den) = (0f64, 0f64);
    for t in 0..c.s.tokens {
        let (g, w) = (&got[t * h..(t + 1) * h], &want[t * h..(t + 1) * h]);
        if nan_tokens.contains(&t) {
            assert!(g.iter().all(|v| v.is_nan()), "token {t} should be NaN");
            continue;
        }
        assert!(
            g.iter().all(|v| v.is_finite()),
            "token {t} has a non-finite output ({:?}): {:?}",
            c.s,
            &g[..4]
        );
        let n: f64 = g.iter().zip(w).map(|(&a, &b)| (a as f64 - b).powi(2)).sum();
        let d: f64 = w.iter().map(|b| b * b).sum();
        assert!(
            n <= (5e-2f64).powi(2) * d,
            "token {t}: relative error {} ({:?})",
            (n / d).sqrt(),
            c.s
        );
        num += n;
        den += d;
    }
    (num / den).sqrt()
}

/// The f64 check of a random case of `s` on every family of [`impls`].
fn check(dev: &CudaDevice, s: Shape, seed: u64) {
    let c = Case::random(s, seed);
    let want = reference(&c);
    for imp in impls(dev) {
        let got = run(dev, &c, imp);
        let err = compare(&c, &got, &want, &[]);
        println!(
            "moe check {imp:?} t={} h={} e={} k={} i={} renorm={}: rel err {err:.2e}",
            s.tokens, s.hidden, s.experts, s.top_k, s.inter, s.renormalise
        );
        assert!(err <= 2e-2, "relative error {err} ({imp:?}, {s:?})");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moe.sh"]
fn small_shapes_match_the_f64_reference() {
    let dev = device();
    for (n, tokens) in [1usize, 7, 100, 333].into_iter().enumerate() {
        for renormalise in [true, false] {
            let s = Shape {
                tokens,
                renormalise,
                ..SMALL
            };
            check(&dev, s, 100 + 2 * n as u64 + renormalise as u64);
        }
    }
    // Other top-k and widths: top-1, top-8 of 8 (every expert), wider layers.
    for (k, h, i) in [(1, 128, 64), (8, 256, 192), (4, 384, 256)] {
        let s = Shape {
            tokens: 57,
            hidden: h,
            top_k: k,
            inter: i,
            ..SMALL
        };
        check(&dev, s, 200 + k as u64);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moe.sh"]
fn many_experts_and_more_picks_than_a_warp_match_the_f64_reference() {
    // Past 256 experts the wide routing kernel runs (32 logits a lane); past
    // 32 picks lane 0 writes the rest; at 1,024 experts the offsets' scan
    // holds every expert. The 1/8-step logits tie often across so many experts.
    let dev = device();
    for (n, (experts, top_k, tokens)) in [(257, 8, 37), (300, 40, 45), (1024, 33, 9), (256, 32, 70)]
        .into_iter()
        .enumerate()
    {
        for renormalise in [true, false] {
            let s = Shape {
                tokens,
                hidden: 128,
                experts,
                top_k,
                inter: 64,
                renormalise,
            };
            check(&dev, s, 600 + 2 * n as u64 + renormalise as u64);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moe.sh"]
fn the_35b_shape_matches_the_f64_reference() {
    let dev = device();
    check(
        &dev,
        Shape {
            tokens: 512,
            ..QWEN35B
        },
        300,
    );
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moe.sh"]
fn the_few_rows_per_expert_regime_matches_the_f64_reference() {
    // 200 and 420 rows of top-8 over 256 experts (6-13 pairs per expert: the
    // streaming kernels' regime), and 64 rows (some experts idle).
    let dev = device();
    for (n, tokens) in [64usize, 200, 420].into_iter().enumerate() {
        check(&dev, Shape { tokens, ..QWEN35B }, 310 + n as u64);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moe.sh"]
fn more_tokens_than_one_pass_are_run_in_chunks() {
    let dev = device();
    let s = Shape {
        tokens: CHUNK_TOKENS + 77,
        ..SMALL
    };
    check(&dev, s, 400);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moe.sh"]
fn ties_go_to_the_lower_expert_and_a_nan_row_poisons_only_its_token() {
    let dev = device();
    let s = Shape {
        tokens: 40,
        ..SMALL
    };
    let mut c = Case::random(s, 500);
    let e = s.experts;
    // Token 0: all logits equal (experts 0 and 1 win the tie); token 1: a tie
    // for second place between experts 6 and 3 (3 wins); token 2: NaN.
    c.logits[..e].fill(0.5);
    c.logits[e..2 * e].copy_from_slice(&[0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 2.0]);
    c.logits[2 * e + 5] = f32::NAN;
    assert_eq!(route(&c.logits[..e], e, 2, true).0, vec![0, 1]);
    assert_eq!(route(&c.logits[e..2 * e], e, 2, true).0, vec![7, 3]);
    assert_eq!(route(&c.logits[2 * e..3 * e], e, 2, true).0, vec![0, 1]);
    let want = reference(&c);
    for imp in impls(&dev) {
        let got = run(&dev, &c, imp);
        let err = compare(&c, &got, &want, &[2]);
        println!("moe ties and NaN row {imp:?}: rel err {err:.2e}");
        assert!(err <= 2e-2);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moe.sh"]
fn results_are_bitwise_reproducible() {
    let dev = device();
    let c = Case::random(
        Shape {
            tokens: 333,
            ..SMALL
        },
        600,
    );
    let a = run(&dev, &c, None);
    let b = run(&dev, &c, None);
    assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()));
    for imp in impls(&dev) {
        let x = run(&dev, &c, imp);
        let y = run(&dev, &c, imp);
        assert!(
            x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits()),
            "{imp:?}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moe.sh"]
fn sanitizer_case() {
    // Small enough for compute-sanitizer: a tail tile, idle experts, one NaN row.
    let dev = device();
    let mut c = Case::random(Shape { tokens: 7, ..SMALL }, 700);
    c.logits[3 * SMALL.experts] = f32::NAN;
    let want = reference(&c);
    for imp in impls(&dev) {
        let got = run(&dev, &c, imp);
        compare(&c, &got, &want, &[3]);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moe.sh"]
fn bench_the_35b_shape() {
    let dev = device();
    let s = QWEN35B;
    let (h, i) = (s.hidden, s.inter);
    let w = Bench35b::new(&dev);
    assert_eq!((h, s.experts, s.top_k, i), (H, E, K, I));
    println!("| GEMMs | tokens | routed block ms | TFLOP/s (block) | grouped GEMMs ms | TFLOP/s (GEMMs) | gate+up ms | down ms | route ms | combine ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (imp, tokens) in impls(&dev)
        .into_iter()
        .flat_map(|imp| [2048usize, 8192, 32768].map(|t| (imp, t)))
    {
        let (inputs, _) = Bench35b::inputs(&dev, tokens, 4);
        let l = w.launch(&inputs);
        for _ in 0..2 {
            routed_experts_marked(&dev, &l, imp, &mut |_| Ok(())).unwrap();
        }
        dev.synchronize().unwrap();
        let (mut total, mut gemms, mut gu, mut dn, mut rt, mut cb) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for _ in 0..7 {
            let (t, per) = timed_call(&dev, &l, imp);
            total.push(t);
            rt.push(per[0]);
            gu.push(per[1]);
            dn.push(per[2]);
            cb.push(per[3]);
            gemms.push(per[1] + per[2]);
        }
        let flops = grouped_gemm_flops(tokens, h, s.top_k, i);
        let (t, g) = (median(&mut total), median(&mut gemms));
        println!(
            "| {imp:?} | {tokens} | {t:.3} | {:.0} | {g:.3} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} |",
            flops / (t * 1e-3) / 1e12,
            flops / (g * 1e-3) / 1e12,
            median(&mut gu),
            median(&mut dn),
            median(&mut rt),
            median(&mut cb),
        );
    }
}

#[path = "moe/block.rs"]
mod block;
#[path = "moe/common.rs"]
mod common;
#[path = "support/watchdog.rs"]
mod watchdog;
#[path = "moe/ws.rs"]
mod ws;
use common::{device, median, random_bf16, timed_call, Bench35b, E, H, I, K};
