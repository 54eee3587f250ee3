//! The decode statistics ([`crate::config::CudaOptions::decode_stats`]):
//! where a step's wall time goes, measured at the
//! one host synchronisation of a step (the sampled tokens' read-back). Each
//! step's wall time (sample to sample) splits into the host's time to queue
//! the step and the wait for the GPU to finish it; and, on the device's own
//! clock (two CUDA events a step: one at the step's first launch, one after
//! its last kernel, before the read-back), into the GPU's span from the
//! step's first launch to its end and the GPU's idle time between the end of
//! one step and the first launch of the next (what the host spends between
//! the read-back and its next launch: bookkeeping, scheduling, uploads). A
//! wait near zero means the
//! host is the bound (launch overhead), a long wait means the GPU is. Of the
//! host's time, every kernel launch of the device is counted and its driver
//! call timed (`CudaDevice::launch`); the launches of `launch.rs` are also
//! timed whole (function lookup, argument packing, driver call); cuBLAS
//! calls (`dense::linear`) are counted and timed. Every 16 decode steps one
//! line goes to stderr with the means per step, per launch and per sequence
//! of the step (the rows sampled: an all-decode step samples one row per
//! running sequence), so issue 23's bar (host work per running sequence per
//! step) is read from the engine itself. With CUDA graphs on (`crate::graph`)
//! a step's launches are captured into its graph (counted and timed the same
//! way: the host's cost of a captured launch) and the graph's launch is
//! counted and timed apart. Launches are counted and timed only with the
//! statistics on.

use crate::event::{EventStream, StreamEvent};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
/// Steps launched as CUDA graphs (`crate::graph`), and the host
/// nanoseconds of their `cuGraphLaunch` calls.
pub(crate) static GRAPH_LAUNCHES: AtomicU64 = AtomicU64::new(0);
pub(crate) static GRAPH_NS: AtomicU64 = AtomicU64::new(0);
/// Host nanoseconds of making those graphs launchable: ending the capture,
/// instantiating an executable graph, queueing the held tables…
pub(crate) static GRAPH_BUILD_NS: AtomicU64 = AtomicU64::new(0);
/// …and updating a kept executable graph to the capture.
pub(crate) static GRAPH_UPDATE_NS: AtomicU64 = AtomicU64::new(0);

/// Set at a step's read-back: the next launch records the next step's
/// start event.
static WANT_START: AtomicBool = AtomicBool::new(false);
/// Host nanoseconds from a step's read-back to the next step's first
/// launch, summed, and the steps summed.
static HOST_GAP_NS: AtomicU64 = AtomicU64::new(0);
static HOST_GAPS: AtomicU64 = AtomicU64::new(0);

/// The device-clock events of the step in flight and the last one's end.
struct Probe {
    /// The previous step's end (its argmax done).
    prev_end: Option<StreamEvent>,
    /// This step's first launch.
    start: Option<StreamEvent>,
    /// This step's end, recorded when its read-back is queued.
    end: Option<StreamEvent>,
    /// The events of the step read before, measured at the next read-back:
    /// with the step overlap the stream holds the next step by a read-back,
    /// and waiting for the events of the step just queued would stall it.
    pending: Option<(Option<StreamEvent>, Option<StreamEvent>)>,
    /// When the last read-back returned (host clock).
    read_at: Option<Instant>,
}

static PROBE: Mutex<Probe> = Mutex::new(Probe {
    prev_end: None,
    start: None,
    end: None,
    pending: None,
    read_at: None,
});

/// Before a launch on `dev` (stats `on`): the first launch after a step's
/// read-back records the next step's start event on the stream first (the
/// stream is idle then, so the event's time is the launch's). Not called
/// for a launch captured into a graph (`CudaDevice::launch`): the graph's
/// launch records it.
pub(crate) fn before_launch(on: bool, dev: &impl EventStream) {
    if on && WANT_START.swap(false, Ordering::Relaxed) {
        let mut p = PROBE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = p.read_at.take() {
            HOST_GAP_NS.fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            HOST_GAPS.fetch_add(1, Ordering::Relaxed);
        }
        p.start = StreamEvent::record(dev).ok();
    }
}

