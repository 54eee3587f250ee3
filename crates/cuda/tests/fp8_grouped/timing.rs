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
        let family = |gemms| {
            time_ms(&dev, iters, || {
                routed_experts_fp8_on(
                    &dev,
                    &l8,
                    (0, e),
                    scales,
                    None,
                    None,
                    Some(gemms),
                    &mut |_| Ok(()),
                )
                .unwrap()
            })
        };
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
