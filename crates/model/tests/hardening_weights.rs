//! Weights that would give NaN logits are refused at load, naming the tensor
//! and the count (issue 13: `logits` wrote all-NaN logits with exit 0), and
//! I/O errors print the OS error once.

mod common;

use common::{checkpoint, write, Experts};
use half::bf16;
use headroom_model::{ModelConfig, Tensor, TensorData, Weights, WeightsError};

fn poisoned(dtype: &str, value: f32) -> WeightsError {
    let mut cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    if dtype == "bf16" {
        cfg.dtype = headroom_core::Dtype::Bf16;
    }
    let mut tensors = checkpoint(
        &Weights::synthetic(&cfg, 5),
        &cfg,
        "model.",
        Experts::Stacked,
    );
    let (_, t) = tensors
        .iter_mut()
        .find(|(n, _)| n == "model.layers.1.input_layernorm.weight")
        .unwrap();
    match &mut t.data {
        TensorData::F32(v) => {
            v[3] = value;
            v[7] = value;
        }
        TensorData::Bf16(v) => {
            v[3] = bf16::from_f32(value);
            v[7] = bf16::from_f32(value);
        }
        TensorData::F16(_) | TensorData::Fp8E4m3(_) => unreachable!("a norm is f32 or bf16"),
    }
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("model.safetensors"), &tensors);
    Weights::load(dir.path(), &cfg).unwrap_err()
}

#[test]
fn nan_and_inf_weights_are_refused_naming_the_tensor() {
    for (dtype, value) in [
        ("f32", f32::NAN),
        ("f32", f32::INFINITY),
        ("bf16", f32::NEG_INFINITY),
        ("bf16", f32::NAN),
    ] {
        let err = poisoned(dtype, value);
        assert!(
            matches!(&err, WeightsError::NonFinite { name, count: 2 } if name.contains("layers.1.input_layernorm.weight")),
            "{dtype} {value}: {err}"
        );
    }
}

#[test]
fn finite_extremes_still_load() {
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    let mut tensors = checkpoint(
        &Weights::synthetic(&cfg, 5),
        &cfg,
        "model.",
        Experts::Stacked,
    );
    if let TensorData::F32(v) = &mut tensors[0].1.data {
        v[0] = f32::MAX;
        v[1] = f32::MIN_POSITIVE / 2.0; // subnormal
    }
    let dir = tempfile::tempdir().unwrap();
    write(&dir.path().join("model.safetensors"), &tensors);
    Weights::load(dir.path(), &cfg).unwrap();
    let _ = Tensor::from_f32(vec![1], vec![0.0]);
}

#[test]
fn io_errors_print_the_os_error_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("model.safetensors")).unwrap();
    let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    let err = Weights::load(dir.path(), &cfg).unwrap_err();
    let mut chain = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(s) = source {
        chain += &format!(": {s}");
        source = s.source();
    }
    let os = chain.matches("os error").count();
    assert!(os <= 1, "{chain}");
}
