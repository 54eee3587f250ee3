//! A scripted [`Generator`] for the HTTP tests: each request "generates"
//! token ids from a fixed script (by default the prompt's ids again, then
//! counting up), one every `token_delay`, honouring `max_tokens`, stop ids,
//! the queue limit and cancellation, and counting what it ran like the engine.
//! With `logprobs` asked, each token is preceded by made-up log
//! probabilities ([`fake_logprobs`]). Its usage reports
//! [`FakeConfig::cached_tokens`] prompt tokens as cached.
//! A test-only fault hook ([`FakeGenerator::inject_fault`]) makes the next
//! step of the running requests fail, as an engine step error or panic would.

use crate::generator::{
    EngineStats, FinishReason, GenerateRequest, Generator, StreamEvent, SubmitError, TokenStream,
    Usage,
};
use futures_util::future::BoxFuture;
use headroom_engine::TokenLogprobs;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// How the fake behaves.
#[derive(Debug, Clone)]
pub struct FakeConfig {
    pub max_context: usize,
    /// Most requests running at once; beyond it submit answers `QueueFull`.
    pub max_running: usize,
    pub token_delay: Duration,
    /// Tokens to emit; `None`: the prompt's ids then 65, 66, ... (wrapping below 256).
    pub script: Option<Vec<u32>>,
    /// Refuse every request with `NeverFits` above this many prompt tokens.
    pub memory_limit_tokens: Option<usize>,
    /// Prompt tokens each request reports as read from a prefix cache
    /// (`usage.cached_tokens`, at most the prompt's length).
    pub cached_tokens: usize,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig {
            max_context: 512,
            max_running: 64,
            token_delay: Duration::from_millis(1),
            script: None,
            memory_limit_tokens: None,
            cached_tokens: 0,
        }
    }
}

/// A fault to inject into the running requests' next step.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// The step fails with this error: its requests end with an error
    /// event, later requests run normally (the engine recovered).
    StepError(String),
    /// The step panics: its requests' streams end without an event, and
    /// the generator is dead (`health` fails, `submit` is refused), as the
    /// engine is when its loop thread died.
    Panic(String),
}

#[derive(Default)]
struct Counters {
    stats: Mutex<EngineStats>,
    running: AtomicUsize,
    shutdown: AtomicBool,
    next_id: AtomicU64,
    /// Requests running now, and the fault their next step meets.
    live: Mutex<HashMap<u64, Option<Fault>>>,
    dead: Mutex<Option<String>>,
}

/// The scripted generator (needs a tokio runtime: each request runs as a task).
#[derive(Clone, Default)]
pub struct FakeGenerator {
    cfg: FakeConfig,
    counters: Arc<Counters>,
}

impl FakeGenerator {
    pub fn new(cfg: FakeConfig) -> FakeGenerator {
        FakeGenerator {
            cfg,
            counters: Arc::default(),
        }
    }

    /// The tokens request `r` would produce before any stop id or limit.
    pub fn script_for(&self, r: &GenerateRequest) -> Vec<u32> {
        match &self.cfg.script {
            Some(s) => s.clone(),
            None => r
                .prompt_ids
                .iter()
                .copied()
                .chain((0..).map(|i| 65 + (i % 26)))
                .take(r.max_tokens)
                .collect(),
        }
    }

    /// Makes the next step of every request running now fail with `fault`.
    pub fn inject_fault(&self, fault: Fault) {
        if let Ok(mut live) = self.counters.live.lock() {
            for f in live.values_mut() {
                *f = Some(fault.clone());
            }
        }
    }

    /// The fault request `id` meets at this step, if any.
    fn fault_for(&self, id: u64) -> Option<Fault> {
        self.counters
            .live
            .lock()
            .ok()
            .and_then(|mut l| l.get_mut(&id).and_then(Option::take))
    }

    fn dead(&self) -> Option<String> {
        self.counters.dead.lock().ok().and_then(|d| d.clone())
    }

    /// Request `id` stops running.
    fn end(&self, id: u64) {
        if let Ok(mut live) = self.counters.live.lock() {
            live.remove(&id);
        }
        self.counters.running.fetch_sub(1, Ordering::AcqRel);
        self.update(|s| {
            s.running -= 1;
            s.kv_blocks_used -= 1;
        });
    }

    fn update(&self, f: impl FnOnce(&mut EngineStats)) {
        if let Ok(mut s) = self.counters.stats.lock() {
            f(&mut s);
        }
    }
}

/// The fake's log probabilities of token `t` with `k` alternatives:
/// `t` has -0.5, alternative `j` is `t + j` with `-0.5 - j`.
pub fn fake_logprobs(t: u32, k: usize) -> TokenLogprobs {
    TokenLogprobs {
        token: t,
        logprob: -0.5,
        top: (0..k)
            .map(|j| (t.wrapping_add(j as u32), -0.5 - j as f32))
            .collect(),
    }
}

