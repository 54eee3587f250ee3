//! The engine's warm-up ([`warm_up`]): before a server listens, requests of
//! random token ids drive the engine through each kind of step it will run,
//! so the first real request does not pay first use (kernel loads or NVRTC
//! compiles, BLAS plans, memory pool growth):
//!
//! 1. **prefill**: one step of a full shared budget (`step_tokens` rows,
//!    bounded by the context, the state slots, the KV pool and the waiting
//!    queue) — several requests of at most one prefill chunk each (whole KV
//!    blocks, so the prefix cache does not cut them; halved until the
//!    memory budget admits one), submitted together, one token each;
//! 2. **decode**: for each batch size of [`DECODE_BATCHES`] (at most the
//!    state slots), that many short requests together, a few tokens each:
//!    one prefill step, then decode steps of that many rows.
//!
//! The requests go through [`EngineHandle::submit_batch`], the path of real
//! requests, EOS ignored. Afterwards [`EngineHandle::forget_history`] empties
//! the prefix cache and zeroes every counter and the request ids: real
//! traffic starts from a clean engine. Each phase's steps are read back from
//! the engine's counters ([`WarmupReport`]).

use crate::api::{GenerateRequest, StreamEvent, SubmitError};
use crate::handle::EngineHandle;
use crate::kv::KV_BLOCK_ROWS;
use crate::limits::Limits;
use crate::EngineError;
use std::time::Instant;

/// Decode batch sizes a warm-up runs (each capped by the state slots): one
/// row (GEMV paths), a few rows, and a batch of 64 (MoE grouped paths).
pub const DECODE_BATCHES: [usize; 3] = [1, 8, 64];
/// Prompt tokens of each decode request.
const DECODE_PROMPT: usize = 8;
/// Tokens each decode request generates (one prefill step, then decodes).
const DECODE_TOKENS: usize = 4;

/// Why a warm-up failed.
#[derive(Debug, thiserror::Error)]
pub enum WarmupError {
    #[error("warm-up {phase}: a request was refused: {source}")]
    Refused {
        phase: String,
        #[source]
        source: SubmitError,
    },
    #[error("warm-up {phase}: a request failed: {why}")]
    Failed { phase: String, why: String },
    #[error("warm-up: {0}")]
    Engine(#[from] EngineError),
}

/// One phase: requests submitted together and run to their end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmupPhase {
    /// `prefill` or `decode xN`.
    pub name: String,
    /// Prompt tokens of each request.
    pub prompts: Vec<usize>,
    /// Tokens each request generates.
    pub max_tokens: usize,
}

impl WarmupPhase {
    /// Rows of the phase's first step when every request is admitted at once.
    pub fn first_step_rows(&self) -> usize {
        self.prompts.iter().sum()
    }

    /// Steps the phase takes when its requests run together: one prefill
    /// step, then a decode step per further token.
    pub fn expected_steps(&self) -> u64 {
        self.max_tokens as u64
    }
}

/// What one phase ran, read from the engine's counters.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseReport {
    pub phase: WarmupPhase,
    pub steps: u64,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    pub ms: f64,
}

/// What a warm-up ran.
#[derive(Debug, Clone, PartialEq)]
pub struct WarmupReport {
    pub phases: Vec<PhaseReport>,
    pub ms: f64,
}

impl WarmupReport {
    pub fn requests(&self) -> usize {
        self.phases.iter().map(|p| p.phase.prompts.len()).sum()
    }

    pub fn steps(&self) -> u64 {
        self.phases.iter().map(|p| p.steps).sum()
    }
}

impl std::fmt::Display for WarmupReport {
    /// `warm-up: N requests, M steps, X ms (prefill R rows: 1 step, X ms;
    /// decode xB: S steps, X ms; ...)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "warm-up: {} requests, {} steps, {:.0} ms",
            self.requests(),
            self.steps(),
            self.ms
        )?;
        let parts: Vec<String> = self
            .phases
            .iter()
            .map(|p| {
                let rows = if p.phase.max_tokens == 1 {
                    format!(" {} rows", p.phase.first_step_rows())
                } else {
                    String::new()
                };
                let s = if p.steps == 1 { "" } else { "s" };
                format!(
                    "{}{rows}: {} step{s}, {:.0} ms",
                    p.phase.name, p.steps, p.ms
                )
            })
            .collect();
        if !parts.is_empty() {
            write!(f, " ({})", parts.join("; "))?;
        }
        Ok(())
    }
}

