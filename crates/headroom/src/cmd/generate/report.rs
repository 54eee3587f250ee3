//! What `headroom generate` tells its user: one line of what ran (backend,
//! model, attention per layer kind, KV cache, scheduler, memory budget) and
//! one line of timings on stderr, in words; with `--json OUT` one JSON line
//! per request and a summary line (the machine-readable record) in OUT.

use anyhow::Context;
use headroom_core::BackendKind;
use headroom_engine::{EngineStats, FinishReason, GenerateRequest, Usage};
use headroom_model::tokenizer::TextCodec;
use serde::Serialize;
use std::path::Path;

/// What one request produced.
#[derive(Default)]
pub(super) struct Outcome {
    pub ids: Vec<u32>,
    pub reason: Option<FinishReason>,
    pub usage: Option<Usage>,
    pub error: Option<String>,
}

/// What opening the backend and loading took, on one model or a group.
pub(super) struct RunInfo {
    pub backend: BackendKind,
    /// Opening the backend (device, context); `None` for a group.
    pub open_seconds: Option<f64>,
    pub load_seconds: f64,
    /// Backend bytes each rank holds after loading (one entry without a group).
    pub weight_bytes: Vec<usize>,
    /// `--batch-invariant`.
    pub batch_invariant: bool,
}

/// Time spent after loading.
pub(super) struct Timings {
    /// The warm-up request: the kernels' first use (compilation on a first
    /// run, else the disk cache) and one short prefill and decode step.
    pub warmup_seconds: f64,
    /// The requests, from submission to the last token.
    pub wall_seconds: f64,
}

/// One request's JSON line.
#[derive(Debug, Serialize)]
struct RequestLine<'a> {
    index: usize,
    ids: &'a [u32],
    text: String,
    finish_reason: Option<&'static str>,
    error: Option<&'a str>,
    prompt_tokens: usize,
    completion_tokens: usize,
    ttft_ms: f64,
}

/// `generate on cpu: synthetic tiny-d64; composed attention (query block 128)
/// on layer 3; ...; paged KV cache ...; scheduler prefill_chunk ...; up to 8
/// running, context 64 tokens; memory budget 1.2 GiB; KV pool 8 blocks of 64
/// tokens = 512 tokens (0.01 GiB); 8 state slots (...); 8 sequences fit at
/// full context (64 tokens)`, of the run of `model` with `attention` (in
/// words) and a context of `max_context` tokens.
pub(super) fn ran_line(
    model: &str,
    attention: &str,
    max_context: usize,
    st: &EngineStats,
    info: &RunInfo,
) -> String {
    let world = info.weight_bytes.len();
    let ranks = if world > 1 {
        format!(" x{world} (tensor parallel, budget per rank)")
    } else {
        String::new()
    };
    format!(
        "generate on {}{ranks}: {}; {}; {}; scheduler {}; up to {} running, context {} tokens; \
         {}; {}",
        info.backend,
        model,
        attention,
        crate::describe::kv(&st.kv),
        st.settings,
        st.pool.slots,
        max_context,
        crate::describe::budget(st.memory_budget_bytes),
        st.pool,
    )
}