/// Before a step's read-back (stats `on`): the step's end event.
pub(crate) fn before_readback(on: bool, dev: &impl EventStream) {
    if on {
        let mut p = PROBE.lock().unwrap_or_else(|p| p.into_inner());
        p.end = StreamEvent::record(dev).ok();
    }
}

/// After a read-back: (GPU span of a step, GPU idle before it) in µs where
/// both events of each were recorded, for the step of the previous
/// read-back (its events are done: no wait on the step in flight); its end
/// becomes the next measured step's `prev_end`.
fn probe_step() -> (Option<f64>, Option<f64>) {
    let mut p = PROBE.lock().unwrap_or_else(|p| p.into_inner());
    let queued = (p.start.take(), p.end.take());
    let (start, end) = p.pending.replace(queued).unwrap_or((None, None));
    let ms = |a: &Option<StreamEvent>, b: &Option<StreamEvent>| match (a, b) {
        (Some(a), Some(b)) => b.ms_since(a).ok().map(|ms| ms * 1e3),
        _ => None,
    };
    let span = ms(&start, &end);
    let idle = ms(&p.prev_end, &start);
    p.prev_end = end;
    p.read_at = Some(Instant::now());
    WANT_START.store(true, Ordering::Relaxed);
    (span, idle)
}

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
    host_gap_ns: u64,
    host_gaps: u64,
    graph_launches: u64,
    graph_ns: u64,
    graph_build_ns: u64,
    graph_update_ns: u64,
}

impl Counters {
    const ZERO: Counters = Counters {
        launches: 0,
        launch_ns: 0,
        op_launches: 0,
        op_launch_ns: 0,
        blas_ns: 0,
        blas_calls: 0,
        host_gap_ns: 0,
        host_gaps: 0,
        graph_launches: 0,
        graph_ns: 0,
        graph_build_ns: 0,
        graph_update_ns: 0,
    };
    fn now() -> Counters {
        Counters {
            launches: LAUNCHES.load(Ordering::Relaxed),
            launch_ns: LAUNCH_NS.load(Ordering::Relaxed),
            op_launches: OP_LAUNCHES.load(Ordering::Relaxed),
            op_launch_ns: OP_LAUNCH_NS.load(Ordering::Relaxed),
            blas_ns: BLAS_NS.load(Ordering::Relaxed),
            blas_calls: BLAS_CALLS.load(Ordering::Relaxed),
            host_gap_ns: HOST_GAP_NS.load(Ordering::Relaxed),
            host_gaps: HOST_GAPS.load(Ordering::Relaxed),
            graph_launches: GRAPH_LAUNCHES.load(Ordering::Relaxed),
            graph_ns: GRAPH_NS.load(Ordering::Relaxed),
            graph_build_ns: GRAPH_BUILD_NS.load(Ordering::Relaxed),
            graph_update_ns: GRAPH_UPDATE_NS.load(Ordering::Relaxed),
        }
    }
}

struct Window {
    last: Option<Instant>,
    start: Counters,
    steps: u32,
    wall_us: f64,
    wait_us: f64,
    /// GPU span and idle time of the window's steps that had both events
    /// (`probed` of them).
    span_us: f64,
    idle_us: f64,
    probed: u32,
    /// Rows sampled in the window's steps.
    rows: u64,
}

static WINDOW: Mutex<Window> = Mutex::new(Window {
    last: None,
    start: Counters::ZERO,
    steps: 0,
    wall_us: 0.0,
    wait_us: 0.0,
    span_us: 0.0,
    idle_us: 0.0,
    probed: 0,
    rows: 0,
});

