//! Hugging Face `config.json` in and out: the text-model fields are read by
//! serde (`#[serde(default)]`, every field optional), then the required ones
//! are checked, the defaults applied and the result validated.

use super::error::ConfigError;
use super::quant::WeightFormat;
use super::types::{
    interval_layer_types, Family, LinearAttentionConfig, MlpConfig, ModelConfig, MoeConfig,
    RopeConfig,
};
use super::validate::{check_size, limits};
use headroom_core::{AttentionKind, Dtype};
use serde::Deserialize;
use serde_json::{Map, Value};

type Obj = Map<String, Value>;

/// Declares a serde struct whose fields are all optional, plus a
/// `parse(obj)` that names the first field whose value has the wrong type
/// when serde refuses the object.
macro_rules! optional_fields {
    ($(#[$meta:meta])* struct $name:ident { $($(#[$fmeta:meta])* $field:ident : $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Default, Deserialize)]
        #[serde(default)]
        struct $name { $($(#[$fmeta])* $field: Option<$ty>,)* }

        impl $name {
            fn parse(obj: &Obj) -> Result<Self, ConfigError> {
                Self::deserialize(&Value::Object(obj.clone())).map_err(|e| {
                    $(if let Some(v) = obj.get(stringify!($field)) {
                        if let Err(e) = Option::<$ty>::deserialize(v) {
                            return ConfigError::invalid(stringify!($field), format!("{v}: {e}"));
                        }
                    })*
                    ConfigError::invalid(stringify!($name), e.to_string())
                })
            }
        }
    };
}

/// `eos_token_id`: one id or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum EosIds {
    One(u32),
    Many(Vec<u32>),
}

optional_fields! {
    /// The fields read from the top level of a (possibly vision-language) config.
    struct Root {
        model_type: String,
        text_config: Value,
        quantization_config: Value,
        tie_word_embeddings: bool,
        dtype: String,
        torch_dtype: String,
        eos_token_id: EosIds,
    }
}

optional_fields! {
    /// The fields of the text model.
    struct Text {
        model_type: String,
        vocab_size: usize,
        hidden_size: usize,
        num_hidden_layers: usize,
        layer_types: Vec<String>,
        full_attention_interval: usize,
        num_attention_heads: usize,
        num_key_value_heads: usize,
        head_dim: usize,
        attn_output_gate: bool,
        attention_bias: bool,
        hidden_act: String,
        rope_parameters: Rope,
        rope_scaling: Rope,
        rope_theta: f64,
        partial_rotary_factor: f64,
        linear_num_key_heads: usize,
        linear_num_value_heads: usize,
        linear_key_head_dim: usize,
        linear_value_head_dim: usize,
        linear_conv_kernel_dim: usize,
        intermediate_size: usize,
        num_experts: usize,
        num_experts_per_tok: usize,
        moe_intermediate_size: usize,
        shared_expert_intermediate_size: usize,
        norm_topk_prob: bool,
        decoder_sparse_step: usize,
        mlp_only_layers: Vec<usize>,
        rms_norm_eps: f64,
        tie_word_embeddings: bool,
        dtype: String,
        torch_dtype: String,
        eos_token_id: EosIds,
        max_position_embeddings: usize,
        quantization_config: Value,
    }
}

/// `rope_parameters` (newer configs) or `rope_scaling` (older ones).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Rope {
    #[serde(alias = "type")]
    rope_type: Option<String>,
    rope_theta: Option<f64>,
    partial_rotary_factor: Option<f64>,
    mrope_section: Option<Vec<usize>>,
    mrope_interleaved: Option<bool>,
}

/// transformers' default `max_position_embeddings` for the family's text configs.
const DEFAULT_MAX_POSITIONS: usize = 32_768;

fn required<T>(value: Option<T>, field: &str) -> Result<T, ConfigError> {
    value.ok_or_else(|| ConfigError::MissingField(field.into()))
}

fn dtype_of(
    dtype: &Option<String>,
    torch_dtype: &Option<String>,
) -> Result<Option<Dtype>, ConfigError> {
    for (field, value) in [("dtype", dtype), ("torch_dtype", torch_dtype)] {
        if let Some(s) = value {
            return Dtype::parse(s).map(Some).ok_or_else(|| {
                ConfigError::Unsupported(format!(
                    "{field} `{s}` (supported: float32, float16, bfloat16)"
                ))
            });
        }
    }
    Ok(None)
}

impl ModelConfig {
    /// Parses a Hugging Face `config.json`.
    pub fn from_json_str(json: &str) -> Result<ModelConfig, ConfigError> {
        let root_value: Value = serde_json::from_str(json)?;
        let root_obj = root_value.as_object().ok_or(ConfigError::NotAnObject)?;
        let root = Root::parse(root_obj)?;
        let top_type = root
            .model_type
            .clone()
            .ok_or(ConfigError::MissingModelType)?;
        let (text_obj, nested) = match &root.text_config {
            Some(Value::Object(text)) => (text, true),
            Some(Value::Null) | None => (root_obj, false),
            Some(_) => return Err(ConfigError::invalid("text_config", "not a JSON object")),
        };
        let text = Text::parse(text_obj)?;
        let model_type = match (&text.model_type, nested) {
            (Some(t), true) => t.clone(),
            (None, true) => format!("{top_type}_text"),
            (_, false) => top_type,
        };
        let family = match model_type.as_str() {
            "qwen3_5_moe" | "qwen3_5_moe_text" => Family::Qwen35Moe,
            "qwen3_5" | "qwen3_5_text" => Family::Qwen35Dense,
            "qwen3_next" => Family::Qwen3Next,
            other => return Err(ConfigError::UnknownModelType(other.to_string())),
        };
        let weight_format = match root
            .quantization_config
            .as_ref()
            .or(text.quantization_config.as_ref())
        {
            None | Some(Value::Null) => WeightFormat::Plain,
            Some(q) => WeightFormat::from_hf_json(q)?,
        };
        text_config(text, &root, model_type, family, weight_format)
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
            "max_position_embeddings": self.max_position_embeddings,
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
        if let Some(q) = self.weight_format.to_hf_json() {
            v["quantization_config"] = q;
        }
        v
    }
}

fn text_config(
    text: Text,
    root: &Root,
    model_type: String,
    family: Family,
    weight_format: WeightFormat,
) -> Result<ModelConfig, ConfigError> {
    let num_hidden_layers = required(text.num_hidden_layers, "num_hidden_layers")?;
    // Bounded before anything is sized by it.
    check_size("num_hidden_layers", num_hidden_layers, limits::MAX_LAYERS)?;
    let head_dim = required(text.head_dim, "head_dim")?;
    let layer_types = match &text.layer_types {
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v.as_str() {
                "full_attention" | "attention" => Ok(AttentionKind::Full),
                "linear_attention" => Ok(AttentionKind::Linear),
                _ => Err(ConfigError::invalid(
                    &format!("layer_types[{i}]"),
                    format!("{v:?} is not \"full_attention\" or \"linear_attention\""),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?,
        None => {
            let interval = text.full_attention_interval.unwrap_or(4);
            if interval == 0 {
                return Err(ConfigError::invalid(
                    "full_attention_interval",
                    "must be at least 1",
                ));
            }
            interval_layer_types(num_hidden_layers, interval)
        }
    };

    let hidden_act = text.hidden_act.as_deref().unwrap_or("silu");
    if hidden_act != "silu" {
        return Err(ConfigError::Unsupported(format!(
            "hidden_act `{hidden_act}` (only silu)"
        )));
    }
    if text.attention_bias.unwrap_or(false) {
        return Err(ConfigError::Unsupported("attention_bias = true".into()));
    }

    let rope = rope_config(&text, head_dim)?;
    let linear = LinearAttentionConfig {
        num_key_heads: required(text.linear_num_key_heads, "linear_num_key_heads")?,
        num_value_heads: required(text.linear_num_value_heads, "linear_num_value_heads")?,
        key_head_dim: required(text.linear_key_head_dim, "linear_key_head_dim")?,
        value_head_dim: required(text.linear_value_head_dim, "linear_value_head_dim")?,
        conv_kernel_dim: required(text.linear_conv_kernel_dim, "linear_conv_kernel_dim")?,
    };
    let mlp = match family {
        Family::Qwen35Dense => MlpConfig::Dense {
            intermediate_size: required(text.intermediate_size, "intermediate_size")?,
        },
        Family::Qwen35Moe | Family::Qwen3Next => {
            if family == Family::Qwen3Next {
                let step = text.decoder_sparse_step.unwrap_or(1);
                let dense_layers = text.mlp_only_layers.as_ref().map_or(0, Vec::len);
                if step != 1 || dense_layers != 0 {
                    return Err(ConfigError::Unsupported(format!(
                        "qwen3_next with dense MLP layers (decoder_sparse_step {step}, {dense_layers} mlp_only_layers)"
                    )));
                }
            }
            MlpConfig::Moe(MoeConfig {
                num_experts: required(text.num_experts, "num_experts")?,
                num_experts_per_tok: required(text.num_experts_per_tok, "num_experts_per_tok")?,
                moe_intermediate_size: required(
                    text.moe_intermediate_size,
                    "moe_intermediate_size",
                )?,
                shared_expert_intermediate_size: required(
                    text.shared_expert_intermediate_size,
                    "shared_expert_intermediate_size",
                )?,
                norm_topk_prob: text.norm_topk_prob.unwrap_or(true),
            })
        }
    };
    // `tie_word_embeddings`, the dtype and the eos ids may sit at either level of a VL config.
    let dtype = match dtype_of(&text.dtype, &text.torch_dtype)? {
        Some(d) => d,
        None => dtype_of(&root.dtype, &root.torch_dtype)?.unwrap_or(Dtype::F32),
    };
    let eos_token_ids = match text.eos_token_id.as_ref().or(root.eos_token_id.as_ref()) {
        Some(EosIds::One(id)) => vec![*id],
        Some(EosIds::Many(ids)) => ids.clone(),
        None => vec![],
    };
    let cfg = ModelConfig {
        model_type,
        family,
        vocab_size: required(text.vocab_size, "vocab_size")?,
        hidden_size: required(text.hidden_size, "hidden_size")?,
        num_hidden_layers,
        layer_types,
        num_attention_heads: required(text.num_attention_heads, "num_attention_heads")?,
        num_key_value_heads: required(text.num_key_value_heads, "num_key_value_heads")?,
        head_dim,
        attn_output_gate: text.attn_output_gate.unwrap_or(true),
        rope,
        linear,
        mlp,
        rms_norm_eps: text.rms_norm_eps.unwrap_or(1e-6),
        tie_word_embeddings: text
            .tie_word_embeddings
            .or(root.tie_word_embeddings)
            .unwrap_or(false),
        dtype,
        fused_linear_projections: family == Family::Qwen3Next,
        eos_token_ids,
        max_position_embeddings: text
            .max_position_embeddings
            .unwrap_or(DEFAULT_MAX_POSITIONS),
        weight_format,
    };
    cfg.validate()?;
    Ok(cfg)
}

fn rope_config(text: &Text, head_dim: usize) -> Result<RopeConfig, ConfigError> {
    let empty = Rope::default();
    let p = text
        .rope_parameters
        .as_ref()
        .or(text.rope_scaling.as_ref())
        .unwrap_or(&empty);
    let rope_type = p.rope_type.as_deref().unwrap_or("default");
    if rope_type != "default" {
        return Err(ConfigError::Unsupported(format!(
            "rope_type `{rope_type}` (only default)"
        )));
    }
    let theta = p.rope_theta.or(text.rope_theta).unwrap_or(10_000.0);
    let partial_rotary_factor = p
        .partial_rotary_factor
        .or(text.partial_rotary_factor)
        .unwrap_or(0.25);
    if !(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0) {
        return Err(ConfigError::invalid(
            "partial_rotary_factor",
            format!("{partial_rotary_factor} not in (0, 1]"),
        ));
    }
    Ok(RopeConfig {
        theta,
        partial_rotary_factor,
        // transformers: int(head_dim * partial_rotary_factor)
        rotary_dim: (head_dim as f64 * partial_rotary_factor) as usize,
        mrope_section: p.mrope_section.clone(),
        mrope_interleaved: p.mrope_interleaved.unwrap_or(false),
    })
}
