//! The host path of a launch (issue 23): what the host spends to queue
//! kernels, and the correctness of what makes it cheap (a context bound once
//! per thread, tables built once per batch). GPU tests, ignored here; on the
//! GPU machine run them one at a time with the output shown:
//! `cargo test --release -p headroom-cuda --test host_path -- --ignored --test-threads=1 --nocapture`.

use headroom_core::ops::{
    Backend, Batch, GdnCoreInputs, GdnCoreWeights, GdnSpec, MoeSpec, MoeWeights, SamplingParams,
    WeightInit,
};
use headroom_core::Tensor;
use headroom_cuda::backend::{CudaAct, CudaBackend, CudaWeight};
use headroom_cuda::event::StreamEvent;
use headroom_cuda::CudaOptions;
use std::time::Instant;

fn backend() -> CudaBackend {
    CudaBackend::open(0).expect("a CUDA device")
}

/// `n` f32 values of a fixed pattern in `[lo, hi]`.
fn pattern(n: usize, lo: f32, hi: f32, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| lo + (hi - lo) * (((i * 7919 + seed * 104_729) % 1000) as f32 / 999.0))
        .collect()
}

fn vector(be: &CudaBackend, v: Vec<f32>) -> CudaWeight {
    be.upload_vector(Tensor::from_f32(vec![v.len()], v))
        .unwrap()
}

