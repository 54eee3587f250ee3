//! Timing of the routed experts' grouped GEMMs where every expert has only a
//! few rows (35B-A3B shape: h 2048, 256 experts, top-8, i 512): gate+up and
//! down per kernel family at 64-1024 rows (median µs and the weight bytes of
//! the touched experts over that time, TB/s), and the whole MoE op at 2048
//! and 8192 rows on the default choice against the kernels main ran there
//! (must not regress). Run by bench/gpu/check_moemem.sh on the GPU machine;
//! prints tables, asserts only that every call succeeded and timed > 0.

use half::bf16;
use headroom_core::ops::{Backend, MoeSpec, MoeWeights, WeightInit};
use headroom_cuda::backend::CudaBackend;
use headroom_cuda::device::CudaDevice;
use headroom_cuda::ops::moe::{routed_experts_marked, GemmImpl, MoeLaunch, MoeStage};
use headroom_cuda::timing::StreamEvent as Event;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

const H: usize = 2048;
const E: usize = 256;
const K: usize = 8;
const I: usize = 512;
const ITERS: usize = 21;

fn device() -> CudaDevice {
    CudaDevice::open(0).expect("a CUDA device (run by bench/gpu/check_moemem.sh)")
}

/// `n` bf16 bit patterns uniform in `[-scale, scale)`, seeded, in parallel.
fn random_bf16(n: usize, scale: f32, seed: u64) -> Vec<u16> {
    let mut v = vec![0u16; n];
    v.par_chunks_mut(1 << 16).enumerate().for_each(|(c, out)| {
        let mut rng =
            rand::rngs::StdRng::seed_from_u64(seed ^ (c as u64).wrapping_mul(0x9E37_79B9));
        for x in out {
            *x = bf16::from_f32((rng.random::<f32>() * 2.0 - 1.0) * scale).to_bits();
        }
    });
    v
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

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
/// of one size) or 64, 200, 256, 420, 512 and 1024.
fn rows_to_time() -> Vec<usize> {
    match std::env::var("MOEMEM_ROWS") {
        Ok(v) => v
            .split(',')
            .map(|r| r.trim().parse().expect("MOEMEM_ROWS: row counts"))
            .collect(),
        Err(_) => vec![64, 200, 256, 420, 512, 1024],
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
        let mut marks: Vec<(MoeStage, Event)> = Vec::new();
        let start = Event::record(dev).unwrap();
        routed_experts_marked(dev, l, imp, &mut |st| {
            marks.push((st, Event::record(dev).unwrap()));
            Ok(())
        })
        .unwrap();
        let end = Event::record(dev).unwrap();
        total.push(end.ms_since(&start).unwrap());
        let (mut g, mut d) = (0f64, 0f64);
        for w in marks.windows(2) {
            let ms = w[1].1.ms_since(&w[0].1).unwrap();
            match w[0].0 {
                MoeStage::GateUp => g += ms,
                MoeStage::Down => d += ms,
                _ => {}
            }
        }
        gu.push(g);
        dn.push(d);
    }
    (median(&mut gu), median(&mut dn), median(&mut total))
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moemem.sh"]
fn bench_few_rows_per_expert() {
    let dev = device();
    let gate_up = dev
        .upload(&random_bf16(E * 2 * I * H, 2.0 / (H as f32).sqrt(), 1))
        .unwrap();
    let down = dev
        .upload(&random_bf16(E * H * I, 2.0 / (I as f32).sqrt(), 2))
        .unwrap();
    let mut arms = vec![
        ("old (Wgmma)", Some(GemmImpl::Wgmma)),
        ("Stream", Some(GemmImpl::Stream)),
        ("StreamPrefetch", Some(GemmImpl::StreamPrefetch)),
        ("StreamDeep", Some(GemmImpl::StreamDeep)),
        ("default", None),
    ];
    if dev.arch != "sm_90a" {
        arms[0] = ("old (MmaSync)", Some(GemmImpl::MmaSync));
    }
    let per_expert_gu = (2 * I * H * 2) as f64;
    let per_expert_dn = (H * I * 2) as f64;
    println!("few rows per expert: h {H}, {E} experts, top-{K}, i {I}; median of {ITERS}; TB/s = weight bytes of the touched experts / time");
    println!("| rows | GEMMs | touched | gate+up us | gate+up TB/s | down us | down TB/s | routed block us |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    for rows in rows_to_time() {
        let x = dev.upload(&random_bf16(rows * H, 1.0, 3)).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(4 + rows as u64);
        let logits: Vec<f32> = (0..rows * E)
            .map(|_| rng.random::<f32>() * 4.0 - 2.0)
            .collect();
        let touched = touched_experts(&logits);
        let logits = dev.upload(&logits).unwrap();
        let out = dev.alloc(rows * H * 4).unwrap();
        let l = MoeLaunch {
            x: &x,
            router_logits: &logits,
            gate_up: &gate_up,
            down: &down,
            out: &out,
            tokens: rows,
            hidden: H,
            experts: E,
            top_k: K,
            intermediate: I,
            renormalise: true,
        };
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

/// The stages the MoE op marks, in its mark names.
const STAGES: [&str; 6] = ["router", "shared", "route", "gate_up", "down", "combine"];

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_moemem.sh"]
fn bench_the_moe_op_at_2k_and_8k_rows() {
    let be = CudaBackend::open(0).expect("a CUDA device");
    let init = |rows: usize, cols: usize, seed: u64| {
        be.init_matrix(
            rows,
            cols,
            WeightInit {
                seed,
                mean: 0.0,
                std: 0.02,
                window: None,
            },
        )
        .unwrap()
    };
    let w = MoeWeights {
        router: init(E, H, 1),
        gate_up: init(E * 2 * I, H, 2),
        down: init(E * H, I, 3),
        shared_gate_proj: init(I, H, 4),
        shared_up_proj: init(I, H, 5),
        shared_down_proj: init(H, I, 6),
        shared_gate: init(1, H, 7),
    };
    let spec = MoeSpec::all_experts(E, K, I, true);
    println!("whole MoE op (router, shared expert, routed experts), median of {ITERS}, ms");
    println!("| tokens | GEMMs | MoE op | router | shared | route | gate+up | down | combine |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    // Main's choice: Wgmma below 65,536 pairs, Wide from there (8192 x top-8).
    for (tokens, old) in [(2048usize, GemmImpl::Wgmma), (8192, GemmImpl::Wide)] {
        let x = be
            .act_from_f32(
                tokens,
                H,
                &random_bf16(tokens * H, 1.0, 8)
                    .iter()
                    .map(|&b| bf16::from_bits(b).to_f32())
                    .collect::<Vec<_>>(),
            )
            .unwrap();
        for (name, how) in [("main's", Some(old)), ("default", None)] {
            for _ in 0..3 {
                be.moe_marked(&x, &w, &spec, how, &mut |_| {}).unwrap();
            }
            be.device().synchronize().unwrap();
            let mut total = vec![];
            let mut per: Vec<Vec<f64>> = vec![vec![]; STAGES.len()];
            for _ in 0..ITERS {
                let mut marks: Vec<(&'static str, Event)> = Vec::new();
                let start = Event::record(be.device()).unwrap();
                let y = be
                    .moe_marked(&x, &w, &spec, how, &mut |s| {
                        marks.push((s, Event::record(be.device()).unwrap()))
                    })
                    .unwrap();
                let end = Event::record(be.device()).unwrap();
                total.push(end.ms_since(&start).unwrap());
                marks.push(("end", end));
                let mut sums = vec![0f64; STAGES.len()];
                for pair in marks.windows(2) {
                    if let Some(j) = STAGES.iter().position(|&n| n == pair[0].0) {
                        sums[j] += pair[1].1.ms_since(&pair[0].1).unwrap();
                    }
                }
                for (p, s) in per.iter_mut().zip(sums) {
                    p.push(s);
                }
                drop(y);
            }
            let t = median(&mut total);
            assert!(t > 0.0);
            let cols: Vec<String> = per
                .iter_mut()
                .map(|p| format!("{:.3}", median(p)))
                .collect();
            println!(
                "| {tokens} | {name} {how:?} | {t:.3} | {} |",
                cols.join(" | ")
            );
        }
    }
}
