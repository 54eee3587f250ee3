//! Bad checkpoints: each is a clear error naming the problem, never a panic.

mod common;

use common::{checkpoint, write, Experts};
use headroom_model::weights::write_safetensors;
use headroom_model::{ModelConfig, Tensor, TensorData, Weights, WeightsError};
use std::path::Path;

fn cfg() -> ModelConfig {
    ModelConfig::synthetic("tiny-d64").unwrap()
}

/// The synthetic model as a checkpoint with `model.` names, after `edit`.
fn write_edited(dir: &Path, edit: impl FnOnce(&mut Vec<(String, Tensor)>)) {
    let cfg = cfg();
    let mut tensors = checkpoint(
        &Weights::synthetic(&cfg, 5),
        &cfg,
        "model.",
        Experts::Stacked,
    );
    edit(&mut tensors);
    write(&dir.join("model.safetensors"), &tensors);
}

fn load_err(edit: impl FnOnce(&mut Vec<(String, Tensor)>)) -> WeightsError {
    let dir = tempfile::tempdir().unwrap();
    write_edited(dir.path(), edit);
    Weights::load(dir.path(), &cfg()).unwrap_err()
}

#[test]
fn missing_tensor_is_named() {
    let err = load_err(|t| t.retain(|(n, _)| n != "model.layers.2.linear_attn.A_log"));
    assert!(
        matches!(&err, WeightsError::Missing { name, expected } if name == "layers.2.linear_attn.A_log" && expected == &vec![4]),
        "{err}"
    );
    assert!(err.to_string().contains("layers.2.linear_attn.A_log"));
}

#[test]
fn wrong_shape_names_tensor_expected_and_actual() {
    let err = load_err(|t| {
        let (_, x) = t
            .iter_mut()
            .find(|(n, _)| n == "model.layers.3.self_attn.k_proj.weight")
            .unwrap();
        *x = Tensor::from_f32(vec![64, 128], vec![0.0; 64 * 128]);
    });
    let msg = err.to_string();
    assert!(matches!(err, WeightsError::Shape { .. }), "{msg}");
    assert!(
        msg.contains("layers.3.self_attn.k_proj.weight")
            && msg.contains("[64, 128]")
            && msg.contains("[128, 128]"),
        "{msg}"
    );
}

#[test]
fn wrong_dtype_is_named() {
    let err = load_err(|t| {
        let (_, x) = t
            .iter_mut()
            .find(|(n, _)| n == "model.embed_tokens.weight")
            .unwrap();
        let v: Vec<half::f16> = x
            .to_f32_vec()
            .into_iter()
            .map(half::f16::from_f32)
            .collect();
        *x = Tensor::new(x.shape.clone(), TensorData::F16(v));
    });
    let msg = err.to_string();
    assert!(
        matches!(err, WeightsError::Dtype { .. })
            && msg.contains("embed_tokens.weight")
            && msg.contains("f16"),
        "{msg}"
    );
}

#[test]
fn unexpected_text_tensor_is_named() {
    let err = load_err(|t| {
        t.push((
            "model.layers.1.self_attn.q_proj.weight".into(),
            Tensor::from_f32(vec![1], vec![0.0]),
        ))
    });
    assert!(
        matches!(&err, WeightsError::Unexpected(n) if n == "layers.1.self_attn.q_proj.weight"),
        "{err}"
    );
    let err = load_err(|t| {
        t.push((
            "model.layers.9.input_layernorm.weight".into(),
            Tensor::from_f32(vec![128], vec![0.0; 128]),
        ))
    });
    assert!(
        matches!(&err, WeightsError::Unexpected(n) if n == "layers.9.input_layernorm.weight"),
        "{err}"
    );
}

