//! The MoE decode path's timing at the 35B-A3B shape (`moe_decode_timing`):
//! each kernel alone and the block back to back, beside the grouped-GEMM
//! path.

use super::*;

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

/// Each kernel's median device time (µs) over `calls` calls: events
/// recorded between the launches (so each kernel runs alone).
fn kernel_medians(
    be: &CudaBackend,
    x: &CudaAct,
    w: &MoeWeights<CudaWeight>,
    sp: &MoeSpec,
    calls: usize,
) -> Vec<(&'static str, f64)> {
    let mut stages: Vec<(&'static str, Vec<f64>)> = Vec::new();
    for _ in 0..calls {
        let mut marks: Vec<(&'static str, Event)> = Vec::new();
        be.moe_decode_marked(x, w, sp, &mut |st| {
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

/// Distinct weight bytes each kernel needs for `rows` rows choosing
/// `experts` distinct experts in all (the DRAM floor; a row's kernels read
/// its experts and the shared expert whether or not another row did too).
fn kernel_bytes(s: Shape, rows: usize, experts: usize, kernel: &str) -> usize {
    let (h, e, i, si) = (s.hidden, s.experts, s.inter, s.shared);
    match kernel {
        "route" => ((e + 1) * h + rows * h) * 2,
        "gate_up" => (experts * 2 * i * h + 2 * si * h) * 2,
        "down" => (experts * h * i + h * si) * 2,
        other => panic!("no kernel {other}"),
    }
}

/// The 35B-A3B block at 1, 2, 3, 4 and 8 rows: each kernel's median µs over
/// 60 calls and its GB/s, one `moe_decode_timing:` line per kernel, and the
/// whole block per call back to back, the grouped-GEMM path's beside it.
/// Asserts only correctness: the decode path agrees with the grouped-GEMM
/// path.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn moe_decode_timing() {
    let be = backend();
    let s = QWEN35B;
    let (w, router) = device_weights(&be, s, 40);
    let sp = spec(s);
    for rows in [1, 2, 3, 4, 8] {
        // A clear routing (as `inputs`): the paths' logits round differently.
        let xh = (0..64)
            .map(|n| uniform(rows as u64 * 1000 + n, rows * s.hidden, 1.0))
            .find(|x| router_gap(x, &router, s) > 1e-3)
            .expect("an input with a clear routing in 64 draws");
        let distinct = distinct_experts(&xh, &router, s);
        let x = be.act_from_f32(rows, s.hidden, &xh).unwrap();
        let want = be.act_to_f32(&be.moe_decode(&x, &w, &sp).unwrap()).unwrap();
        assert!(want.iter().all(|v| v.is_finite()), "{rows} rows: finite");
        let grouped = be.moe_marked(&x, &w, &sp, None, &mut |_| {}).unwrap();
        let grouped: Vec<f64> = be
            .act_to_f32(&grouped)
            .unwrap()
            .iter()
            .map(|&v| v as f64)
            .collect();
        let e = rel_err(&want, &grouped);
        assert!(e < 2e-2, "{rows} rows: decode vs grouped {e}");
        let medians = kernel_medians(&be, &x, &w, &sp, 60);
        assert_eq!(medians.len(), 3, "three kernels: {medians:?}");
        for (kernel, us) in &medians {
            let mb = kernel_bytes(s, rows, distinct, kernel) as f64 / 1e6;
            println!(
                "moe_decode_timing: rows {rows} ({distinct} experts) kernel {kernel} \
                 median {us:.2} us, {mb:.1} MB, {:.0} GB/s",
                mb * 1e3 / us
            );
        }
        let (dev_us, host_us) = chained_us(&be, 200, || {
            be.moe_decode(&x, &w, &sp).unwrap();
        });
        let (grouped_us, grouped_host_us) = chained_us(&be, 200, || {
            be.moe_marked(&x, &w, &sp, None, &mut |_| {}).unwrap();
        });
        println!(
            "moe_decode_timing: rows {rows} chained block {dev_us:.2} us per call (host \
             {host_us:.2} us per call); grouped-GEMM path {grouped_us:.2} us (host \
             {grouped_host_us:.2} us)"
        );
    }
}
