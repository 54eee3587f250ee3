//! The recording's bookkeeping against a scripted driver: which steps are
//! probed, captured, updated, instantiated, launched or queued as they
//! are, and what a failure at each stage does.

use super::*;
use std::cell::{Cell, RefCell};

/// A fake driver: graphs are the number of launches their capture saw,
/// an executable graph remembers the launch count it was made for (an
/// update to another count fails, as a topology change does).
#[derive(Default)]
struct Script {
    log: RefCell<Vec<String>>,
    capturing: Cell<bool>,
    /// Launches queued in the current capture.
    nodes: Cell<usize>,
    next_exec: Cell<u32>,
    fail_begin: Cell<bool>,
    fail_end: Cell<bool>,
    /// Updates fail whatever the node counts (another topology).
    fail_update: Cell<bool>,
    /// The signature of the captures (the kernels they launch).
    signature: Cell<u64>,
    /// The hash of the captured graphs' kernel nodes (a library's choice
    /// of functions and clusters).
    kernels: Cell<u64>,
    /// Calls that waited for the device (or were refused).
    waits: Cell<u64>,
    fail_launch: Cell<bool>,
}

#[derive(Debug)]
struct FakeExec {
    id: u32,
    nodes: usize,
}

impl Script {
    fn log(&self, s: impl Into<String>) {
        self.log.borrow_mut().push(s.into());
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.borrow_mut())
    }
    /// An op that waits for the device: refused while capturing, counted.
    fn wait(&self) -> Result<(), String> {
        self.waits.set(self.waits.get() + 1);
        if self.capturing.get() {
            return Err("a read of device memory waits for the device".into());
        }
        self.log("wait");
        Ok(())
    }
    /// What a step's op does: a launch (recorded or run).
    fn kernel(&self) {
        if self.capturing.get() {
            self.nodes.set(self.nodes.get() + 1);
        } else {
            self.log("run");
        }
    }
}

impl GraphDriver for Script {
    type Graph = usize;
    type Exec = FakeExec;
    type Flushed = ();

    fn waits(&self) -> u64 {
        self.waits.get()
    }
    fn begin(&self) -> Result<(), CudaError> {
        if self.fail_begin.get() {
            return Err(CudaError::Driver("no capture".into()));
        }
        self.capturing.set(true);
        self.nodes.set(0);
        self.log("begin");
        Ok(())
    }
    fn end(&self) -> Result<usize, CudaError> {
        self.capturing.set(false);
        self.log("end");
        if self.fail_end.get() {
            return Err(CudaError::Driver("capture invalidated".into()));
        }
        Ok(self.nodes.get())
    }
    fn nodes(&self, graph: &usize) -> Result<usize, CudaError> {
        Ok(*graph)
    }
    fn signature(&self) -> u64 {
        self.signature.get()
    }
    fn kernels(&self, _graph: &usize) -> Result<u64, CudaError> {
        Ok(self.kernels.get())
    }
    fn flush(&self) -> Result<(), CudaError> {
        self.log("flush");
        Ok(())
    }
    fn update(&self, exec: &mut FakeExec, graph: &usize) -> Result<bool, CudaError> {
        let ok = exec.nodes == *graph && !self.fail_update.get();
        self.log(format!(
            "update {} {}",
            exec.id,
            if ok { "ok" } else { "fails" }
        ));
        Ok(ok)
    }
    fn instantiate(&self, graph: &usize) -> Result<FakeExec, CudaError> {
        let id = self.next_exec.get();
        self.next_exec.set(id + 1);
        self.log(format!("instantiate {id}"));
        Ok(FakeExec { id, nodes: *graph })
    }
    fn launch(&self, exec: &FakeExec) -> Result<(), CudaError> {
        if self.fail_launch.get() {
            return Err(CudaError::Driver("launch failed".into()));
        }
        self.log(format!("launch {} ({} nodes)", exec.id, exec.nodes));
        Ok(())
    }
}

fn key(rows: usize) -> StepKey {
    StepKey {
        rows,
        sequences: rows,
        drawn_ids: false,
    }
}

/// A step of `kernels` launches returning `rows`.
fn step(
    g: &StepGraphs<FakeExec>,
    d: &Script,
    rows: usize,
    kernels: usize,
) -> OpResult<Result<usize, String>> {
    g.queue(d, key(rows), || {
        for _ in 0..kernels {
            d.kernel();
        }
        Ok::<_, String>(rows)
    })
}

/// Recording on, and the first (probing) step of each key of `rows`
/// queued and its log cleared.
fn on_with(rows: &[usize]) -> (StepGraphs<FakeExec>, Script) {
    let (g, d) = (StepGraphs::default(), Script::default());
    g.set_on(true);
    for &r in rows {
        step(&g, &d, r, 1).unwrap().unwrap();
    }
    d.take();
    (g, d)
}

