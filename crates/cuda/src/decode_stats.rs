//! The decode statistics ([`crate::config::CudaOptions::decode_stats`]):
//! where a step's wall time goes, measured at the
//! one host synchronisation of a step (the sampled tokens' read-back). Each
//! step's wall time (sample to sample) splits into the host's time to queue
//! the step and the wait for the GPU to finish it: a wait near zero means the
//! host is the bound (launch overhead), a long wait means the GPU is. Of the
//! host's time, the part spent inside the driver's launch calls (`launch.rs`)
//! and inside cuBLAS calls (`dense::linear`) is timed too. Every 16 decode
//! steps one line goes to stderr with the means per step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Kernels launched through `crate::launch` since the process started (cuBLAS,
/// the grouped MoE and the attention launchers count elsewhere): the decode
/// statistics report the count per step.
pub(crate) static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// Host nanoseconds inside the driver's kernel-launch calls (with stats on).
pub(crate) static LAUNCH_NS: AtomicU64 = AtomicU64::new(0);
/// Host nanoseconds inside cuBLAS calls, and their number (with stats on).
pub(crate) static BLAS_NS: AtomicU64 = AtomicU64::new(0);
pub(crate) static BLAS_CALLS: AtomicU64 = AtomicU64::new(0);

/// Steps per reported window.
const WINDOW_STEPS: u32 = 16;
/// A step longer than this is not a decode step (a prefill).
const LONG_STEP_US: f64 = 100_000.0;

/// Runs `f`, adding its host time to `counter` when the stats are `on`.
pub(crate) fn timed<T>(on: bool, counter: &AtomicU64, f: impl FnOnce() -> T) -> T {
    if !on {
        return f();
    }
    let started = Instant::now();
    let out = f();
    counter.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
    out
}

/// The counters at a window's start.
#[derive(Clone, Copy)]
struct Counters {
    launches: u64,
    launch_ns: u64,
    blas_ns: u64,
    blas_calls: u64,
}

impl Counters {
    const ZERO: Counters = Counters {
        launches: 0,
        launch_ns: 0,
        blas_ns: 0,
        blas_calls: 0,
    };
    fn now() -> Counters {
        Counters {
            launches: LAUNCHES.load(Ordering::Relaxed),
            launch_ns: LAUNCH_NS.load(Ordering::Relaxed),
            blas_ns: BLAS_NS.load(Ordering::Relaxed),
            blas_calls: BLAS_CALLS.load(Ordering::Relaxed),
        }
    }
}

struct Window {
    last: Option<Instant>,
    start: Counters,
    steps: u32,
    wall_us: f64,
    wait_us: f64,
}

static WINDOW: Mutex<Window> = Mutex::new(Window {
    last: None,
    start: Counters::ZERO,
    steps: 0,
    wall_us: 0.0,
    wait_us: 0.0,
});

/// Called after the read-back that began (waiting) at `queued` (nothing
/// unless the stats are `on`).
pub(crate) fn step_done(on: bool, queued: Instant) {
    if !on {
        return;
    }
    let now = Instant::now();
    let mut w = WINDOW.lock().unwrap_or_else(|p| p.into_inner());
    let counters = Counters::now();
    let wall = w.last.map(|l| (now - l).as_secs_f64() * 1e6);
    w.last = Some(now);
    match wall {
        // A prefill (or the first call): start a new window.
        None => {}
        Some(us) if us > LONG_STEP_US => {}
        Some(us) => {
            w.steps += 1;
            w.wall_us += us;
            w.wait_us += (now - queued).as_secs_f64() * 1e6;
            if w.steps < WINDOW_STEPS {
                return;
            }
        }
    }
    if w.steps == WINDOW_STEPS {
        let n = w.steps as f64;
        let per = |a: u64, b: u64| (a - b) as f64 / n;
        eprintln!(
            "decode stats: step {:.1} us = host queue {:.1} us + wait for the GPU {:.1} us; \
             {:.0} launches/step (launch.rs) taking {:.1} us in the driver, \
             {:.0} cuBLAS calls/step taking {:.1} us",
            w.wall_us / n,
            (w.wall_us - w.wait_us) / n,
            w.wait_us / n,
            per(counters.launches, w.start.launches),
            per(counters.launch_ns, w.start.launch_ns) / 1e3,
            per(counters.blas_calls, w.start.blas_calls),
            per(counters.blas_ns, w.start.blas_ns) / 1e3,
        );
    }
    w.steps = 0;
    w.wall_us = 0.0;
    w.wait_us = 0.0;
    w.start = counters;
}