/// The phases a warm-up runs on an engine with these limits and `slots`
/// state slots (pure: see the module doc). Empty when the context cannot
/// hold a prompt and a token.
pub fn plan(limits: &Limits, slots: usize) -> Vec<WarmupPhase> {
    let context = limits.max_context;
    let queue = limits.max_waiting.max(1);
    let slots = slots.min(queue).max(1);
    let s = &limits.settings;
    let mut phases = Vec::new();
    // One prompt: at most a shared step's chunk and the context less a token;
    // whole KV blocks when a block fits (a prefix cache cuts chunks at a
    // prompt's last full block and at its interval).
    let mut len = s
        .prefill_chunk
        .min(s.step_tokens)
        .min(context.saturating_sub(1));
    if let Some(iv) = limits.prefix_interval {
        len = len.min(iv);
    }
    len = whole_blocks(len);
    // A request the memory budget could never admit is halved until it fits.
    while len > 0 && !fits(limits, len, 1) {
        len = whole_blocks(len / 2);
    }
    if len == 0 {
        return phases;
    }
    let mut total = s.step_tokens;
    if len >= KV_BLOCK_ROWS {
        total = total / KV_BLOCK_ROWS * KV_BLOCK_ROWS;
    }
    if let Some(blocks) = limits.pool_blocks {
        // A request's check counts its generated token's block too.
        total = total.min(blocks.saturating_sub(1).saturating_mul(KV_BLOCK_ROWS));
    }
    let mut prompts = Vec::new();
    while total > 0 && prompts.len() < slots {
        let n = len.min(total);
        prompts.push(n);
        total -= n;
    }
    phases.push(WarmupPhase {
        name: "prefill".into(),
        prompts,
        max_tokens: 1,
    });
    let prompt = DECODE_PROMPT.min(context.saturating_sub(2)).max(1);
    let max_tokens = DECODE_TOKENS.min(context.saturating_sub(prompt)).max(1);
    if !fits(limits, prompt, max_tokens) {
        return phases;
    }
    let mut sizes: Vec<usize> = DECODE_BATCHES.iter().map(|&b| b.min(slots)).collect();
    sizes.dedup();
    for n in sizes {
        phases.push(WarmupPhase {
            name: format!("decode x{n}"),
            prompts: vec![prompt; n],
            max_tokens,
        });
    }
    phases
}

/// `n` rounded down to whole KV blocks when it holds one.
fn whole_blocks(n: usize) -> usize {
    if n >= KV_BLOCK_ROWS {
        n / KV_BLOCK_ROWS * KV_BLOCK_ROWS
    } else {
        n
    }
}

/// Whether a request of `prompt` tokens and `max_tokens` passes the
/// engine's checks (context, KV pool, memory budget).
fn fits(limits: &Limits, prompt: usize, max_tokens: usize) -> bool {
    limits
        .check(&GenerateRequest::greedy(vec![0; prompt], max_tokens), 0)
        .is_ok()
}

/// Runs [`plan`] for `handle`'s engine, then forgets it
/// ([`EngineHandle::forget_history`]); the engine must be idle.
pub fn warm_up(handle: &EngineHandle) -> Result<WarmupReport, WarmupError> {
    let slots = handle.stats().pool.slots;
    let phases = plan(handle.limits(), slots);
    let report = run(handle, &phases)?;
    handle.forget_history()?;
    Ok(report)
}

/// Runs each phase to its end on `handle` (no forgetting).
pub fn run(handle: &EngineHandle, phases: &[WarmupPhase]) -> Result<WarmupReport, WarmupError> {
    let started = Instant::now();
    let vocab = handle.limits().vocab.max(1) as u64;
    let mut rng = 0x5eed_u64;
    let mut reports = Vec::new();
    for phase in phases {
        let before = handle.current_stats()?;
        let t = Instant::now();
        let requests = phase
            .prompts
            .iter()
            .map(|&n| {
                let ids = (0..n)
                    .map(|_| (splitmix(&mut rng) % vocab) as u32)
                    .collect();
                GenerateRequest {
                    ignore_eos: true,
                    ..GenerateRequest::greedy(ids, phase.max_tokens)
                }
            })
            .collect();
        let streams = handle
            .submit_batch(requests)
            .map_err(|source| WarmupError::Refused {
                phase: phase.name.clone(),
                source,
            })?;
        for mut s in streams {
            while let Some(e) = s.blocking_next() {
                match e {
                    StreamEvent::Error(why) => {
                        return Err(WarmupError::Failed {
                            phase: phase.name.clone(),
                            why,
                        })
                    }
                    StreamEvent::Finished { .. } => break,
                    _ => {}
                }
            }
        }
        let after = handle.current_stats()?;
        let r = PhaseReport {
            phase: phase.clone(),
            steps: after.steps - before.steps,
            prompt_tokens: after.prompt_tokens - before.prompt_tokens,
            generated_tokens: after.generated_tokens - before.generated_tokens,
            ms: t.elapsed().as_secs_f64() * 1e3,
        };
        tracing::debug!(
            phase = %r.phase.name,
            requests = r.phase.prompts.len(),
            first_step_rows = r.phase.first_step_rows(),
            steps = r.steps,
            ms = r.ms,
            "warm-up phase"
        );
        reports.push(r);
    }
    Ok(WarmupReport {
        phases: reports,
        ms: started.elapsed().as_secs_f64() * 1e3,
    })
}

/// The next value of a splitmix64 sequence (the warm-up's prompt ids).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
