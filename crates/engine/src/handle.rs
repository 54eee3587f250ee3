//! The engine loop on its own thread ([`spawn`]) and the non-generic,
//! cloneable [`EngineHandle`] the server and the CLI talk to it through.
//!
//! `submit` checks a request on the caller's thread (context, queue, memory
//! budget: the refusals are immediate errors) and queues it to the loop,
//! which steps the [`EngineCore`] while work exists and sleeps on its
//! command channel otherwise. Stats are published after every step.
//!
//! [`EngineHandle::shutdown_and_wait`] also joins the loop thread, so the
//! model (its device buffers, NCCL communicators) is dropped before the
//! caller goes on: a process must not exit while the loop thread still tears
//! down a tensor-parallel group (the driver's exit handlers race it).

use crate::api::{EngineStats, GenerateRequest, SubmitError};
use crate::config::{EngineConfig, Limits};
use crate::core::{prepare, EngineCore};
use crate::sequence::Sequence;
use crate::stream::{RequestStream, Waker};
use crate::EngineError;
use headroom_core::ops::Backend;
use headroom_model::StepModel;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

enum Command {
    Submit(Box<Sequence>),
    Wake,
    Shutdown,
}

struct Shared {
    stats: Mutex<EngineStats>,
    next_id: AtomicU64,
    /// Requests refused by `submit` (the loop never sees them).
    refused: AtomicU64,
    shutting_down: AtomicBool,
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
            Command::Wake => {}
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
        if let Err(e) = core.step() {
            tracing::error!("engine step: {e}");
            core.abort_all(&format!("engine error: {e}"));
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

impl EngineHandle {
    /// Checks `r` and queues it; tokens stream back on the returned stream.
    /// Never blocks on the engine's work.
    pub fn submit(&self, r: GenerateRequest) -> Result<RequestStream, SubmitError> {
        if self.shared.shutting_down.load(Ordering::Acquire) {
            return Err(SubmitError::ShuttingDown);
        }
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let waiting = self.stats().waiting;
        let (stream, seq) = match prepare(&self.limits, id, r, waiting, Some(self.waker())) {
            Ok(ok) => ok,
            Err(e) => {
                self.shared.refused.fetch_add(1, Ordering::Relaxed);
                return Err(e);
            }
        };
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

    /// Whether the loop thread has ended (after a shutdown).
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
