//! The timing bench of the gated delta rule at the Qwen3.6-35B-A3B shape
//! (a module of `tests/gdn.rs`, run by `bench/gpu/check_gdn.sh`): the scan at
//! both widths at t = 2048, 8192, 32768, prep alone and the scan as the
//! difference, 8-sequence splits, the scan ablations, decode batches; each
//! for the production pair and, beside it, the lite pair (names `…-lite`);
//! and the lite prep with the fused full-width scans (no width: names
//! `scan-Full…-fused` (mma.sync) and `scan-Full…-fusedwgmma`, their
//! prep/scan split from `prep-alone-lite`).

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
    let tuned = |w: ScanWidth, ablation: u32, form: ChunkForm| Tuning {
        width: Some(w),
        form,
        scan_ablation: ablation,
    };
    let suffix = |form: ChunkForm| match form {
        ChunkForm::Wu => "",
        ChunkForm::Lite => "-lite",
        ChunkForm::Fused => "-fused",
        ChunkForm::FusedWgmma => "-fusedwgmma",
    };
    let mut not_finite: Vec<String> = Vec::new();
    for &t in &lengths {
        let x = Inputs::random(d, t, 8, 7);
        let bufs = OnDevice::upload(&dev, &x);
        let one = vec![(0, 0, t)];
        // The same rows as 8 sequences (8x the scan CTAs): how latency-bound the scan is.
        let eight: Vec<Seq> = (0..8).map(|i| (i, i * t / 8, t / 8)).collect();
        let mut cases: Vec<(String, Tuning, &Vec<Seq>)> = Vec::new();
        // Each case for the production pair, then the same for the lite one.
        let mut add = |name: String, w: ScanWidth, ablation: u32, seqs, forms: &[ChunkForm]| {
            for &form in forms {
                let n = format!("{name}{}", suffix(form));
                cases.push((n, tuned(w, ablation, form), seqs));
            }
        };
        let paired = [ChunkForm::Wu, ChunkForm::Lite];
        // Prep alone (no scan launched): the scan's time is the difference.
        add("prep-alone".into(), ScanWidth::Narrow, 4, &one, &paired);
        for w in WIDTHS {
            let n = format!("scan-{w:?}");
            add(n.clone(), w, 0, &one, &paired);
            if t >= 8192 {
                add(format!("{n}-8seq"), w, 0, &eight, &paired);
            }
            if t >= 32768 && w == ScanWidth::Narrow {
                // Timing ablations (wrong results by design): the scan without
                // its tile loads after the first chunk, without arithmetic.
                add(format!("{n}-noload"), w, 1, &one, &paired);
                add(format!("{n}-nomath"), w, 2, &one, &paired);
            }
        }
        // The fused full-width scans (one CTA per head and sequence; the
        // width is ignored), after the lite prep (`prep-alone-lite`).
        let fused = FUSED_FORMS;
        add("scan-Full".into(), ScanWidth::Wide, 0, &one, &fused);
        if t >= 8192 {
            add("scan-Full-8seq".into(), ScanWidth::Wide, 0, &eight, &fused);
        }
        if t >= 32768 {
            add("scan-Full-noload".into(), ScanWidth::Wide, 1, &one, &fused);
            add("scan-Full-nomath".into(), ScanWidth::Wide, 2, &one, &fused);
        }
        // Prep alone per form (index: the form's position in FORMS; the
        // fused forms run the lite prep).
        let mut prep_ms: [Option<f64>; FORMS.len()] = [None; FORMS.len()];
        let prep_form = |f: ChunkForm| match f {
            ChunkForm::Fused | ChunkForm::FusedWgmma => ChunkForm::Lite,
            f => f,
        };
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
            let fi = FORMS
                .iter()
                .position(|&f| f == prep_form(tuning.form))
                .unwrap();
            if tuning.scan_ablation == 4 {
                prep_ms[fi] = Some(median);
            }
            report(format!("t={t} 35B-A3B {name}"), ms);
            // The 8-sequence rows have as many chunks as the one sequence
            // (t / 8 is a multiple of 64): the same prep-alone time applies.
            if let (Some(p), 0) = (prep_ms[fi], tuning.scan_ablation) {
                println!(
                    "gdn_split t={t} {name}: prep {p:.3} + scan {:.3} ms/layer",
                    median - p
                );
            }
        }
    }
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
