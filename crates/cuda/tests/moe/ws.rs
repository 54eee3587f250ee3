//! The warp-specialised grouped GEMMs ([`GemmImpl::Ws`], the default on
//! sm_90a from [`WS_PAIRS`] pairs a pass): bitwise reproducible, across runs
//! and across the other rows of a pass, and the default where it should be;
//! a small case for compute-sanitizer; the routed block timed beside the
//! 128 x 128 wgmma tiles at 2,048 / 8,192 / 32,768 tokens (one pass) on the
//! 35B-A3B shape; every family giving a row the same bits (what batch
//! invariance rests on); many runs under the engine's calibration routing,
//! each caught if it hangs. (The f64 cases of `moe.rs` run Ws among every
//! family.)

use super::watchdog::wait_or_abort;
use super::{
    compare, launch, median, reference, run, timed_call, upload, Bench35b, Case, Shape, QWEN35B,
    SMALL,
};
use headroom_cuda::device::CudaDevice;
use headroom_cuda::ops::moe::{
    grouped_gemm_flops, routed_experts, routed_experts_marked, GemmImpl, MoeLaunch, WS_PAIRS,
};

/// The device, which must be sm_90a (Ws is Hopper-only): on another GPU the
/// test fails instead of passing without having run.
fn hopper() -> CudaDevice {
    let dev = super::device();
    assert_eq!(dev.arch, "sm_90a", "the Ws kernels need an sm_90a GPU");
    dev
}

/// One call on `imp` (`None`: the default) into a NaN-poisoned out.
fn call_on(dev: &CudaDevice, l: &MoeLaunch<'_>, imp: Option<GemmImpl>) {
    dev.fill_bytes(l.out, 0xFF).unwrap();
    match imp {
        Some(_) => routed_experts_marked(dev, l, imp, &mut |_| Ok(())).unwrap(),
        None => routed_experts(dev, l).unwrap(),
    }
}

/// The device's f32 out, as bits.
fn read_bits(dev: &CudaDevice, l: &MoeLaunch<'_>) -> Vec<u32> {
    let mut out = vec![0f32; l.tokens * l.hidden];
    dev.read(l.out, &mut out).unwrap();
    out.iter().map(|v| v.to_bits()).collect()
}

/// The device's f32 out of one call on `imp` (`None`: the default), as bits.
fn out_bits(dev: &CudaDevice, l: &MoeLaunch<'_>, imp: Option<GemmImpl>) -> Vec<u32> {
    call_on(dev, l, imp);
    read_bits(dev, l)
}

/// Indices of the first few elements where `a` and `b` differ.
fn first_diffs(a: &[u32], b: &[u32]) -> Vec<usize> {
    (0..a.len()).filter(|&i| a[i] != b[i]).take(4).collect()
}

#[test]
#[ignore = "needs an sm_90a GPU: run by bench/gpu/check_moe.sh"]
fn ws_is_bitwise_reproducible_across_runs_and_pass_sizes() {
    let dev = hopper();
    // 9,000 tokens of top-2 over 8 experts: 18,000 pairs, past WS_PAIRS (the
    // default runs Ws), ~2,250 rows an expert (17-18 row tiles, a partial
    // last one); then its first 1,500 tokens alone (3,000 pairs: the
    // default would be Wgmma, Ws forced), whose rows sit in other tiles at
    // other positions: a row's result depends on its own data only.
    let s = Shape {
        tokens: 9000,
        ..SMALL
    };
    assert!(s.tokens * s.top_k >= WS_PAIRS);
    let c = Case::random(s, 980);
    let d = upload(&dev, &c);
    let l = launch(&c.s, &d);
    let a = out_bits(&dev, &l, Some(GemmImpl::Ws));
    for (what, b) in [
        ("a second run", out_bits(&dev, &l, Some(GemmImpl::Ws))),
        ("the default", out_bits(&dev, &l, None)),
    ] {
        let diffs = first_diffs(&a, &b);
        println!("ws bits: {what} tokens=9000 differing={}", diffs.len());
        assert!(diffs.is_empty(), "{what}: first differences at {diffs:?}");
    }
    let t = 1500;
    let h = s.hidden;
    let p = Case {
        s: Shape { tokens: t, ..s },
        x: c.x[..t * h].to_vec(),
        logits: c.logits[..t * s.experts].to_vec(),
        gate_up: c.gate_up.clone(),
        down: c.down.clone(),
    };
    let dp = upload(&dev, &p);
    let lp = launch(&p.s, &dp);
    let b = out_bits(&dev, &lp, Some(GemmImpl::Ws));
    let diffs = first_diffs(&a[..t * h], &b);
    println!(
        "ws bits: first 1500 of 9000 tokens differing={}",
        diffs.len()
    );
    assert!(diffs.is_empty(), "prefix: first differences at {diffs:?}");
}

