//! The prefill bench's JSON evidence, `headroom.bench.prefill/1`
//! (documented in `docs/bench-prefill.md`, JSON Schema in
//! `docs/schema/bench-prefill-1.schema.json`).
//!
//! Every struct denies unknown fields and has no defaults: a file missing a
//! field, or holding a NaN (written by serde_json as `null` where a number is
//! required), does not parse.

use crate::build_info::BuildInfo;
use headroom_core::{LayerKind, Route};
use headroom_hardware::HardwareFingerprint;
use headroom_policy::{AttentionControl, ControlSource, ResolutionSource};
use serde::{Deserialize, Serialize};

pub const PREFILL_SCHEMA: &str = "headroom.bench.prefill/1";

/// One `bench prefill` run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefillBenchFile {
    /// Always [`PREFILL_SCHEMA`].
    pub schema: String,
    pub hardware: HardwareFingerprint,
    pub build: BuildInfo,
    pub model: ModelInfo,
    /// How prompts reached the model: `"model.prefill"` (the model's own
    /// one-sequence prefill) or `"engine"` (the engine's scheduler).
    pub path: String,
    pub lengths: Vec<usize>,
    pub warmup: usize,
    pub iterations: usize,
    pub samples: Vec<PrefillSample>,
}

/// The model the samples ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelInfo {
    /// `synthetic:NAME` or `model:FOLDER-NAME`.
    pub source: String,
    pub num_layers: usize,
    pub vocab_size: usize,
}

/// One (arm, length): `iterations` measured prefills of one prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefillSample {
    /// The arm as given, e.g. `fallback:512`, `fused`, `auto`.
    pub arm: String,
    pub length: usize,
    pub control: ControlRecord,
    /// One per distinct full-attention layer shape.
    pub attention: Vec<LayerShapeRecord>,
    pub ttft_ms: Timing,
    /// `length / median TTFT`.
    pub prefill_tokens_per_s: f64,
    pub memory: MemoryRecord,
    pub kv: KvRecord,
    pub scheduler: SchedulerRecord,
}

/// The control the arm asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlRecord {
    pub requested: AttentionControl,
    pub requested_source: ControlSource,
    /// The query-block override the arm set (`null`: none).
    pub query_block_override: Option<usize>,
}

/// One layer shape: what the policy resolved and what the calls reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerShapeRecord {
    pub kind: LayerKind,
    pub layers: Vec<usize>,
    /// The policy's decision (`resolve()`): route, block, source, entry id.
    pub resolved: ResolvedRecord,
    /// What every attention call of these layers reported running (identical
    /// across calls and iterations, or the run fails).
    pub reported: ReportedRecord,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolvedRecord {
    pub route: Route,
    pub query_block: Option<usize>,
    pub source: ResolutionSource,
    pub qualification_id: Option<String>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportedRecord {
    pub route: Route,
    pub query_block: Option<usize>,
    /// Attention calls read back per iteration for these layers.
    pub calls: usize,
    /// Largest transient workspace any of these calls reported.
    pub transient_peak_bytes: u64,
}

/// Times of the measured runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timing {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryRecord {
    /// Largest transient any attention call reported.
    pub attention_transient_peak_bytes: u64,
    /// Backend memory held before the prefill (weights).
    pub backend_before_bytes: u64,
    /// Backend memory peak during the prefill (device memory on CUDA).
    pub backend_peak_bytes: u64,
    /// Process peak resident set (`VmHWM`, reset per run where the kernel allows; 0 if unknown).
    pub process_peak_rss_bytes: u64,
}

/// The KV cache backend the run asked for and the one it got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvRecord {
    /// `contiguous` or `paged` on the engine path (`default` on `model.prefill`).
    pub requested: String,
    /// What the engine's KV factory resolved (`contiguous-slots` on `model.prefill`).
    pub resolved: String,
    /// Why the resolved backend (or its storage) differs from the request.
    pub fallback_reason: Option<String>,
}

/// How the prompt was scheduled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerRecord {
    /// Same as the file's `path`.
    pub path: String,
    /// The engine's prefill chunk (tokens per step of a request sharing the
    /// engine); `null` on `model.prefill`.
    pub prefill_chunk: Option<usize>,
    /// The engine's step token budget; `null` on `model.prefill`.
    pub step_tokens: Option<usize>,
    /// The engine's solo stripe as resolved (tokens); `null` on `model.prefill`.
    pub solo_stripe: Option<usize>,
    /// How the engine's solo stripe resolved (`auto` or explicit, the bound
    /// and why); `null` on `model.prefill` (and read as `null` from files
    /// written before it).
    #[serde(default)]
    pub solo_stripe_reason: Option<String>,
    /// Most prompt rows one step (one attention call) took of this request,
    /// which runs alone: `null` = the whole prompt in one pass.
    pub solo_chunk: Option<usize>,
    /// Most sequences the engine runs at once (1 on `model.prefill`).
    pub max_batch_sequences: usize,
    /// Tokens the request generates (1: the first token ends it).
    pub max_tokens: usize,
    /// Steps (forwards) from submission to the first token, read back from
    /// the run: `ceil(length / solo_chunk)` (1 on `model.prefill`).
    pub steps_to_first_token: usize,
}
