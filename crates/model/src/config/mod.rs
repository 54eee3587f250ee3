//! Model configuration: Hugging Face `config.json` of the Qwen3.5 / Qwen3.6
//! hybrid family, and the built-in synthetic presets.
//!
//! * [`types`] — the config types, [`ConfigError`] and the derived dims;
//! * [`validate`](mod@validate) — bounds on every size ([`limits`]) and consistency;
//! * `hf` — `config.json` in ([`ModelConfig::from_json_str`]) and out ([`ModelConfig::to_hf_json`]);
//! * `presets` — [`ModelConfig::synthetic`].
//!
//! Accepted `model_type`s (the text model may sit under `text_config` in the
//! vision-language checkpoints, whose top level is `qwen3_5_moe` / `qwen3_5`):
//!
//! * `qwen3_5_moe`, `qwen3_5_moe_text` — sparse MoE MLP with a shared expert;
//! * `qwen3_5`, `qwen3_5_text` — dense SwiGLU MLP (`intermediate_size`);
//! * `qwen3_next` — the same trunk with the Gated DeltaNet input projections
//!   fused (`in_proj_qkvz`, `in_proj_ba`; see [`ModelConfig::fused_linear_projections`]).
//!   Only checkpoints whose every layer is MoE (`decoder_sparse_step` 1, empty
//!   `mlp_only_layers`) are accepted; anything else is an "unsupported" error.
//!
//! A `quantization_config` must describe block-scaled FP8 (see [`quant`]; the
//! result is [`ModelConfig::weight_format`]); other quantizations, rope types
//! other than `default`, `attention_bias`, and activations other than SiLU
//! are [`ConfigError::Unsupported`].
//!
//! Fields that fix a tensor's shape are **required** (a missing one is a
//! [`ConfigError::MissingField`] naming it): `vocab_size`, `hidden_size`,
//! `num_hidden_layers`, `num_attention_heads`, `num_key_value_heads`,
//! `head_dim`, the five `linear_*` sizes, and either the MoE sizes
//! (`num_experts`, `num_experts_per_tok`, `moe_intermediate_size`,
//! `shared_expert_intermediate_size`) or the dense `intermediate_size`.
//! transformers always writes these model-specific keys when it saves a
//! config. Other fields take transformers' defaults: `rms_norm_eps` 1e-6,
//! `tie_word_embeddings` false, `partial_rotary_factor` 0.25, `rope_theta`
//! 10000 (when neither `rope_parameters.rope_theta` nor `rope_theta` is
//! given), `attn_output_gate` true, `norm_topk_prob` true, `hidden_act`
//! silu, `max_position_embeddings` 32768, `layer_types` from
//! `full_attention_interval` (default 4: layer `i` is full attention iff
//! `(i + 1) % interval == 0`), dtype f32 (the storage dtype comes from
//! `dtype` or the older `torch_dtype`). Every size is bounded by
//! [`limits`] before anything is allocated from it.
//!
//! RoPE: only `rope_type` `default` is supported. `mrope_section` /
//! `mrope_interleaved` are recorded; for text-only positions (all three
//! position ids equal) multimodal RoPE is ordinary RoPE on the first
//! `rotary_dim = head_dim * partial_rotary_factor` dims of each head.

mod error;
mod hf;
mod presets;
pub mod quant;
pub mod types;
pub mod validate;

pub use error::ConfigError;
pub use presets::tail_anchored_layer_types;
pub use quant::{WeightFormat, FP8_BLOCK};
pub use types::{
    interval_layer_types, Family, LinearAttentionConfig, MlpConfig, ModelConfig, MoeConfig,
    RopeConfig,
};
pub use validate::limits;

use std::path::Path;

/// The largest `config.json` read (real ones are a few KiB).
const MAX_CONFIG_BYTES: u64 = 16 << 20;

impl ModelConfig {
    /// Reads `DIR/config.json` (a regular file of at most 16 MiB).
    pub fn from_dir(dir: &Path) -> Result<ModelConfig, ConfigError> {
        let path = dir.join("config.json");
        let io = |reason: String| ConfigError::Io {
            path: path.display().to_string(),
            reason,
        };
        let text =
            crate::files::read_regular_text(&path, MAX_CONFIG_BYTES).map_err(|e| match e {
                crate::files::FileError::Refused { reason, .. } => io(reason),
                crate::files::FileError::Io { op, error, .. } => {
                    io(format!("{op} failed: {error}"))
                }
            })?;
        ModelConfig::from_json_str(&text)
    }
}

#[cfg(test)]
mod tests;