/// The log's lines that start with one of `what`.
fn only(log: Vec<String>, what: &[&str]) -> Vec<String> {
    log.into_iter()
        .filter(|l| what.iter().any(|w| l.starts_with(w)))
        .collect()
}

#[test]
fn off_queues_the_step_as_it_is() {
    let (g, d) = (StepGraphs::default(), Script::default());
    assert_eq!(step(&g, &d, 1, 2).unwrap(), Ok(1));
    assert_eq!(d.take(), ["run", "run"]);
    assert_eq!(g.stats(), GraphStats::default());
}

#[test]
fn a_key_is_probed_once_then_instantiates_once_then_updates_its_graph() {
    let (g, d) = (StepGraphs::default(), Script::default());
    g.set_on(true);
    assert_eq!(step(&g, &d, 1, 3).unwrap(), Ok(1));
    assert_eq!(d.take(), ["run", "run", "run"], "the first step as it is");
    assert_eq!(step(&g, &d, 1, 3).unwrap(), Ok(1));
    assert_eq!(
        d.take(),
        [
            "begin",
            "end",
            "flush",
            "instantiate 0",
            "launch 0 (3 nodes)"
        ]
    );
    assert_eq!(step(&g, &d, 1, 3).unwrap(), Ok(1));
    assert_eq!(
        d.take(),
        ["begin", "end", "flush", "update 0 ok", "launch 0 (3 nodes)"]
    );
    // Another shape gets its own graph after its probe; the first is kept.
    step(&g, &d, 2, 5).unwrap().unwrap();
    assert_eq!(d.take().len(), 5, "probed: five runs");
    step(&g, &d, 2, 5).unwrap().unwrap();
    assert_eq!(d.take()[3..], ["instantiate 1", "launch 1 (5 nodes)"]);
    step(&g, &d, 1, 3).unwrap().unwrap();
    assert_eq!(d.take()[3..], ["update 0 ok", "launch 0 (3 nodes)"]);
    let s = g.stats();
    assert_eq!(
        (s.probed, s.launched, s.updated, s.instantiated),
        (2, 4, 2, 2)
    );
}

#[test]
fn a_key_whose_first_step_waits_is_never_recorded() {
    let (g, d) = (StepGraphs::default(), Script::default());
    g.set_on(true);
    let waiting = |g: &StepGraphs<FakeExec>| {
        g.queue(&d, key(7), || {
            d.kernel();
            d.wait()?;
            Ok::<_, String>(7)
        })
    };
    assert_eq!(waiting(&g).unwrap(), Ok(7));
    assert_eq!(waiting(&g).unwrap(), Ok(7));
    assert_eq!(
        d.take(),
        ["run", "wait", "run", "wait"],
        "both as they are, no capture"
    );
    let s = g.stats();
    assert_eq!(
        (s.probed, s.refused_keys, s.eager, s.launched),
        (1, 1, 1, 0)
    );
}

#[test]
fn steps_of_other_keys_but_as_many_nodes_update_one_graph() {
    let (g, d) = on_with(&[2, 3, 4]);
    // A decode batch that gains and loses sequences: other keys, the same launches.
    for rows in [3, 4, 3, 2] {
        step(&g, &d, rows, 6).unwrap().unwrap();
    }
    assert_eq!(
        only(d.take(), &["instantiate", "update"]),
        ["instantiate 0", "update 0 ok", "update 0 ok", "update 0 ok"]
    );
}

/// Four steps of one key and as many launches, `set` giving the captures
/// two alternating values of something a graph is kept by: each value
/// keeps a graph of its own, updated only to captures of that value.
fn two_alternating_captures(set: impl Fn(&Script, u64)) -> (StepGraphs<FakeExec>, Script) {
    let (g, d) = on_with(&[4]);
    for value in [1, 2, 1, 2] {
        set(&d, value);
        step(&g, &d, 4, 6).unwrap().unwrap();
    }
    assert_eq!(
        only(d.take(), &["instantiate", "update"]),
        [
            "instantiate 0",
            "instantiate 1",
            "update 0 ok",
            "update 1 ok"
        ],
        "no update across the two values, both graphs kept"
    );
    (g, d)
}

#[test]
fn captures_of_other_kernels_keep_their_own_graphs() {
    let (g, _) = two_alternating_captures(|d, sig| d.signature.set(sig));
    assert_eq!(g.stats().kernels_changed, 0, "other capture signatures");
}

#[test]
fn captures_whose_library_kernels_differ_are_never_updated_into_each_other() {
    let (g, d) = two_alternating_captures(|d, kernels| d.kernels.set(kernels));
    let s = g.stats();
    assert_eq!(
        (s.instantiated, s.kernels_changed, s.updated),
        (2, 1, 2),
        "the second graph is counted as the kernels' doing: {s:?}"
    );
    d.signature.set(3);
    step(&g, &d, 4, 6).unwrap().unwrap();
    assert_eq!(
        g.stats().kernels_changed,
        1,
        "another capture signature is not the kernels' doing"
    );
}

