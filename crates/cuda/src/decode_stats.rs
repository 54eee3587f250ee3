//! The decode statistics ([`crate::config::CudaOptions::decode_stats`]):
//! where a step's wall time goes, measured at the
//! one host synchronisation of a step (the sampled tokens' read-back). Each
//! step's wall time (sample to sample) splits into the host's time to queue
//! the step and the wait for the GPU to finish it: a wait near zero means the
//! host is the bound (launch overhead), a long wait means the GPU is. Of the
//! host's time, every kernel launch of the device is counted and its driver
//! call timed (`CudaDevice::launch`); the launches of `launch.rs` are also
//! timed whole (function lookup, argument packing, driver call); cuBLAS
//! calls (`dense::linear`) are counted and timed. Every 16 decode steps one
//! line goes to stderr with the means per step, per launch and per sequence
//! of the step (the rows sampled: an all-decode step samples one row per
//! running sequence), so issue 23's bar (host work per running sequence per
//! step) is read from the engine itself. Launches are counted and timed
//! only with the statistics on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Kernel launches of the device (`CudaDevice::launch` and
/// `launch_programmatic`: the ops' launch path and the launchers that call
/// the device directly), and the host nanoseconds inside their driver calls.
pub(crate) static LAUNCHES: AtomicU64 = AtomicU64::new(0);
pub(crate) static LAUNCH_NS: AtomicU64 = AtomicU64::new(0);
/// Launches through `crate::launch`, and the host nanoseconds of their whole
/// path there, driver call included.
pub(crate) static OP_LAUNCHES: AtomicU64 = AtomicU64::new(0);
pub(crate) static OP_LAUNCH_NS: AtomicU64 = AtomicU64::new(0);
/// Host nanoseconds inside cuBLAS calls, and their number.
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

/// [`timed`], also counting one call in `calls` when the stats are `on`.
pub(crate) fn counted<T>(
    on: bool,
    calls: &AtomicU64,
    counter: &AtomicU64,
    f: impl FnOnce() -> T,
) -> T {
    if on {
        calls.fetch_add(1, Ordering::Relaxed);
    }
    timed(on, counter, f)
}

/// The counters at a window's start.
#[derive(Clone, Copy)]
struct Counters {
    launches: u64,
    launch_ns: u64,
    op_launches: u64,
    op_launch_ns: u64,
    blas_ns: u64,
    blas_calls: u64,
}

impl Counters {
    const ZERO: Counters = Counters {
        launches: 0,
        launch_ns: 0,
        op_launches: 0,
        op_launch_ns: 0,
        blas_ns: 0,
        blas_calls: 0,
    };
    fn now() -> Counters {
        Counters {
            launches: LAUNCHES.load(Ordering::Relaxed),
            launch_ns: LAUNCH_NS.load(Ordering::Relaxed),
            op_launches: OP_LAUNCHES.load(Ordering::Relaxed),
            op_launch_ns: OP_LAUNCH_NS.load(Ordering::Relaxed),
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
    /// Rows sampled in the window's steps.
    rows: u64,
}

static WINDOW: Mutex<Window> = Mutex::new(Window {
    last: None,
    start: Counters::ZERO,
    steps: 0,
    wall_us: 0.0,
    wait_us: 0.0,
    rows: 0,
});

/// Called after the read-back of `rows` sampled tokens that began (waiting)
/// at `queued` (nothing unless the stats are `on`).
pub(crate) fn step_done(on: bool, queued: Instant, rows: usize) {
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
            w.rows += rows as u64;
            if w.steps < WINDOW_STEPS {
                return;
            }
        }
    }
    if w.steps == WINDOW_STEPS {
        eprintln!("{}", line(&w, &counters));
    }
    w.steps = 0;
    w.wall_us = 0.0;
    w.wait_us = 0.0;
    w.rows = 0;
    w.start = counters;
}

/// The report of a full window that ends at `now`'s counters.
fn line(w: &Window, now: &Counters) -> String {
    let steps = f64::from(w.steps.max(1));
    let d = |a: u64, b: u64| a.saturating_sub(b) as f64;
    let per_us = |ns: f64, n: f64| if n > 0.0 { ns / n / 1e3 } else { 0.0 };
    let launches = d(now.launches, w.start.launches);
    let op_launches = d(now.op_launches, w.start.op_launches);
    let host_us = (w.wall_us - w.wait_us) / steps;
    let seqs = w.rows as f64 / steps;
    format!(
        "decode stats: step {:.1} us = host queue {:.1} us + wait for the GPU {:.1} us; \
         {:.1} sequences/step, host {:.2} us per sequence; \
         {:.0} launches/step at {:.2} us each in the driver, \
         {:.0} of them through launch.rs at {:.2} us each on its whole path; \
         {:.0} cuBLAS calls/step taking {:.1} us",
        w.wall_us / steps,
        host_us,
        w.wait_us / steps,
        seqs,
        if seqs > 0.0 { host_us / seqs } else { 0.0 },
        launches / steps,
        per_us(d(now.launch_ns, w.start.launch_ns), launches),
        op_launches / steps,
        per_us(d(now.op_launch_ns, w.start.op_launch_ns), op_launches),
        d(now.blas_calls, w.start.blas_calls) / steps,
        d(now.blas_ns, w.start.blas_ns) / steps / 1e3,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_gives_means_per_step_launch_and_sequence() {
        let w = Window {
            last: None,
            start: Counters {
                launches: 100,
                launch_ns: 0,
                op_launches: 10,
                op_launch_ns: 1_000,
                blas_ns: 0,
                blas_calls: 0,
            },
            steps: 16,
            wall_us: 16.0 * 1000.0,
            wait_us: 16.0 * 600.0,
            rows: 16 * 8,
        };
        let now = Counters {
            launches: 100 + 16 * 60,
            launch_ns: 16 * 60 * 2_000,
            op_launches: 10 + 16 * 50,
            op_launch_ns: 1_000 + 16 * 50 * 3_000,
            blas_ns: 16 * 4_000,
            blas_calls: 16 * 2,
        };
        let l = line(&w, &now);
        for part in [
            "step 1000.0 us = host queue 400.0 us + wait for the GPU 600.0 us",
            "8.0 sequences/step, host 50.00 us per sequence",
            "60 launches/step at 2.00 us each in the driver",
            "50 of them through launch.rs at 3.00 us each on its whole path",
            "2 cuBLAS calls/step taking 4.0 us",
        ] {
            assert!(l.contains(part), "{part:?} not in {l:?}");
        }
    }

    #[test]
    fn an_empty_window_divides_by_nothing() {
        let w = Window {
            last: None,
            start: Counters::ZERO,
            steps: 0,
            wall_us: 0.0,
            wait_us: 0.0,
            rows: 0,
        };
        let l = line(&w, &Counters::ZERO);
        assert!(!l.contains("NaN") && !l.contains("inf"), "{l}");
    }

    #[test]
    fn counted_counts_only_when_on() {
        let (calls, ns) = (AtomicU64::new(0), AtomicU64::new(0));
        assert_eq!(counted(false, &calls, &ns, || 3), 3);
        assert_eq!(calls.load(Ordering::Relaxed), 0);
        counted(true, &calls, &ns, || ());
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn timed_adds_only_when_on() {
        let c = AtomicU64::new(0);
        assert_eq!(timed(false, &c, || 7), 7);
        assert_eq!(c.load(Ordering::Relaxed), 0);
        timed(true, &c, || {
            std::thread::sleep(std::time::Duration::from_millis(1))
        });
        assert!(c.load(Ordering::Relaxed) >= 1_000_000);
    }
}
