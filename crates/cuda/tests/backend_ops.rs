//! `CudaBackend` op by op against f64 host references on fresh random inputs.
//! GPU tests are ignored here and run by `bench/gpu/check_backend_ops.sh`;
//! outputs come from NaN-poisoned pool blocks, lengths are not multiples of
//! 64, batches are varlen with history, state is carried across chunks.

use half::bf16;
use headroom_core::ops::{
    rng, Backend, Batch, GdnSpec, KvSpec, MoeSpec, MoeWeights, OpError, RopeSpec, SamplingParams,
    WeightInit,
};
use headroom_core::{OpKey, RouteRequest, Tensor};
use headroom_cuda::backend::{CudaAct, CudaBackend};
use rand::{Rng, SeedableRng};

mod support;
use support::rel_err;

fn backend() -> CudaBackend {
    CudaBackend::open(0).expect("a CUDA device")
}

fn rng_of(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// `n` values uniform in `[-scale, scale)`, rounded to bf16 (what the device holds).
fn uniform(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut g = rng_of(seed);
    (0..n)
        .map(|_| bf16::from_f32((g.random::<f32>() * 2.0 - 1.0) * scale).to_f32())
        .collect()
}

/// Leaves `count` poisoned (0xFF: NaN) blocks of `bytes` in the pool, so the
/// next outputs of that size start as NaN.
fn poison_pool(be: &CudaBackend, bytes: usize) {
    let dev = be.device();
    let bufs: Vec<_> = (0..8).map(|_| dev.alloc(bytes).unwrap()).collect();
    for b in &bufs {
        dev.fill_bytes(b, 0xFF).unwrap();
    }
    dev.synchronize().unwrap();
}

fn act(be: &CudaBackend, rows: usize, cols: usize, data: &[f32]) -> CudaAct {
    be.act_from_f32(rows, cols, data).unwrap()
}

fn vector(be: &CudaBackend, v: &[f32]) -> headroom_cuda::backend::CudaWeight {
    be.upload_vector(Tensor::from_f32(vec![v.len()], v.to_vec()))
        .unwrap()
}

fn matrix(
    be: &CudaBackend,
    rows: usize,
    cols: usize,
    v: &[f32],
) -> headroom_cuda::backend::CudaWeight {
    be.upload_matrix(Tensor::from_f32(vec![rows, cols], v.to_vec()))
        .unwrap()
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// A small GDN state shape (GQA 2 key heads / 4 value heads).
fn gdn_spec(slots: usize) -> GdnSpec {
    GdnSpec {
        slots,
        k_heads: 2,
        v_heads: 4,
        k_dim: 16,
        v_dim: 24,
        kernel: 4,
    }
}

// ---- without a GPU --------------------------------------------------------

#[test]
fn open_without_a_driver_is_an_error_not_a_panic() {
    let driver = headroom_cuda::libs::probe_driver();
    match (CudaBackend::open(0), driver) {
        (Err(e), Err(_)) => assert!(e.to_string().contains("libcuda"), "{e}"),
        (Ok(be), Ok(())) => assert_eq!(be.act_dtype(), headroom_core::Dtype::Bf16),
        (Err(e), Ok(())) => assert!(!e.to_string().is_empty()),
        (Ok(_), Err(e)) => panic!("opened a device without a driver ({e})"),
    }
}

// ---- on the GPU (one file per op group) -------------------------------------

#[path = "backend_ops/dense.rs"]
mod dense;
#[path = "backend_ops/experts.rs"]
mod experts;
#[path = "backend_ops/fused.rs"]
mod fused;
#[path = "backend_ops/sampling.rs"]
mod sampling;
#[path = "backend_ops/sequence.rs"]
mod sequence;

#[test]
#[ignore = "needs a CUDA GPU: run this test binary with --include-ignored on the GPU machine"]
fn freed_buffers_stay_reserved_until_the_cache_is_released() {
    let be = backend();
    let dev = be.device();
    be.release_cached_memory();
    let (active, _) = be.memory();
    assert_eq!(
        be.memory_reserved(),
        active,
        "nothing cached after a release"
    );
    let held = dev.alloc(64 << 20).unwrap();
    let freed = dev.alloc(96 << 20).unwrap();
    drop(freed);
    let (now, _) = be.memory();
    assert_eq!(now, active + (64 << 20), "the freed buffer is not held");
    assert_eq!(
        be.memory_reserved(),
        now + (96 << 20),
        "the freed buffer stays cached for reuse"
    );
    be.release_cached_memory();
    assert_eq!(be.memory_reserved(), now, "released to the device");
    drop(held);
}

#[test]
#[ignore = "needs a CUDA GPU: bench/gpu/check_backend_ops.sh"]
fn timeline_marks_time_the_queued_work_between_them_without_waiting() {
    // Marks around a 4,096 x 4,096 linear on 4,096 rows (≈ 137 GFLOP): the
    // device time between them is the GEMM's, and taking them waits for nothing.
    let be = backend();
    let (n, k) = (4096, 4096);
    let x = act(&be, n, k, &uniform(1, n * k, 1.0));
    let w = matrix(&be, n, k, &uniform(2, n * k, 0.05));
    be.linear(&x, &w).unwrap(); // the first use (cuBLAS's setup) outside the marks
    be.synchronize().unwrap();
    let host = std::time::Instant::now();
    let a = be.timeline_mark().unwrap();
    let outs: Vec<_> = (0..4).map(|_| be.linear(&x, &w).unwrap()).collect();
    let b = be.timeline_mark().unwrap();
    let queued = host.elapsed().as_secs_f64();
    let secs = be.timeline_seconds(&a, &b).unwrap();
    let wall = host.elapsed().as_secs_f64();
    assert!(matches!(a, headroom_core::TimelineMark::Device(_)));
    // Four GEMMs of 137 GFLOP: more than 0.1 ms at any rate a GPU reaches,
    // and no more than the wall time up to the read.
    assert!(
        secs > 1e-4 && secs <= wall,
        "{secs} s between marks, {wall} s wall"
    );
    println!(
        "timeline: {:.3} ms between the marks, {:.3} ms to queue them",
        secs * 1e3,
        queued * 1e3
    );
    // A host mark is not this backend's.
    let host_mark = headroom_core::TimelineMark::Host(std::time::Instant::now());
    assert!(be.timeline_seconds(&a, &host_mark).is_err());
    drop(outs);
}
