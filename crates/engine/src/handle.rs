//! The engine loop on its own thread ([`spawn`]) and the non-generic,
//! cloneable [`EngineHandle`] the server and the CLI talk to it through.
//!
//! `submit` checks a request on the caller's thread (context, queue, memory
//! budget: the refusals are immediate errors) and queues it to the loop,
//! which steps the [`EngineCore`] while work exists and sleeps on its
//! command channel otherwise. Stats are published after every step.
//!
//! The loop is supervised: a step that returns an error fails that step's
//! requests (each stream ends with an error event naming it) and the loop
//! goes on. A step that panics is caught: its requests and the queued ones
//! fail with `an engine step panicked: MESSAGE`, and the loop ends rather
//! than step a model whose state the panic may have left half-updated
//! (device buffers, a tensor-parallel group mid-collective): from then on
//! [`EngineHandle::health`] is that error and `submit` refuses, so
//! `/health` answers 503 and an orchestrator restarts the process.
//!
//! [`EngineHandle::shutdown_and_wait`] also joins the loop thread, so the
//! model (its device buffers, NCCL communicators) is dropped before the
//! caller goes on: a process must not exit while the loop thread still tears
//! down a tensor-parallel group (the driver's exit handlers race it).

use crate::api::{EngineStats, GenerateRequest, SubmitError};
use crate::config::EngineConfig;
use crate::core::{prepare, EngineCore};
use crate::limits::Limits;
use crate::sequence::Sequence;
use crate::stream::{RequestStream, Waker};
use crate::EngineError;
use headroom_core::ops::Backend;
use headroom_model::StepModel;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

enum Command {
    Submit(Box<Sequence>),
    /// Several sequences queued together: the next step plans them all.
    SubmitMany(Vec<Sequence>),
    Wake,
    /// Answers the counters as of now (after every earlier command).
    Stats(Sender<EngineStats>),
    /// Forgets what ran (see [`EngineCore::forget_history`]); answers the
    /// counters as they were.
    Forget(Sender<Result<EngineStats, String>>),
    Shutdown,
}

struct Shared {
    stats: Mutex<EngineStats>,
    next_id: AtomicU64,
    /// Requests refused by `submit` (the loop never sees them).
    refused: AtomicU64,
    shutting_down: AtomicBool,
    /// Why the engine can serve no more requests (a step panicked).
    failure: Mutex<Option<String>>,
    /// The loop thread, until someone waits for it.
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// A cloneable handle to a running engine.
#[derive(Clone)]
pub struct EngineHandle {
    tx: Sender<Command>,
    shared: Arc<Shared>,
    limits: Arc<Limits>,
}

impl std::fmt::Debug for EngineHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineHandle")
            .field("max_context", &self.limits.max_context)
            .finish()
    }
}

/// Builds the engine (routes, KV backend, state pools) on the calling thread,
/// then moves it to its loop thread.
/// `model`: one `Qwen35Model` or a tensor-parallel `TpGroup` (see `StepModel`).
pub fn spawn<B: Backend + 'static, M: StepModel<B> + 'static>(
    model: M,
    cfg: EngineConfig,
) -> Result<EngineHandle, EngineError> {
    let core = EngineCore::new(model, cfg)?;
    let limits = Arc::new(core.limits().clone());
    let shared = Arc::new(Shared {
        stats: Mutex::new(core.stats()),
        next_id: AtomicU64::new(1),
        refused: AtomicU64::new(0),
        shutting_down: AtomicBool::new(false),
        failure: Mutex::new(None),
        thread: Mutex::new(None),
    });
    let (tx, rx) = channel();
    let loop_shared = shared.clone();
    let thread = std::thread::Builder::new()
        .name("headroom-engine".into())
        .spawn(move || run_loop(core, rx, loop_shared))
        .map_err(|e| EngineError::Config(format!("cannot start the engine thread: {e}")))?;
    if let Ok(mut t) = shared.thread.lock() {
        *t = Some(thread);
    }
    Ok(EngineHandle { tx, shared, limits })
}

fn run_loop<B: Backend, M: StepModel<B>>(
    mut core: EngineCore<B, M>,
    rx: Receiver<Command>,
    shared: Arc<Shared>,
) {
    // false: shut down.
    let apply = |core: &mut EngineCore<B, M>, cmd: Command| -> bool {
        match cmd {
            Command::Submit(seq) => core.enqueue(*seq),
            Command::SubmitMany(seqs) => seqs.into_iter().for_each(|s| core.enqueue(s)),
            Command::Wake => {}
            Command::Stats(reply) => {
                let _ = reply.send(core.stats());
            }
            Command::Forget(reply) => {
                let _ = reply.send(core.forget_history().map_err(|e| e.to_string()));
            }
            Command::Shutdown => return false,
        }
        true
    };
    'run: loop {
        if core.is_idle() {
            let Ok(cmd) = rx.recv() else { break 'run };
            if !apply(&mut core, cmd) {
                break 'run;
            }
        }
        while let Ok(cmd) = rx.try_recv() {
            if !apply(&mut core, cmd) {
                break 'run;
            }
        }
        match catch_unwind(AssertUnwindSafe(|| core.step())) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::error!("engine step: {e}");
                core.abort_all(&format!("engine error: {e}"));
            }
            Err(payload) => {
                let why = format!("an engine step panicked: {}", panic_message(&*payload));
                tracing::error!("{why}; the engine stops");
                fail(&mut core, &rx, &shared, &why);
                return;
            }
        }
        if let Ok(mut s) = shared.stats.lock() {
            *s = core.stats();
        }
    }
    core.abort_all("the engine is shutting down");
    if let Ok(mut s) = shared.stats.lock() {
        *s = core.stats();
    }
    // The model and its device memory go here, on the loop thread, before
    // `shutdown_and_wait` returns.
    drop(core);
}

