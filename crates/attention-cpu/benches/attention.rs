//! Criterion benches of the CPU prefill attention routes on the Qwen3.6
//! full-attention shape (head_dim 256, 16 query / 2 KV heads, bf16), plus the
//! square f32 GEMM of the same `gemm` library as the yardstick.
//!
//! Throughput is in causal FLOPs (`AttentionShape::causal_flops`), so
//! criterion's "elem/s" reads as FLOP/s. Run: `cargo bench -p headroom-attention-cpu`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use half::bf16;
use headroom_attention_cpu::attention_prefill;
use headroom_core::{AttentionShape, RouteRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;

fn random(n: usize, rng: &mut StdRng) -> Vec<bf16> {
    (0..n)
        .map(|_| bf16::from_f32(rng.random_range(-1.7f32..1.7)))
        .collect()
}

fn prefill(c: &mut Criterion) {
    let mut group = c.benchmark_group("prefill_d256_q16_kv2_bf16");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));
    let mut rng = StdRng::seed_from_u64(7);
    for length in [512usize, 2048, 4096] {
        let shape = AttentionShape {
            q_len: length,
            kv_len: length,
            q_heads: 16,
            kv_heads: 2,
            head_dim: 256,
            scale: None,
        };
        let q = random(shape.q_elems(), &mut rng);
        let k = random(shape.kv_elems(), &mut rng);
        let v = random(shape.kv_elems(), &mut rng);
        let mut out = vec![bf16::ZERO; shape.q_elems()];
        group.throughput(Throughput::Elements(shape.causal_flops() as u64));
        for route in ["composed:128", "composed:512", "fused"] {
            let r: RouteRequest = route.parse().expect("route");
            group.bench_with_input(BenchmarkId::new(route, length), &r, |b, &r| {
                b.iter(|| attention_prefill(&shape, r, &q, &k, &v, &mut out).expect("runs"))
            });
        }
    }
    group.finish();
}

fn gemm_square(c: &mut Criterion) {
    let n = 2048;
    let mut rng = StdRng::seed_from_u64(8);
    let a: Vec<f32> = (0..n * n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let b: Vec<f32> = (0..n * n).map(|_| rng.random_range(-1.0..1.0)).collect();
    let mut out = vec![0.0f32; n * n];
    let mut group = c.benchmark_group("gemm_f32_square");
    group.sample_size(10);
    group.throughput(Throughput::Elements(2 * (n * n * n) as u64));
    group.bench_function(BenchmarkId::from_parameter(n), |bench| {
        bench.iter(|| {
            // SAFETY: a, b and out each hold n*n elements, row-major with row stride n.
            unsafe {
                gemm::gemm(
                    n,
                    n,
                    n,
                    out.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    a.as_ptr(),
                    1,
                    n as isize,
                    b.as_ptr(),
                    1,
                    n as isize,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    gemm::Parallelism::Rayon(rayon::current_num_threads()),
                )
            }
        })
    });
    group.finish();
}

criterion_group!(benches, prefill, gemm_square);
criterion_main!(benches);
