//! Loading checkpoints written in every layout real Qwen3.5 checkpoints use,
//! and the errors for bad ones.

mod common;

use common::{checkpoint, write, Experts};
use headroom_model::config::{Family, ModelConfig};
use headroom_model::{Tensor, TensorData, Weights, WeightsError};
use std::path::Path;

fn cfg() -> ModelConfig {
    ModelConfig::synthetic("tiny-d64").unwrap()
}

fn write_config(dir: &Path, cfg: &ModelConfig) {
    // The loader only needs the config value; the JSON is for completeness of the folder.
    std::fs::write(dir.join("config.json"), serde_json::to_string(cfg).unwrap()).unwrap();
}

#[test]
fn loads_vl_prefixed_stacked_checkpoint_and_skips_vision_and_mtp() {
    let cfg = cfg();
    let w = Weights::synthetic(&cfg, 11);
    let dir = tempfile::tempdir().unwrap();
    let mut tensors = checkpoint(&w, &cfg, "model.language_model.", Experts::Stacked);
    tensors.push((
        "model.visual.blocks.0.attn.qkv.weight".into(),
        Tensor::from_f32(vec![2, 3], vec![1.0; 6]),
    ));
    tensors.push((
        "mtp.layers.0.mlp.gate.weight".into(),
        Tensor::from_f32(vec![5], vec![0.5; 5]),
    ));
    write(&dir.path().join("model.safetensors"), &tensors);
    write_config(dir.path(), &cfg);
    let loaded = Weights::load(dir.path(), &cfg).unwrap();
    assert_eq!(loaded, w);
}

#[test]
fn stacks_per_expert_tensors_gate_rows_first() {
    let cfg = cfg();
    let w = Weights::synthetic(&cfg, 12);
    let dir = tempfile::tempdir().unwrap();
    let tensors = checkpoint(&w, &cfg, "model.", Experts::PerExpert);
    assert!(tensors
        .iter()
        .any(|(n, _)| n == "model.layers.2.mlp.experts.7.up_proj.weight"));
    write(&dir.path().join("model.safetensors"), &tensors);
    let loaded = Weights::load(dir.path(), &cfg).unwrap();
    assert_eq!(loaded, w);
    // Spot check: expert 5's gate row 0 is row 0 of its stacked block.
    let gate5 = &tensors
        .iter()
        .find(|(n, _)| n == "model.layers.1.mlp.experts.5.gate_proj.weight")
        .unwrap()
        .1;
    let stacked = loaded
        .get("layers.1.mlp.experts.gate_up_proj")
        .unwrap()
        .to_f32_vec();
    let (i, h) = (cfg.moe().unwrap().moe_intermediate_size, cfg.hidden_size);
    assert_eq!(
        &stacked[5 * 2 * i * h..5 * 2 * i * h + h],
        &gate5.to_f32_vec()[..h]
    );
}

#[test]
fn loads_sharded_checkpoint_through_the_index() {
    let cfg = cfg();
    let w = Weights::synthetic(&cfg, 13);
    let dir = tempfile::tempdir().unwrap();
    let tensors = checkpoint(&w, &cfg, "model.", Experts::PerExpert);
    let (a, b) = tensors.split_at(tensors.len() / 2);
    write(&dir.path().join("model-00001-of-00002.safetensors"), a);
    write(&dir.path().join("model-00002-of-00002.safetensors"), b);
    // A stray file not named by the index must be ignored.
    std::fs::write(
        dir.path().join("junk.safetensors"),
        b"not a safetensors file",
    )
    .unwrap();
    let mut map = serde_json::Map::new();
    for (n, _) in a {
        map.insert(n.clone(), "model-00001-of-00002.safetensors".into());
    }
    for (n, _) in b {
        map.insert(n.clone(), "model-00002-of-00002.safetensors".into());
    }
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": map});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let loaded = Weights::load(dir.path(), &cfg).unwrap();
    assert_eq!(loaded, w);

    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        "{\"weight_map\": 3}",
    )
    .unwrap();
    let err = Weights::load(dir.path(), &cfg).unwrap_err();
    assert!(matches!(err, WeightsError::Index { .. }), "{err}");
}

#[test]
fn loads_bf16_checkpoint_in_storage_dtype() {
    let mut cfg = cfg();
    cfg.dtype = headroom_core::Dtype::Bf16;
    let w = Weights::synthetic(&cfg, 14);
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir.path().join("model.safetensors"),
        &checkpoint(&w, &cfg, "model.", Experts::Stacked),
    );
    let loaded = Weights::load(dir.path(), &cfg).unwrap();
    assert!(matches!(
        loaded.get("embed_tokens.weight").unwrap().data,
        TensorData::Bf16(_)
    ));
    assert_eq!(loaded, w);
}

