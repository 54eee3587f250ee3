//! Scheduler host overhead per engine step on the CPU with a tiny model:
//! the time of a step outside `model.step` + sampling (admission, planning,
//! batch building, bookkeeping, streaming), against the whole step.
//! `cargo bench -p headroom-engine` prints one line per case:
//! `host overhead … µs/step, … µs a sequence (… % of the step)` — the
//! engine's share of issue 23's ≤ 5 µs of host work a running sequence.

use criterion::{criterion_group, criterion_main, Criterion};
use headroom_cpu::CpuBackend;
use headroom_engine::{EngineConfig, EngineCore, GenerateRequest, RequestStream};
use headroom_model::{ModelConfig, Qwen35Model, Weights};
use std::time::{Duration, Instant};

fn engine(sequences: usize, prompt: usize) -> (EngineCore<CpuBackend>, Vec<RequestStream>) {
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    let model = Qwen35Model::load(CpuBackend::new(), &cfg, Weights::synthetic(&cfg, 7)).unwrap();
    let mut core = EngineCore::new(
        model,
        EngineConfig {
            max_running: sequences,
            max_context: 1 << 16,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let streams = (0..sequences)
        .map(|i| {
            let ids = (0..prompt as u32)
                .map(|t| (t * 31 + i as u32) % 512)
                .collect();
            core.submit(GenerateRequest::greedy(ids, 60_000)).unwrap()
        })
        .collect();
    // Prefill everyone so the measured steps are decode steps.
    loop {
        let prefill = core.step().unwrap().map_or(0, |r| r.prefill_rows);
        if prefill == 0 && core.stats().running == sequences {
            break;
        }
    }
    (core, streams)
}

fn decode_steps(c: &mut Criterion) {
    for sequences in [1usize, 8, 32, 256] {
        let (mut core, mut streams) = engine(sequences, 32);
        let (mut host, mut total, mut n) = (0f64, 0f64, 0u64);
        c.bench_function(&format!("decode step, {sequences} sequences"), |b| {
            b.iter_custom(|iters| {
                let started = Instant::now();
                for _ in 0..iters {
                    let r = core.step().unwrap().unwrap();
                    host += r.total_s - r.forward_s;
                    total += r.total_s;
                    n += 1;
                }
                for s in &mut streams {
                    while s.try_next().is_some() {}
                }
                started.elapsed()
            })
        });
        println!(
            "host overhead {sequences} sequences: {:.1} µs/step, {:.2} µs a sequence ({:.2} % of \
             the step, {:.1} µs)",
            host / n as f64 * 1e6,
            host / n as f64 * 1e6 / sequences as f64,
            100.0 * host / total,
            total / n as f64 * 1e6
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_millis(500)).sample_size(20);
    targets = decode_steps
}
criterion_main!(benches);
