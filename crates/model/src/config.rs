//! Model configuration: Hugging Face `config.json` of the Qwen3.5 / Qwen3.6
//! hybrid family, and the built-in synthetic presets.
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
//! Quantized checkpoints (a `quantization_config`), rope types other than
//! `default`, `attention_bias`, and activations other than SiLU are
//! [`ConfigError::Unsupported`].
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
//! silu, `layer_types` from `full_attention_interval` (default 4: layer `i`
//! is full attention iff `(i + 1) % interval == 0`), dtype f32 (the
//! storage dtype comes from `dtype` or the older `torch_dtype`).
//!
//! RoPE: only `rope_type` `default` is supported. `mrope_section` /
//! `mrope_interleaved` are recorded; for text-only positions (all three
//! position ids equal) multimodal RoPE is ordinary RoPE on the first
//! `rotary_dim = head_dim * partial_rotary_factor` dims of each head.

use headroom_core::{AttentionKind, Dtype, LayerKind};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::Path;

/// Why a configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("malformed config JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("config is not a JSON object")]
    NotAnObject,
    #[error("config has no `model_type`")]
    MissingModelType,
    #[error(
        "unknown model_type `{0}` (supported: qwen3_5_moe, qwen3_5_moe_text, qwen3_5, qwen3_5_text, qwen3_next)"
    )]
    UnknownModelType(String),
    #[error("config is missing the required field `{0}`")]
    MissingField(String),
    #[error("config field `{field}` is invalid: {reason}")]
    InvalidField { field: String, reason: String },
    #[error("unsupported configuration: {0}")]
    Unsupported(String),
    #[error(
        "unknown synthetic model `{0}` (available: tiny-d256, tiny-d64, qwen3.6-35b-a3b, each optionally with :layers=N)"
    )]
    UnknownSynthetic(String),
}

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
}

impl ModelConfig {
    /// Parses a Hugging Face `config.json`.
    pub fn from_json_str(json: &str) -> Result<ModelConfig, ConfigError> {
        let root: Value = serde_json::from_str(json)?;
        let root = root.as_object().ok_or(ConfigError::NotAnObject)?;
        let top_type = str_field(root, "model_type")?.ok_or(ConfigError::MissingModelType)?;
        let (text, model_type) = match root.get("text_config") {
            Some(Value::Object(text)) => {
                let t =
                    str_field(text, "model_type")?.unwrap_or_else(|| format!("{top_type}_text"));
                (text, t)
            }
            Some(_) => {
                return Err(ConfigError::InvalidField {
                    field: "text_config".into(),
                    reason: "not a JSON object".into(),
                })
            }
            None => (root, top_type.clone()),
        };
        let family = match model_type.as_str() {
            "qwen3_5_moe" | "qwen3_5_moe_text" => Family::Qwen35Moe,
            "qwen3_5" | "qwen3_5_text" => Family::Qwen35Dense,
            "qwen3_next" => Family::Qwen3Next,
            other => return Err(ConfigError::UnknownModelType(other.to_string())),
        };
        if let Some(q) = root
            .get("quantization_config")
            .or_else(|| text.get("quantization_config"))
        {
            let method = q
                .get("quant_method")
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            return Err(ConfigError::Unsupported(format!(
                "quantized checkpoint (quant_method `{method}`); only f32 / f16 / bf16 weights are supported"
            )));
        }
        parse_text(text, root, model_type, family)
    }

