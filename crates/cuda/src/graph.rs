//! CUDA graphs of decode steps (issue 23 item 2; `--cuda-graphs`,
//! `Backend::queue_step`). A decode step queues ≈ 300 launches, ≈ 4.4 µs
//! each in the driver (`docs/perf/cuda-graphs.md`); recorded as a graph it
//! is one launch. Each step is captured from the stream as it is queued
//! today (the same ops, kernels and arguments: the same bits), and a kept
//! executable graph of as many nodes is updated in place to the new
//! capture (`cuGraphExecUpdate`: from step to step the arguments and grids
//! change, the launches do not — also when a decode batch gains or loses
//! a sequence) and launched — also while its previous launch still runs,
//! which the update does not wait for (H200, session 24:
//! `tests/graphs.rs`) — ; a capture no kept graph can take instantiates
//! a new one. Graphs are kept by their shape (node count and the capture's
//! signature: the kernels launched and the library calls' shape classes,
//! `device::capture`), the last [`KEPT`] shapes. A step's
//! [`StepKey`] names it in the logs and refusals. This is the llama.cpp scheme: the
//! capture still walks the ops on the host, but a captured launch is a
//! node appended to a graph, not a driver submission, and the device
//! receives the whole step at once.
//!
//! What a capture cannot contain is kept out of it (`device::capture`):
//! table copies are held and queued after the capture, ahead of the
//! graph; a call that waits for the device cannot be recorded, so the
//! first step of each key is queued as it is and the key is recorded from
//! its next step only if that first step waited for nothing (else it runs
//! without a graph from there on); a wait met inside a capture after all
//! fails that step's queueing (reported like a failed kernel) and refuses
//! its key; the allocator keeps its cached
//! blocks while capturing (recorded kernels name them). A capture, an
//! update, an instantiation or a launch that fails in the driver turns the
//! recording off for the process and fails the step, with the reason.

use crate::device::capture::{mix_word, Held, SIGNATURE_SEED};
use crate::device::CudaDevice;
use crate::CudaError;
use cudarc::driver::{result, sys};
use headroom_core::ops::{OpError, OpResult, StepKey};
use std::collections::HashSet;
use std::fmt::Display;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Executable graphs kept, one per shape, most recently launched first.
pub(crate) const KEPT: usize = 8;
/// Keys remembered as recordable (beyond, a key's steps keep being probed).
const KEYS_KEPT: usize = 4096;

/// What the recording did since the device opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GraphStats {
    /// Steps launched as a graph.
    pub launched: u64,
    /// Of them, launched from a kept graph updated to the step.
    pub updated: u64,
    /// Graphs instantiated (a capture no kept graph could be updated to).
    pub instantiated: u64,
    /// Of the instantiated, those a kept graph of as many nodes and the
    /// same capture signature would have taken, but whose kernel nodes run
    /// other functions or thread-block clusters (a library's own choice:
    /// `cuGraphExecUpdate` leaves a node's cluster shape stale, so such a
    /// graph is never updated into the other).
    pub kernels_changed: u64,
    /// Steps queued without a graph because their key was refused.
    pub eager: u64,
    /// First steps of a key, queued as they are to see whether they wait
    /// for the device.
    pub probed: u64,
    /// Keys refused (their steps run without a graph): their first step
    /// waited for the device, or a capture met a wait.
    pub refused_keys: u64,
}

