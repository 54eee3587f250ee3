//! Tests of the config module: Hugging Face parsing, validation, presets.
use super::*;
use headroom_core::{AttentionKind, Dtype, LayerKind};
use serde_json::Value;

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
        Some(serde_json::json!({"quant_method": "awq"})),
    );
    let err = ModelConfig::from_json_str(&j).unwrap_err();
    assert!(err.to_string().contains("quant_method `awq`"), "{err}");
    let j = set(
        &vl_moe_json(),
        &["quantization_config"],
        Some(serde_json::json!({"quant_method": "fp8"})),
    );
    let err = ModelConfig::from_json_str(&j).unwrap_err();
    assert!(err.to_string().contains("weight_block_size"), "{err}");

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
fn fp8_quantization_config_gives_the_weight_format() {
    let q = serde_json::json!({"quant_method": "fp8", "fmt": "e4m3",
        "activation_scheme": "dynamic", "weight_block_size": [128, 128],
        "modules_to_not_convert": ["lm_head", "model.language_model.layers.0.mlp.gate"]});
    let plain = ModelConfig::from_json_str(&vl_moe_json()).unwrap();
    assert_eq!(plain.weight_format, WeightFormat::Plain);
    let j = set(&vl_moe_json(), &["quantization_config"], Some(q.clone()));
    let c = ModelConfig::from_json_str(&j).unwrap();
    let WeightFormat::Fp8Block {
        block,
        modules_to_not_convert,
    } = &c.weight_format
    else {
        panic!("{:?}", c.weight_format)
    };
    assert_eq!(*block, [128, 128]);
    assert_eq!(modules_to_not_convert.len(), 2);
    assert!(c.weight_format.not_converted("layers.0.mlp.gate"));
    // Under text_config too, and written back by to_hf_json.
    let j = set(
        &vl_moe_json(),
        &["text_config", "quantization_config"],
        Some(q),
    );
    assert_eq!(ModelConfig::from_json_str(&j).unwrap(), c);
    let back = ModelConfig::from_json_str(&c.to_hf_json().to_string()).unwrap();
    assert_eq!(back.weight_format, c.weight_format);
    let j = set(
        &vl_moe_json(),
        &["quantization_config"],
        Some(serde_json::json!({"quant_method": "fp8", "weight_block_size": [128, 64]})),
    );
    let err = ModelConfig::from_json_str(&j).unwrap_err();
    assert!(err.to_string().contains("[128, 64]"), "{err}");
}