    /// Reads `DIR/config.json`.
    pub fn from_dir(dir: &Path) -> Result<ModelConfig, ConfigError> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        ModelConfig::from_json_str(&text)
    }

    /// A built-in synthetic preset: `tiny-d256`, `tiny-d64`, `qwen3.6-35b-a3b`,
    /// each optionally suffixed `:layers=N` (the layer pattern continues: every
    /// 4th layer is full attention).
    pub fn synthetic(name: &str) -> Result<ModelConfig, ConfigError> {
        let unknown = || ConfigError::UnknownSynthetic(name.to_string());
        let (base, layers) = match name.split_once(':') {
            None => (name, None),
            Some((base, opt)) => {
                let n = opt
                    .strip_prefix("layers=")
                    .and_then(|n| n.trim().parse::<usize>().ok())
                    .filter(|&n| n >= 1)
                    .ok_or_else(unknown)?;
                (base, Some(n))
            }
        };
        let mut cfg = match base.trim() {
            "tiny-d256" => tiny(256),
            "tiny-d64" => tiny(64),
            "qwen3.6-35b-a3b" => qwen36_35b_a3b(),
            _ => return Err(unknown()),
        };
        if let Some(n) = layers {
            cfg.num_hidden_layers = n;
            cfg.layer_types = interval_layer_types(n, 4);
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// One [`LayerKind`] per layer. Full layers: softmax attention's head_dim,
    /// q heads, kv heads; linear layers: the Gated DeltaNet's key head dim,
    /// key heads (as `q_heads`) and value heads (as `kv_heads`).
    pub fn layer_kinds(&self) -> Vec<LayerKind> {
        (0..self.num_hidden_layers)
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
        (0..self.num_hidden_layers)
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

    /// The config as a flat Hugging Face text-model `config.json`
    /// (what `Qwen3_5MoeForCausalLM` / `Qwen3_5ForCausalLM` save); parsing it
    /// back gives this config.
    pub fn to_hf_json(&self) -> Value {
        let layer_types: Vec<&str> = self
            .layer_types
            .iter()
            .map(|k| match k {
                AttentionKind::Full => "full_attention",
                AttentionKind::Linear => "linear_attention",
            })
            .collect();
        let mut rope = serde_json::json!({
            "rope_type": "default",
            "rope_theta": self.rope.theta,
            "partial_rotary_factor": self.rope.partial_rotary_factor,
        });
        if let Some(section) = &self.rope.mrope_section {
            rope["mrope_section"] = serde_json::json!(section);
            rope["mrope_interleaved"] = self.rope.mrope_interleaved.into();
        }
        let mut v = serde_json::json!({
            "architectures": [match self.family {
                Family::Qwen35Moe => "Qwen3_5MoeForCausalLM",
                Family::Qwen35Dense => "Qwen3_5ForCausalLM",
                Family::Qwen3Next => "Qwen3NextForCausalLM",
            }],
            "model_type": self.model_type,
            "dtype": match self.dtype {
                Dtype::F32 => "float32",
                Dtype::F16 => "float16",
                Dtype::Bf16 => "bfloat16",
            },
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "layer_types": layer_types,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "attn_output_gate": self.attn_output_gate,
            "attention_bias": false,
            "hidden_act": "silu",
            "rope_parameters": rope,
            "linear_num_key_heads": self.linear.num_key_heads,
            "linear_num_value_heads": self.linear.num_value_heads,
            "linear_key_head_dim": self.linear.key_head_dim,
            "linear_value_head_dim": self.linear.value_head_dim,
            "linear_conv_kernel_dim": self.linear.conv_kernel_dim,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
        });
        match &self.mlp {
            MlpConfig::Moe(m) => {
                v["num_experts"] = m.num_experts.into();
                v["num_experts_per_tok"] = m.num_experts_per_tok.into();
                v["moe_intermediate_size"] = m.moe_intermediate_size.into();
                v["shared_expert_intermediate_size"] = m.shared_expert_intermediate_size.into();
                v["norm_topk_prob"] = m.norm_topk_prob.into();
            }
            MlpConfig::Dense { intermediate_size } => {
                v["intermediate_size"] = (*intermediate_size).into();
            }
        }
        if !self.eos_token_ids.is_empty() {
            v["eos_token_id"] = serde_json::json!(self.eos_token_ids);
        }
        v
    }

    /// Checks the internal consistency of the sizes (head divisibility, rotary dims, ...).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field: &str, reason: String| {
            Err(ConfigError::InvalidField {
                field: field.into(),
                reason,
            })
        };
        for (field, v) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("linear_num_key_heads", self.linear.num_key_heads),
            ("linear_num_value_heads", self.linear.num_value_heads),
            ("linear_key_head_dim", self.linear.key_head_dim),
            ("linear_value_head_dim", self.linear.value_head_dim),
            ("linear_conv_kernel_dim", self.linear.conv_kernel_dim),
        ] {
            if v == 0 {
                return bad(field, "must be at least 1".into());
            }
        }
        if self.layer_types.len() != self.num_hidden_layers {
            return bad(
                "layer_types",
                format!(
                    "has {} entries but num_hidden_layers is {}",
                    self.layer_types.len(),
                    self.num_hidden_layers
                ),
            );
        }
        if !self
            .num_attention_heads
            .is_multiple_of(self.num_key_value_heads)
        {
            return bad(
                "num_key_value_heads",
                format!(
                    "{} does not divide num_attention_heads {}",
                    self.num_key_value_heads, self.num_attention_heads
                ),
            );
        }
        if !self
            .linear
            .num_value_heads
            .is_multiple_of(self.linear.num_key_heads)
        {
            return bad(
                "linear_num_key_heads",
                format!(
                    "{} does not divide linear_num_value_heads {}",
                    self.linear.num_key_heads, self.linear.num_value_heads
                ),
            );
        }
        if self.rope.rotary_dim == 0
            || self.rope.rotary_dim > self.head_dim
            || !self.rope.rotary_dim.is_multiple_of(2)
        {
            return bad(
                "partial_rotary_factor",
                format!(
                    "{} gives {} rotary dims of head_dim {} (need an even number in 2..=head_dim)",
                    self.rope.partial_rotary_factor, self.rope.rotary_dim, self.head_dim
                ),
            );
        }
        if !(self.rope.theta.is_finite() && self.rope.theta > 0.0) {
            return bad("rope_theta", format!("{} is not positive", self.rope.theta));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps >= 0.0) {
            return bad(
                "rms_norm_eps",
                format!("{} is not valid", self.rms_norm_eps),
            );
        }
        match &self.mlp {
            MlpConfig::Moe(m) => {
                if m.num_experts == 0 || m.moe_intermediate_size == 0 {
                    return bad(
                        "num_experts",
                        "experts and their size must be at least 1".into(),
                    );
                }
                if m.num_experts_per_tok == 0 || m.num_experts_per_tok > m.num_experts {
                    return bad(
                        "num_experts_per_tok",
                        format!("{} not in 1..={}", m.num_experts_per_tok, m.num_experts),
                    );
                }
            }
            MlpConfig::Dense { intermediate_size } => {
                if *intermediate_size == 0 {
                    return bad("intermediate_size", "must be at least 1".into());
                }
            }
        }
        Ok(())
    }
}