/// The driver calls of a recording (the device's, a fake in tests).
pub(crate) trait GraphDriver {
    type Graph;
    type Exec;
    /// What [`GraphDriver::flush`] queued, kept until the graph is launched.
    type Flushed;
    /// Calls that waited for the device so far (`device::capture`).
    fn waits(&self) -> u64;
    /// Starts capturing the stream (nothing started on an error).
    fn begin(&self) -> Result<(), CudaError>;
    /// Ends the capture: its graph, or why the capture failed.
    fn end(&self) -> Result<Self::Graph, CudaError>;
    /// Nodes of `graph`.
    fn nodes(&self, graph: &Self::Graph) -> Result<usize, CudaError>;
    /// The signature of the capture last ended (`device::capture`).
    fn signature(&self) -> u64;
    /// A hash of `graph`'s kernel nodes, in node order: each one's function
    /// and thread-block cluster shape (what an update must not change).
    fn kernels(&self, graph: &Self::Graph) -> Result<u64, CudaError>;
    /// Queues the copies held during the capture (called after every
    /// [`GraphDriver::end`], whatever it returned).
    fn flush(&self) -> Result<Self::Flushed, CudaError>;
    /// Updates `exec` to `graph`'s launches: `false` where they differ in
    /// more than their arguments (then `exec` is not to be launched).
    fn update(&self, exec: &mut Self::Exec, graph: &Self::Graph) -> Result<bool, CudaError>;
    fn instantiate(&self, graph: &Self::Graph) -> Result<Self::Exec, CudaError>;
    fn launch(&self, exec: &Self::Exec) -> Result<(), CudaError>;
}

/// What a kept graph is found by: its node count, its capture's signature
/// and its kernel nodes' functions and clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    nodes: usize,
    signature: u64,
    kernels: u64,
}

struct Kept<X> {
    /// Executable graphs by their shape.
    execs: Vec<(Shape, X)>,
    /// Keys whose first step waited for nothing.
    clean: HashSet<StepKey>,
    refused: HashSet<StepKey>,
    stats: GraphStats,
}

/// The recording's switch, the kept graphs and the keys refused.
pub(crate) struct StepGraphs<X> {
    on: AtomicBool,
    /// Kept graphs are updated to new captures (else each instantiates).
    updates: AtomicBool,
    kept: Mutex<Kept<X>>,
}

impl<X> Default for StepGraphs<X> {
    fn default() -> Self {
        StepGraphs {
            on: AtomicBool::new(false),
            updates: AtomicBool::new(true),
            kept: Mutex::new(Kept {
                execs: Vec::new(),
                clean: HashSet::new(),
                refused: HashSet::new(),
                stats: GraphStats::default(),
            }),
        }
    }
}

