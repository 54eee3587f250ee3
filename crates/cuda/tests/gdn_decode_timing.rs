//! Device time of the fused GDN decode step (`ops/gdn/gdn_decode.cu`) on the
//! 35B-A3B shape (16 key heads, 32 value heads, head dims 128: 2 MiB of f32
//! state per sequence) at 1, 2, 4, 8, 16, 64, 256 and 512 sequences (512: the kernel's
//! MAX_SEQS, W1's decode-only steps).
//! One line per sequence count, starting with `gdn_decode_timing:`:
//!   single   the median over 30 launches each between its own two events;
//!   stream   the mean over 200 launches queued back to back while a host
//!            function holds the stream (no launch gaps; programmatic
//!            launches overlap each other's start as in a decode step;
//!            each launch reads the state before it waits for the previous
//!            one, which writes it: in a model step the previous kernel is
//!            the input projection, here the values are not looked at);
//! and the bytes the launch moves over each (the state read and written,
//! the conv state, inputs and output). Nothing is asserted about the times.
//! Run by the lead on the GPU machine:
//! `gdn_decode_timing-* --ignored --nocapture`.

use cudarc::driver::result;
use half::bf16;
use headroom_core::ops::{Backend, Batch, GdnCoreInputs, GdnCoreWeights, GdnSpec};
use headroom_core::Tensor;
use headroom_cuda::backend::{CudaAct, CudaBackend};
use headroom_cuda::event::StreamEvent as Event;
use headroom_cuda::ops::gdn::decode::gdn_decode;
use rand::{Rng, SeedableRng};

const SAMPLES: usize = 30;
const STREAM_CALLS: usize = 200;

fn uniform(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let mut g = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| bf16::from_f32(lo + g.random::<f32>() * (hi - lo)).to_f32())
        .collect()
}

unsafe extern "C" fn hold_stream(_: *mut std::ffi::c_void) {
    std::thread::sleep(std::time::Duration::from_millis(50));
}

/// Holds the device stream for a while (queued launches then run back to back).
fn hold(be: &CudaBackend) {
    // SAFETY: the callback touches nothing; the stream is live.
    unsafe {
        result::stream::launch_host_function(
            be.device().stream_raw(),
            hold_stream,
            std::ptr::null_mut(),
        )
        .unwrap()
    };
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Bytes one launch moves for `n` sequences of `spec`.
fn bytes_moved(spec: &GdnSpec, n: usize) -> f64 {
    let vhd = spec.v_heads * spec.v_dim;
    let state = 2 * spec.v_heads * spec.k_dim * spec.v_dim * 4; // read + write, f32
    let conv = 2 * 3 * spec.conv_dim() * 2; // three rows read and written, bf16
    let io = (spec.conv_dim() + 2 * vhd + 2 * spec.v_heads) * 2; // mixed, z, out, a, b
    (n * (state + conv + io)) as f64
}

struct Setup {
    spec: GdnSpec,
    conv: headroom_cuda::backend::CudaWeight,
    a_log: headroom_cuda::backend::CudaWeight,
    dt_bias: headroom_cuda::backend::CudaWeight,
    norm: headroom_cuda::backend::CudaWeight,
    z: CudaAct,
    b: CudaAct,
    a: CudaAct,
    batch: Batch,
}

fn setup(be: &CudaBackend, n: usize) -> Setup {
    let spec = GdnSpec {
        slots: n,
        k_heads: 16,
        v_heads: 32,
        k_dim: 128,
        v_dim: 128,
        kernel: 4,
    };
    let vec = |s: u64, len: usize, lo: f32, hi: f32| {
        be.upload_vector(Tensor::from_f32(vec![len], uniform(s, len, lo, hi)))
            .unwrap()
    };
    let act = |s: u64, cols: usize| {
        be.act_from_f32(n, cols, &uniform(s, n * cols, -2.0, 2.0))
            .unwrap()
    };
    let vh = spec.v_heads;
    // Sequence i in slot n - 1 - i, 100 tokens of history.
    let seqs: Vec<(usize, usize, usize)> = (0..n).map(|i| (n - 1 - i, 100, 1)).collect();
    Setup {
        conv: vec(1, spec.conv_dim() * 4, -0.6, 0.6),
        a_log: vec(2, vh, -1.0, 1.5),
        dt_bias: vec(3, vh, -1.0, 1.0),
        norm: vec(4, spec.v_dim, 0.5, 1.5),
        z: act(6, vh * spec.v_dim),
        b: act(7, vh),
        a: act(8, vh),
        batch: Batch::packed(&seqs),
        spec,
    }
}

/// `(single, stream)` µs per launch on `x`.
fn time_launch(be: &CudaBackend, x: &Setup) -> (f64, f64) {
    let n = x.batch.sequences();
    let mut st = be.new_gdn_state(&x.spec).unwrap();
    let inputs = GdnCoreInputs {
        mixed: be
            .act_from_f32(
                n,
                x.spec.conv_dim(),
                &uniform(5, n * x.spec.conv_dim(), -2.0, 2.0),
            )
            .unwrap(),
        z: &x.z,
        b: &x.b,
        a: &x.a,
    };
    let w = GdnCoreWeights {
        conv: &x.conv,
        a_log: &x.a_log,
        dt_bias: &x.dt_bias,
        norm: &x.norm,
        eps: 1e-6,
    };
    let mut call = || {
        gdn_decode(be.device(), &inputs, &w, &mut st, &x.batch).unwrap();
    };
    for _ in 0..3 {
        call();
    }
    be.synchronize().unwrap();
    hold(be);
    let events: Vec<(Event, Event)> = (0..SAMPLES)
        .map(|_| {
            let start = Event::record(be.device()).unwrap();
            call();
            (start, Event::record(be.device()).unwrap())
        })
        .collect();
    let single = median(
        events
            .iter()
            .map(|(s, e)| e.ms_since(s).unwrap() * 1e3)
            .collect(),
    );
    hold(be);
    let start = Event::record(be.device()).unwrap();
    for _ in 0..STREAM_CALLS {
        call();
    }
    let stream = Event::record(be.device())
        .unwrap()
        .ms_since(&start)
        .unwrap()
        * 1e3
        / STREAM_CALLS as f64;
    (single, stream)
}

#[test]
#[ignore = "needs a CUDA GPU: run by the lead on the H200 (gdn_decode_timing-* --ignored --nocapture)"]
fn gdn_decode_timing() {
    let be = CudaBackend::open(0).expect("a CUDA device");
    for n in [1usize, 2, 4, 8, 16, 64, 256, 512] {
        let x = setup(&be, n);
        let gb = bytes_moved(&x.spec, n) / 1e9;
        let (single, stream) = time_launch(&be, &x);
        println!(
            "gdn_decode_timing: n={n}: single median {single:.2} us ({:.0} GB/s), stream {stream:.2} us/launch ({:.0} GB/s), {:.1} MB moved",
            gb / (single * 1e-6),
            gb / (stream * 1e-6),
            gb * 1e3
        );
    }
}