/// `layer_types` from `full_attention_interval`: layer `i` is full iff `(i + 1) % interval == 0`.
pub fn interval_layer_types(layers: usize, interval: usize) -> Vec<AttentionKind> {
    (0..layers)
        .map(|i| {
            if (i + 1) % interval == 0 {
                AttentionKind::Full
            } else {
                AttentionKind::Linear
            }
        })
        .collect()
}

fn tiny(head_dim: usize) -> ModelConfig {
    ModelConfig {
        model_type: "qwen3_5_moe_text".into(),
        family: Family::Qwen35Moe,
        vocab_size: 512,
        hidden_size: 128,
        num_hidden_layers: 4,
        layer_types: interval_layer_types(4, 4),
        num_attention_heads: 4,
        num_key_value_heads: 2,
        head_dim,
        attn_output_gate: true,
        rope: RopeConfig {
            theta: 10_000_000.0,
            partial_rotary_factor: 0.25,
            rotary_dim: head_dim / 4,
            mrope_section: None,
            mrope_interleaved: false,
        },
        linear: LinearAttentionConfig {
            num_key_heads: 2,
            num_value_heads: 4,
            key_head_dim: 32,
            value_head_dim: 32,
            conv_kernel_dim: 4,
        },
        mlp: MlpConfig::Moe(MoeConfig {
            num_experts: 8,
            num_experts_per_tok: 2,
            moe_intermediate_size: 64,
            shared_expert_intermediate_size: 64,
            norm_topk_prob: true,
        }),
        rms_norm_eps: 1e-6,
        tie_word_embeddings: false,
        dtype: Dtype::F32,
        fused_linear_projections: false,
        eos_token_ids: vec![],
    }
}

/// The text model of Qwen3.6-35B-A3B (as its public config.json gives it).
fn qwen36_35b_a3b() -> ModelConfig {
    ModelConfig {
        model_type: "qwen3_5_moe_text".into(),
        family: Family::Qwen35Moe,
        vocab_size: 248_320,
        hidden_size: 2048,
        num_hidden_layers: 40,
        layer_types: interval_layer_types(40, 4),
        num_attention_heads: 16,
        num_key_value_heads: 2,
        head_dim: 256,
        attn_output_gate: true,
        rope: RopeConfig {
            theta: 10_000_000.0,
            partial_rotary_factor: 0.25,
            rotary_dim: 64,
            mrope_section: Some(vec![11, 11, 10]),
            mrope_interleaved: true,
        },
        linear: LinearAttentionConfig {
            num_key_heads: 16,
            num_value_heads: 32,
            key_head_dim: 128,
            value_head_dim: 128,
            conv_kernel_dim: 4,
        },
        mlp: MlpConfig::Moe(MoeConfig {
            num_experts: 256,
            num_experts_per_tok: 8,
            moe_intermediate_size: 512,
            shared_expert_intermediate_size: 512,
            norm_topk_prob: true,
        }),
        rms_norm_eps: 1e-6,
        tie_word_embeddings: false,
        dtype: Dtype::Bf16,
        fused_linear_projections: false,
        eos_token_ids: vec![],
    }
}

