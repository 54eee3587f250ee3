//! The native block-scaled FP8 grouped GEMMs of the routed experts
//! (`ops/moe/fp8.rs`, `moe_grouped_gemm_fp8.cu`, sm_90a) against f64 host
//! references on fresh random inputs: expert weights of random finite e4m3
//! codes with block scales 2^U(-8, 8) (orders of magnitude apart), x
//! quantized per (token, 128 columns) exactly as the kernel's quantization
//! does, act rounded to bf16 and quantized likewise; rows per expert that
//! are no multiple of the tiles, an expert with no row and one with a
//! single row; the output and the pool's workspaces NaN-poisoned first.
//! The error against the unquantized activations is printed too.
//!
//! Then, in modules: `timing` (native FP8 vs dequantize + bf16 grouped
//! GEMMs vs bf16 grouped GEMMs on the 35B-A3B shape) and `skew` (the
//! warp-specialised kernels under skewed routings, against the tiles' bits).

#[allow(dead_code)]
#[path = "fp8_ops/host.rs"]
mod host;
mod support;
#[path = "support/watchdog.rs"]
mod watchdog;

use half::bf16;
use headroom_core::fp8::Fp8Block;
use headroom_core::ops::{Backend, MoeSpec, MoeWeights};
use headroom_core::{Tensor, TensorData};
use headroom_cuda::alloc::DeviceBuffer;
use headroom_cuda::backend::{CudaBackend, CudaWeight};
use headroom_cuda::device::CudaDevice;
use headroom_cuda::event::StreamEvent;
use headroom_cuda::ops::fp8::gemm::QuantizedX;
use headroom_cuda::ops::fp8::quant::dequantize_stacked;
use headroom_cuda::ops::moe::fp8::{
    routed_experts_fp8, routed_experts_fp8_from, routed_experts_fp8_on, Fp8ExpertScales, Fp8Gemms,
};
use headroom_cuda::ops::moe::{grouped_gemm_flops, routed_experts, MoeLaunch, CHUNK_TOKENS};
use host::{dequant_act, quantize, uniform_bf16, HostFp8, BLOCK};
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use watchdog::wait_or_abort;

fn device() -> CudaDevice {
    CudaDevice::open(0).expect("a CUDA device")
}

#[derive(Debug, Clone, Copy)]
struct Case {
    hidden: usize,
    inter: usize,
    experts: usize,
    top_k: usize,
}

/// The experts on the host (each its own `[n][k]` with its own scale grid)
/// and stacked on the device.
struct Experts {
    gate_up: Vec<HostFp8>,
    down: Vec<HostFp8>,
    dev: [DeviceBuffer; 4],
}

impl Experts {
    fn random(dev: &CudaDevice, c: Case, seed: u64) -> Experts {
        let gate_up: Vec<_> = (0..c.experts)
            .map(|e| HostFp8::random(seed + 2 * e as u64, 2 * c.inter, c.hidden))
            .collect();
        let down: Vec<_> = (0..c.experts)
            .map(|e| HostFp8::random(seed + 2 * e as u64 + 1, c.hidden, c.inter))
            .collect();
        let cat_w = |v: &[HostFp8]| v.iter().flat_map(|m| m.w.clone()).collect::<Vec<u8>>();
        let cat_s = |v: &[HostFp8]| v.iter().flat_map(|m| m.s.clone()).collect::<Vec<f32>>();
        let dev = [
            dev.upload(&cat_w(&gate_up)).unwrap(),
            dev.upload(&cat_s(&gate_up)).unwrap(),
            dev.upload(&cat_w(&down)).unwrap(),
            dev.upload(&cat_s(&down)).unwrap(),
        ];
        Experts { gate_up, down, dev }
    }

    fn scales(&self) -> Fp8ExpertScales<'_> {
        Fp8ExpertScales {
            gate_up: &self.dev[1],
            down: &self.dev[3],
        }
    }
}

/// Top-k of a softmax over `logits` (ties to the lower expert), weights
/// renormalised over the kept k.
fn route(logits: &[f32], k: usize) -> Vec<(usize, f64)> {
    let m = logits.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let p: Vec<f64> = logits.iter().map(|&l| (l as f64 - m).exp()).collect();
    let mut idx: Vec<usize> = (0..p.len()).collect();
    idx.sort_by(|&a, &b| p[b].partial_cmp(&p[a]).unwrap().then(a.cmp(&b)));
    let kept = &idx[..k];
    let sum: f64 = kept.iter().map(|&e| p[e]).sum();
    kept.iter().map(|&e| (e, p[e] / sum)).collect()
}

