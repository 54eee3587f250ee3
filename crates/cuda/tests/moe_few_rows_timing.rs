//! Timing of the routed experts' grouped GEMMs where every expert has only a
//! few rows (35B-A3B shape: h 2048, 256 experts, top-8, i 512): gate+up and
//! down per kernel family at 64-1024 rows (median µs and the weight bytes of
//! the touched experts over that time, TB/s). (The whole MoE op at 2k-32k rows
//! is `moe.rs`'s `block::bench_the_35b_moe_op`.) Run by
//! bench/gpu/check_moemem.sh on the GPU machine; prints a table, asserts only
//! that every call succeeded and timed > 0.

use headroom_cuda::device::CudaDevice;
use headroom_cuda::ops::moe::{routed_experts_marked, GemmImpl, MoeLaunch};

const ITERS: usize = 21;

#[path = "moe/common.rs"]
mod common;
use common::{device, median, timed_call, Bench35b, E, H, I, K};

/// Experts among the top-`K` logits of at least one token (the weights a
/// pass reads).
fn touched_experts(logits: &[f32]) -> usize {
    let mut hit = [false; E];
    for row in logits.chunks(E) {
        let mut order: Vec<usize> = (0..E).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        for &e in &order[..K] {
            hit[e] = true;
        }
    }
    hit.iter().filter(|&&h| h).count()
}

/// The row counts timed: `MOEMEM_ROWS` (comma-separated, for a profiler run
/// of one size) or 64, 200, 256, 420, 512, 600, 768 and 1024.
fn rows_to_time() -> Vec<usize> {
    match std::env::var("MOEMEM_ROWS") {
        Ok(v) => v
            .split(',')
            .map(|r| r.trim().parse().expect("MOEMEM_ROWS: row counts"))
            .collect(),
        Err(_) => vec![64, 200, 256, 420, 512, 600, 768, 1024],
    }
}

/// Median ms of (gate+up, down, whole routed block) over ITERS calls.
fn time_block(dev: &CudaDevice, l: &MoeLaunch<'_>, imp: Option<GemmImpl>) -> (f64, f64, f64) {
    for _ in 0..3 {
        routed_experts_marked(dev, l, imp, &mut |_| Ok(())).unwrap();
    }
    dev.synchronize().unwrap();
    let (mut gu, mut dn, mut total) = (vec![], vec![], vec![]);
    for _ in 0..ITERS {
        let (t, per) = timed_call(dev, l, imp);
        total.push(t);
        let (g, d) = (per[1], per[2]);
        gu.push(g);
        dn.push(d);
    }
    (median(&mut gu), median(&mut dn), median(&mut total))
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moemem.sh"]
fn bench_few_rows_per_expert() {
    let dev = device();
    let w = Bench35b::new(&dev);
    let arms = if dev.arch == "sm_90a" {
        vec![
            ("old (Wgmma)", Some(GemmImpl::Wgmma)),
            ("Stream", Some(GemmImpl::Stream)),
            ("default", None),
        ]
    } else {
        vec![
            ("old (MmaSync)", Some(GemmImpl::MmaSync)),
            ("Stream", Some(GemmImpl::Stream)),
            ("default", None),
        ]
    };
    let per_expert_gu = (2 * I * H * 2) as f64;
    let per_expert_dn = (H * I * 2) as f64;
    println!("few rows per expert: h {H}, {E} experts, top-{K}, i {I}; median of {ITERS}; TB/s = weight bytes of the touched experts / time");
    println!("| rows | GEMMs | touched | gate+up us | gate+up TB/s | down us | down TB/s | routed block us |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    for rows in rows_to_time() {
        let (inputs, logits) = Bench35b::inputs(&dev, rows, 4 + rows as u64);
        let touched = touched_experts(&logits);
        let l = w.launch(&inputs);
        for &(name, imp) in &arms {
            let (g, d, t) = time_block(&dev, &l, imp);
            assert!(g > 0.0 && d > 0.0 && t > 0.0, "{name} at {rows} rows");
            let tb = |bytes: f64, ms: f64| bytes / (ms * 1e-3) / 1e12;
            println!(
                "| {rows} | {name} | {touched} | {:.1} | {:.2} | {:.1} | {:.2} | {:.1} |",
                g * 1e3,
                tb(touched as f64 * per_expert_gu, g),
                d * 1e3,
                tb(touched as f64 * per_expert_dn, d),
                t * 1e3
            );
        }
    }
}
