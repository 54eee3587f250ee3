//! The engine's public request and result types: what a caller submits
//! ([`GenerateRequest`]), what streams back ([`StreamEvent`]), why a submit
//! is refused ([`SubmitError`]) and the counters [`EngineStats`] reports.

use crate::kv::KvResolution;
use crate::settings::SchedulerSettings;
use crate::stripe::SoloStripeResolution;
use headroom_core::ops::SamplingParams;
use headroom_core::Route;
use serde::{Deserialize, Serialize};

/// One generation request: prompt token ids, how to sample, when to stop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateRequest {
    pub prompt_ids: Vec<u32>,
    pub sampling: SamplingParams,
    /// Most tokens to generate (the stop token, when one is drawn, counts).
    pub max_tokens: usize,
    /// Tokens that end the sequence (the checkpoint's EOS ids are added by the engine).
    pub stop_token_ids: Vec<u32>,
    /// Leave the engine's EOS ids out of the stop tokens: the sequence then ends
    /// only at `max_tokens`, a `stop_token_ids` entry or a cancel.
    #[serde(default)]
    pub ignore_eos: bool,
    /// Penalties and log probabilities: a request that asks for any of them
    /// has its tokens drawn on the host ([`crate::sampling`]).
    #[serde(default)]
    pub extras: SamplingExtras,
}

impl GenerateRequest {
    /// A greedy request of `max_tokens` tokens without extra stop tokens.
    pub fn greedy(prompt_ids: Vec<u32>, max_tokens: usize) -> GenerateRequest {
        GenerateRequest {
            prompt_ids,
            sampling: SamplingParams::default(),
            max_tokens,
            stop_token_ids: Vec::new(),
            ignore_eos: false,
            extras: SamplingExtras::default(),
        }
    }
}

/// Most alternatives [`SamplingExtras::logprobs`] may ask for per token.
pub const MAX_TOP_LOGPROBS: usize = 20;

/// What a request adds to plain sampling: OpenAI's presence and frequency
/// penalties (over the generated tokens), vLLM's repetition penalty (over
/// prompt and generated tokens) and log probabilities of the drawn tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SamplingExtras {
    /// Subtracted once from the logit of every token generated so far (-2..=2).
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per time it was generated (-2..=2).
    pub frequency_penalty: f32,
    /// Divides positive and multiplies negative logits of every token in the
    /// prompt or generated so far (> 0; 1 is off).
    pub repetition_penalty: f32,
    /// `Some(k)`: report each drawn token's log probability with the `k`
    /// most likely tokens (0..=[`MAX_TOP_LOGPROBS`]).
    pub logprobs: Option<usize>,
}

impl Default for SamplingExtras {
    fn default() -> Self {
        SamplingExtras {
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            logprobs: None,
        }
    }
}

impl SamplingExtras {
    /// Whether any penalty changes the logits.
    pub fn penalised(&self) -> bool {
        self.presence_penalty != 0.0
            || self.frequency_penalty != 0.0
            || self.repetition_penalty != 1.0
    }

    /// Whether a row of this request is drawn on the host.
    pub fn on_host(&self) -> bool {
        self.penalised() || self.logprobs.is_some()
    }

    /// `Some(why)` when a value is out of range.
    pub fn invalid(&self) -> Option<String> {
        for (name, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(v.is_finite() && (-2.0..=2.0).contains(&v)) {
                return Some(format!("{name} must be in [-2, 2] (got {v})"));
            }
        }
        let r = self.repetition_penalty;
        if !(r.is_finite() && r > 0.0) {
            return Some(format!("repetition_penalty must be > 0 (got {r})"));
        }
        match self.logprobs {
            Some(k) if k > MAX_TOP_LOGPROBS => Some(format!(
                "at most {MAX_TOP_LOGPROBS} top log probabilities per token (got {k})"
            )),
            _ => None,
        }
    }
}

/// A drawn token's log probability and the most likely alternatives, of the
/// model's distribution before penalties and temperature (its raw
/// log-softmax, as vLLM reports by default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprobs {
    pub token: u32,
    /// `-inf` for a token whose logit was not finite.
    pub logprob: f32,
    /// `(token, logprob)`, most likely first, lowest id on ties.
    pub top: Vec<(u32, f32)>,
}

/// Why a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    /// A stop token (or EOS) was drawn; it is not streamed as a token.
    Stop,
    /// `max_tokens` were generated.
    Length,
    /// The caller cancelled (or dropped the stream).
    Cancelled,
}

impl FinishReason {
    pub fn as_str(&self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// Token counts and time to first token of one request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Usage {
    pub prompt_tokens: usize,
    /// Prompt tokens whose rows came from the prefix cache (0 without one).
    #[serde(default)]
    pub cached_tokens: usize,
    /// Tokens drawn, including a final stop token.
    pub completion_tokens: usize,
    /// Milliseconds from submit to the first drawn token (0 when none was drawn).
    pub ttft_ms: f64,
}

/// What one full-attention layer ran for a request, read back from the
/// attention reports: the route, the query block, how many calls reported
/// them (one per step the request was in) and the largest transient bytes
/// of those calls (a packed call's report covers every sequence in it). A
/// layer whose calls reported different routes or blocks has one entry per
/// (route, block).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttentionRun {
    pub layer: usize,
    pub route: Route,
    pub query_block: Option<usize>,
    pub transient_bytes: u64,
    pub calls: usize,
}