#[test]
#[ignore = "needs an sm_90a GPU: run by bench/gpu/check_moe.sh"]
fn ws_sanitizer_case() {
    // Small enough for compute-sanitizer: 600 tokens of top-2 over 8 experts
    // (~150 rows an expert: 128 + 22, the second MMA warpgroup idle on the
    // last tile), 40 tokens (~10 rows), one NaN row.
    let dev = hopper();
    for (tokens, seed) in [(600, 970), (40, 971)] {
        let mut c = Case::random(Shape { tokens, ..SMALL }, seed);
        c.logits[3 * SMALL.experts] = f32::NAN;
        let want = reference(&c);
        let got = run(&dev, &c, Some(GemmImpl::Ws));
        let err = compare(&c, &got, &want, &[3]);
        println!("ws sanitizer case: tokens={tokens} rel err {err:.2e}");
        assert!(err <= 2e-2);
    }
}

#[test]
#[ignore = "needs an sm_90a GPU: run by bench/gpu/check_moe.sh"]
fn timing_wgmma_vs_ws_routed_block() {
    let dev = hopper();
    let s = QWEN35B;
    let w = Bench35b::new(&dev);
    for tokens in [2048usize, 8192, 32768] {
        let (inputs, _) = Bench35b::inputs(&dev, tokens, 4);
        let l = w.launch(&inputs);
        for imp in [GemmImpl::Wgmma, GemmImpl::Ws] {
            for _ in 0..3 {
                routed_experts_marked(&dev, &l, Some(imp), &mut |_| Ok(())).unwrap();
            }
            dev.synchronize().unwrap();
            let (mut total, mut gu, mut dn) = (vec![], vec![], vec![]);
            for _ in 0..15 {
                let (t, per) = timed_call(&dev, &l, Some(imp));
                total.push(t);
                gu.push(per[1]);
                dn.push(per[2]);
            }
            let (gu, dn) = (median(&mut gu), median(&mut dn));
            let flops = grouped_gemm_flops(tokens, s.hidden, s.top_k, s.inter);
            println!(
                "ws timing: imp={imp:?} tokens={tokens} gate_up_ms={gu:.4} down_ms={dn:.4} gemms_ms={:.4} block_ms={:.4} gemm_tflops={:.0} runs=15",
                gu + dn,
                median(&mut total),
                flops / ((gu + dn) * 1e-3) / 1e12
            );
        }
    }
}

/// Every grouped-GEMM family gives a row the same bits whatever the pass
/// (the 35B-A3B shape, 1 … 2,048 tokens, each family forced): what makes
/// `CudaBackend::with_batch_invariant` batch-invariant, since a step of any
/// row count then runs one of them (H200, session 16 call 5: 0 differing
/// elements in every case).
#[test]
#[ignore = "needs an sm_90a GPU: run by bench/gpu/check_moe.sh"]
fn every_grouped_family_gives_a_row_the_same_bits() {
    let dev = hopper();
    let w = Bench35b::new(&dev);
    for tokens in [1usize, 8, 64, 600, 2048] {
        let (inputs, _) = Bench35b::inputs(&dev, tokens, 7);
        let l = w.launch(&inputs);
        let base = out_bits(&dev, &l, Some(GemmImpl::MmaSync));
        assert!(
            base.iter().all(|&b| f32::from_bits(b).is_finite()),
            "tokens={tokens}: every output written"
        );
        for imp in [GemmImpl::Stream, GemmImpl::Wgmma, GemmImpl::Ws] {
            let b = out_bits(&dev, &l, Some(imp));
            let differ = base.iter().zip(&b).filter(|(x, y)| x != y).count();
            println!(
                "families: tokens={tokens} MmaSync vs {imp:?}: {differ} of {} differ",
                b.len()
            );
            assert_eq!(
                differ,
                0,
                "tokens={tokens} {imp:?}: first {:?}",
                first_diffs(&base, &b)
            );
        }
    }
}

/// The engine's calibration step on the 35B-A3B shape (4,096 tokens over
/// all 256 experts, about 128 rows an expert): about half the experts end in
/// a unit of at most 64 rows, which the second MMA warpgroup skips. There
/// the FP8 ws kernels deadlocked in session 35 (a skipping warpgroup's
/// leader released stages its other warps had not yet waited for; this
/// kernel had the same release, moe_ws_common.cuh). 200 runs, each caught if
/// it is still running after 10 s, each with MmaSync's bits.
#[test]
#[ignore = "needs an sm_90a GPU: run by bench/gpu/check_moe.sh"]
fn ws_finishes_with_the_same_bits_under_the_calibration_routing() {
    let dev = hopper();
    let w = Bench35b::new(&dev);
    let (inputs, _) = Bench35b::inputs(&dev, 4096, 35);
    let l = w.launch(&inputs);
    let base = out_bits(&dev, &l, Some(GemmImpl::MmaSync));
    let runs = 200;
    for run in 0..runs {
        call_on(&dev, &l, Some(GemmImpl::Ws));
        wait_or_abort(
            &dev,
            &format!("ws under the calibration routing, run {run}"),
            10,
        );
        let diffs = first_diffs(&base, &read_bits(&dev, &l));
        assert!(
            diffs.is_empty(),
            "run {run}: first differences at {diffs:?}"
        );
    }
    println!("ws under the calibration routing: {runs} runs finished with MmaSync's bits");
}