struct FakeStream {
    rx: mpsc::UnboundedReceiver<StreamEvent>,
    cancel: Arc<AtomicBool>,
}

impl TokenStream for FakeStream {
    fn next(&mut self) -> BoxFuture<'_, Option<StreamEvent>> {
        Box::pin(self.rx.recv())
    }

    fn cancel(&mut self) {
        self.cancel.store(true, Ordering::Release);
    }
}

impl Drop for FakeStream {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Release);
    }
}

impl Generator for FakeGenerator {
    fn submit(&self, r: GenerateRequest) -> Result<Box<dyn TokenStream>, SubmitError> {
        if self.counters.shutdown.load(Ordering::Acquire) || self.dead().is_some() {
            return Err(SubmitError::ShuttingDown);
        }
        let tokens = r.prompt_ids.len().saturating_add(r.max_tokens);
        if tokens > self.cfg.max_context {
            self.update(|s| s.refused += 1);
            return Err(SubmitError::TooLong {
                tokens,
                limit: self.cfg.max_context,
            });
        }
        if let Some(limit) = self.cfg.memory_limit_tokens {
            if r.prompt_ids.len() > limit {
                self.update(|s| s.refused += 1);
                return Err(SubmitError::NeverFits {
                    predicted_bytes: r.prompt_ids.len() as u64 * 1000,
                    budget_bytes: limit as u64 * 1000,
                    detail: "fake".into(),
                });
            }
        }
        let running = self.counters.running.fetch_add(1, Ordering::AcqRel);
        if running >= self.cfg.max_running {
            self.counters.running.fetch_sub(1, Ordering::AcqRel);
            self.update(|s| s.refused += 1);
            return Err(SubmitError::QueueFull {
                limit: self.cfg.max_running,
            });
        }
        self.update(|s| {
            s.admitted += 1;
            s.running += 1;
            s.kv_blocks_used += 1;
            s.prompt_tokens += r.prompt_ids.len() as u64;
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let script = self.script_for(&r);
        let me = self.clone();
        let cancelled = cancel.clone();
        let prompt_tokens = r.prompt_ids.len();
        let id = self.counters.next_id.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut live) = self.counters.live.lock() {
            live.insert(id, None);
        }
        tokio::spawn(async move {
            let mut drawn = 0usize;
            let mut reason = FinishReason::Length;
            for &t in script.iter().take(r.max_tokens) {
                tokio::time::sleep(me.cfg.token_delay).await;
                match me.fault_for(id) {
                    None => {}
                    Some(Fault::StepError(msg)) => {
                        me.end(id);
                        let _ = tx.send(StreamEvent::Error(format!("engine error: {msg}")));
                        return;
                    }
                    Some(Fault::Panic(msg)) => {
                        if let Ok(mut d) = me.counters.dead.lock() {
                            *d = Some(msg);
                        }
                        me.end(id);
                        return;
                    }
                }
                if cancelled.load(Ordering::Acquire) || me.counters.shutdown.load(Ordering::Acquire)
                {
                    reason = FinishReason::Cancelled;
                    break;
                }
                drawn += 1;
                me.update(|s| s.generated_tokens += 1);
                if r.stop_token_ids.contains(&t) {
                    reason = FinishReason::Stop;
                    break;
                }
                if let Some(k) = r.extras.logprobs {
                    let _ = tx.send(StreamEvent::Logprobs(fake_logprobs(t, k)));
                }
                let _ = tx.send(StreamEvent::Token(t));
            }
            if reason == FinishReason::Length && drawn < r.max_tokens {
                reason = FinishReason::Stop;
            }
            me.end(id);
            me.update(|s| {
                if reason == FinishReason::Cancelled {
                    s.cancelled += 1;
                } else {
                    s.finished += 1;
                }
            });
            if me.counters.shutdown.load(Ordering::Acquire) {
                let _ = tx.send(StreamEvent::Error("the engine is shutting down".into()));
            } else {
                let _ = tx.send(StreamEvent::Finished {
                    reason,
                    usage: Usage {
                        prompt_tokens,
                        cached_tokens: me.cfg.cached_tokens.min(prompt_tokens),
                        completion_tokens: drawn,
                        ttft_ms: 0.0,
                    },
                    attention: Vec::new(),
                });
            }
        });
        Ok(Box::new(FakeStream { rx, cancel }))
    }

    fn stats(&self) -> EngineStats {
        self.counters
            .stats
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    fn max_context(&self) -> usize {
        self.cfg.max_context
    }

    fn health(&self) -> Result<(), String> {
        match self.dead() {
            Some(msg) => Err(format!("the engine loop died: {msg}")),
            None => Ok(()),
        }
    }

    fn shutdown(&self) {
        self.counters.shutdown.store(true, Ordering::Release);
    }
}