#[test]
fn mixed_expert_layouts_are_an_error() {
    // Layer 0 keeps its stacked experts and also gets a per-expert tensor.
    let err = load_err(|t| {
        t.push((
            "model.layers.0.mlp.experts.0.gate_proj.weight".into(),
            Tensor::from_f32(vec![64, 128], vec![0.0; 64 * 128]),
        ))
    });
    assert!(
        matches!(err, WeightsError::MixedExpertLayout { layer: 0, .. }),
        "{err}"
    );
    // Layer 1 per-expert, the others stacked.
    let err = load_err(|t| {
        t.retain(|(n, _)| !n.starts_with("model.layers.1.mlp.experts."));
        for e in 0..8 {
            for (p, s) in [
                ("gate_proj", [64, 128]),
                ("up_proj", [64, 128]),
                ("down_proj", [128, 64]),
            ] {
                t.push((
                    format!("model.layers.1.mlp.experts.{e}.{p}.weight"),
                    Tensor::from_f32(s.to_vec(), vec![0.0; 64 * 128]),
                ));
            }
        }
    });
    assert!(
        matches!(err, WeightsError::MixedExpertLayout { layer: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("layer 0 uses stacked"), "{err}");
}

#[test]
fn per_expert_missing_expert_is_named() {
    let err = load_err(|t| {
        for l in 0..4 {
            t.retain(|(n, _)| !n.starts_with(&format!("model.layers.{l}.mlp.experts.")));
            for e in 0..7 {
                for (p, s) in [
                    ("gate_proj", [64, 128]),
                    ("up_proj", [64, 128]),
                    ("down_proj", [128, 64]),
                ] {
                    t.push((
                        format!("model.layers.{l}.mlp.experts.{e}.{p}.weight"),
                        Tensor::from_f32(s.to_vec(), vec![0.0; 64 * 128]),
                    ));
                }
            }
        }
    });
    assert!(
        matches!(&err, WeightsError::Missing { name, .. } if name == "layers.0.mlp.experts.7.gate_proj.weight"),
        "{err}"
    );
}

#[test]
fn truncated_or_garbage_safetensors_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    write_edited(dir.path(), |_| {});
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    // Cut inside the data, inside the header, and before the header length.
    for keep in [bytes.len() - 100, 200, 5, 0] {
        std::fs::write(&path, &bytes[..keep]).unwrap();
        let err = Weights::load(dir.path(), &cfg()).unwrap_err();
        // A short file is worded as truncated, not as an invalid format.
        assert!(
            matches!(err, WeightsError::Truncated { .. }),
            "keep {keep}: {err}"
        );
        let msg = err.to_string();
        assert!(msg.contains("model.safetensors"), "{msg}");
        assert!(
            msg.contains("truncated") && !msg.contains("not a valid"),
            "{msg}"
        );
    }
    // A header length far beyond the file.
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    std::fs::write(&path, &huge).unwrap();
    assert!(matches!(
        Weights::load(dir.path(), &cfg()),
        Err(WeightsError::Safetensors { .. })
    ));
    // Offsets beyond the data.
    let header = br#"{"model.norm.weight":{"dtype":"F32","shape":[128],"data_offsets":[0,512]}}"#;
    let mut f = (header.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(header);
    f.extend_from_slice(&[0u8; 16]);
    std::fs::write(&path, &f).unwrap();
    assert!(matches!(
        Weights::load(dir.path(), &cfg()),
        Err(WeightsError::Safetensors { .. } | WeightsError::Truncated { .. })
    ));
}

#[test]
fn a_fifo_or_folder_named_model_safetensors_is_refused_by_what_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    assert!(std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap()
        .success());
    // Opening the FIFO would block forever with no writer: it must not be opened.
    let err = Weights::load(dir.path(), &cfg()).unwrap_err().to_string();
    assert!(
        err.contains("model.safetensors") && err.contains("FIFO"),
        "{err}"
    );
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let err = Weights::load(dir.path(), &cfg()).unwrap_err().to_string();
    assert!(err.contains("is a folder, not a regular file"), "{err}");
    assert!(!err.contains("No such device"), "{err}");
    std::fs::remove_dir(&path).unwrap();
    let index = dir.path().join("model.safetensors.index.json");
    assert!(std::process::Command::new("mkfifo")
        .arg(&index)
        .status()
        .unwrap()
        .success());
    let err = Weights::load(dir.path(), &cfg()).unwrap_err().to_string();
    assert!(err.contains("index.json") && err.contains("FIFO"), "{err}");
}

#[test]
fn unsupported_tensor_dtype_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let header = br#"{"model.norm.weight":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}}"#;
    let mut f = (header.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(header);
    f.extend_from_slice(&[0u8; 4]);
    std::fs::write(dir.path().join("model.safetensors"), &f).unwrap();
    let err = Weights::load(dir.path(), &cfg()).unwrap_err();
    assert!(
        matches!(err, WeightsError::Dtype { .. })
            && err.to_string().contains("model.norm.weight")
            && err.to_string().contains("I8"),
        "{err}"
    );
}

#[test]
fn empty_folder_and_missing_folder() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Weights::load(dir.path(), &cfg()),
        Err(WeightsError::NoFiles(_))
    ));
    assert!(matches!(
        Weights::load(&dir.path().join("nope"), &cfg()),
        Err(WeightsError::Io { .. })
    ));
}

#[test]
fn index_naming_a_missing_shard_or_duplicate_tensors_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    write_edited(dir.path(), |_| {});
    let single = dir.path().join("model.safetensors");
    let shard = dir.path().join("model-00001-of-00002.safetensors");
    std::fs::rename(&single, &shard).unwrap();
    let index = serde_json::json!({"weight_map": {
        "model.norm.weight": "model-00001-of-00002.safetensors",
        "model.embed_tokens.weight": "model-00002-of-00002.safetensors"
    }});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let err = Weights::load(dir.path(), &cfg()).unwrap_err();
    assert!(
        matches!(err, WeightsError::File(_))
            && err.to_string().contains("model-00002-of-00002.safetensors")
            && err.to_string().contains("does not exist"),
        "{err}"
    );
    // The second shard repeats a tensor of the first.
    let dup = Tensor::from_f32(vec![128], vec![0.0; 128]);
    write_safetensors(
        &dir.path().join("model-00002-of-00002.safetensors"),
        &[("model.norm.weight", &dup)],
    )
    .unwrap();
    let err = Weights::load(dir.path(), &cfg()).unwrap_err();
    assert!(
        matches!(&err, WeightsError::Duplicate(n) if n == "norm.weight"),
        "{err}"
    );
    // A shard path that leaves the folder is refused.
    let index = serde_json::json!({"weight_map": {"model.norm.weight": "../x.safetensors"}});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    assert!(matches!(
        Weights::load(dir.path(), &cfg()),
        Err(WeightsError::Index { .. })
    ));
}