/// The timing line: opening and loading, the warm-up (kernels' first use)
/// apart, then the prefill and decode of one request or the throughput of many.
pub(super) fn timing_line(
    requests: &[GenerateRequest],
    outcomes: &[Outcome],
    info: &RunInfo,
    t: &Timings,
    single: bool,
) -> anyhow::Result<String> {
    let mut s = String::from("timings: ");
    if let Some(open) = info.open_seconds {
        s.push_str(&format!("backend open {open:.3} s, "));
    }
    s.push_str(&format!(
        "model load {:.3} s, warm-up {:.3} s (first use of the kernels); ",
        info.load_seconds, t.warmup_seconds
    ));
    if single {
        let u = outcomes[0]
            .usage
            .context("the request ended without usage")?;
        let n = requests[0].prompt_ids.len();
        let ttft = u.ttft_ms / 1e3;
        let decode = (t.wall_seconds - ttft).max(1e-9);
        s.push_str(&format!(
            "prompt {n} tokens, prefill {ttft:.3} s ({:.1} tokens/s); \
             generated {} tokens in {decode:.3} s ({:.1} tokens/s)",
            n as f64 / ttft.max(1e-9),
            u.completion_tokens,
            u.completion_tokens.saturating_sub(1) as f64 / decode
        ));
    } else {
        let (prompt, generated) = token_totals(outcomes);
        let wall = t.wall_seconds.max(1e-9);
        s.push_str(&format!(
            "{} requests ({} completed, {} failed), {prompt} prompt and {generated} generated \
             tokens in {wall:.3} s ({:.1} generated tokens/s, {:.1} tokens/s in all)",
            outcomes.len(),
            outcomes.iter().filter(|o| o.reason.is_some()).count(),
            outcomes.iter().filter(|o| o.error.is_some()).count(),
            generated as f64 / wall,
            (prompt + generated) as f64 / wall,
        ));
    }
    Ok(s)
}

/// Prompt and generated tokens of the requests that finished.
fn token_totals(outcomes: &[Outcome]) -> (usize, usize) {
    outcomes
        .iter()
        .filter_map(|o| o.usage)
        .fold((0, 0), |(p, g), u| {
            (p + u.prompt_tokens, g + u.completion_tokens)
        })
}

/// The summary line of `--json`.
pub(super) fn summary(
    outcomes: &[Outcome],
    t: &Timings,
    st: &EngineStats,
    info: &RunInfo,
) -> serde_json::Value {
    let (prompt, generated) = token_totals(outcomes);
    let wall = t.wall_seconds;
    serde_json::json!({"summary": {
        "requests": outcomes.len(),
        "completed": outcomes.iter().filter(|o| o.reason.is_some()).count(),
        "errors": outcomes.iter().filter(|o| o.error.is_some()).count(),
        "prompt_tokens": prompt,
        "completion_tokens": generated,
        "wall_s": wall,
        "warmup_s": t.warmup_seconds,
        "generated_tokens_per_s": generated as f64 / wall.max(1e-9),
        "total_tokens_per_s": (prompt + generated) as f64 / wall.max(1e-9),
        "backend": info.backend,
        "open_seconds": info.open_seconds,
        "load_seconds": info.load_seconds,
        "tensor_parallel": info.weight_bytes.len(),
        "weight_bytes": info.weight_bytes.iter().sum::<usize>(),
        "weight_bytes_per_rank": info.weight_bytes,
        "peak_device_bytes_per_rank": st.device_memory.iter().map(|m| m.peak_bytes).collect::<Vec<_>>(),
        "batch_invariant": info.batch_invariant,
        "scheduler": st.settings,
        "kv": st.kv,
        "memory_budget_bytes": st.memory_budget_bytes,
        "steps": st.steps,
        "steps_queued_ahead": st.steps_queued_ahead,
        "refused": st.refused,
        "cancelled": st.cancelled,
    }})
}

/// Writes one line per request and the summary line to `path`.
pub(super) fn write_json(
    path: &Path,
    outcomes: &[Outcome],
    codec: &TextCodec,
    summary: &serde_json::Value,
) -> anyhow::Result<()> {
    let mut out = String::new();
    for (index, o) in outcomes.iter().enumerate() {
        let u = o.usage.unwrap_or_default();
        let line = RequestLine {
            index,
            ids: &o.ids,
            text: codec.decode(&o.ids)?,
            finish_reason: o.reason.map(|r| r.as_str()),
            error: o.error.as_deref(),
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            ttft_ms: u.ttft_ms,
        };
        out.push_str(&serde_json::to_string(&line)?);
        out.push('\n');
    }
    out.push_str(&serde_json::to_string(summary)?);
    out.push('\n');
    crate::output::write_file_atomically(path, out.as_bytes())
}
