//! The timing bench of the gated delta rule at the Qwen3.6-35B-A3B shape
//! (a module of `tests/gdn.rs`, run by `bench/gpu/check_gdn.sh`): the scan at
//! each width at t = 2048, 8192, 32768, prep alone and the scan as the
//! difference, 8-sequence splits, the scan ablations, decode batches; and
//! the crossover of the widths over batches of equal sequences
//! (`GDN_BENCH_CROSS`), which `scan_width_for` follows.

use super::*;

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn.sh (timing, prints ms/layer)"]
fn bench_qwen36_35b_prefill_ms_per_layer() {
    let dev = device();
    let d = QWEN36_35B;
    // GDN_BENCH_T=2048,32768 picks the lengths (the script's profiler pass).
    let lengths: Vec<usize> = std::env::var("GDN_BENCH_T")
        .ok()
        .map(|v| v.split(',').filter_map(|t| t.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![2048, 8192, 32768]);
    let report = |what: String, ms: Vec<f64>| {
        println!(
            "gdn_bench {what}: median {:.3} ms/layer (min {:.3}, max {:.3}, n={})",
            ms[ms.len() / 2],
            ms[0],
            ms[ms.len() - 1],
            ms.len()
        )
    };
    // GDN_BENCH_VARIANTS=a,b picks variants by name (the profiler pass);
    // GDN_BENCH_REPS sets the timed calls (default 7).
    let pick: Option<Vec<String>> = std::env::var("GDN_BENCH_VARIANTS")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let reps: usize = std::env::var("GDN_BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let dev_widths = widths(&dev);
    let tuned = |w: ScanWidth, ablation: u32| Tuning {
        width: Some(w),
        scan_ablation: ablation,
    };
    let mut not_finite: Vec<String> = Vec::new();
    for &t in &lengths {
        let x = Inputs::random(d, t, 8, 7);
        let bufs = OnDevice::upload(&dev, &x);
        let one = vec![(0, 0, t)];
        // The same rows as 8 sequences (8x the scan CTAs): how latency-bound the scan is.
        let eight: Vec<Seq> = (0..8).map(|i| (i, i * t / 8, t / 8)).collect();
        let mut cases: Vec<(String, Tuning, &Vec<Seq>)> = Vec::new();
        // Prep alone (no scan launched): the scan's time is the difference.
        cases.push(("prep-alone".into(), tuned(ScanWidth::Narrow, 4), &one));
        for &w in &dev_widths {
            let n = format!("scan-{w:?}");
            cases.push((n.clone(), tuned(w, 0), &one));
            if t >= 8192 {
                cases.push((format!("{n}-8seq"), tuned(w, 0), &eight));
            }
            if t >= 32768 && w != ScanWidth::Wide {
                // Timing ablations (wrong results by design): the scan without
                // its tile loads after the first chunk, without arithmetic.
                cases.push((format!("{n}-noload"), tuned(w, 1), &one));
                cases.push((format!("{n}-nomath"), tuned(w, 2), &one));
            }
        }
        let mut prep_ms: Option<f64> = None;
        for (name, tuning, seqs) in cases {
            if pick.as_ref().is_some_and(|p| !p.contains(&name)) {
                continue;
            }
            let run = || gated_delta_rule_tuned(&dev, &bufs.launch(d, seqs), &tuning).unwrap();
            let ms = time_ms(&dev, reps, run);
            if tuning.scan_ablation == 0 {
                let (out, _) = bufs.read(&dev, &x);
                if !out.iter().all(|v| v.is_finite()) {
                    // Reported at the end: the other variants still get timed.
                    println!("gdn_bench t={t} {name}: OUTPUT NOT FINITE");
                    not_finite.push(format!("t={t} {name}"));
                }
            }
            let median = ms[ms.len() / 2];
            if tuning.scan_ablation == 4 {
                prep_ms = Some(median);
            }
            report(format!("t={t} 35B-A3B {name}"), ms);
            // The 8-sequence rows have as many chunks as the one sequence
            // (t / 8 is a multiple of 64): the same prep-alone time applies.
            if let (Some(p), 0) = (prep_ms, tuning.scan_ablation) {
                println!(
                    "gdn_split t={t} {name}: prep {p:.3} + scan {:.3} ms/layer",
                    median - p
                );
            }
        }
    }
    crossover(&dev, &dev_widths, reps, &mut not_finite);
    assert!(not_finite.is_empty(), "non-finite outputs: {not_finite:?}");
    // Decode: one recurrent step for a batch of sequences.
    if std::env::var("GDN_BENCH_T").is_err() {
        for batch in [1usize, 32, 256] {
            let x = Inputs::random(d, batch, batch, 9);
            let bufs = OnDevice::upload(&dev, &x);
            let seqs: Vec<Seq> = (0..batch).map(|i| (i, i, 1)).collect();
            let ms = time_ms(&dev, 7, || bufs.run(&dev, d, &seqs).unwrap());
            let (out, _) = bufs.read(&dev, &x);
            assert!(out.iter().all(|v| v.is_finite()));
            report(format!("decode batch {batch}"), ms);
        }
    }
}

/// The widths side by side over batches of equal sequences, `NxL` = N
/// sequences of L rows (GDN_BENCH_CROSS, default 1x1024 .. 16x1024 and a few
/// longer ones): where the full-width scan overtakes the others, which
/// `scan_width_for` follows. Prints `gdn_cross NxL width: median ms` and the
/// width `scan_width_for` picks here.
fn crossover(dev: &CudaDevice, widths: &[ScanWidth], reps: usize, not_finite: &mut Vec<String>) {
    let d = QWEN36_35B;
    let spec = std::env::var("GDN_BENCH_CROSS").unwrap_or_else(|_| {
        "1x1024,2x1024,3x1024,4x1024,5x1024,6x1024,8x1024,12x1024,16x1024,2x4096,4x4096,5x4096,8x4096".into()
    });
    for case in spec.split(',').filter(|c| !c.is_empty()) {
        let Some((n, len)) = case
            .trim()
            .split_once('x')
            .and_then(|(n, l)| Some((n.parse::<usize>().ok()?, l.parse::<usize>().ok()?)))
        else {
            panic!("GDN_BENCH_CROSS: {case:?} is not NxL");
        };
        let x = Inputs::random(d, n * len, n, 11);
        let bufs = OnDevice::upload(dev, &x);
        let seqs: Vec<Seq> = (0..n).map(|i| (i, i * len, len)).collect();
        let pick = headroom_cuda::ops::gdn::scan_width_on(dev, d.hv, n);
        let mut best = (f64::INFINITY, ScanWidth::Narrow);
        for &w in widths {
            let tuning = Tuning {
                width: Some(w),
                ..Tuning::default()
            };
            let ms = time_ms(dev, reps, || {
                gated_delta_rule_tuned(dev, &bufs.launch(d, &seqs), &tuning).unwrap()
            });
            let (out, _) = bufs.read(dev, &x);
            if !out.iter().all(|v| v.is_finite()) {
                println!("gdn_cross {case} {w:?}: OUTPUT NOT FINITE");
                not_finite.push(format!("{case} {w:?}"));
            }
            let median = ms[ms.len() / 2];
            println!("gdn_cross {case} {w:?}: median {median:.3} ms/layer");
            if median < best.0 {
                best = (median, w);
            }
        }
        println!(
            "gdn_cross {case}: fastest {:?}, scan_width_for picks {pick:?}",
            best.1
        );
    }
}

/// Device times (ms, sorted) of `reps` calls after one warm-up, from CUDA events.
fn time_ms(dev: &CudaDevice, reps: usize, mut call: impl FnMut()) -> Vec<f64> {
    use cudarc::driver::{result, sys};
    call(); // warm-up (compiles on first use)
    dev.synchronize().unwrap();
    let mut ms = Vec::new();
    for _ in 0..reps {
        // SAFETY: events on this device's live stream, destroyed below.
        unsafe {
            let a = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).unwrap();
            let b = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).unwrap();
            result::event::record(a, dev.stream_raw()).unwrap();
            call();
            result::event::record(b, dev.stream_raw()).unwrap();
            result::event::synchronize(b).unwrap();
            ms.push(result::event::elapsed(a, b).unwrap() as f64);
            result::event::destroy(a).unwrap();
            result::event::destroy(b).unwrap();
        }
    }
    ms.sort_by(f64::total_cmp);
    ms
}