/// After a panicked step: records `why` (health and `submit` see it), then
/// fails the running and queued requests with it. Aborting touches the
/// panicked core, so it is guarded too: if it panics as well, the requests'
/// streams end without an event when the core is dropped, and the server
/// names the failure from [`EngineHandle::health`].
fn fail<B: Backend, M: StepModel<B>>(
    core: &mut EngineCore<B, M>,
    rx: &Receiver<Command>,
    shared: &Shared,
    why: &str,
) {
    match shared.failure.lock() {
        Ok(mut f) => *f = Some(why.to_string()),
        Err(p) => *p.into_inner() = Some(why.to_string()),
    }
    while let Ok(cmd) = rx.try_recv() {
        match cmd {
            Command::Submit(seq) => core.enqueue(*seq),
            Command::SubmitMany(seqs) => seqs.into_iter().for_each(|s| core.enqueue(s)),
            _ => {}
        }
    }
    if catch_unwind(AssertUnwindSafe(|| core.abort_all(why))).is_err() {
        tracing::error!("failing the requests after the panic panicked too");
    }
    if let Ok(mut s) = shared.stats.lock() {
        if let Ok(stats) = catch_unwind(AssertUnwindSafe(|| core.stats())) {
            *s = stats;
        }
    }
}

/// The error of a command the loop did not answer.
fn stopped() -> EngineError {
    EngineError::Internal("the engine loop has stopped".into())
}

/// The message of a panic's payload (a `&str` or `String`; anything else unnamed).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

impl EngineHandle {
    /// Checks `r` and queues it; tokens stream back on the returned stream.
    /// Never blocks on the engine's work.
    pub fn submit(&self, r: GenerateRequest) -> Result<RequestStream, SubmitError> {
        self.accepting()?;
        let (stream, seq) = self.prepare_one(r, self.stats().waiting)?;
        if let Some(seq) = seq {
            if let Ok(mut s) = self.shared.stats.lock() {
                s.waiting += 1;
            }
            self.tx
                .send(Command::Submit(Box::new(seq)))
                .map_err(|_| SubmitError::ShuttingDown)?;
        }
        Ok(stream)
    }

    /// Checks every request of `rs` and queues them together, so the next
    /// step plans them all (as far as its budget and the pools admit):
    /// what a burst of concurrent requests looks like to the engine. All or
    /// none: the first refusal is returned and nothing is queued.
    pub fn submit_batch(
        &self,
        rs: Vec<GenerateRequest>,
    ) -> Result<Vec<RequestStream>, SubmitError> {
        self.accepting()?;
        let waiting = self.stats().waiting;
        let (mut streams, mut seqs) = (Vec::new(), Vec::new());
        for r in rs {
            let (stream, seq) = self.prepare_one(r, waiting + seqs.len())?;
            streams.push(stream);
            seqs.extend(seq);
        }
        self.queue_many(seqs)?;
        Ok(streams)
    }

