//! What a forward call is asked to do ([`ForwardOptions`]), what it reports
//! ([`ForwardOutput`]) and how it fails ([`ModelError`]).

use crate::{ConfigError, WeightsError};
use headroom_core::{AttentionError, AttentionReport, RouteRequest};

/// The attention route of each full-attention layer.
#[derive(Debug, Clone, PartialEq)]
pub enum AttentionPlan {
    /// The same route on every full-attention layer.
    Uniform(RouteRequest),
    /// `(layer index, route)` for every full-attention layer (as the policy
    /// resolves per layer kind); a full layer without an entry is an error.
    PerLayer(Vec<(usize, RouteRequest)>),
}

impl AttentionPlan {
    /// The route of layer `layer`.
    pub fn route(&self, layer: usize) -> Result<RouteRequest, ModelError> {
        match self {
            AttentionPlan::Uniform(r) => Ok(*r),
            AttentionPlan::PerLayer(list) => list
                .iter()
                .find(|(l, _)| *l == layer)
                .map(|(_, r)| *r)
                .ok_or(ModelError::NoRoute { layer }),
        }
    }
}

/// Which rows of logits a forward computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsRows {
    /// One row per input token.
    All,
    /// Only the last input token's row of each sequence (what generation needs).
    Last,
    /// No logits (a prefill chunk that is not the prompt's last).
    None,
}

/// Options of one prefill / forward call.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardOptions {
    pub attention: AttentionPlan,
    /// Prefill chunk size in tokens; `None` = one pass over all tokens.
    pub chunk: Option<usize>,
    pub logits: LogitsRows,
}

impl Default for ForwardOptions {
    /// Composed attention with query block 128 (the policy default), one pass, all rows.
    fn default() -> Self {
        ForwardOptions {
            attention: AttentionPlan::Uniform(RouteRequest::Composed { query_block: 128 }),
            chunk: None,
            logits: LogitsRows::All,
        }
    }
}

/// One attention call's report, with where it ran.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerAttentionReport {
    pub layer: usize,
    /// Position of the chunk's first token.
    pub chunk_start: usize,
    pub chunk_len: usize,
    pub report: AttentionReport,
}

/// Logits `[rows][vocab]` and every attention report of the call.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardOutput {
    pub logits: Vec<f32>,
    pub rows: usize,
    pub vocab: usize,
    pub attention: Vec<LayerAttentionReport>,
}

/// Why a forward could not run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Weights(#[from] WeightsError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("token id {id} at position {position} is out of range (vocab_size {vocab})")]
    TokenOutOfRange {
        id: u32,
        position: usize,
        vocab: usize,
    },
    #[error("no input tokens")]
    EmptyInput,
    #[error("chunk size must be > 0")]
    ZeroChunk,
    #[error("no attention route given for full-attention layer {layer}")]
    NoRoute { layer: usize },
    #[error("layer {layer}: the {route} attention route cannot run here: {reason}")]
    RouteUnsupported {
        layer: usize,
        route: RouteRequest,
        reason: String,
    },
    #[error("attention of layer {layer}: {source}")]
    Attention {
        layer: usize,
        #[source]
        source: AttentionError,
    },
    #[error("unsupported model: {0}")]
    Unsupported(String),
    #[error("{}{source}", layer.map(|l| format!("layer {l}: ")).unwrap_or_default())]
    Op {
        layer: Option<usize>,
        #[source]
        source: headroom_core::OpError,
    },
    #[error(transparent)]
    Plan(#[from] crate::parallel::PlanError),
    #[error("tensor-parallel rank {rank}: {detail}")]
    Rank { rank: usize, detail: String },
    #[error("context full: {have} tokens held + {adding} new > capacity {capacity}")]
    ContextFull {
        have: usize,
        adding: usize,
        capacity: usize,
    },
}

impl ModelError {
    /// An op error not tied to a layer.
    pub(crate) fn op(source: headroom_core::OpError) -> ModelError {
        ModelError::Op {
            layer: None,
            source,
        }
    }
}