type Obj = Map<String, Value>;

fn parse_text(
    text: &Obj,
    root: &Obj,
    model_type: String,
    family: Family,
) -> Result<ModelConfig, ConfigError> {
    let num_hidden_layers = req_usize(text, "num_hidden_layers")?;
    let head_dim = req_usize(text, "head_dim")?;
    let layer_types = match text.get("layer_types") {
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v.as_str() {
                Some("full_attention") | Some("attention") => Ok(AttentionKind::Full),
                Some("linear_attention") => Ok(AttentionKind::Linear),
                _ => Err(ConfigError::InvalidField {
                    field: format!("layer_types[{i}]"),
                    reason: format!("{v} is not \"full_attention\" or \"linear_attention\""),
                }),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(Value::Null) | None => {
            let interval = opt_usize(text, "full_attention_interval")?.unwrap_or(4);
            if interval == 0 {
                return Err(ConfigError::InvalidField {
                    field: "full_attention_interval".into(),
                    reason: "must be at least 1".into(),
                });
            }
            interval_layer_types(num_hidden_layers, interval)
        }
        Some(other) => {
            return Err(ConfigError::InvalidField {
                field: "layer_types".into(),
                reason: format!("{other} is not an array"),
            })
        }
    };

    let hidden_act = str_field(text, "hidden_act")?.unwrap_or_else(|| "silu".into());
    if hidden_act != "silu" {
        return Err(ConfigError::Unsupported(format!(
            "hidden_act `{hidden_act}` (only silu)"
        )));
    }
    if opt_bool(text, "attention_bias")?.unwrap_or(false) {
        return Err(ConfigError::Unsupported("attention_bias = true".into()));
    }

    let rope = parse_rope(text, head_dim)?;
    let linear = LinearAttentionConfig {
        num_key_heads: req_usize(text, "linear_num_key_heads")?,
        num_value_heads: req_usize(text, "linear_num_value_heads")?,
        key_head_dim: req_usize(text, "linear_key_head_dim")?,
        value_head_dim: req_usize(text, "linear_value_head_dim")?,
        conv_kernel_dim: req_usize(text, "linear_conv_kernel_dim")?,
    };
    let mlp = match family {
        Family::Qwen35Dense => MlpConfig::Dense {
            intermediate_size: req_usize(text, "intermediate_size")?,
        },
        Family::Qwen35Moe | Family::Qwen3Next => {
            if family == Family::Qwen3Next {
                let step = opt_usize(text, "decoder_sparse_step")?.unwrap_or(1);
                let dense_layers = match text.get("mlp_only_layers") {
                    Some(Value::Array(a)) => a.len(),
                    _ => 0,
                };
                if step != 1 || dense_layers != 0 {
                    return Err(ConfigError::Unsupported(format!(
                        "qwen3_next with dense MLP layers (decoder_sparse_step {step}, {dense_layers} mlp_only_layers)"
                    )));
                }
            }
            MlpConfig::Moe(MoeConfig {
                num_experts: req_usize(text, "num_experts")?,
                num_experts_per_tok: req_usize(text, "num_experts_per_tok")?,
                moe_intermediate_size: req_usize(text, "moe_intermediate_size")?,
                shared_expert_intermediate_size: req_usize(
                    text,
                    "shared_expert_intermediate_size",
                )?,
                norm_topk_prob: opt_bool(text, "norm_topk_prob")?.unwrap_or(true),
            })
        }
    };
    // `tie_word_embeddings` and the dtype may sit at either level of a VL config.
    let tie_word_embeddings = match opt_bool(text, "tie_word_embeddings")? {
        Some(b) => b,
        None => opt_bool(root, "tie_word_embeddings")?.unwrap_or(false),
    };
    let dtype = match dtype_field(text)? {
        Some(d) => d,
        None => dtype_field(root)?.unwrap_or(Dtype::F32),
    };
    let eos_token_ids = match text
        .get("eos_token_id")
        .or_else(|| root.get("eos_token_id"))
    {
        Some(Value::Number(n)) => n.as_u64().map(|v| vec![v as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_u64())
            .map(|v| v as u32)
            .collect(),
        _ => vec![],
    };
    let cfg = ModelConfig {
        model_type,
        family,
        vocab_size: req_usize(text, "vocab_size")?,
        hidden_size: req_usize(text, "hidden_size")?,
        num_hidden_layers,
        layer_types,
        num_attention_heads: req_usize(text, "num_attention_heads")?,
        num_key_value_heads: req_usize(text, "num_key_value_heads")?,
        head_dim,
        attn_output_gate: opt_bool(text, "attn_output_gate")?.unwrap_or(true),
        rope,
        linear,
        mlp,
        rms_norm_eps: opt_f64(text, "rms_norm_eps")?.unwrap_or(1e-6),
        tie_word_embeddings,
        dtype,
        fused_linear_projections: family == Family::Qwen3Next,
        eos_token_ids,
    };
    cfg.validate()?;
    Ok(cfg)
}

fn parse_rope(text: &Obj, head_dim: usize) -> Result<RopeConfig, ConfigError> {
    // Newer configs: `rope_parameters`; older: `rope_scaling` + top-level `rope_theta`.
    let params = match text
        .get("rope_parameters")
        .or_else(|| text.get("rope_scaling"))
    {
        Some(Value::Object(p)) => Some(p),
        Some(Value::Null) | None => None,
        Some(other) => {
            return Err(ConfigError::InvalidField {
                field: "rope_parameters".into(),
                reason: format!("{other} is not an object"),
            })
        }
    };
    let empty = Obj::new();
    let p = params.unwrap_or(&empty);
    let rope_type = str_field(p, "rope_type")?
        .or(str_field(p, "type")?)
        .unwrap_or_else(|| "default".into());
    if rope_type != "default" {
        return Err(ConfigError::Unsupported(format!(
            "rope_type `{rope_type}` (only default)"
        )));
    }
    let theta = match opt_f64(p, "rope_theta")? {
        Some(t) => t,
        None => opt_f64(text, "rope_theta")?.unwrap_or(10_000.0),
    };
    let partial_rotary_factor = match opt_f64(p, "partial_rotary_factor")? {
        Some(f) => f,
        None => opt_f64(text, "partial_rotary_factor")?.unwrap_or(0.25),
    };
    if !(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0) {
        return Err(ConfigError::InvalidField {
            field: "partial_rotary_factor".into(),
            reason: format!("{partial_rotary_factor} not in (0, 1]"),
        });
    }
    let mrope_section = match p.get("mrope_section") {
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|v| v.as_u64().map(|x| x as usize))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| ConfigError::InvalidField {
                    field: "rope_parameters.mrope_section".into(),
                    reason: "not an array of non-negative integers".into(),
                })?,
        ),
        _ => None,
    };
    Ok(RopeConfig {
        theta,
        partial_rotary_factor,
        // transformers: int(head_dim * partial_rotary_factor)
        rotary_dim: (head_dim as f64 * partial_rotary_factor) as usize,
        mrope_section,
        mrope_interleaved: opt_bool(p, "mrope_interleaved")?.unwrap_or(false),
    })
}