fn silu(v: f64) -> f64 {
    v / (1.0 + (-v).exp())
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// f64 references of the routed output `[tokens][hidden]`: on the quantized
/// activations the kernels multiply (x's codes, act rounded to bf16 then
/// quantized), and on the unquantized ones.
fn reference(
    x: &[f32],
    logits: &[f32],
    w: &Experts,
    c: Case,
    tokens: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (h, i) = (c.hidden, c.inter);
    let gu: Vec<Vec<f64>> = w.gate_up.iter().map(HostFp8::dequant_f64).collect();
    let dn: Vec<Vec<f64>> = w.down.iter().map(HostFp8::dequant_f64).collect();
    let (xq, xs) = quantize(x, tokens, h);
    let xd = dequant_act(&xq, &xs, tokens, h);
    let rows: Vec<(Vec<f64>, Vec<f64>)> = (0..tokens)
        .into_par_iter()
        .map(|t| {
            let xr = &xd[t * h..(t + 1) * h];
            let xu: Vec<f64> = x[t * h..(t + 1) * h].iter().map(|&v| v as f64).collect();
            let (mut q, mut u) = (vec![0.0; h], vec![0.0; h]);
            for (e, p) in route(&logits[t * c.experts..(t + 1) * c.experts], c.top_k) {
                let act = |xv: &[f64]| -> Vec<f64> {
                    (0..i)
                        .map(|j| {
                            let g = dot(xv, &gu[e][j * h..(j + 1) * h]);
                            silu(g) * dot(xv, &gu[e][(i + j) * h..(i + j + 1) * h])
                        })
                        .collect()
                };
                let a_b: Vec<f32> = act(xr)
                    .iter()
                    .map(|&v| bf16::from_f64(v).to_f32())
                    .collect();
                let (aq, as_) = quantize(&a_b, 1, i);
                let ad = dequant_act(&aq, &as_, 1, i);
                let au = act(&xu);
                for o in 0..h {
                    let wr = &dn[e][o * i..(o + 1) * i];
                    q[o] += p * dot(&ad, wr);
                    u[o] += p * dot(&au, wr);
                }
            }
            (q, u)
        })
        .collect();
    let q = rows.iter().flat_map(|r| r.0.clone()).collect();
    let u = rows.iter().flat_map(|r| r.1.clone()).collect();
    (q, u)
}

/// Router logits: random, but expert `E-1` never chosen and expert `E-2`
/// chosen by token 0 alone.
/// The routed experts of `l` (all its experts, no shared expert) on the
/// grouped-GEMM family `gemms`, forced.
fn routed_on(dev: &CudaDevice, l: &MoeLaunch, scales: Fp8ExpertScales<'_>, gemms: Fp8Gemms) {
    routed_experts_fp8_on(
        dev,
        l,
        (0, l.experts),
        scales,
        None,
        None,
        Some(gemms),
        &mut |_| Ok(()),
    )
    .unwrap();
}

fn logits(seed: u64, tokens: usize, experts: usize) -> Vec<f32> {
    let mut g = rand::rngs::StdRng::seed_from_u64(seed);
    let mut l: Vec<f32> = (0..tokens * experts)
        .map(|_| g.random::<f32>() * 4.0 - 2.0)
        .collect();
    for t in 0..tokens {
        l[t * experts + experts - 1] = -30.0;
        l[t * experts + experts - 2] = if t == 0 { 30.0 } else { -30.0 };
    }
    l
}

/// Leaves NaN-filled (0xFF) blocks of each size in the pool, so the next
/// workspaces of those sizes start as NaN.
fn poison_pool(dev: &CudaDevice, sizes: &[usize]) {
    let bufs: Vec<DeviceBuffer> = sizes.iter().map(|&b| dev.alloc(b).unwrap()).collect();
    for b in &bufs {
        dev.fill_bytes(b, 0xFF).unwrap();
    }
    dev.synchronize().unwrap();
}

/// Activations whose rows span orders of magnitude.
fn activations(seed: u64, tokens: usize, h: usize) -> Vec<f32> {
    let base = uniform_bf16(seed, tokens * h);
    (0..tokens * h)
        .map(|n| bf16::from_f32(base[n] * 2f32.powi((n / h % 7) as i32 - 3)).to_f32())
        .collect()
}

fn check(dev: &CudaDevice, c: Case, tokens: usize, seed: u64) {
    let (h, i) = (c.hidden, c.inter);
    let w = Experts::random(dev, c, seed);
    let x = activations(seed + 100, tokens, h);
    let lg = logits(seed + 200, tokens, c.experts);
    let xd = dev.upload(&host::bf16_bits(&x)).unwrap();
    let ld = dev.upload(&lg).unwrap();
    let pairs = tokens * c.top_k;
    poison_pool(dev, &[pairs * i * 2, pairs * h * 2, pairs * i, tokens * h]);
    let out = dev.alloc(tokens * h * 4).unwrap();
    dev.fill_bytes(&out, 0xFF).unwrap();
    let l = MoeLaunch {
        x: &xd,
        router_logits: &ld,
        gate_up: &w.dev[0],
        down: &w.dev[2],
        out: &out,
        tokens,
        hidden: h,
        experts: c.experts,
        top_k: c.top_k,
        intermediate: i,
        renormalise: true,
    };
    routed_experts_fp8(dev, &l, (0, c.experts), w.scales(), None, &mut |_| Ok(())).unwrap();
    let mut got = vec![0f32; tokens * h];
    dev.read(&out, &mut got).unwrap();
    // x quantized beforehand (as the MoE block shares it with its shared
    // expert): every pass reads its rows of it, the same bits.
    let pre = QuantizedX::new(dev, &xd, tokens, h).unwrap();
    dev.fill_bytes(&out, 0xFF).unwrap();
    let mut none = |_| Ok(());
    routed_experts_fp8_from(
        dev,
        &l,
        (0, c.experts),
        w.scales(),
        None,
        Some(&pre),
        &mut none,
    )
    .unwrap();
    let mut from_pre = vec![0f32; tokens * h];
    dev.read(&out, &mut from_pre).unwrap();
    assert!(
        got.iter()
            .zip(&from_pre)
            .all(|(a, b)| a.to_bits() == b.to_bits()),
        "{c:?} tokens {tokens}: the routed experts on a quantized x differ"
    );
    // Each family of grouped GEMMs forced (the default picks one per pass):
    // the warp-specialised kernels run the tile kernels' k-blocks, wgmma
    // shapes and promotion, so the same bits.
    let on = |gemms| {
        dev.fill_bytes(&out, 0xFF).unwrap();
        routed_on(dev, &l, w.scales(), gemms);
        let mut v = vec![0f32; tokens * h];
        dev.read(&out, &mut v).unwrap();
        v
    };
    let (tiles, ws) = (on(Fp8Gemms::Tiles), on(Fp8Gemms::Ws));
    let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
    assert!(
        same(&tiles, &ws),
        "{c:?} tokens {tokens}: the warp-specialised FP8 GEMMs differ from the tile kernels"
    );
    assert!(
        same(&got, &tiles),
        "{c:?} tokens {tokens}: the default family differs"
    );
    let short = QuantizedX::new(dev, &xd, tokens - 1, h).unwrap();
    let mut none = |_| Ok(());
    let refused = routed_experts_fp8_from(
        dev,
        &l,
        (0, c.experts),
        w.scales(),
        None,
        Some(&short),
        &mut none,
    );
    assert!(
        refused.is_err(),
        "{c:?} tokens {tokens}: a shorter quantized x was taken"
    );
    let (want_q, want_u) = reference(&x, &lg, &w, c, tokens);
    let err_q = support::rel_err(&got, &want_q);
    let err_u = support::rel_err(&got, &want_u);
    println!(
        "fp8_grouped: {c:?} tokens {tokens}: rel err {err_q:.2e} vs f64 on the quantized \
         activations, {err_u:.2e} vs unquantized"
    );
    assert!(err_q < 1e-2, "{c:?} tokens {tokens}: rel err {err_q:.2e}");
    // Token by token too, each within 1e-1 of its norm. Not tighter: the
    // reference computes the SwiGLU output in f64, the kernel in f32, so a
    // 128-group's amax can round to a neighbouring bf16 on one side and
    // move that group's scale, re-rounding all its e4m3 codes; two e4m3
    // roundings of one value differ by at most 2^-3 of it (H200, session 9:
    // 3.03e-2 at one of 33 tokens, 5.71e-2 at one of 4,096 with one group a
    // token, the whole outputs 1.8e-3 ..= 7.3e-3). A wrong expert, row or
    // block scale reads >= 0.3.
    let worst = (0..tokens)
        .map(|t| {
            let r = t * h..(t + 1) * h;
            (support::rel_err(&got[r.clone()], &want_q[r]), t)
        })
        .fold(
            (0.0f64, 0),
            |a, b| if b.0.is_nan() || b.0 > a.0 { b } else { a },
        );
    println!(
        "fp8_grouped: {c:?} tokens {tokens}: worst token {} rel err {:.2e}",
        worst.1, worst.0
    );
    assert!(
        worst.0 < 1e-1,
        "{c:?} tokens {tokens}: token {} rel err {:.2e}",
        worst.1,
        worst.0
    );
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a): the native FP8 grouped GEMMs against f64"]
fn the_native_fp8_grouped_gemms_match_f64_with_ragged_experts() {
    let dev = device();
    let cases = [
        // Two k-blocks in each GEMM, four act column tiles.
        Case {
            hidden: 256,
            inter: 256,
            experts: 16,
            top_k: 4,
        },
        // Three k-blocks in gate+up, one in down, gate and up halves in
        // the same scale block (inter 128).
        Case {
            hidden: 384,
            inter: 128,
            experts: 8,
            top_k: 2,
        },
    ];
    for (n, c) in cases.into_iter().enumerate() {
        for tokens in [33, 100, 1000, 4096] {
            check(&dev, c, tokens, 1000 * n as u64 + tokens as u64);
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a): the native FP8 grouped GEMMs over two passes against f64"]
fn more_tokens_than_one_pass_are_run_in_chunks() {
    // CHUNK_TOKENS + 77 tokens: a full pass, then a 77-token one whose
    // tokens start at CHUNK_TOKENS (the x offset, the quantized rows and
    // the output rows of the second pass).
    let dev = device();
    let c = Case {
        hidden: 256,
        inter: 128,
        experts: 8,
        top_k: 2,
    };
    check(&dev, c, CHUNK_TOKENS + 77, 77);
}

/// Stacked host experts as one FP8 weight `[E·n][k]` (a grid per expert).
fn fp8_weight(be: &CudaBackend, m: &[HostFp8]) -> CudaWeight {
    let (n, k) = (m[0].n, m[0].k);
    let bits = m.iter().flat_map(|x| x.w.clone()).collect();
    let s = m.iter().flat_map(|x| x.s.clone()).collect();
    let q = Fp8Block::new(bits, s, [BLOCK, BLOCK], n, k).unwrap();
    let w = be
        .upload_matrix(Tensor::new(vec![m.len() * n, k], TensorData::Fp8E4m3(q)))
        .unwrap();
    assert!(w.is_fp8());
    w
}

fn bf16_weight(be: &CudaBackend, rows: usize, cols: usize, v: &[f32]) -> CudaWeight {
    be.upload_matrix(Tensor::from_f32(vec![rows, cols], v.to_vec()))
        .unwrap()
}

/// `x · wᵀ` in f64 for x `[t][k]`, w `[n][k]`.
fn matmul(x: &[f64], w: &[f32], t: usize, n: usize, k: usize) -> Vec<f64> {
    let w: Vec<f64> = w.iter().map(|&v| v as f64).collect();
    (0..t * n)
        .map(|o| {
            dot(
                &x[o / n * k..(o / n + 1) * k],
                &w[o % n * k..(o % n + 1) * k],
            )
        })
        .collect()
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a): the MoE block on FP8 experts against f64"]
fn the_moe_block_on_fp8_experts_matches_f64_from_33_to_4096_rows() {
    let be = CudaBackend::open(0).expect("a CUDA device");
    let dev = be.device();
    let c = Case {
        hidden: 256,
        inter: 256,
        experts: 16,
        top_k: 4,
    };
    let (h, i, si) = (c.hidden, c.inter, 128);
    let w = Experts::random(dev, c, 31);
    let sc = 1.0 / (h as f32).sqrt();
    let scaled = |seed, n, s: f32| -> Vec<f32> {
        uniform_bf16(seed, n)
            .iter()
            .map(|&v| bf16::from_f32(v * s).to_f32())
            .collect()
    };
    let router = scaled(40, c.experts * h, 4.0 * sc);
    let (sg, su, sd) = (
        scaled(41, si * h, sc),
        scaled(42, si * h, sc),
        scaled(43, h * si, sc),
    );
    let gate = scaled(44, h, sc);
    let weights = MoeWeights {
        router: bf16_weight(&be, c.experts, h, &router),
        gate_up: fp8_weight(&be, &w.gate_up),
        down: fp8_weight(&be, &w.down),
        shared_gate_proj: bf16_weight(&be, si, h, &sg),
        shared_up_proj: bf16_weight(&be, si, h, &su),
        shared_down_proj: bf16_weight(&be, h, si, &sd),
        shared_gate: bf16_weight(&be, 1, h, &gate),
    };
    let spec = MoeSpec::all_experts(c.experts, c.top_k, i, true);
    for tokens in [33, 257, 1000, 4096] {
        let x = activations(500 + tokens as u64, tokens, h);
        let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let logits: Vec<f32> = matmul(&xf, &router, tokens, c.experts, h)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let (routed, _) = reference(&x, &logits, &w, c, tokens);
        let g = matmul(&xf, &sg, tokens, si, h);
        let u = matmul(&xf, &su, tokens, si, h);
        let a: Vec<f64> = g.iter().zip(&u).map(|(&g, &u)| silu(g) * u).collect();
        let shared = matmul(&a, &sd, tokens, h, si);
        let gates = matmul(&xf, &gate, tokens, 1, h);
        let want: Vec<f64> = (0..tokens * h)
            .map(|o| routed[o] + shared[o] / (1.0 + (-gates[o / h]).exp()))
            .collect();
        let xa = be.act_from_f32(tokens, h, &x).unwrap();
        poison_pool(dev, &[tokens * h * 2, tokens * c.top_k * h * 2]);
        let out = be.moe(&xa, &weights, &spec).unwrap();
        let got = be.act_to_f32(&out).unwrap();
        let err = support::rel_err(&got, &want);
        println!("fp8_grouped: moe block tokens {tokens}: rel err {err:.2e} vs f64");
        assert!(err < 1e-2, "tokens {tokens}: rel err {err:.2e}");
    }
}

/// FP8 experts of `e` experts, `hidden` h and `intermediate` i on the device
/// for the tests that check bits or time rather than values: random e4m3
/// codes of moderate magnitude (gate+up's, then down's, from `g`) and every
/// scale 0.01.
struct RandomFp8Experts {
    gate_up: DeviceBuffer,
    down: DeviceBuffer,
    gate_up_s: DeviceBuffer,
    down_s: DeviceBuffer,
    /// hidden, intermediate, experts.
    shape: (usize, usize, usize),
}

impl RandomFp8Experts {
    fn new(
        dev: &CudaDevice,
        h: usize,
        i: usize,
        e: usize,
        g: &mut rand::rngs::StdRng,
    ) -> RandomFp8Experts {
        let mut codes =
            |n: usize| -> Vec<u8> { (0..n).map(|_| (g.random::<u8>() & 0xbf) | 0x20).collect() };
        let gate_up = dev.upload(&codes(e * 2 * i * h)).unwrap();
        let down = dev.upload(&codes(e * h * i)).unwrap();
        RandomFp8Experts {
            gate_up,
            down,
            gate_up_s: dev
                .upload(&vec![0.01f32; e * (2 * i / BLOCK) * (h / BLOCK)])
                .unwrap(),
            down_s: dev
                .upload(&vec![0.01f32; e * (h / BLOCK) * (i / BLOCK)])
                .unwrap(),
            shape: (h, i, e),
        }
    }

    /// These experts over `tokens` rows of `x` routed by `logits` (top
    /// `top_k`, renormalised) into `out`.
    fn launch<'a>(
        &'a self,
        x: &'a DeviceBuffer,
        logits: &'a DeviceBuffer,
        out: &'a DeviceBuffer,
        tokens: usize,
        top_k: usize,
    ) -> MoeLaunch<'a> {
        let (hidden, intermediate, experts) = self.shape;
        MoeLaunch {
            x,
            router_logits: logits,
            gate_up: &self.gate_up,
            down: &self.down,
            out,
            tokens,
            hidden,
            experts,
            top_k,
            intermediate,
            renormalise: true,
        }
    }

    fn scales(&self) -> Fp8ExpertScales<'_> {
        Fp8ExpertScales {
            gate_up: &self.gate_up_s,
            down: &self.down_s,
        }
    }
}

#[path = "fp8_grouped/skew.rs"]
mod skew;
#[path = "fp8_grouped/timing.rs"]
mod timing;
