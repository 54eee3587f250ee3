//! The configuration types of the Qwen3.5 / Qwen3.6 family and the
//! dimensions derived from the sizes (layer kinds, GDN widths).

use super::error::ConfigError;
use headroom_core::{AttentionKind, Dtype, LayerKind};
use serde::{Deserialize, Serialize};

/// Which member of the family a config describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// `qwen3_5_moe` / `qwen3_5_moe_text`.
    Qwen35Moe,
    /// `qwen3_5` / `qwen3_5_text` (dense MLP).
    Qwen35Dense,
    /// `qwen3_next` (fused Gated DeltaNet input projections, MoE).
    Qwen3Next,
}

/// Rotary position embedding parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RopeConfig {
    pub theta: f64,
    pub partial_rotary_factor: f64,
    /// Rotated dims per head: `head_dim * partial_rotary_factor` (even).
    pub rotary_dim: usize,
    /// Multimodal RoPE sections, when the config gives them (ignored for text).
    pub mrope_section: Option<Vec<usize>>,
    pub mrope_interleaved: bool,
}

/// Gated DeltaNet (linear attention) sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinearAttentionConfig {
    pub num_key_heads: usize,
    pub num_value_heads: usize,
    pub key_head_dim: usize,
    pub value_head_dim: usize,
    pub conv_kernel_dim: usize,
}

impl LinearAttentionConfig {
    /// `num_key_heads * key_head_dim`.
    pub fn key_dim(&self) -> usize {
        self.num_key_heads * self.key_head_dim
    }
    /// `num_value_heads * value_head_dim`.
    pub fn value_dim(&self) -> usize {
        self.num_value_heads * self.value_head_dim
    }
    /// Channels of the causal depthwise conv: q, k and v (`2 * key_dim + value_dim`).
    pub fn conv_dim(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }
}

/// Sparse MoE sizes (router softmax, top-k, shared expert with sigmoid gate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoeConfig {
    pub num_experts: usize,
    pub num_experts_per_tok: usize,
    pub moe_intermediate_size: usize,
    pub shared_expert_intermediate_size: usize,
    /// Renormalise the top-k routing weights to sum to 1.
    pub norm_topk_prob: bool,
}

/// The MLP of every decoder layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MlpConfig {
    Moe(MoeConfig),
    Dense { intermediate_size: usize },
}

/// A text model of the Qwen3.5 / Qwen3.6 hybrid family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// The text model's `model_type` as written (or the synthetic preset's family type).
    pub model_type: String,
    pub family: Family,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    /// Token mixer of each layer (`layer_types`), `num_hidden_layers` long.
    pub layer_types: Vec<AttentionKind>,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    /// Full attention's `q_proj` also produces a per-channel sigmoid output gate.
    pub attn_output_gate: bool,
    pub rope: RopeConfig,
    pub linear: LinearAttentionConfig,
    pub mlp: MlpConfig,
    pub rms_norm_eps: f64,
    pub tie_word_embeddings: bool,
    /// Storage dtype of the weights (`dtype` / `torch_dtype`).
    pub dtype: Dtype,
    /// `qwen3_next`: the Gated DeltaNet input projections are `in_proj_qkvz`
    /// and `in_proj_ba` instead of `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`.
    pub fused_linear_projections: bool,
    /// End-of-sequence token ids, when the config names them.
    pub eos_token_ids: Vec<u32>,
    /// The longest sequence (prompt + generated tokens) the model is configured for.
    pub max_position_embeddings: usize,
    /// Plain or block-scaled FP8 linear weights (`quantization_config`).
    #[serde(default)]
    pub weight_format: super::quant::WeightFormat,
}

impl ModelConfig {
    /// One [`LayerKind`] per layer. Full layers: softmax attention's head_dim,
    /// q heads, kv heads; linear layers: the Gated DeltaNet's key head dim,
    /// key heads (as `q_heads`) and value heads (as `kv_heads`).
    pub fn layer_kinds(&self) -> Vec<LayerKind> {
        (0..self.layer_types.len())
            .map(|i| self.layer_kind(i))
            .collect()
    }

    /// The [`LayerKind`] of layer `layer` (panics if out of range).
    pub fn layer_kind(&self, layer: usize) -> LayerKind {
        match self.layer_types[layer] {
            AttentionKind::Full => LayerKind {
                attention: AttentionKind::Full,
                head_dim: self.head_dim,
                q_heads: self.num_attention_heads,
                kv_heads: self.num_key_value_heads,
                dtype: self.dtype,
            },
            AttentionKind::Linear => LayerKind {
                attention: AttentionKind::Linear,
                head_dim: self.linear.key_head_dim,
                q_heads: self.linear.num_key_heads,
                kv_heads: self.linear.num_value_heads,
                dtype: self.dtype,
            },
        }
    }

    /// Whether layer `layer` is a full (softmax) attention layer.
    pub fn is_full_attention(&self, layer: usize) -> bool {
        self.layer_types.get(layer) == Some(&AttentionKind::Full)
    }

    /// Indices of the full attention layers.
    pub fn full_attention_layers(&self) -> Vec<usize> {
        (0..self.layer_types.len())
            .filter(|&i| self.is_full_attention(i))
            .collect()
    }

    /// The MoE sizes, when the MLP is sparse.
    pub fn moe(&self) -> Option<&MoeConfig> {
        match &self.mlp {
            MlpConfig::Moe(m) => Some(m),
            MlpConfig::Dense { .. } => None,
        }
    }

    /// Checks that a sequence of `tokens` positions fits the model's context
    /// (`max_position_embeddings`); the error names both numbers.
    pub fn check_sequence_length(&self, tokens: usize) -> Result<(), ConfigError> {
        if tokens > self.max_position_embeddings {
            return Err(ConfigError::invalid(
                "max_position_embeddings",
                format!(
                    "a sequence of {tokens} tokens is longer than the model's context of {} positions",
                    self.max_position_embeddings
                ),
            ));
        }
        Ok(())
    }
}

/// `layer_types` from `full_attention_interval`: layer `i` is full iff `(i + 1) % interval == 0`.
pub fn interval_layer_types(layers: usize, interval: usize) -> Vec<AttentionKind> {
    (0..layers)
        .map(|i| {
            if (i + 1) % interval.max(1) == 0 {
                AttentionKind::Full
            } else {
                AttentionKind::Linear
            }
        })
        .collect()
}