impl<X> StepGraphs<X> {
    pub(crate) fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::Release);
        if !on {
            self.lock().execs.clear();
        }
    }

    pub(crate) fn set_updates(&self, on: bool) {
        self.updates.store(on, Ordering::Release);
    }

    pub(crate) fn on(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    pub(crate) fn stats(&self) -> GraphStats {
        self.lock().stats
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept<X>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues one step (`queue`) under `key`: as is while the recording is
    /// off, for `key`'s first step (counting its waits) or when `key` was
    /// refused; else captured, launched as a graph (see the module comment)
    /// and `queue`'s result returned.
    pub(crate) fn queue<D, T, E>(
        &self,
        d: &D,
        key: StepKey,
        queue: impl FnOnce() -> Result<T, E>,
    ) -> OpResult<Result<T, E>>
    where
        D: GraphDriver<Exec = X>,
        E: Display,
    {
        if !self.on() {
            return Ok(queue());
        }
        {
            let mut kept = self.lock();
            if kept.refused.contains(&key) {
                kept.stats.eager += 1;
                drop(kept);
                return Ok(queue());
            }
            if !kept.clean.contains(&key) {
                kept.stats.probed += 1;
                drop(kept);
                let before = d.waits();
                let out = queue();
                let waited = d.waits() != before;
                let mut kept = self.lock();
                if waited {
                    tracing::info!(
                        "decode steps of {key} wait for the device: they run without a CUDA graph"
                    );
                    kept.refused.insert(key);
                    kept.stats.refused_keys += 1;
                } else if kept.clean.len() < KEYS_KEPT {
                    kept.clean.insert(key);
                }
                return Ok(out);
            }
        }
        if let Err(e) = d.begin() {
            return Err(self.broken("start a capture", e));
        }
        let mut unwinding = EndOnUnwind { d, armed: true };
        let out = queue();
        unwinding.armed = false;
        let graph = d.end();
        let flushed = d.flush();
        let value = match out {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(
                    "a decode step of {key} could not be recorded as a CUDA graph ({e}); \
                     steps of its shape run without one"
                );
                let mut kept = self.lock();
                kept.clean.remove(&key);
                kept.refused.insert(key);
                kept.stats.refused_keys += 1;
                drop(kept);
                if let Err(fe) = flushed {
                    return Err(self.broken("queue the step's tables", fe));
                }
                return Ok(Err(e));
            }
        };
        let graph = graph.map_err(|e| self.broken("end the capture", e))?;
        let flushed = flushed.map_err(|e| self.broken("queue the step's tables", e))?;
        self.launch(d, &graph)?;
        drop(flushed);
        Ok(Ok(value))
    }

    /// Launches `graph` through the kept graph of its shape, updated, or a
    /// new one.
    fn launch<D: GraphDriver<Exec = X>>(&self, d: &D, graph: &D::Graph) -> OpResult<()> {
        let shape = Shape {
            nodes: d
                .nodes(graph)
                .map_err(|e| self.broken("count the step's nodes", e))?,
            signature: d.signature(),
            kernels: d
                .kernels(graph)
                .map_err(|e| self.broken("read the step's kernel nodes", e))?,
        };
        let mut kept = self.lock();
        let at = kept.execs.iter().position(|(s, _)| *s == shape);
        let kernels_changed = at.is_none()
            && kept
                .execs
                .iter()
                .any(|(s, _)| (s.nodes, s.signature) == (shape.nodes, shape.signature));
        let old = at
            .map(|i| kept.execs.remove(i).1)
            .filter(|_| self.updates.load(Ordering::Acquire));
        let exec = match old {
            Some(mut x) => match d.update(&mut x, graph) {
                Ok(true) => {
                    kept.stats.updated += 1;
                    Ok(x)
                }
                Ok(false) => {
                    drop(x);
                    kept.stats.instantiated += 1;
                    d.instantiate(graph)
                }
                Err(e) => Err(e),
            },
            None => {
                kept.stats.instantiated += 1;
                kept.stats.kernels_changed += u64::from(kernels_changed);
                d.instantiate(graph)
            }
        };
        let exec = match exec {
            Ok(x) => x,
            Err(e) => {
                drop(kept);
                return Err(self.broken("make the step's executable graph", e));
            }
        };
        if let Err(e) = d.launch(&exec) {
            drop(kept);
            return Err(self.broken("launch the step's graph", e));
        }
        kept.stats.launched += 1;
        kept.execs.insert(0, (shape, exec));
        kept.execs.truncate(KEPT);
        Ok(())
    }

    /// Turns the recording off after the driver failed to `what`; the
    /// step's error.
    fn broken(&self, what: &str, e: CudaError) -> OpError {
        self.set_on(false);
        tracing::error!("CUDA graphs: could not {what} ({e}); recording turned off");
        OpError::Device(format!(
            "CUDA graphs: could not {what} ({e}); the recording is off from here on \
             (--cuda-graphs off avoids it)"
        ))
    }
}

/// Ends a capture whose step panicked (the stream would stay capturing and
/// refuse all later work) and queues its held copies.
struct EndOnUnwind<'a, D: GraphDriver> {
    d: &'a D,
    armed: bool,
}

impl<D: GraphDriver> Drop for EndOnUnwind<'_, D> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.d.end();
            let _ = self.d.flush();
        }
    }
}

/// A captured graph (destroyed on drop).
pub(crate) struct Graph(sys::CUgraph);

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: made by cuStreamEndCapture, destroyed once.
        unsafe {
            let _ = sys::cuGraphDestroy(self.0);
        }
    }
}

