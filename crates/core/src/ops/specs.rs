//! Plain descriptions the ops take: state pool shapes, RoPE, MoE, sampling,
//! synthetic weight draws, and the keys [`super::Backend::supports`] answers.

use crate::{LayerKind, RouteRequest};
use serde::{Deserialize, Serialize};

/// Shape of one full-attention layer's KV cache pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvSpec {
    pub slots: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Most tokens one slot may hold (a backend may allocate it up front).
    pub capacity: usize,
}

/// Shape of one Gated DeltaNet layer's state pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GdnSpec {
    pub slots: usize,
    pub k_heads: usize,
    pub v_heads: usize,
    pub k_dim: usize,
    pub v_dim: usize,
    /// Conv kernel width (the conv state keeps `kernel - 1` rows).
    pub kernel: usize,
}

impl GdnSpec {
    /// Channels of the conv (q, k and v concatenated).
    pub fn conv_dim(&self) -> usize {
        2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim
    }

    /// Elements of one slot's recurrent state `[v_heads][k_dim][v_dim]`.
    pub fn recurrent_len(&self) -> usize {
        self.v_heads * self.k_dim * self.v_dim
    }

    /// Elements of one slot's conv state `[kernel - 1][conv_dim]`.
    pub fn conv_len(&self) -> usize {
        (self.kernel - 1) * self.conv_dim()
    }
}

/// Partial rotary embedding: the first `rotary_dim` dims of each head rotate
/// with `inv_freq[i] = theta^(-2i / rotary_dim)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeSpec {
    pub rotary_dim: usize,
    pub theta: f64,
}

/// Shape of a sparse MoE block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeSpec {
    pub num_experts: usize,
    pub top_k: usize,
    /// Per-expert intermediate size `I`.
    pub intermediate: usize,
    pub renormalise: bool,
}

/// Weights of a sparse MoE block. Expert `e`'s gate and up projections are
/// rows `e·2I .. e·2I+I` and `e·2I+I .. (e+1)·2I` of `gate_up` (`[E·2I][H]`),
/// its down projection rows `e·H .. (e+1)·H` of `down` (`[E·H][I]`).
#[derive(Debug)]
pub struct MoeWeights<W> {
    pub router: W,
    pub gate_up: W,
    pub down: W,
    pub shared_gate_proj: W,
    pub shared_up_proj: W,
    pub shared_down_proj: W,
    /// `[1][H]`: the shared expert's sigmoid gate.
    pub shared_gate: W,
}

/// How one sequence's next token is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    /// 0 = greedy (argmax, lowest index on ties).
    pub temperature: f32,
    /// Nucleus mass in (0, 1]; 1 keeps every token.
    pub top_p: f32,
    /// Keep the `top_k` most likely tokens; 0 keeps every token.
    pub top_k: usize,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: 0,
        }
    }
}

/// A synthetic weight draw: `N(mean, std)` from a counter-based stream of `seed`
/// (the same values whatever the device's thread layout).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WeightInit {
    pub seed: u64,
    pub mean: f32,
    pub std: f32,
}

/// What [`super::Backend::supports`] is asked about.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OpKey {
    Embed,
    Linear,
    RmsNorm,
    GatedRmsNorm,
    Rope,
    Conv1dSilu,
    GdnGating,
    GatedDeltaRule {
        k_dim: usize,
        v_dim: usize,
    },
    KvWrite,
    Attention {
        route: RouteRequest,
        layer: LayerKind,
    },
    Moe {
        num_experts: usize,
        top_k: usize,
    },
    Swiglu,
    Sample,
}

impl OpKey {
    pub fn name(&self) -> &'static str {
        match self {
            OpKey::Embed => "embed",
            OpKey::Linear => "linear",
            OpKey::RmsNorm => "rms_norm",
            OpKey::GatedRmsNorm => "gated_rms_norm",
            OpKey::Rope => "rope",
            OpKey::Conv1dSilu => "conv1d_silu",
            OpKey::GdnGating => "gdn_gating",
            OpKey::GatedDeltaRule { .. } => "gated_delta_rule",
            OpKey::KvWrite => "kv_write",
            OpKey::Attention { .. } => "attention",
            OpKey::Moe { .. } => "moe",
            OpKey::Swiglu => "swiglu",
            OpKey::Sample => "sample",
        }
    }
}
