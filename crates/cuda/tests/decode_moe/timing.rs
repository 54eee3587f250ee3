//! `moe_decode_timing`: the 35B-A3B block at 1, 2, 4 and 8 rows on the GEMV
//! kernels ([`DecodeKernels::Gemv`], the default) and the streaming variants
//! (one or two CTAs an SM, with and without the L2 prefetch) side by side in
//! one run: each kernel's median µs over 200 calls (events between its
//! launches, so it runs alone) and its TB/s on the weight bytes it must
//! read, and the whole block's µs per call over 200 calls back to back
//! (chained by programmatic launch, as in a model step): the median of 7
//! such runs, the sets and the grouped-GEMM path alternating. Asserts only
//! that the sets agree with the grouped-GEMM path, the streams with the GEMV
//! kernels and with each other bit for bit.

use super::*;
use headroom_core::ops::WeightInit;
use headroom_cuda::ops::moe::DecodeKernels;
use headroom_cuda::timing::StreamEvent as Event;

const SETS: [(DecodeKernels, &str); 5] = [
    (DecodeKernels::Gemv, "gemv"),
    (DecodeKernels::Stream, "stream"),
    (DecodeKernels::StreamNoPrefetch, "stream-nopf"),
    (DecodeKernels::Stream2, "stream2"),
    (DecodeKernels::Stream2NoPrefetch, "stream2-nopf"),
];

/// The 35B-A3B block's weights drawn on the device (normal, the scales of
/// [`weights`]) but the router's, drawn on the host and returned with them
/// (the timing test picks inputs with a clear routing and counts experts).
fn device_weights(be: &CudaBackend, s: Shape, seed: u64) -> (MoeWeights<CudaWeight>, Vec<f32>) {
    let (h, i, si, l) = (s.hidden, s.inter, s.shared, s.local);
    let sc = 1.0 / (h as f32).sqrt();
    let draw = |rows, cols, n: u64, std: f32| {
        be.init_matrix(rows, cols, WeightInit::new(seed + n, 0.0, std))
            .unwrap()
    };
    let router = uniform(seed, s.experts * h, 4.0 * sc * 1.7);
    let w = MoeWeights {
        router: matrix(be, s.experts, h, &router),
        gate_up: draw(l * 2 * i, h, 1, sc),
        down: draw(l * h, i, 2, 1.0 / (i as f32).sqrt()),
        shared_gate_proj: draw(si, h, 3, sc),
        shared_up_proj: draw(si, h, 4, sc),
        shared_down_proj: draw(h, si, 5, 1.0 / (si as f32).sqrt()),
        shared_gate: draw(1, h, 6, sc),
    };
    (w, router)
}

/// The experts the rows of `x` choose (f64 logits), each expert once.
fn distinct_experts(x: &[f32], router: &[f32], s: Shape) -> usize {
    let mut chosen: Vec<usize> = x
        .chunks(s.hidden)
        .flat_map(|xr| {
            let l: Vec<f64> = router.chunks(s.hidden).map(|r| dot(xr, r)).collect();
            let mut order: Vec<usize> = (0..s.experts).collect();
            order.sort_by(|&a, &b| l[b].total_cmp(&l[a]).then(a.cmp(&b)));
            order.truncate(s.top_k);
            order
        })
        .collect();
    chosen.sort_unstable();
    chosen.dedup();
    chosen.len()
}