/// An executable graph (destroyed on drop: the driver frees it after any
/// launch of it still in flight completes).
pub(crate) struct Exec(sys::CUgraphExec);

// SAFETY: graph handles may be used from any thread of their context; the
// kept graphs are used under `StepGraphs`' lock.
unsafe impl Send for Exec {}
unsafe impl Send for Graph {}

impl Drop for Exec {
    fn drop(&mut self) {
        // SAFETY: made by cuGraphInstantiateWithFlags, destroyed once.
        unsafe {
            let _ = sys::cuGraphExecDestroy(self.0);
        }
    }
}

/// The recording on a device's stream.
pub(crate) struct DeviceGraphs<'a>(pub &'a CudaDevice);

impl DeviceGraphs<'_> {
    /// `f`, its host time added to the decode statistics' graph building.
    fn timed<T>(&self, f: impl FnOnce() -> T) -> T {
        self.timed_in(&crate::decode_stats::GRAPH_BUILD_NS, f)
    }

    /// `f`, its host time added to `counter` of the decode statistics.
    fn timed_in<T>(&self, counter: &std::sync::atomic::AtomicU64, f: impl FnOnce() -> T) -> T {
        crate::decode_stats::timed(self.0.options().decode_stats, counter, f)
    }
}

impl GraphDriver for DeviceGraphs<'_> {
    type Graph = Graph;
    type Exec = Exec;
    type Flushed = Vec<Held>;

    fn waits(&self) -> u64 {
        self.0.capture().waits()
    }

    fn begin(&self) -> Result<(), CudaError> {
        let dev = self.0;
        dev.bind()?;
        dev.capture().start();
        dev.allocator().keep_cached(true);
        // SAFETY: the stream is live. Relaxed: this thread's allocations
        // (cuMemAlloc of the caching allocator) stay allowed while capturing.
        let begun = unsafe {
            result::stream::begin_capture(
                dev.stream_raw(),
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        };
        if let Err(e) = begun {
            let _ = dev.capture().finish();
            dev.allocator().keep_cached(false);
            return Err(e.into());
        }
        Ok(())
    }

    fn end(&self) -> Result<Graph, CudaError> {
        // SAFETY: the stream is capturing (`begin`).
        let g = self.timed(|| unsafe { result::stream::end_capture(self.0.stream_raw()) })?;
        if g.is_null() {
            return Err(CudaError::Driver("the capture gave no graph".into()));
        }
        Ok(Graph(g))
    }

    fn flush(&self) -> Result<Vec<Held>, CudaError> {
        let dev = self.0;
        let held = dev.capture().finish();
        dev.allocator().keep_cached(false);
        self.timed(|| {
            for h in held.iter().filter(|h| !h.bytes.is_empty()) {
                // SAFETY: `h.buf` holds `h.bytes` (checked when held); pageable
                // memory is staged before the call returns.
                unsafe { result::memcpy_htod_async(h.buf.ptr(), &h.bytes[..], dev.stream_raw())? };
            }
            Ok::<_, CudaError>(())
        })?;
        Ok(held)
    }

    fn nodes(&self, graph: &Graph) -> Result<usize, CudaError> {
        let mut n = 0usize;
        // SAFETY: the graph is live; a null array asks for the count only.
        unsafe { sys::cuGraphGetNodes(graph.0, std::ptr::null_mut(), &mut n) }.result()?;
        Ok(n)
    }

    fn signature(&self) -> u64 {
        self.0.capture().signature()
    }

    fn kernels(&self, graph: &Graph) -> Result<u64, CudaError> {
        // Every kernel this crate launches is named in the capture's
        // signature already; only a library call picks kernels unseen.
        if self.0.capture().library_calls() == 0 {
            return Ok(0);
        }
        self.timed(|| kernel_nodes_hash(graph))
    }

    fn update(&self, exec: &mut Exec, graph: &Graph) -> Result<bool, CudaError> {
        let mut info = std::mem::MaybeUninit::<sys::CUgraphExecUpdateResultInfo>::zeroed();
        // SAFETY: both handles are live; `info` is written by the call.
        let r = self.timed_in(&crate::decode_stats::GRAPH_UPDATE_NS, || unsafe {
            sys::cuGraphExecUpdate_v2(exec.0, graph.0, info.as_mut_ptr())
        });
        match r {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE => Ok(false),
            other => Err(CudaError::Driver(format!("cuGraphExecUpdate: {other:?}"))),
        }
    }

    fn instantiate(&self, graph: &Graph) -> Result<Exec, CudaError> {
        let mut exec = std::ptr::null_mut();
        // SAFETY: the graph is live; `exec` is written by the call.
        self.timed(|| unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph.0, 0) })
            .result()?;
        Ok(Exec(exec))
    }

    fn launch(&self, exec: &Exec) -> Result<(), CudaError> {
        let dev = self.0;
        crate::decode_stats::before_launch(dev.options().decode_stats, dev);
        crate::decode_stats::counted(
            dev.options().decode_stats,
            &crate::decode_stats::GRAPH_LAUNCHES,
            &crate::decode_stats::GRAPH_NS,
            // SAFETY: the executable graph and the stream are live.
            || unsafe { sys::cuGraphLaunch(exec.0, dev.stream_raw()) }.result(),
        )?;
        Ok(())
    }
}

