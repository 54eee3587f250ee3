//! The fused decode kernels of `Backend::gdn_core` (`kernels/gdn_decode.cu`)
//! and `Backend::attention_prep` (`kernels/attention_prep.cu`) against the
//! composition of the plain ops on the same GPU and against the CPU backend,
//! on fresh random inputs: several sequences in scattered slots after prompts
//! of different lengths, 8 decode steps in a row (states advanced by each
//! path on its own pool), GQA ratios 1, 2 and 3 and the 35B-A3B shapes, a slot
//! outside the batch left alone, a NaN input kept to its sequence, every
//! output from NaN-poisoned pool blocks; the GDN kernel at 1, 2 and 3
//! sequences, and 17 and 256 sequences.
//! Run by `bench/gpu/check_gdn_decode.sh`.

use cudarc::driver::result;
use half::bf16;
use headroom_core::ops::{
    attention_prep_composed, gdn_core_composed, AttentionPrepWeights, Backend, Batch,
    GdnCoreInputs, GdnCoreWeights, GdnSpec, KvSpec, RopeSpec,
};
use headroom_core::{RouteRequest, Tensor};
use headroom_cpu::CpuBackend;
use headroom_cuda::backend::{CudaAct, CudaBackend};
use headroom_cuda::event::StreamEvent as Event;
use rand::{Rng, SeedableRng};

#[path = "fused_decode/attention_prep.rs"]
mod attention_prep;
use attention_prep::{attention_prep_case, prep_data, prep_weights};

fn backend() -> CudaBackend {
    CudaBackend::open(0).expect("a CUDA device")
}

/// `n` values uniform in `[lo, hi)`, rounded to bf16 (what the device holds).
fn uniform(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let mut g = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| bf16::from_f32(lo + g.random::<f32>() * (hi - lo)).to_f32())
        .collect()
}

/// Leaves poisoned (0xFF: NaN) blocks of `bytes` in the pool, so the next
/// outputs of that size start as NaN.
fn poison_pool(be: &CudaBackend, bytes: usize) {
    let dev = be.device();
    let bufs: Vec<_> = (0..8).map(|_| dev.alloc(bytes).unwrap()).collect();
    for b in &bufs {
        dev.fill_bytes(b, 0xFF).unwrap();
    }
    dev.synchronize().unwrap();
}

/// Relative RMS difference over the entries where `mask` is true; both sides
/// must be finite there.
fn rel_err_where(got: &[f32], want: &[f32], mask: impl Fn(usize) -> bool, what: &str) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if !mask(i) {
            continue;
        }
        assert!(g.is_finite() && w.is_finite(), "{what}: [{i}] {g} vs {w}");
        num += (g as f64 - w as f64).powi(2);
        den += (w as f64).powi(2);
    }
    (num / den.max(1e-30)).sqrt()
}

fn rel_err(got: &[f32], want: &[f32], what: &str) -> f64 {
    rel_err_where(got, want, |_| true, what)
}

/// One backend's view of the GDN weights.
struct GdnWeights<B: Backend> {
    conv: B::Weight,
    a_log: B::Weight,
    dt_bias: B::Weight,
    norm: B::Weight,
}

fn gdn_weights<B: Backend>(be: &B, spec: &GdnSpec, seed: u64) -> GdnWeights<B> {
    let v = |s: u64, n: usize, lo: f32, hi: f32| {
        be.upload_vector(Tensor::from_f32(vec![n], uniform(s, n, lo, hi)))
            .unwrap()
    };
    GdnWeights {
        conv: v(seed, spec.conv_dim() * spec.kernel, -0.6, 0.6),
        a_log: v(seed + 1, spec.v_heads, -1.0, 1.5),
        dt_bias: v(seed + 2, spec.v_heads, -1.0, 1.0),
        norm: v(seed + 3, spec.v_dim, 0.5, 1.5),
    }
}

fn core_weights<B: Backend>(w: &GdnWeights<B>) -> GdnCoreWeights<'_, B::Weight> {
    GdnCoreWeights {
        conv: &w.conv,
        a_log: &w.a_log,
        dt_bias: &w.dt_bias,
        norm: &w.norm,
        eps: 1e-6,
    }
}

/// Host inputs of one GDN call: mixed, z, b, a.
struct GdnRows {
    mixed: Vec<f32>,
    z: Vec<f32>,
    b: Vec<f32>,
    a: Vec<f32>,
}