fn matrix(be: &CudaBackend, rows: usize, cols: usize, seed: u64) -> CudaWeight {
    be.init_matrix(rows, cols, WeightInit::new(seed, 0.0, 0.02))
        .unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU: prints the launch rate of the ops' launch path"]
fn launches_per_second_of_an_empty_kernel() {
    let be = backend();
    let dev = be.device();
    dev.launch_empty(1000).unwrap();
    dev.synchronize().unwrap();
    let n = 50_000;
    let start = Instant::now();
    dev.launch_empty(n).unwrap();
    let host = start.elapsed().as_secs_f64();
    dev.synchronize().unwrap();
    let all = start.elapsed().as_secs_f64();
    let us = host * 1e6 / n as f64;
    println!(
        "empty kernel through launch.rs: {n} launches, {:.0} launches/s on the host \
         ({us:.2} us each), {:.0} launches/s until the GPU finished",
        n as f64 / host,
        n as f64 / all
    );
    assert!(us < 20.0, "{us:.2} us of host time per launch");
}

/// One GDN layer of the 35B-A3B shape (hidden 2048, 16/32 heads of 128,
/// 256 experts top-8 of 512 plus the shared expert), synthetic weights.
struct Layer {
    norm: CudaWeight,
    post_norm: CudaWeight,
    qkv: CudaWeight,
    z: CudaWeight,
    b: CudaWeight,
    a: CudaWeight,
    out: CudaWeight,
    conv: CudaWeight,
    a_log: CudaWeight,
    dt_bias: CudaWeight,
    gated_norm: CudaWeight,
    moe: MoeWeights<CudaWeight>,
    moe_spec: MoeSpec,
}

const HIDDEN: usize = 2048;

fn gdn_spec(slots: usize) -> GdnSpec {
    GdnSpec {
        slots,
        k_heads: 16,
        v_heads: 32,
        k_dim: 128,
        v_dim: 128,
        kernel: 4,
    }
}

fn layer(be: &CudaBackend, s: &GdnSpec) -> Layer {
    let (e, i, vhd) = (256, 512, s.v_heads * s.v_dim);
    Layer {
        norm: vector(be, pattern(HIDDEN, 0.5, 1.5, 1)),
        post_norm: vector(be, pattern(HIDDEN, 0.5, 1.5, 2)),
        qkv: matrix(be, s.conv_dim(), HIDDEN, 3),
        z: matrix(be, vhd, HIDDEN, 4),
        b: matrix(be, s.v_heads, HIDDEN, 5),
        a: matrix(be, s.v_heads, HIDDEN, 6),
        out: matrix(be, HIDDEN, vhd, 7),
        conv: vector(be, pattern(s.conv_dim() * s.kernel, -0.6, 0.6, 8)),
        a_log: vector(be, pattern(s.v_heads, -1.0, 1.5, 9)),
        dt_bias: vector(be, pattern(s.v_heads, -1.0, 1.0, 10)),
        gated_norm: vector(be, pattern(s.v_dim, 0.5, 1.5, 11)),
        moe: MoeWeights {
            router: matrix(be, e, HIDDEN, 12),
            gate_up: matrix(be, e * 2 * i, HIDDEN, 13),
            down: matrix(be, e * HIDDEN, i, 14),
            shared_gate_proj: matrix(be, i, HIDDEN, 15),
            shared_up_proj: matrix(be, i, HIDDEN, 16),
            shared_down_proj: matrix(be, HIDDEN, i, 17),
            shared_gate: matrix(be, 1, HIDDEN, 18),
        },
        moe_spec: MoeSpec::all_experts(e, 8, i, true),
    }
}

/// The layer's ops on a decode batch as the model calls them (norm, the four
/// input projections, the fused GDN core, the output projection, norm, MoE);
/// returns the number of backend ops called.
fn run_layer(
    be: &CudaBackend,
    w: &Layer,
    residual: &mut CudaAct,
    delta: Option<&CudaAct>,
    st: &mut headroom_cuda::backend::CudaGdnState,
    batch: &Batch,
) -> (CudaAct, usize) {
    let x = be.add_rms_norm(residual, delta, &w.norm, 1e-6).unwrap();
    let [mixed, z, b, a] =
        <[CudaAct; 4]>::try_from(be.linear_many(&x, &[&w.qkv, &w.z, &w.b, &w.a]).unwrap()).unwrap();
    let core_w = GdnCoreWeights {
        conv: &w.conv,
        a_log: &w.a_log,
        dt_bias: &w.dt_bias,
        norm: &w.gated_norm,
        eps: 1e-6,
    };
    let core = be
        .gdn_core(
            GdnCoreInputs {
                mixed,
                z: &z,
                b: &b,
                a: &a,
            },
            &core_w,
            st,
            batch,
        )
        .unwrap();
    let attn_out = be.linear_partial(&core, &w.out).unwrap();
    let y = be
        .add_rms_norm(residual, Some(&attn_out), &w.post_norm, 1e-6)
        .unwrap();
    (be.moe(&y, &w.moe, &w.moe_spec).unwrap(), 6)
}

#[test]
#[ignore = "needs a CUDA GPU: prints the host time per op of a 256-sequence decode layer"]
fn host_time_per_op_of_a_256_sequence_decode_layer() {
    let opts = CudaOptions {
        decode_stats: true,
        ..CudaOptions::from_env()
    };
    let be = CudaBackend::open_with(0, opts).expect("a CUDA device");
    let n = 256;
    let spec = gdn_spec(n);
    let w = layer(&be, &spec);
    let mut st = be.new_gdn_state(&spec).unwrap();
    let mut residual = be
        .act_from_f32(n, HIDDEN, &pattern(n * HIDDEN, -1.0, 1.0, 20))
        .unwrap();
    let mut delta: Option<CudaAct> = None;
    let greedy = vec![SamplingParams::default(); n];
    let mut timed = (0.0f64, 0usize, 0usize);
    let mut gpu_ms = 0.0;
    // 2 warm-up steps, then 17 measured (the decode statistics print one
    // line per 16 steps after the first: run with --nocapture to see it).
    for step in 0..19usize {
        let batch = Batch::packed(&(0..n).map(|s| (s, 100 + step, 1)).collect::<Vec<_>>());
        let start_ev = StreamEvent::record(be.device()).unwrap();
        let started = Instant::now();
        let (out, ops) = run_layer(&be, &w, &mut residual, delta.as_ref(), &mut st, &batch);
        let host = started.elapsed().as_secs_f64();
        let end_ev = StreamEvent::record(be.device()).unwrap();
        // The step's one synchronisation, as the engine's: sampling.
        let tokens = be.sample(&out, &greedy, &vec![step as u64; n]).unwrap();
        assert_eq!(tokens.len(), n);
        assert!(tokens.iter().all(|&t| (t as usize) < HIDDEN));
        if step >= 2 {
            timed.0 += host;
            timed.1 += ops;
            timed.2 += 1;
            gpu_ms += end_ev.ms_since(&start_ev).unwrap();
        }
        delta = Some(out);
    }
    let (host, ops, steps) = timed;
    let per_op_us = host * 1e6 / ops as f64;
    println!(
        "256-sequence decode, one GDN layer's non-attention ops ({} ops/step): host {:.1} us \
         per step, {per_op_us:.1} us per op, {:.3} us per sequence; GPU {:.1} us per step",
        ops / steps,
        host * 1e6 / steps as f64,
        host * 1e6 / steps as f64 / n as f64,
        gpu_ms * 1e3 / steps as f64
    );
    let last = be.act_to_f32(&residual).unwrap();
    assert!(
        last.iter().all(|v| v.is_finite()),
        "the residual stays finite"
    );
    assert!(per_op_us < 1000.0, "{per_op_us:.1} us of host time per op");
}

/// RMS norm of fixed inputs on `be`, read back.
fn normed(be: &CudaBackend) -> Vec<f32> {
    let (rows, cols) = (5, 384);
    let mut x = be
        .act_from_f32(rows, cols, &pattern(rows * cols, -2.0, 2.0, 30))
        .unwrap();
    let w = vector(be, pattern(cols, 0.5, 1.5, 31));
    let y = be.add_rms_norm(&mut x, None, &w, 1e-6).unwrap();
    be.act_to_f32(&y).unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU: an op's first launch on a new thread binds the context"]
fn a_second_threads_first_launch_works() {
    let be = backend();
    let here = normed(&be);
    let (be, there, launched) = std::thread::spawn(move || {
        // The thread's first driver call is a launch.
        let launched = be.device().launch_empty(1);
        let there = normed(&be);
        (be, there, launched)
    })
    .join()
    .unwrap();
    launched.expect("a launch as a thread's first driver call");
    assert_eq!(here, there, "the same op on another thread");
    assert_eq!(normed(&be), here, "and back on the first thread");
}

#[test]
#[ignore = "needs a CUDA GPU: equal batches share one device table, different ones get their own"]
fn the_table_cache_returns_equal_contents_for_equal_batches() {
    let be = backend();
    let dev = be.device();
    let read = |buf: &headroom_cuda::alloc::DeviceBuffer, len: usize| {
        let mut v = vec![0i32; len];
        dev.read(buf, &mut v).unwrap();
        v
    };
    let a = Batch::packed(&[(3, 17, 1), (0, 5, 2), (7, 0, 1)]);
    let want_a = vec![0, 1, 3, 4, 3, 0, 7, 17, 5, 0];
    let ta = dev.sequence_table(&a).unwrap();
    let ta2 = dev.sequence_table(&a.clone()).unwrap();
    assert_eq!(ta.ptr(), ta2.ptr(), "one buffer for equal batches");
    assert_eq!(read(&ta, 10), want_a);
    let b = Batch::packed(&[(3, 18, 1), (0, 6, 2), (7, 1, 1)]);
    let tb = dev.sequence_table(&b).unwrap();
    assert_ne!(tb.ptr(), ta.ptr(), "a held table is not overwritten");
    assert_eq!(read(&tb, 10), vec![0, 1, 3, 4, 3, 0, 7, 18, 6, 1]);
    assert_eq!(
        read(&ta, 10),
        want_a,
        "the first batch's table is unchanged"
    );
    // Unheld tables are rewritten in place by later batches: contents follow.
    drop((ta, ta2, tb));
    for step in 0..8usize {
        let c = Batch::packed(&[(step, step * 3, 1), (9, 2, 1)]);
        let t = dev.sequence_table(&c).unwrap();
        assert_eq!(
            read(&t, 7),
            vec![0, 1, 2, step as i32, 9, (step * 3) as i32, 2],
            "step {step}"
        );
    }
    assert_eq!(read(&dev.sequence_table(&a).unwrap(), 10), want_a);
}