#[test]
fn fp8_presets_carry_qwens_weight_format() {
    for name in [
        "tiny-d64-fp8",
        "tiny-d256-fp8:layers=2",
        "qwen3.6-35b-a3b-fp8",
    ] {
        let c = ModelConfig::synthetic(name).unwrap();
        assert!(c.weight_format.is_fp8(), "{name}");
        assert!(c.weight_format.not_converted("layers.0.mlp.gate"));
        assert!(c.weight_format.not_converted("lm_head"));
        assert!(!c
            .weight_format
            .not_converted("layers.0.mlp.experts.gate_up_proj"));
        let back = ModelConfig::from_json_str(&c.to_hf_json().to_string()).unwrap();
        assert_eq!(back, c, "{name}");
        let plain = ModelConfig::synthetic(name.replace("-fp8", "").as_str()).unwrap();
        assert_eq!(
            ModelConfig {
                weight_format: WeightFormat::Plain,
                ..c
            },
            plain
        );
    }
    assert!(ModelConfig::synthetic("tiny-d64-fp16").is_err());
    // The 35B-A3B in FP8: under 36 GB of weights (bf16: ~69 GB).
    let fp8 = crate::weights::expected_storage_bytes(
        &ModelConfig::synthetic("qwen3.6-35b-a3b-fp8").unwrap(),
    );
    let bf16 =
        crate::weights::expected_storage_bytes(&ModelConfig::synthetic("qwen3.6-35b-a3b").unwrap());
    println!("35B-A3B weights: fp8 {fp8} bytes, bf16 {bf16} bytes");
    assert!(
        fp8 < 36_000_000_000 && fp8 * 2 > bf16 && fp8 < bf16 * 55 / 100,
        "{fp8} vs {bf16}"
    );
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
    for bad in ["tiny", "tiny-d64:depth=2"] {
        let err = ModelConfig::synthetic(bad).unwrap_err();
        assert!(
            matches!(err, ConfigError::UnknownSynthetic(_)),
            "{bad}: {err}"
        );
    }
    for bad in [
        "qwen3.6-35b-a3b:layers=0",
        "tiny-d64:layers=x",
        "tiny-d64:layers=1025",
        "qwen3.6-35b-a3b:layers=18446744073709551615",
        "qwen3.6-35b-a3b:layers=1000000000000000000000",
    ] {
        let err = ModelConfig::synthetic(bad).unwrap_err();
        assert!(
            matches!(&err, ConfigError::InvalidField { field, .. } if field == "layers"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn small_layer_counts_end_in_full_attention() {
    for n in 1..=9 {
        let c = ModelConfig::synthetic(&format!("qwen3.6-35b-a3b:layers={n}")).unwrap();
        assert!(c.is_full_attention(n - 1), "layers={n}: last layer is full");
        assert_eq!(c.full_attention_layers().len(), n.div_ceil(4), "layers={n}");
    }
    let c = ModelConfig::synthetic("tiny-d64:layers=2").unwrap();
    assert_eq!(c.full_attention_layers(), vec![1]);
}

#[test]
fn huge_layer_counts_are_refused_before_allocating() {
    for n in [
        serde_json::json!(1_000_000_000u64),
        serde_json::json!(u64::MAX),
        serde_json::json!(1025),
    ] {
        let j = set(&vl_moe_json(), &["text_config", "layer_types"], None);
        let j = set(&j, &["text_config", "num_hidden_layers"], Some(n.clone()));
        let err = ModelConfig::from_json_str(&j).unwrap_err();
        assert!(
            matches!(&err, ConfigError::InvalidField { field, .. } if field == "num_hidden_layers"),
            "{n}: {err}"
        );
        assert!(err.to_string().contains("limit"), "{err}");
    }
    // Negative or fractional sizes name the field.
    for v in [
        serde_json::json!(-1),
        serde_json::json!(1.5),
        serde_json::json!(1e30),
    ] {
        let j = set(
            &vl_moe_json(),
            &["text_config", "num_hidden_layers"],
            Some(v),
        );
        let err = ModelConfig::from_json_str(&j).unwrap_err();
        assert!(err.to_string().contains("num_hidden_layers"), "{err}");
    }
}

#[test]
fn every_size_is_bounded_and_the_parameter_count_is_checked() {
    for (field, v) in [
        ("vocab_size", 1u64 << 40),
        ("hidden_size", 1 << 30),
        ("num_experts", 1 << 20),
        ("moe_intermediate_size", u64::MAX),
        ("max_position_embeddings", 1 << 40),
    ] {
        let j = set(&vl_moe_json(), &["text_config", field], Some(v.into()));
        let err = ModelConfig::from_json_str(&j).unwrap_err();
        assert!(err.to_string().contains(field), "{field}: {err}");
    }
    // Each size within its bound, the product above the parameter limit.
    let mut j = vl_moe_json();
    for (field, v) in [
        ("hidden_size", limits::MAX_WIDTH),
        ("num_experts", limits::MAX_EXPERTS),
        ("moe_intermediate_size", limits::MAX_WIDTH),
    ] {
        j = set(&j, &["text_config", field], Some(v.into()));
    }
    let err = ModelConfig::from_json_str(&j).unwrap_err();
    assert!(err.to_string().contains("parameters"), "{err}");
    let c = ModelConfig::synthetic("qwen3.6-35b-a3b").unwrap();
    let params = c.parameter_count().unwrap();
    assert!(
        (34_000_000_000..36_000_000_000).contains(&params),
        "{params}"
    );
    assert_eq!(c.weight_bytes(), Some(params * 2));
}

#[test]
fn max_position_embeddings_is_read_checked_and_bounds_sequences() {
    let j = set(
        &vl_moe_json(),
        &["text_config", "max_position_embeddings"],
        Some(0.into()),
    );
    let err = ModelConfig::from_json_str(&j).unwrap_err();
    assert!(
        matches!(&err, ConfigError::InvalidField { field, .. } if field == "max_position_embeddings"),
        "{err}"
    );
    let j = set(
        &vl_moe_json(),
        &["text_config", "max_position_embeddings"],
        Some(4096.into()),
    );
    let c = ModelConfig::from_json_str(&j).unwrap();
    assert_eq!(c.max_position_embeddings, 4096);
    assert!(c.check_sequence_length(4096).is_ok());
    let err = c.check_sequence_length(1_000_000).unwrap_err();
    assert!(
        err.to_string().contains("1000000") && err.to_string().contains("4096"),
        "{err}"
    );
    let c = ModelConfig::from_json_str(&vl_moe_json()).unwrap();
    assert_eq!(c.max_position_embeddings, 32_768, "transformers' default");
}

#[test]
fn malformed_eos_ids_are_errors_naming_the_field() {
    for v in [
        serde_json::json!(-3),
        serde_json::json!("x"),
        serde_json::json!([1, "a"]),
    ] {
        let j = set(
            &vl_moe_json(),
            &["text_config", "eos_token_id"],
            Some(v.clone()),
        );
        let err = ModelConfig::from_json_str(&j).unwrap_err();
        assert!(err.to_string().contains("eos_token_id"), "{v}: {err}");
    }
}

#[test]
fn from_dir_refuses_what_is_not_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("config.json")).unwrap();
    let err = ModelConfig::from_dir(dir.path()).unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
}