fn gdn_rows(spec: &GdnSpec, rows: usize, seed: u64) -> GdnRows {
    let vh = spec.v_heads;
    GdnRows {
        mixed: uniform(seed, rows * spec.conv_dim(), -2.0, 2.0),
        z: uniform(seed + 1, rows * vh * spec.v_dim, -2.0, 2.0),
        b: uniform(seed + 2, rows * vh, -3.0, 3.0),
        a: uniform(seed + 3, rows * vh, -3.0, 3.0),
    }
}

/// Which implementation runs a call.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    /// The fused kernel (`gdn_core_fused`).
    Fused,
    /// The composition of the plain ops.
    Composed,
}

/// What runs one GDN call: the inputs, weights and state to the output.
type GdnCall<'f, B> = Box<
    dyn FnOnce(
            GdnCoreInputs<'_, <B as Backend>::Act>,
            &GdnCoreWeights<'_, <B as Backend>::Weight>,
            &mut <B as Backend>::GdnState,
        ) -> <B as Backend>::Act
        + 'f,
>;

fn run_gdn<B: Backend>(
    be: &B,
    w: &GdnWeights<B>,
    st: &mut B::GdnState,
    spec: &GdnSpec,
    x: &GdnRows,
    batch: &Batch,
    call: GdnCall<'_, B>,
) -> Vec<f32> {
    let t = batch.rows();
    let vh = spec.v_heads;
    let mixed = be.act_from_f32(t, spec.conv_dim(), &x.mixed).unwrap();
    let z = be.act_from_f32(t, vh * spec.v_dim, &x.z).unwrap();
    let b = be.act_from_f32(t, vh, &x.b).unwrap();
    let a = be.act_from_f32(t, vh, &x.a).unwrap();
    let inputs = GdnCoreInputs {
        mixed,
        z: &z,
        b: &b,
        a: &a,
    };
    let out = call(inputs, &core_weights(w), st);
    be.act_to_f32(&out).unwrap()
}

/// Runs one call on the GPU (`path`) with a poisoned output pool.
fn gpu_gdn(
    be: &CudaBackend,
    w: &GdnWeights<CudaBackend>,
    st: &mut headroom_cuda::backend::CudaGdnState,
    spec: &GdnSpec,
    x: &GdnRows,
    batch: &Batch,
    path: Path,
) -> Vec<f32> {
    poison_pool(be, batch.rows() * spec.v_heads * spec.v_dim * 2);
    let call: GdnCall<'_, CudaBackend> = Box::new(move |i, cw, st| match path {
        Path::Fused => be.gdn_core_fused(i, cw, st, batch).unwrap(),
        Path::Composed => gdn_core_composed(be, i, cw, st, batch).unwrap(),
    });
    run_gdn(be, w, st, spec, x, batch, call)
}

fn cpu_gdn(
    cpu: &CpuBackend,
    w: &GdnWeights<CpuBackend>,
    st: &mut <CpuBackend as Backend>::GdnState,
    spec: &GdnSpec,
    x: &GdnRows,
    batch: &Batch,
) -> Vec<f32> {
    let call: GdnCall<'_, CpuBackend> =
        Box::new(move |i, cw, st| cpu.gdn_core(i, cw, st, batch).unwrap());
    run_gdn(cpu, w, st, spec, x, batch, call)
}