/// One event of a request's stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StreamEvent {
    Token(u32),
    /// The log probabilities of the next `Token` (sent just before it, only
    /// to a request that asked for them).
    Logprobs(TokenLogprobs),
    Finished {
        reason: FinishReason,
        usage: Usage,
        attention: Vec<AttentionRun>,
    },
    Error(String),
}

/// Why [`crate::EngineHandle::submit`] refused a request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SubmitError {
    #[error("the request needs a predicted {predicted_bytes} bytes but the engine's memory budget is {budget_bytes} bytes ({detail})")]
    NeverFits {
        predicted_bytes: u64,
        budget_bytes: u64,
        detail: String,
    },
    #[error("prompt + max_tokens = {tokens} tokens exceed the engine's context limit of {limit}")]
    TooLong { tokens: usize, limit: usize },
    #[error("the waiting queue is full ({limit} requests)")]
    QueueFull { limit: usize },
    #[error("the engine is shutting down")]
    ShuttingDown,
}

/// The engine's counters and configuration, as of its last step. The
/// default is zero counters over default settings (a stand-in before an
/// engine exists: the server's scripted generator, tests).
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct EngineStats {
    pub running: usize,
    pub waiting: usize,
    pub kv_blocks_used: usize,
    pub kv_blocks_free: usize,
    pub admitted: u64,
    pub refused: u64,
    pub finished: u64,
    pub cancelled: u64,
    pub prompt_tokens: u64,
    pub generated_tokens: u64,
    /// The settings as run: an `auto` solo stripe is replaced by the tokens
    /// it resolved to (`solo_stripe` says what was asked and why).
    pub settings: SchedulerSettings,
    /// The solo stripe: requested, resolved tokens, the bound and the reason.
    pub solo_stripe: SoloStripeResolution,
    /// GDN state slots free (one per running sequence is taken).
    pub gdn_slots_free: usize,
    /// GDN state slots taken by running sequences.
    pub gdn_slots_used: usize,
    /// Running sequences preempted because the KV pool was short (each is
    /// recomputed when admitted again).
    pub preemptions: u64,
    /// The KV block pool and state slots the engine made.
    pub pool: crate::pool::PoolPlan,
    /// The KV backend requested, resolved, and why they differ.
    pub kv: KvResolution,
    /// Configured memory budget of the engine's state and transients (`None`: unbounded).
    pub memory_budget_bytes: Option<u64>,
    /// Predicted bytes of the running requests (KV + GDN + the largest transient).
    pub memory_committed_bytes: u64,
    /// Model steps run.
    pub steps: u64,
    /// Of those, steps queued while the step before was in flight (the step
    /// overlap, `crate::overlap`): the host's work between the two ran
    /// while the device computed.
    pub steps_queued_ahead: u64,
    /// The step overlap as resolved on this engine, with why.
    pub step_overlap: crate::overlap::OverlapResolution,
    /// CUDA graphs of decode steps as resolved on this engine, with why.
    pub cuda_graphs: crate::graphs::GraphsResolution,
    /// Prompt tokens looked up in the prefix cache at admission.
    pub prefix_cache_queried_tokens: u64,
    /// Of those, tokens the cache supplied (not computed).
    pub prefix_cache_hit_tokens: u64,
    /// Idle KV blocks kept for their content (counted as free).
    pub kv_blocks_cached: usize,
    /// Prefix-cache GDN snapshot slots holding a snapshot, and made.
    pub prefix_snapshot_slots_used: usize,
    pub prefix_snapshot_slots: usize,
    /// Each rank's backend memory as of the last step (one entry unless the
    /// model is a tensor-parallel group): bytes held now and the peak.
    pub device_memory: Vec<RankMemory>,
    /// The step activations a row measured at start-up, which the memory
    /// plan counts (a GPU's engine; `None`: the shape's estimate).
    pub step_activations: Option<crate::calibrate::Calibration>,
}

/// One rank's backend memory (weights, state and transients together).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub struct RankMemory {
    /// Held by live buffers now.
    pub active_bytes: usize,
    /// The most held at once since start-up.
    pub peak_bytes: usize,
    /// Obtained from the device: held, plus what the allocator keeps cached
    /// for reuse (CUDA's caching allocator; the active bytes elsewhere).
    pub reserved_bytes: usize,
}

impl RankMemory {
    /// Every rank's memory of `model`.
    pub fn of<B: headroom_core::ops::Backend, M: headroom_model::StepModel<B>>(
        model: &M,
    ) -> Vec<RankMemory> {
        model
            .rank_memory()
            .into_iter()
            .zip(model.rank_memory_reserved())
            .map(|((active_bytes, peak_bytes), reserved_bytes)| RankMemory {
                active_bytes,
                peak_bytes,
                reserved_bytes,
            })
            .collect()
    }
}