/// Called after the read-back of `rows` sampled tokens that began (waiting)
/// at `queued` (nothing unless the stats are `on`).
pub(crate) fn step_done(on: bool, queued: Instant, rows: usize) {
    if !on {
        return;
    }
    let now = Instant::now();
    let (span, idle) = probe_step();
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
            if let (Some(span), Some(idle)) = (span, idle) {
                w.span_us += span;
                w.idle_us += idle;
                w.probed += 1;
            }
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
    w.span_us = 0.0;
    w.idle_us = 0.0;
    w.probed = 0;
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
    let probed = f64::from(w.probed.max(1));
    format!(
        "decode stats: step {:.1} us = host queue {:.1} us + wait for the GPU {:.1} us; \
         on the GPU's clock ({} steps) {:.1} us from the step's first launch to its end \
         + {:.1} us idle before it, of which {:.1} us on the host from the read-back to the first launch; \
         {:.1} sequences/step, host {:.2} us per sequence; \
         {:.0} launches/step at {:.2} us each in the driver, \
         {:.0} of them through launch.rs at {:.2} us each on its whole path; \
         {:.0} cuBLAS calls/step taking {:.1} us; \
         {:.2} CUDA graph launches/step at {:.1} us each, \
         {:.1} us/step updating their graphs, {:.1} us/step ending their captures, \
         instantiating graphs and queueing their tables",
        w.wall_us / steps,
        host_us,
        w.wait_us / steps,
        w.probed,
        w.span_us / probed,
        w.idle_us / probed,
        per_us(
            d(now.host_gap_ns, w.start.host_gap_ns),
            d(now.host_gaps, w.start.host_gaps)
        ),
        seqs,
        if seqs > 0.0 { host_us / seqs } else { 0.0 },
        launches / steps,
        per_us(d(now.launch_ns, w.start.launch_ns), launches),
        op_launches / steps,
        per_us(d(now.op_launch_ns, w.start.op_launch_ns), op_launches),
        d(now.blas_calls, w.start.blas_calls) / steps,
        d(now.blas_ns, w.start.blas_ns) / steps / 1e3,
        d(now.graph_launches, w.start.graph_launches) / steps,
        per_us(
            d(now.graph_ns, w.start.graph_ns),
            d(now.graph_launches, w.start.graph_launches)
        ),
        d(now.graph_update_ns, w.start.graph_update_ns) / steps / 1e3,
        d(now.graph_build_ns, w.start.graph_build_ns) / steps / 1e3,
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
                host_gap_ns: 0,
                host_gaps: 0,
                graph_launches: 4,
                graph_ns: 0,
                graph_build_ns: 0,
                graph_update_ns: 0,
            },
            steps: 16,
            wall_us: 16.0 * 1000.0,
            wait_us: 16.0 * 600.0,
            span_us: 15.0 * 950.0,
            idle_us: 15.0 * 50.0,
            probed: 15,
            rows: 16 * 8,
        };
        let now = Counters {
            launches: 100 + 16 * 60,
            launch_ns: 16 * 60 * 2_000,
            op_launches: 10 + 16 * 50,
            op_launch_ns: 1_000 + 16 * 50 * 3_000,
            blas_ns: 16 * 4_000,
            blas_calls: 16 * 2,
            host_gap_ns: 16 * 20_000,
            host_gaps: 16,
            graph_launches: 4 + 8,
            graph_ns: 8 * 12_500,
            graph_build_ns: 16 * 300_000,
            graph_update_ns: 16 * 120_000,
        };
        let l = line(&w, &now);
        for part in [
            "step 1000.0 us = host queue 400.0 us + wait for the GPU 600.0 us",
            "on the GPU's clock (15 steps) 950.0 us from the step's first launch to its end + 50.0 us idle before it, of which 20.0 us on the host from the read-back to the first launch",
            "8.0 sequences/step, host 50.00 us per sequence",
            "60 launches/step at 2.00 us each in the driver",
            "50 of them through launch.rs at 3.00 us each on its whole path",
            "2 cuBLAS calls/step taking 4.0 us",
            "0.50 CUDA graph launches/step at 12.5 us each, 120.0 us/step updating their graphs, 300.0 us/step ending their captures",
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
            span_us: 0.0,
            idle_us: 0.0,
            probed: 0,
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