/// Prompts of different lengths into scattered slots, then 8 decode steps:
/// fused vs composed on the GPU and vs the CPU at every step; then one step of
/// a slot that sat outside the batch (its state untouched by the fused path).
fn gdn_decode_case(spec: GdnSpec, seed: u64) {
    let (be, cpu) = (backend(), CpuBackend::new());
    let (wf, wc) = (
        gdn_weights(&be, &spec, seed),
        gdn_weights(&cpu, &spec, seed),
    );
    let mut st_f = be.new_gdn_state(&spec).unwrap();
    let mut st_g = be.new_gdn_state(&spec).unwrap();
    let mut st_c = cpu.new_gdn_state(&spec).unwrap();
    // Prompts: slot 3 (9 rows), slot 0 (2 rows), slot 4 (1 row), slot 1 (5 rows, left out later).
    let prompt = Batch::packed(&[(3, 0, 9), (0, 0, 2), (4, 0, 1), (1, 0, 5)]);
    let x = gdn_rows(&spec, prompt.rows(), seed + 10);
    let f = gpu_gdn(&be, &wf, &mut st_f, &spec, &x, &prompt, Path::Composed);
    let g = gpu_gdn(&be, &wf, &mut st_g, &spec, &x, &prompt, Path::Composed);
    let c = cpu_gdn(&cpu, &wc, &mut st_c, &spec, &x, &prompt);
    assert_eq!(f, g, "the same composed prompt on two pools");
    assert!(rel_err(&g, &c, "prompt") < 2e-2);
    let mut hist = [9usize, 2, 1];
    let label = format!("{}/{} heads", spec.k_heads, spec.v_heads);
    for step in 0..8 {
        let batch = Batch::packed(&[(3, hist[0], 1), (0, hist[1], 1), (4, hist[2], 1)]);
        let x = gdn_rows(&spec, 3, seed + 100 + step);
        let f = gpu_gdn(&be, &wf, &mut st_f, &spec, &x, &batch, Path::Fused);
        let g = gpu_gdn(&be, &wf, &mut st_g, &spec, &x, &batch, Path::Composed);
        let c = cpu_gdn(&cpu, &wc, &mut st_c, &spec, &x, &batch);
        let (eg, ec) = (
            rel_err(&f, &g, "fused vs composed"),
            rel_err(&f, &c, "fused vs cpu"),
        );
        let ecg = rel_err(&g, &c, "composed vs cpu");
        println!("{label} step {step}: fused vs composed {eg:.2e}, vs cpu {ec:.2e} (composed vs cpu {ecg:.2e})");
        assert!(eg < 4e-3, "{label} step {step}: fused vs composed {eg}");
        assert!(ec < 2e-2, "{label} step {step}: fused vs cpu {ec}");
        for h in &mut hist {
            *h += 1;
        }
    }
    // Slot 1 sat out the decode steps: one step of it alone, composed everywhere.
    let batch = Batch::single(1, 5, 1);
    let x = gdn_rows(&spec, 1, seed + 999);
    let f = gpu_gdn(&be, &wf, &mut st_f, &spec, &x, &batch, Path::Composed);
    let g = gpu_gdn(&be, &wf, &mut st_g, &spec, &x, &batch, Path::Composed);
    let c = cpu_gdn(&cpu, &wc, &mut st_c, &spec, &x, &batch);
    assert_eq!(f, g, "{label}: slot 1 outside the batch must be untouched");
    assert!(rel_err(&f, &c, "slot 1") < 2e-2);
}

/// `n` sequences in scattered slots of a pool of `spec.slots`: a prompt of
/// 1 to 4 rows each (composed), then `steps` decode steps, the fused kernel
/// on its own pool against the composed GPU path and the CPU on theirs.
fn gdn_sequences_case(spec: GdnSpec, n: usize, steps: u64, seed: u64) {
    assert!(n < spec.slots && !spec.slots.is_multiple_of(7));
    let (be, cpu) = (backend(), CpuBackend::new());
    let (wg, wc) = (
        gdn_weights(&be, &spec, seed),
        gdn_weights(&cpu, &spec, seed),
    );
    let mut st_g = be.new_gdn_state(&spec).unwrap();
    let mut st_c = cpu.new_gdn_state(&spec).unwrap();
    let mut st_f = be.new_gdn_state(&spec).unwrap();
    let slot = |i: usize| (i * 7 + 3) % spec.slots;
    let lens: Vec<usize> = (0..n).map(|i| 1 + i % 4).collect();
    let prompt: Vec<_> = (0..n).map(|i| (slot(i), 0, lens[i])).collect();
    let prompt = Batch::packed(&prompt);
    let x = gdn_rows(&spec, prompt.rows(), seed + 10);
    let g = gpu_gdn(&be, &wg, &mut st_g, &spec, &x, &prompt, Path::Composed);
    let f = gpu_gdn(&be, &wg, &mut st_f, &spec, &x, &prompt, Path::Composed);
    assert_eq!(f, g, "the same composed prompt on two pools");
    let c = cpu_gdn(&cpu, &wc, &mut st_c, &spec, &x, &prompt);
    assert!(rel_err(&g, &c, "prompt") < 2e-2);
    let label = format!("{}/{} heads, {n} sequences", spec.k_heads, spec.v_heads);
    for step in 0..steps {
        let seqs: Vec<_> = (0..n)
            .map(|i| (slot(i), lens[i] + step as usize, 1))
            .collect();
        let batch = Batch::packed(&seqs);
        let x = gdn_rows(&spec, n, seed + 100 + step);
        let g = gpu_gdn(&be, &wg, &mut st_g, &spec, &x, &batch, Path::Composed);
        let c = cpu_gdn(&cpu, &wc, &mut st_c, &spec, &x, &batch);
        let f = gpu_gdn(&be, &wg, &mut st_f, &spec, &x, &batch, Path::Fused);
        let (eg, ec) = (
            rel_err(&f, &g, "fused vs composed"),
            rel_err(&f, &c, "fused vs cpu"),
        );
        println!("{label} step {step}: fused vs composed {eg:.2e}, vs cpu {ec:.2e}");
        assert!(eg < 4e-3, "{label} step {step}: fused vs composed {eg}");
        assert!(ec < 2e-2, "{label} step {step}: fused vs cpu {ec}");
    }
}