/// [`GraphDriver::kernels`] of a captured graph: cuBLAS picks its kernels
/// (and their thread-block clusters) from a call's exact sizes, so two
/// captures of one step shape may differ in them; `cuGraphExecUpdate`
/// takes a new function but keeps the old cluster shape (reported for
/// cuBLASLt's GEMV on Blackwell, mlx issue 2748; on the H200 a lone decode
/// updated step after step gave other logits than eager, session 24), so
/// such a capture gets a graph of its own.
fn kernel_nodes_hash(graph: &Graph) -> Result<u64, CudaError> {
    let mut n = 0usize;
    // SAFETY: the graph is live; a null array asks for the count only.
    unsafe { sys::cuGraphGetNodes(graph.0, std::ptr::null_mut(), &mut n) }.result()?;
    let mut nodes: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); n];
    // SAFETY: `nodes` has room for `n` handles; the call writes at most `n`.
    unsafe { sys::cuGraphGetNodes(graph.0, nodes.as_mut_ptr(), &mut n) }.result()?;
    nodes.truncate(n);
    let mut h = SIGNATURE_SEED;
    for node in nodes {
        let mut ty = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: `node` is one of the live graph's nodes.
        unsafe { sys::cuGraphNodeGetType(node, &mut ty) }.result()?;
        if ty != sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
            continue;
        }
        let mut p = std::mem::MaybeUninit::<sys::CUDA_KERNEL_NODE_PARAMS>::zeroed();
        // SAFETY: a kernel node; `p` is written by the call.
        unsafe { sys::cuGraphKernelNodeGetParams_v2(node, p.as_mut_ptr()) }.result()?;
        // SAFETY: written by the successful call above.
        let p = unsafe { p.assume_init() };
        let mut v = std::mem::MaybeUninit::<sys::CUkernelNodeAttrValue>::zeroed();
        // SAFETY: a kernel node; `v` is written by the call.
        unsafe {
            sys::cuGraphKernelNodeGetAttribute(
                node,
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                v.as_mut_ptr(),
            )
        }
        .result()?;
        // SAFETY: the cluster shape is the member the attribute writes.
        let c = unsafe { v.assume_init().clusterDim };
        let cluster = u64::from(c.x) | u64::from(c.y) << 21 | u64::from(c.z) << 42;
        for w in [p.func as u64, p.kern as u64, cluster] {
            h = mix_word(h, w);
        }
    }
    Ok(h)
}

#[cfg(test)]
#[path = "graph_tests.rs"]
mod tests;