#[test]
fn a_capture_its_graph_cannot_take_instantiates_a_new_one() {
    let (g, d) = on_with(&[4]);
    step(&g, &d, 4, 3).unwrap().unwrap();
    d.take();
    d.fail_update.set(true);
    step(&g, &d, 4, 3).unwrap().unwrap();
    assert_eq!(
        d.take()[3..],
        ["update 0 fails", "instantiate 1", "launch 1 (3 nodes)"]
    );
    d.fail_update.set(false);
    step(&g, &d, 4, 3).unwrap().unwrap();
    assert_eq!(d.take()[3..], ["update 1 ok", "launch 1 (3 nodes)"]);
    let s = g.stats();
    assert_eq!((s.instantiated, s.updated), (2, 1));
}

#[test]
fn only_the_last_kept_shapes_keep_their_graphs() {
    let (g, d) = on_with(&[1]);
    for nodes in 1..=KEPT + 1 {
        step(&g, &d, 1, nodes).unwrap().unwrap();
    }
    d.take();
    step(&g, &d, 1, 1).unwrap().unwrap();
    assert_eq!(
        only(d.take(), &["instantiate", "update"]),
        ["instantiate 9"],
        "the oldest shape's graph was dropped"
    );
    step(&g, &d, 1, KEPT + 1).unwrap().unwrap();
    assert_eq!(only(d.take(), &["instantiate", "update"]), ["update 8 ok"]);
}

#[test]
fn a_wait_met_inside_a_capture_fails_that_step_and_refuses_its_key() {
    let (g, d) = on_with(&[3, 5]);
    let out = g
        .queue(&d, key(3), || {
            d.kernel();
            d.wait()?;
            Ok::<usize, String>(3)
        })
        .unwrap();
    assert_eq!(
        out,
        Err("a read of device memory waits for the device".into())
    );
    assert_eq!(d.take(), ["begin", "end", "flush"], "nothing launched");
    assert_eq!(step(&g, &d, 3, 2).unwrap(), Ok(3));
    assert_eq!(d.take(), ["run", "run"], "the key runs without a graph");
    // Other keys still record.
    step(&g, &d, 5, 1).unwrap().unwrap();
    assert!(d.take().contains(&"launch 0 (1 nodes)".to_string()));
    let s = g.stats();
    assert_eq!((s.refused_keys, s.eager, s.launched), (1, 1, 1));
    assert!(g.on());
}

#[test]
fn a_driver_failure_fails_the_step_and_turns_the_recording_off() {
    for stage in ["begin", "end", "launch"] {
        let (g, d) = on_with(&[1]);
        d.fail_begin.set(stage == "begin");
        d.fail_end.set(stage == "end");
        d.fail_launch.set(stage == "launch");
        let err = step(&g, &d, 1, 2).unwrap_err().to_string();
        assert!(
            err.contains("CUDA graphs") && err.contains("--cuda-graphs off"),
            "{stage}: {err}"
        );
        assert!(!g.on(), "{stage}: off after the failure");
        if stage != "begin" {
            assert!(
                d.take().contains(&"flush".to_string()),
                "{stage}: tables still queued"
            );
        }
        d.fail_begin.set(false);
        d.fail_end.set(false);
        d.fail_launch.set(false);
        d.take();
        assert_eq!(step(&g, &d, 1, 2).unwrap(), Ok(1));
        assert_eq!(
            d.take(),
            ["run", "run"],
            "{stage}: later steps run as they are"
        );
    }
}

#[test]
fn turning_the_recording_off_drops_the_kept_graphs() {
    let (g, d) = on_with(&[1]);
    step(&g, &d, 1, 1).unwrap().unwrap();
    g.set_on(false);
    g.set_on(true);
    d.take();
    step(&g, &d, 1, 1).unwrap().unwrap();
    assert_eq!(
        only(d.take(), &["instantiate", "update"]),
        ["instantiate 1"]
    );
}

#[test]
fn a_step_that_panics_while_captured_ends_the_capture() {
    let (g, d) = on_with(&[1]);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        g.queue(&d, key(1), || -> Result<usize, String> {
            d.kernel();
            panic!("an op panicked")
        })
    }));
    assert!(caught.is_err());
    assert_eq!(d.take(), ["begin", "end", "flush"]);
    assert!(!d.capturing.get(), "the stream is not left capturing");
}

#[test]
fn with_updates_off_every_capture_instantiates_its_own_graph() {
    let (g, d) = on_with(&[1]);
    g.set_updates(false);
    for _ in 0..3 {
        step(&g, &d, 1, 2).unwrap().unwrap();
    }
    assert_eq!(
        only(d.take(), &["instantiate", "update"]),
        ["instantiate 0", "instantiate 1", "instantiate 2"]
    );
    assert_eq!(g.stats().updated, 0);
}