fn small_spec(k_heads: usize, v_heads: usize) -> GdnSpec {
    GdnSpec {
        slots: 6,
        k_heads,
        v_heads,
        k_dim: 128,
        v_dim: 128,
        kernel: 4,
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn_decode.sh"]
fn gdn_core_fused_small_gqa_1_2_3() {
    for (i, (hk, hv)) in [(2, 2), (2, 4), (1, 3)].into_iter().enumerate() {
        gdn_decode_case(small_spec(hk, hv), 7 + 1000 * i as u64);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn_decode.sh"]
fn gdn_core_fused_35b_a3b_shape() {
    gdn_decode_case(small_spec(16, 32), 31);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn_decode.sh"]
fn gdn_core_fused_at_1_2_3_sequences() {
    for n in 1..=3 {
        gdn_sequences_case(small_spec(16, 32), n, 4, 40 + n as u64);
        gdn_sequences_case(small_spec(1, 3), n, 4, 50 + n as u64);
        gdn_sequences_case(small_spec(2, 2), n, 4, 60 + n as u64);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn_decode.sh"]
fn gdn_core_17_sequences() {
    let spec = GdnSpec {
        slots: 20,
        ..small_spec(16, 32)
    };
    gdn_sequences_case(spec, 17, 3, 70);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn_decode.sh"]
fn gdn_core_256_sequences() {
    let spec = GdnSpec {
        slots: 260,
        ..small_spec(16, 32)
    };
    gdn_sequences_case(spec, 256, 2, 80);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn_decode.sh"]
fn gdn_core_nan_input_stays_in_its_sequence() {
    let spec = small_spec(2, 4);
    let be = backend();
    let w = gdn_weights(&be, &spec, 5);
    let mut st_f = be.new_gdn_state(&spec).unwrap();
    let mut st_g = be.new_gdn_state(&spec).unwrap();
    let cols = spec.v_heads * spec.v_dim;
    for step in 0..3u64 {
        let batch = Batch::packed(&[
            (2, step as usize, 1),
            (5, step as usize, 1),
            (0, step as usize, 1),
        ]);
        let mut x = gdn_rows(&spec, 3, 50 + step);
        if step == 0 {
            x.mixed[spec.conv_dim() + 3] = f32::NAN; // sequence 1's q, key head 0
        }
        let f = gpu_gdn(&be, &w, &mut st_f, &spec, &x, &batch, Path::Fused);
        let g = gpu_gdn(&be, &w, &mut st_g, &spec, &x, &batch, Path::Composed);
        let seq1 = |i: usize| (cols..2 * cols).contains(&i);
        let e = rel_err_where(&f, &g, |i| !seq1(i), "other sequences");
        assert!(e < 4e-3, "step {step}: other sequences {e}");
        let nan_f: Vec<bool> = f[cols..2 * cols].iter().map(|v| v.is_nan()).collect();
        let nan_g: Vec<bool> = g[cols..2 * cols].iter().map(|v| v.is_nan()).collect();
        assert!(nan_f.iter().any(|&n| n), "step {step}: the NaN vanished");
        assert_eq!(
            nan_f, nan_g,
            "step {step}: NaN pattern differs from the composition"
        );
    }
}

/// The 35B-A3B GDN shape at one sequence (compute-sanitizer's case).
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn_decode.sh"]
fn small_case_for_memcheck() {
    let spec = GdnSpec {
        slots: 3,
        ..small_spec(2, 4)
    };
    let be = backend();
    let w = gdn_weights(&be, &spec, 3);
    let mut st = be.new_gdn_state(&spec).unwrap();
    for step in 0..2 {
        let x = gdn_rows(&spec, 2, 70 + step);
        let batch = Batch::packed(&[(2, step as usize, 1), (0, step as usize, 1)]);
        let f = gpu_gdn(&be, &w, &mut st, &spec, &x, &batch, Path::Fused);
        assert!(f.iter().all(|v| v.is_finite()));
    }
    attention_prep_case(4, 2, 128, 32, 3);
}

// ---- timing ---------------------------------------------------------------------

unsafe extern "C" fn hold_stream(_: *mut std::ffi::c_void) {
    std::thread::sleep(std::time::Duration::from_millis(100));
}

/// `(gpu, wall)` µs per call of `calls` back-to-back calls of `f`: `gpu`
/// between events with the stream held by a sleeping host function while
/// all calls are queued (the device's time alone, no launch gaps), `wall`
/// with one synchronisation at the end (the host's queueing included).
fn per_call_us(be: &CudaBackend, calls: u32, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..3 {
        f();
    }
    be.synchronize().unwrap();
    // SAFETY: the callback touches nothing; the stream is live.
    unsafe {
        result::stream::launch_host_function(
            be.device().stream_raw(),
            hold_stream,
            std::ptr::null_mut(),
        )
        .unwrap()
    };
    let start = Event::record(be.device()).unwrap();
    for _ in 0..calls {
        f();
    }
    let gpu = Event::record(be.device())
        .unwrap()
        .ms_since(&start)
        .unwrap()
        * 1e3
        / calls as f64;
    let t = std::time::Instant::now();
    for _ in 0..calls {
        f();
    }
    be.synchronize().unwrap();
    (gpu, t.elapsed().as_secs_f64() * 1e6 / calls as f64)
}

/// One sequence on the 35B-A3B shapes (GDN 16/32 heads of 128; attention
/// 16/2 heads of 256, rotary 64, 8k of history): the composition and the
/// fused kernel, device time and wall time per call.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn_decode.sh"]
fn timing_composed_vs_fused_batch_1() {
    let be = backend();
    let spec = GdnSpec {
        slots: 2,
        ..small_spec(16, 32)
    };
    let w = gdn_weights(&be, &spec, 1);
    let mut st = be.new_gdn_state(&spec).unwrap();
    let x = gdn_rows(&spec, 1, 2);
    let vh = spec.v_heads;
    let z = be.act_from_f32(1, vh * 128, &x.z).unwrap();
    let b = be.act_from_f32(1, vh, &x.b).unwrap();
    let a = be.act_from_f32(1, vh, &x.a).unwrap();
    let mixed = be.act_from_f32(1, spec.conv_dim(), &x.mixed).unwrap();
    let batch = Batch::single(1, 100, 1);
    for fused in [false, true] {
        let (gpu, wall) = per_call_us(&be, 200, || {
            let inputs = GdnCoreInputs {
                mixed: be.gather_rows(&mixed, &[0]).unwrap(),
                z: &z,
                b: &b,
                a: &a,
            };
            let cw = core_weights(&w);
            let _ = if fused {
                be.gdn_core_fused(inputs, &cw, &mut st, &batch).unwrap()
            } else {
                gdn_core_composed(&be, inputs, &cw, &mut st, &batch).unwrap()
            };
        });
        let name = if fused { "fused" } else { "composed" };
        println!("timing gdn_core 16/32 x 128, batch 1, {name}: device {gpu:.2} us/call, wall {wall:.2} us/call (includes a one-row gather_rows copy of the input)");
    }
    let (heads, kv_heads, d) = (16, 2, 256);
    let rope = RopeSpec {
        rotary_dim: 64,
        theta: 10_000_000.0,
    };
    let pw = prep_weights(&be, d, 3);
    let spec = KvSpec::contiguous(1, kv_heads, d, 8192 + 1000);
    let data = prep_data(1, heads, kv_heads, d, 4);
    let mut q = be.act_from_f32(1, heads * d, &data[0]).unwrap();
    let mut k = be.act_from_f32(1, kv_heads * d, &data[1]).unwrap();
    let v = be.act_from_f32(1, kv_heads * d, &data[2]).unwrap();
    for fused in [false, true] {
        let mut cache = be.new_kv_cache(&spec).unwrap();
        let prompt = Batch::single(0, 0, 8192);
        let kp = be
            .act_from_f32(8192, kv_heads * d, &vec![0.1; 8192 * kv_heads * d])
            .unwrap();
        be.kv_write(&mut cache, &kp, &kp, &prompt).unwrap();
        let w = AttentionPrepWeights {
            q_norm: &pw.q_norm,
            k_norm: &pw.k_norm,
            eps: 1e-6,
            heads,
            kv_heads,
            head_dim: d,
            rope: &rope,
        };
        let mut len = 8192;
        let (gpu, wall) = per_call_us(&be, 200, || {
            let batch = Batch::single(0, len, 1);
            if fused {
                be.attention_prep_fused(&mut q, &mut k, &v, &w, &mut cache, &batch)
                    .unwrap()
            } else {
                attention_prep_composed(&be, &mut q, &mut k, &v, &w, &mut cache, &batch).unwrap()
            }
            len += 1;
        });
        let name = if fused { "fused" } else { "composed" };
        println!("timing attention_prep 16/2 x 256, batch 1, {name}: device {gpu:.2} us/call, wall {wall:.2} us/call");
    }
}