fn invalid(field: &str, v: &Value, want: &str) -> ConfigError {
    ConfigError::InvalidField {
        field: field.into(),
        reason: format!("{v} is not {want}"),
    }
}

fn opt_usize(o: &Obj, field: &str) -> Result<Option<usize>, ConfigError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|x| Some(x as usize))
            .ok_or_else(|| invalid(field, v, "a non-negative integer")),
    }
}

fn req_usize(o: &Obj, field: &str) -> Result<usize, ConfigError> {
    opt_usize(o, field)?.ok_or_else(|| ConfigError::MissingField(field.into()))
}

fn opt_f64(o: &Obj, field: &str) -> Result<Option<f64>, ConfigError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| invalid(field, v, "a number")),
    }
}

fn opt_bool(o: &Obj, field: &str) -> Result<Option<bool>, ConfigError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| invalid(field, v, "a boolean")),
    }
}

fn str_field(o: &Obj, field: &str) -> Result<Option<String>, ConfigError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(invalid(field, v, "a string")),
    }
}

fn dtype_field(o: &Obj) -> Result<Option<Dtype>, ConfigError> {
    for field in ["dtype", "torch_dtype"] {
        if let Some(s) = str_field(o, field)? {
            return Dtype::parse(&s).map(Some).ok_or_else(|| {
                ConfigError::Unsupported(format!(
                    "{field} `{s}` (supported: float32, float16, bfloat16)"
                ))
            });
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config as transformers' `Qwen3_5MoeForConditionalGeneration` writes it (text under `text_config`).
    fn vl_moe_json() -> String {
        r#"{
          "architectures": ["Qwen3_5MoeForConditionalGeneration"],
          "model_type": "qwen3_5_moe",
          "tie_word_embeddings": false,
          "text_config": {
            "model_type": "qwen3_5_moe_text",
            "dtype": "bfloat16",
            "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 6,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
            "layer_types": ["linear_attention", "full_attention", "linear_attention",
                            "linear_attention", "linear_attention", "full_attention"],
            "linear_num_key_heads": 2, "linear_num_value_heads": 4,
            "linear_key_head_dim": 16, "linear_value_head_dim": 8, "linear_conv_kernel_dim": 3,
            "num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
            "shared_expert_intermediate_size": 40, "rms_norm_eps": 1e-5,
            "eos_token_id": [7, 9],
            "rope_parameters": {"rope_type": "default", "rope_theta": 5000000, "partial_rotary_factor": 0.5,
                                "mrope_section": [11, 11, 10], "mrope_interleaved": true}
          },
          "vision_config": {"depth": 2}
        }"#
        .to_string()
    }

    fn set(json: &str, path: &[&str], value: Option<Value>) -> String {
        let mut v: Value = serde_json::from_str(json).unwrap();
        let mut o = &mut v;
        for k in &path[..path.len() - 1] {
            o = o.get_mut(*k).unwrap();
        }
        let o = o.as_object_mut().unwrap();
        match value {
            Some(x) => o.insert(path[path.len() - 1].to_string(), x),
            None => o.remove(path[path.len() - 1]),
        };
        v.to_string()
    }

    #[test]
    fn parses_vl_moe_config_from_text_config() {
        let c = ModelConfig::from_json_str(&vl_moe_json()).unwrap();
        assert_eq!(c.family, Family::Qwen35Moe);
        assert_eq!(c.model_type, "qwen3_5_moe_text");
        assert_eq!(
            (c.vocab_size, c.hidden_size, c.num_hidden_layers),
            (1000, 64, 6)
        );
        assert_eq!(c.head_dim, 32);
        assert_eq!(c.dtype, Dtype::Bf16);
        assert_eq!(c.rope.theta, 5e6);
        assert_eq!(c.rope.rotary_dim, 16);
        assert_eq!(c.rope.mrope_section, Some(vec![11, 11, 10]));
        assert!(c.rope.mrope_interleaved);
        assert_eq!(c.rms_norm_eps, 1e-5);
        assert_eq!(c.eos_token_ids, vec![7, 9]);
        assert_eq!(c.linear.conv_dim(), 2 * 2 * 16 + 4 * 8);
        let m = c.moe().unwrap();
        assert_eq!((m.num_experts, m.num_experts_per_tok), (6, 2));
        assert_eq!(
            (m.moe_intermediate_size, m.shared_expert_intermediate_size),
            (24, 40)
        );
        assert!(m.norm_topk_prob && c.attn_output_gate && !c.tie_word_embeddings);
        assert_eq!(c.full_attention_layers(), vec![1, 5]);
        assert!(c.is_full_attention(1) && !c.is_full_attention(0) && !c.is_full_attention(99));
    }

    #[test]
    fn layer_kinds_follow_layer_types() {
        let c = ModelConfig::from_json_str(&vl_moe_json()).unwrap();
        let kinds = c.layer_kinds();
        assert_eq!(kinds.len(), 6);
        let full = LayerKind {
            attention: AttentionKind::Full,
            head_dim: 32,
            q_heads: 4,
            kv_heads: 2,
            dtype: Dtype::Bf16,
        };
        let linear = LayerKind {
            attention: AttentionKind::Linear,
            head_dim: 16,
            q_heads: 2,
            kv_heads: 4,
            dtype: Dtype::Bf16,
        };
        assert_eq!(kinds, vec![linear, full, linear, linear, linear, full]);
    }

    #[test]
    fn full_attention_interval_when_no_layer_types() {
        let j = set(&vl_moe_json(), &["text_config", "layer_types"], None);
        let j = set(
            &j,
            &["text_config", "full_attention_interval"],
            Some(3.into()),
        );
        let c = ModelConfig::from_json_str(&j).unwrap();
        assert_eq!(c.full_attention_layers(), vec![2, 5]);
        let j = set(&j, &["text_config", "full_attention_interval"], None);
        let c = ModelConfig::from_json_str(&j).unwrap();
        assert_eq!(c.full_attention_layers(), vec![3]);
    }

    #[test]
    fn text_only_config_with_legacy_rope_fields() {
        // Qwen3_5MoeForCausalLM saves a flat config; older files use torch_dtype / rope_theta.
        let v: Value = serde_json::from_str(&vl_moe_json()).unwrap();
        let mut text = v["text_config"].clone();
        let o = text.as_object_mut().unwrap();
        o.remove("rope_parameters");
        o.remove("dtype");
        o.insert("torch_dtype".into(), "float16".into());
        o.insert("rope_theta".into(), 1234.0.into());
        o.insert("partial_rotary_factor".into(), 1.0.into());
        o.insert("tie_word_embeddings".into(), true.into());
        let c = ModelConfig::from_json_str(&text.to_string()).unwrap();
        assert_eq!(c.dtype, Dtype::F16);
        assert_eq!(c.rope.theta, 1234.0);
        assert_eq!(c.rope.rotary_dim, 32);
        assert!(c.tie_word_embeddings);
        assert_eq!(c.rope.mrope_section, None);
    }

    #[test]
    fn dense_qwen3_5_needs_intermediate_size() {
        let j = set(&vl_moe_json(), &["model_type"], Some("qwen3_5".into()));
        let j = set(
            &j,
            &["text_config", "model_type"],
            Some("qwen3_5_text".into()),
        );
        let err = ModelConfig::from_json_str(&j).unwrap_err();
        assert!(
            matches!(&err, ConfigError::MissingField(f) if f == "intermediate_size"),
            "{err}"
        );
        let j = set(&j, &["text_config", "intermediate_size"], Some(96.into()));
        let c = ModelConfig::from_json_str(&j).unwrap();
        assert_eq!(c.family, Family::Qwen35Dense);
        assert_eq!(
            c.mlp,
            MlpConfig::Dense {
                intermediate_size: 96
            }
        );
        assert!(c.moe().is_none());
    }

    #[test]
    fn qwen3_next_is_moe_with_fused_projections() {
        let v: Value = serde_json::from_str(&vl_moe_json()).unwrap();
        let mut text = v["text_config"].clone();
        text["model_type"] = "qwen3_next".into();
        text["norm_topk_prob"] = false.into();
        let c = ModelConfig::from_json_str(&text.to_string()).unwrap();
        assert_eq!(c.family, Family::Qwen3Next);
        assert!(c.fused_linear_projections);
        assert!(!c.moe().unwrap().norm_topk_prob);
        text["mlp_only_layers"] = serde_json::json!([0]);
        let err = ModelConfig::from_json_str(&text.to_string()).unwrap_err();
        assert!(matches!(err, ConfigError::Unsupported(_)), "{err}");
    }

    #[test]
    fn errors_name_the_problem() {
        let err = ModelConfig::from_json_str("{ \"model_type\": ").unwrap_err();
        assert!(matches!(err, ConfigError::Json(_)), "{err}");
        let err = ModelConfig::from_json_str("[1]").unwrap_err();
        assert!(matches!(err, ConfigError::NotAnObject), "{err}");
        let err = ModelConfig::from_json_str("{}").unwrap_err();
        assert!(matches!(err, ConfigError::MissingModelType), "{err}");

        let j = set(
            &vl_moe_json(),
            &["text_config", "model_type"],
            Some("llama".into()),
        );
        let err = ModelConfig::from_json_str(&j).unwrap_err();
        assert!(
            err.to_string().contains("unknown model_type `llama`"),
            "{err}"
        );

        for field in [
            "head_dim",
            "num_key_value_heads",
            "linear_value_head_dim",
            "num_experts",
            "vocab_size",
        ] {
            let j = set(&vl_moe_json(), &["text_config", field], None);
            let err = ModelConfig::from_json_str(&j).unwrap_err();
            assert!(
                matches!(&err, ConfigError::MissingField(f) if f == field),
                "{err}"
            );
            assert!(err.to_string().contains(field));
        }
        let j = set(
            &vl_moe_json(),
            &["text_config", "hidden_size"],
            Some("big".into()),
        );
        let err = ModelConfig::from_json_str(&j).unwrap_err();
        assert!(err.to_string().contains("hidden_size"), "{err}");

        let j = set(
            &vl_moe_json(),
            &["text_config", "num_key_value_heads"],
            Some(3.into()),
        );
        let err = ModelConfig::from_json_str(&j).unwrap_err();
        assert!(err.to_string().contains("num_key_value_heads"), "{err}");

        let j = set(
            &vl_moe_json(),
            &["text_config", "num_hidden_layers"],
            Some(5.into()),
        );
        let err = ModelConfig::from_json_str(&j).unwrap_err();
        assert!(err.to_string().contains("layer_types"), "{err}");

        let j = set(
            &vl_moe_json(),
            &["text_config", "dtype"],
            Some("int8".into()),
        );
        assert!(matches!(
            ModelConfig::from_json_str(&j),
            Err(ConfigError::Unsupported(_))
        ));

        let j = set(
            &vl_moe_json(),
            &["quantization_config"],
            Some(serde_json::json!({"quant_method": "fp8"})),
        );
        let err = ModelConfig::from_json_str(&j).unwrap_err();
        assert!(err.to_string().contains("quant_method `fp8`"), "{err}");

        let j = set(
            &vl_moe_json(),
            &["text_config", "rope_parameters", "rope_type"],
            Some("yarn".into()),
        );
        let err = ModelConfig::from_json_str(&j).unwrap_err();
        assert!(err.to_string().contains("yarn"), "{err}");
    }

    #[test]
    fn from_dir_reads_config_json_and_reports_missing_file() {
        let dir = std::env::temp_dir().join(format!("headroom-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = ModelConfig::from_dir(&dir.join("nope")).unwrap_err();
        assert!(err.to_string().contains("config.json"), "{err}");
        std::fs::write(dir.join("config.json"), vl_moe_json()).unwrap();
        let c = ModelConfig::from_dir(&dir).unwrap();
        assert_eq!(c.num_hidden_layers, 6);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hf_json_round_trips() {
        for name in ["tiny-d256", "tiny-d64", "qwen3.6-35b-a3b:layers=8"] {
            let c = ModelConfig::synthetic(name).unwrap();
            let back = ModelConfig::from_json_str(&c.to_hf_json().to_string()).unwrap();
            assert_eq!(back, c, "{name}");
        }
        let mut c = ModelConfig::synthetic("tiny-d64").unwrap();
        c.model_type = "qwen3_5_text".into();
        c.family = Family::Qwen35Dense;
        c.mlp = MlpConfig::Dense {
            intermediate_size: 80,
        };
        c.eos_token_ids = vec![3];
        c.tie_word_embeddings = true;
        let back = ModelConfig::from_json_str(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn synthetic_presets() {
        for (name, d) in [("tiny-d256", 256), ("tiny-d64", 64)] {
            let c = ModelConfig::synthetic(name).unwrap();
            assert_eq!(c.head_dim, d);
            assert_eq!((c.num_attention_heads, c.num_key_value_heads), (4, 2));
            let kinds = c.layer_kinds();
            let full = kinds
                .iter()
                .filter(|k| k.attention == AttentionKind::Full)
                .count();
            assert_eq!(full * 4, kinds.len(), "3 linear : 1 full");
            assert!(c.moe().unwrap().num_experts > c.moe().unwrap().num_experts_per_tok);
        }
        let c = ModelConfig::synthetic("qwen3.6-35b-a3b").unwrap();
        assert_eq!(c.num_hidden_layers, 40);
        assert_eq!(
            c.full_attention_layers(),
            (0..10).map(|i| 4 * i + 3).collect::<Vec<_>>()
        );
        assert_eq!(
            c.layer_kind(3),
            LayerKind {
                attention: AttentionKind::Full,
                head_dim: 256,
                q_heads: 16,
                kv_heads: 2,
                dtype: Dtype::Bf16
            }
        );
        assert_eq!((c.linear.num_key_heads, c.linear.num_value_heads), (16, 32));
        assert_eq!(
            (c.vocab_size, c.hidden_size, c.rope.rotary_dim),
            (248_320, 2048, 64)
        );

        let c = ModelConfig::synthetic("qwen3.6-35b-a3b:layers=4").unwrap();
        assert_eq!(c.num_hidden_layers, 4);
        assert_eq!(c.full_attention_layers(), vec![3]);
        for bad in [
            "tiny",
            "qwen3.6-35b-a3b:layers=0",
            "tiny-d64:layers=x",
            "tiny-d64:depth=2",
        ] {
            let err = ModelConfig::synthetic(bad).unwrap_err();
            assert!(
                matches!(err, ConfigError::UnknownSynthetic(_)),
                "{bad}: {err}"
            );
        }
    }
}
