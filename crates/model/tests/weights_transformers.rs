//! Checkpoints written by transformers itself in the layouts the loader
//! converts (tests/loader_fixtures, made by make_loader_fixtures.py there):
//! loading them and running the forward gives transformers' logits.
//!
//! * `next_d64`: `Qwen3NextForCausalLM` — fused `in_proj_qkvz` / `in_proj_ba`,
//!   one tensor per expert;
//! * `vl_moe_d128`: `Qwen3_5MoeForConditionalGeneration` — `text_config`,
//!   `model.language_model.` names, a vision tower to skip.

mod common;

use common::{read_f32_tensor, rel_err};
use headroom_cpu::CpuBackend;
use headroom_model::config::Family;
use headroom_model::{ForwardOptions, ModelConfig, Qwen35Model, Weights};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/loader_fixtures")
        .join(name)
}

/// The prompt's ids and transformers' logits for them (shape, values).
fn reference(dir: &Path) -> (Vec<u32>, Vec<usize>, Vec<f32>) {
    let ids: Vec<u32> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("ids.json")).unwrap()).unwrap();
    let (shape, v) = read_f32_tensor(&dir.join("logits.safetensors"), "logits");
    (ids, shape, v)
}

fn check(name: &str, family: Family) -> ModelConfig {
    let dir = fixture(name);
    let cfg = ModelConfig::from_dir(&dir).unwrap();
    assert_eq!(cfg.family, family);
    let weights = Weights::load(&dir, &cfg).unwrap();
    let model = Qwen35Model::load(CpuBackend::new(), &cfg, weights.clone()).unwrap();
    let (ids, shape, want) = reference(&dir);
    assert_eq!(shape, vec![ids.len(), cfg.vocab_size]);
    let got = model
        .forward_logits(&ids, &ForwardOptions::default())
        .unwrap();
    let e = rel_err(&got, &want);
    eprintln!("{name}: relative Frobenius error vs transformers {e:e}");
    assert!(e < 1e-4, "{name}: relative Frobenius error {e:e}");
    // A wrong conversion would not be close: the logits are far from zero.
    assert!(want.iter().map(|x| x.abs()).sum::<f32>() / (want.len() as f32) > 0.1);
    cfg
}

#[test]
fn qwen3_next_fused_projections_match_transformers() {
    let cfg = check("next_d64", Family::Qwen3Next);
    assert!(cfg.fused_linear_projections);
}

#[test]
fn vl_checkpoint_text_model_matches_transformers() {
    let cfg = check("vl_moe_d128", Family::Qwen35Moe);
    assert_eq!(cfg.head_dim, 128);
    assert_eq!(cfg.rope.mrope_section, Some(vec![6, 5, 5]));
}