#[test]
fn splits_qwen3_next_fused_projections() {
    let mut cfg = cfg();
    cfg.family = Family::Qwen3Next;
    cfg.fused_linear_projections = true;
    let w = Weights::synthetic(&cfg, 15);
    let l = cfg.linear;
    let (nk, dk, dv, h) = (
        l.num_key_heads,
        l.key_head_dim,
        l.value_head_dim,
        cfg.hidden_size,
    );
    let r = l.num_value_heads / nk;
    let mut tensors = Vec::new();
    for (name, t) in checkpoint(&w, &cfg, "model.", Experts::PerExpert) {
        let Some(base) = name.strip_suffix(".in_proj_qkv.weight") else {
            if name.contains(".in_proj_") {
                continue; // z, b, a are folded into the fused tensors below
            }
            tensors.push((name, t));
            continue;
        };
        let row = |n: &str, i: usize| -> Vec<f32> {
            let t = w
                .get(&format!("{}.{n}.weight", base.trim_start_matches("model.")))
                .unwrap()
                .to_f32_vec();
            t[i * h..(i + 1) * h].to_vec()
        };
        let mut qkvz = Vec::new();
        let mut ba = Vec::new();
        for g in 0..nk {
            for i in 0..dk {
                qkvz.extend(row("in_proj_qkv", g * dk + i));
            }
            for i in 0..dk {
                qkvz.extend(row("in_proj_qkv", nk * dk + g * dk + i));
            }
            for i in 0..r * dv {
                qkvz.extend(row("in_proj_qkv", 2 * nk * dk + g * r * dv + i));
            }
            for i in 0..r * dv {
                qkvz.extend(row("in_proj_z", g * r * dv + i));
            }
            for j in 0..r {
                ba.extend(row("in_proj_b", g * r + j));
            }
            for j in 0..r {
                ba.extend(row("in_proj_a", g * r + j));
            }
        }
        let rows = qkvz.len() / h;
        tensors.push((
            format!("{base}.in_proj_qkvz.weight"),
            Tensor::from_f32(vec![rows, h], qkvz),
        ));
        tensors.push((
            format!("{base}.in_proj_ba.weight"),
            Tensor::from_f32(vec![2 * r * nk, h], ba),
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("model.safetensors"), &tensors);
    let loaded = Weights::load(dir.path(), &cfg).unwrap();
    assert_eq!(loaded, w);
}

#[test]
fn transposes_old_orientation_stacked_experts() {
    let mut cfg = cfg();
    if let headroom_model::config::MlpConfig::Moe(m) = &mut cfg.mlp {
        m.moe_intermediate_size = 48; // H = 128 differs from I and 2I
    }
    let w = Weights::synthetic(&cfg, 16);
    let moe = *cfg.moe().unwrap();
    let (e, i, h) = (moe.num_experts, moe.moe_intermediate_size, cfg.hidden_size);
    assert!(h != 2 * i && h != i, "the test needs unambiguous shapes");
    let transpose = |t: &Tensor| -> Tensor {
        let (r, c) = (t.shape[1], t.shape[2]);
        let v = t.to_f32_vec();
        let mut out = Vec::with_capacity(v.len());
        for m in 0..e {
            for j in 0..c {
                for k in 0..r {
                    out.push(v[m * r * c + k * c + j]);
                }
            }
        }
        Tensor::from_f32(vec![e, c, r], out)
    };
    let tensors: Vec<(String, Tensor)> = checkpoint(&w, &cfg, "model.", Experts::Stacked)
        .into_iter()
        .map(|(n, t)| {
            if n.ends_with("experts.gate_up_proj") || n.ends_with("experts.down_proj") {
                let tt = transpose(&t);
                (n, tt)
            } else {
                (n, t)
            }
        })
        .collect();
    let gu = &tensors
        .iter()
        .find(|(n, _)| n == "model.layers.0.mlp.experts.gate_up_proj")
        .unwrap()
        .1;
    assert_eq!(gu.shape, vec![e, h, 2 * i]);
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("model.safetensors"), &tensors);
    let loaded = Weights::load(dir.path(), &cfg).unwrap();
    assert_eq!(loaded, w);
}

#[test]
fn tied_checkpoint_may_carry_a_redundant_lm_head() {
    let mut cfg = cfg();
    cfg.tie_word_embeddings = true;
    let w = Weights::synthetic(&cfg, 17);
    assert!(w.get("lm_head.weight").is_err());
    let mut tensors = checkpoint(&w, &cfg, "model.", Experts::Stacked);
    let embed = w.get("embed_tokens.weight").unwrap().clone();
    tensors.push(("lm_head.weight".into(), embed));
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("model.safetensors"), &tensors);
    assert_eq!(Weights::load(dir.path(), &cfg).unwrap(), w);
}
