//! `fp8_grouped_timing:` lines: native FP8 (the tile kernels and the
//! warp-specialised ones, each forced) vs dequantize + bf16 grouped GEMMs vs
//! bf16 grouped GEMMs on the 35B-A3B shape, at 512 / 2,048 / 8,192 tokens.

use super::*;

/// Mean ms of `f()` over `iters` calls after 3 warm-up calls.
fn time_ms(dev: &CudaDevice, iters: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    dev.synchronize().unwrap();
    let start = StreamEvent::record(dev).unwrap();
    for _ in 0..iters {
        f();
    }
    let end = StreamEvent::record(dev).unwrap();
    end.ms_since(&start).unwrap() / iters as f64
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a): timing, prints fp8_grouped_timing: lines"]
fn timing_native_fp8_vs_dequant_vs_bf16_grouped_gemms() {
    let dev = device();
    let c = Case {
        hidden: 2048,
        inter: 512,
        experts: 256,
        top_k: 8,
    };
    let (h, i, e) = (c.hidden, c.inter, c.experts);
    // Random codes and scales near 1 (the timing does not check values).
    let mut g = rand::rngs::StdRng::seed_from_u64(7);
    let w = RandomFp8Experts::new(&dev, h, i, e, &mut g);
    let (gu_w, dn_w, gu_s, dn_s, scales) =
        (&w.gate_up, &w.down, &w.gate_up_s, &w.down_s, w.scales());
    let gu_b = dev.alloc(e * 2 * i * h * 2).unwrap();
    let dn_b = dev.alloc(e * h * i * 2).unwrap();
    dequantize_stacked(&dev, gu_w, gu_s, e * 2 * i, h, 2 * i, &gu_b).unwrap();
    dequantize_stacked(&dev, dn_w, dn_s, e * h, i, h, &dn_b).unwrap();
    for tokens in [512, 2048, 8192] {
        let x = dev
            .upload(&host::bf16_bits(&uniform_bf16(tokens as u64, tokens * h)))
            .unwrap();
        let lg: Vec<f32> = (0..tokens * e).map(|_| g.random::<f32>()).collect();
        let lg = dev.upload(&lg).unwrap();
        let out = dev.alloc(tokens * h * 4).unwrap();
        let launch = |gate_up, down| MoeLaunch {
            x: &x,
            router_logits: &lg,
            gate_up,
            down,
            out: &out,
            tokens,
            hidden: h,
            experts: e,
            top_k: c.top_k,
            intermediate: i,
            renormalise: true,
        };
        let (l8, lb) = (launch(gu_w, dn_w), launch(&gu_b, &dn_b));
        let iters = (40_000 / tokens).clamp(5, 50);
        let native = time_ms(&dev, iters, || {
            routed_experts_fp8(&dev, &l8, (0, e), scales, None, &mut |_| Ok(())).unwrap()
        });
        let dequant = time_ms(&dev, iters, || {
            let gb = dev.alloc(e * 2 * i * h * 2).unwrap();
            let db = dev.alloc(e * h * i * 2).unwrap();
            dequantize_stacked(&dev, gu_w, gu_s, e * 2 * i, h, 2 * i, &gb).unwrap();
            dequantize_stacked(&dev, dn_w, dn_s, e * h, i, h, &db).unwrap();
            let l = MoeLaunch {
                gate_up: &gb,
                down: &db,
                ..lb
            };
            routed_experts(&dev, &l).unwrap();
        });
        let bf16_ms = time_ms(&dev, iters, || routed_experts(&dev, &lb).unwrap());
        let family = |gemms| time_ms(&dev, iters, || routed_on(&dev, &l8, scales, gemms));
        let (tiles, ws) = (family(Fp8Gemms::Tiles), family(Fp8Gemms::Ws));
        let flops = grouped_gemm_flops(tokens, h, c.top_k, i);
        let tf = |ms: f64| flops / (ms * 1e-3) / 1e12;
        println!(
            "fp8_grouped_timing: tokens {tokens}: native fp8 {native:.3} ms ({:.0} TFLOP/s), \
             dequant + bf16 {dequant:.3} ms ({:.0}), bf16 grouped {bf16_ms:.3} ms ({:.0}), \
             fp8 tiles {tiles:.3} ms ({:.0}), fp8 warp-specialised {ws:.3} ms ({:.0}) \
             (whole routed experts: route, quantize, GEMMs, combine)",
            tf(native),
            tf(dequant),
            tf(bf16_ms),
            tf(tiles),
            tf(ws)
        );
    }
}

/// Logits whose top-k are experts `(k·t + j) mod experts`: every expert gets
/// exactly `tokens · k / experts` rows (whole 128-row tiles when that is a
/// multiple of 128), the routing without tails.
fn balanced_logits(tokens: usize, experts: usize, k: usize) -> Vec<f32> {
    let mut lg = vec![0f32; tokens * experts];
    for t in 0..tokens {
        for j in 0..k {
            lg[t * experts + (k * t + j) % experts] = 1.0;
        }
    }
    lg
}

#[test]
#[ignore = "needs a CUDA GPU (sm_90a): timing, prints fp8_grouped_tails: lines"]
fn timing_the_ws_gemms_with_and_without_tile_tails() {
    // W1's mixed steps route ≈ 265 rows an expert: most experts then have a
    // third 128-row tile of a few rows (docs/perf/cuda-fp8.md, session 41).
    // The ws GEMMs at 8,192 tokens on a routing with every expert at exactly
    // 256 rows (two whole tiles) against near-uniform random logits (≈ 256 ±
    // 16 rows, most experts three tiles): what the tails cost. At 8,469
    // "balanced" is the worst case instead: every expert 264 or 265 rows,
    // each with a third tile of 8 or 9 (session 42 on an H100: 0.761 / 0.814
    // ms at 8,192, 0.891 / 0.852 at 8,469).
    let dev = device();
    let (h, i, e, k) = (2048, 512, 256, 8);
    let mut g = rand::rngs::StdRng::seed_from_u64(11);
    let w = RandomFp8Experts::new(&dev, h, i, e, &mut g);
    let scales = w.scales();
    for tokens in [8192usize, 8469] {
        let x = dev
            .upload(&host::bf16_bits(&uniform_bf16(tokens as u64, tokens * h)))
            .unwrap();
        let out = dev.alloc(tokens * h * 4).unwrap();
        let random: Vec<f32> = (0..tokens * e).map(|_| g.random::<f32>()).collect();
        let mut line = format!("fp8_grouped_tails: tokens {tokens}:");
        for (name, lg) in [
            ("balanced", balanced_logits(tokens, e, k)),
            ("random", random),
        ] {
            let lg = dev.upload(&lg).unwrap();
            let l = w.launch(&x, &lg, &out, tokens, k);
            let ms = time_ms(&dev, 20, || routed_on(&dev, &l, scales, Fp8Gemms::Ws));
            line += &format!(" {name} {ms:.3} ms;");
        }
        println!("{line} (whole routed experts, ws kernels forced; 8,469 = W1's mixed step)");
    }
}