    /// Checks each request of `rs` and queues every one that passes in one
    /// command, so the next step plans them together and the schedule of an
    /// offline batch (`generate --prompts`) does not depend on when each
    /// request reached the engine thread: its tokens are the same run to run
    /// (one at a time, session 15 measured 5 of 12 prompts' tokens differing
    /// between two runs of the synthetic 35B on CUDA). A refused request gets
    /// its error in its place; the others still run.
    pub fn submit_each(&self, rs: Vec<GenerateRequest>) -> Vec<Result<RequestStream, SubmitError>> {
        if let Err(e) = self.accepting() {
            return rs.iter().map(|_| Err(e.clone())).collect();
        }
        let waiting = self.stats().waiting;
        let mut seqs = Vec::new();
        let mut out: Vec<_> = rs
            .into_iter()
            .map(|r| {
                let (stream, seq) = self.prepare_one(r, waiting + seqs.len())?;
                seqs.extend(seq);
                Ok(stream)
            })
            .collect();
        if let Err(e) = self.queue_many(seqs) {
            for r in out.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(e.clone());
            }
        }
        out
    }

    /// `Err(ShuttingDown)` once the engine stops taking requests.
    fn accepting(&self) -> Result<(), SubmitError> {
        if self.shared.shutting_down.load(Ordering::Acquire) || self.failure().is_some() {
            return Err(SubmitError::ShuttingDown);
        }
        Ok(())
    }

    /// One request checked under a new id against `waiting` queued ones
    /// (a refusal is counted).
    fn prepare_one(
        &self,
        r: GenerateRequest,
        waiting: usize,
    ) -> Result<(RequestStream, Option<Sequence>), SubmitError> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        prepare(&self.limits, id, r, waiting, Some(self.waker())).inspect_err(|_| {
            self.shared.refused.fetch_add(1, Ordering::Relaxed);
        })
    }

    /// Queues `seqs` in one command (the loop takes them before its next step).
    fn queue_many(&self, seqs: Vec<Sequence>) -> Result<(), SubmitError> {
        if seqs.is_empty() {
            return Ok(());
        }
        if let Ok(mut s) = self.shared.stats.lock() {
            s.waiting += seqs.len();
        }
        self.tx
            .send(Command::SubmitMany(seqs))
            .map_err(|_| SubmitError::ShuttingDown)
    }

    /// The counters as of now: asked of the loop, so every request whose
    /// stream has ended is counted (`stats` may lag one step); with the
    /// requests `submit` refused, as [`Self::stats`].
    pub fn current_stats(&self) -> Result<EngineStats, EngineError> {
        let mut s = self.loop_stats()?;
        s.refused += self.shared.refused.load(Ordering::Relaxed);
        Ok(s)
    }

    /// The loop's own counters (without the refusals only the handle saw).
    fn loop_stats(&self) -> Result<EngineStats, EngineError> {
        let (tx, rx) = channel();
        self.tx.send(Command::Stats(tx)).map_err(|_| stopped())?;
        rx.recv().map_err(|_| stopped())
    }

    /// Forgets what the engine ran while idle (a warm-up): the prefix
    /// cache's blocks and snapshots, every counter, and the request ids
    /// (the next request is id 1 again). Returns the counters as they were.
    /// An error when requests are waiting or running.
    pub fn forget_history(&self) -> Result<EngineStats, EngineError> {
        let (tx, rx) = channel();
        self.tx.send(Command::Forget(tx)).map_err(|_| stopped())?;
        let mut before = rx
            .recv()
            .map_err(|_| stopped())?
            .map_err(EngineError::Config)?;
        self.shared.next_id.store(1, Ordering::Relaxed);
        before.refused += self.shared.refused.swap(0, Ordering::Relaxed);
        let now = self.loop_stats()?;
        if let Ok(mut s) = self.shared.stats.lock() {
            *s = now;
        }
        Ok(before)
    }

    fn waker(&self) -> Waker {
        let tx = Mutex::new(self.tx.clone());
        Arc::new(move || {
            if let Ok(t) = tx.lock() {
                let _ = t.send(Command::Wake);
            }
        })
    }

    /// Counters as of the engine's last step.
    pub fn stats(&self) -> EngineStats {
        let mut s = match self.shared.stats.lock() {
            Ok(s) => s.clone(),
            Err(p) => p.into_inner().clone(),
        };
        s.refused += self.shared.refused.load(Ordering::Relaxed);
        s
    }

    /// Stops the loop: running and waiting requests end with an error event.
    pub fn shutdown(&self) {
        self.shared.shutting_down.store(true, Ordering::Release);
        let _ = self.tx.send(Command::Shutdown);
    }

    /// [`shutdown`](Self::shutdown), then waits until the loop thread has
    /// ended and dropped the model. Call it from a thread that may block
    /// (the CLI at exit), not from the loop itself. A second call returns at once.
    pub fn shutdown_and_wait(&self) {
        self.shutdown();
        let thread = match self.shared.thread.lock() {
            Ok(mut t) => t.take(),
            Err(p) => p.into_inner().take(),
        };
        if let Some(t) = thread {
            if t.join().is_err() {
                tracing::error!("the engine thread panicked");
            }
        }
    }

    /// Why the engine stopped serving, if a step panicked (see the module doc).
    pub fn failure(&self) -> Option<String> {
        match self.shared.failure.lock() {
            Ok(f) => f.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// `Err(why)` once the engine can serve no more requests: a step
    /// panicked (the panic's message), or the loop thread ended otherwise.
    pub fn health(&self) -> Result<(), String> {
        if let Some(why) = self.failure() {
            return Err(why);
        }
        if self.is_stopped() {
            return Err("the engine loop has stopped; restart the server".into());
        }
        Ok(())
    }

    /// Whether the loop thread has ended (after a shutdown or a panicked step).
    pub fn is_stopped(&self) -> bool {
        match self.shared.thread.lock() {
            Ok(t) => t.as_ref().is_none_or(|h| h.is_finished()),
            Err(p) => p.into_inner().as_ref().is_none_or(|h| h.is_finished()),
        }
    }

    /// Most tokens (prompt + max_tokens) one request may have.
    pub fn max_context(&self) -> usize {
        self.limits.max_context
    }

    /// The checks and memory model requests are admitted by.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}