/// Median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Each kernel's median device time (µs) over `calls` calls of `kernels`:
/// events recorded between the launches (so each kernel runs alone).
fn kernel_medians(
    be: &CudaBackend,
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    sp: &MoeSpec,
    kernels: DecodeKernels,
    calls: usize,
) -> Vec<(&'static str, f64)> {
    let mut stages: Vec<(&'static str, Vec<f64>)> = Vec::new();
    for _ in 0..calls {
        let mut marks: Vec<(&'static str, Event)> = Vec::new();
        be.moe_decode_marked(x, w, sp, kernels, &mut |st| {
            marks.push((st, Event::record(be.device()).unwrap()))
        })
        .unwrap();
        for pair in marks.windows(2) {
            let us = pair[1].1.ms_since(&pair[0].1).unwrap() * 1e3;
            match stages.iter_mut().find(|(n, _)| *n == pair[0].0) {
                Some((_, v)) => v.push(us),
                None => stages.push((pair[0].0, vec![us])),
            }
        }
    }
    stages
        .into_iter()
        .map(|(n, mut v)| (n, median(&mut v)))
        .collect()
}

/// The device time per call (µs) of `calls` back-to-back calls of `f` (the
/// decode kernels chained by programmatic launch, as in a model step), and
/// the host's time per call to issue them.
fn chained_us(be: &CudaBackend, calls: usize, mut f: impl FnMut()) -> (f64, f64) {
    f();
    be.synchronize().unwrap();
    let start = Event::record(be.device()).unwrap();
    let host = std::time::Instant::now();
    for _ in 0..calls {
        f();
    }
    let host_us = host.elapsed().as_secs_f64() * 1e6 / calls as f64;
    let end = Event::record(be.device()).unwrap();
    be.synchronize().unwrap();
    (end.ms_since(&start).unwrap() * 1e3 / calls as f64, host_us)
}

/// Distinct weight bytes a kernel (or the whole `block`) needs for `rows`
/// rows choosing `experts` distinct experts in all (the DRAM floor).
fn kernel_bytes(s: Shape, rows: usize, experts: usize, kernel: &str) -> usize {
    let (h, e, i, si) = (s.hidden, s.experts, s.inter, s.shared);
    match kernel {
        "route" => ((e + 1) * h + rows * h) * 2,
        "gate_up" => (experts * 2 * i * h + 2 * si * h) * 2,
        "down" => (experts * h * i + h * si) * 2,
        "block" => ["route", "gate_up", "down"]
            .iter()
            .map(|k| kernel_bytes(s, rows, experts, k))
            .sum(),
        other => panic!("no kernel {other}"),
    }
}

/// TB/s of `bytes` in `us` µs.
fn tbs(bytes: usize, us: f64) -> f64 {
    bytes as f64 / us / 1e6
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moestream.sh"]
fn moe_decode_timing() {
    let be = backend();
    let s = QWEN35B;
    let (w, router) = device_weights(&be, s, 40);
    let sp = spec(s);
    for rows in [1, 2, 4, 8] {
        // A clear routing (as `inputs`): the paths' logits round differently.
        let xh = (0..64)
            .map(|n| uniform(rows as u64 * 1000 + n, rows * s.hidden, 1.0))
            .find(|x| router_gap(x, &router, s) > 1e-3)
            .expect("an input with a clear routing in 64 draws");
        let distinct = distinct_experts(&xh, &router, s);
        let x = be.act_from_f32(rows, s.hidden, &xh).unwrap();
        let grouped = be.moe_marked(&x, &w, &sp, None, &mut |_| {}).unwrap();
        let grouped: Vec<f64> = be
            .act_to_f32(&grouped)
            .unwrap()
            .iter()
            .map(|&v| v as f64)
            .collect();
        let mut outs = Vec::new();
        for (kernels, name) in SETS {
            let out = be
                .moe_decode_marked(&x, &w, &sp, kernels, &mut |_| {})
                .unwrap();
            let out = be.act_to_f32(&out).unwrap();
            let e = rel_err(&out, &grouped);
            println!("moe_decode_timing: rows {rows} {name} vs grouped rel err {e:.2e}");
            assert!(e < 2e-2, "{rows} rows: {name} vs grouped {e}");
            outs.push(out.iter().map(|&v| v as f64).collect::<Vec<f64>>());
        }
        let stream_out: Vec<f32> = outs[1].iter().map(|&v| v as f32).collect();
        let e = rel_err(&stream_out, &outs[0]);
        println!("moe_decode_timing: rows {rows} stream vs gemv rel err {e:.2e}");
        assert!(e < 1e-2, "{rows} rows: stream vs gemv {e}");
        for (j, (_, name)) in SETS.iter().enumerate().skip(2) {
            assert_eq!(outs[1], outs[j], "{rows} rows: {name} = stream bit for bit");
        }
        for (kernels, name) in SETS {
            let medians = kernel_medians(&be, &x, &w, &sp, kernels, 200);
            assert_eq!(medians.len(), 3, "three kernels: {medians:?}");
            for (kernel, us) in &medians {
                let b = kernel_bytes(s, rows, distinct, kernel);
                println!(
                    "moe_decode_timing: rows {rows} ({distinct} experts) {name} kernel {kernel} \
                     median {us:.2} us, {:.1} MB, {:.2} TB/s",
                    b as f64 / 1e6,
                    tbs(b, *us)
                );
            }
        }
        // 7 runs of 200 calls back to back, the sets and the grouped path alternating.
        let mut block: Vec<Vec<f64>> = vec![Vec::new(); SETS.len() + 1];
        let mut host: Vec<Vec<f64>> = vec![Vec::new(); SETS.len() + 1];
        for _ in 0..7 {
            for (j, (kernels, _)) in SETS.iter().enumerate() {
                let (d, h) = chained_us(&be, 200, || {
                    be.moe_decode_marked(&x, &w, &sp, *kernels, &mut |_| {})
                        .unwrap();
                });
                block[j].push(d);
                host[j].push(h);
            }
            let (d, h) = chained_us(&be, 200, || {
                be.moe_marked(&x, &w, &sp, None, &mut |_| {}).unwrap();
            });
            block[SETS.len()].push(d);
            host[SETS.len()].push(h);
        }
        let b = kernel_bytes(s, rows, distinct, "block");
        let names = [
            "gemv",
            "stream",
            "stream-nopf",
            "stream2",
            "stream2-nopf",
            "grouped",
        ];
        for (j, name) in names.iter().enumerate() {
            let d = median(&mut block[j]);
            let h = median(&mut host[j]);
            println!(
                "moe_decode_timing: rows {rows} ({distinct} experts, {:.1} MB) block {name} \
                 {d:.2} us per call back to back ({:.2} TB/s; host {h:.2} us per call)",
                b as f64 / 1e6,
                tbs(b, d)
            );
        }
    }
}

/// Two calls of each set at one row of the 35B shape and nothing else: the
/// workload `check_moestream.sh ncu` profiles (each kernel's DRAM
/// throughput, warp stalls and occupancy under Nsight Compute).
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moestream.sh ncu"]
fn moe_decode_profile_once() {
    let be = backend();
    let s = QWEN35B;
    let (w, router) = device_weights(&be, s, 40);
    let sp = spec(s);
    let xh = (0..64)
        .map(|n| uniform(1000 + n, s.hidden, 1.0))
        .find(|x| router_gap(x, &router, s) > 1e-3)
        .expect("an input with a clear routing in 64 draws");
    let x = be.act_from_f32(1, s.hidden, &xh).unwrap();
    for (kernels, _) in SETS {
        for _ in 0..2 {
            let out = be
                .moe_decode_marked(&x, &w, &sp, kernels, &mut |_| {})
                .unwrap();
            let out = be.act_to_f32(&out).unwrap();
            assert!(out.iter().all(|v| v.is_finite()), "{kernels:?}: finite");
        }
    }
}
