//! FP8 checkpoints written by the tests themselves (synthetic weights,
//! quantized in 128 × 128 blocks the way Qwen's FP8 releases are): loading in
//! both expert layouts, logits equal to those of the same checkpoint
//! dequantized and saved as f32, and one test per validation error.

mod common;

use common::{checkpoint, rel_err, write, Experts};
use headroom_core::fp8::Fp8Block;
use headroom_core::RouteRequest;
use headroom_cpu::CpuBackend;
use headroom_model::config::{WeightFormat, FP8_BLOCK};
use headroom_model::weights::qwen_fp8_quantized;
use headroom_model::{
    AttentionPlan, ForwardOptions, LogitsRows, ModelConfig, Qwen35Model, Tensor, TensorData,
    Weights, WeightsError,
};
use std::path::Path;

const NOT_CONVERTED: [&str; 5] = [
    "lm_head",
    "mlp.gate",
    "shared_expert_gate",
    "linear_attn.in_proj_a",
    "linear_attn.in_proj_b",
];

/// tiny-d64 (hidden 128, experts of 64 rows: block tails) as an FP8 checkpoint config.
fn fp8_cfg() -> ModelConfig {
    let mut cfg = ModelConfig::synthetic("tiny-d64").unwrap();
    cfg.weight_format = WeightFormat::Fp8Block {
        block: FP8_BLOCK,
        modules_to_not_convert: NOT_CONVERTED.iter().map(|s| s.to_string()).collect(),
    };
    cfg
}

/// `t` quantized in 128 × 128 blocks of its last two dimensions.
fn quantize(t: &Tensor) -> Tensor {
    let r = t.shape.len();
    let (rows, cols) = (t.shape[r - 2], t.shape[r - 1]);
    let q = Fp8Block::quantize(&t.to_f32_vec(), FP8_BLOCK, rows, cols).unwrap();
    Tensor::new(t.shape.clone(), TensorData::Fp8E4m3(q))
}

/// The synthetic weights of `cfg` as a checkpoint (`model.` prefix), the
/// projections Qwen quantizes in FP8 (each per-expert tensor with its own grid).
fn fp8_checkpoint(cfg: &ModelConfig, seed: u64, experts: Experts) -> Vec<(String, Tensor)> {
    let w = Weights::synthetic(cfg, seed);
    checkpoint(&w, cfg, "model.", experts)
        .into_iter()
        .map(|(name, t)| {
            let canonical = name.strip_prefix("model.").unwrap_or(&name);
            if qwen_fp8_quantized(canonical) {
                (name, quantize(&t))
            } else {
                (name, t)
            }
        })
        .collect()
}

fn load(
    dir: &Path,
    tensors: &[(String, Tensor)],
    cfg: &ModelConfig,
) -> Result<Weights, WeightsError> {
    write(&dir.join("model.safetensors"), tensors);
    Weights::load(dir, cfg)
}

fn set(tensors: &mut [(String, Tensor)], name: &str, f: impl FnOnce(&mut Tensor)) {
    let t = &mut tensors.iter_mut().find(|(n, _)| n == name).unwrap().1;
    f(t);
}

fn fp8_mut(t: &mut Tensor) -> &mut Fp8Block {
    match &mut t.data {
        TensorData::Fp8E4m3(q) => q,
        _ => panic!("not fp8"),
    }
}

#[test]
fn loads_fp8_checkpoints_in_both_expert_layouts() {
    let cfg = fp8_cfg();
    for experts in [Experts::Stacked, Experts::PerExpert] {
        let tensors = fp8_checkpoint(&cfg, 21, experts);
        let dir = tempfile::tempdir().unwrap();
        let w = load(dir.path(), &tensors, &cfg).unwrap();
        let q = w.get("layers.3.self_attn.q_proj.weight").unwrap();
        assert!(q.is_fp8());
        assert!(!w.get("layers.1.mlp.gate.weight").unwrap().is_fp8());
        assert!(!w.get("embed_tokens.weight").unwrap().is_fp8());
        let gate_up = w.get("layers.1.mlp.experts.gate_up_proj").unwrap();
        let g = gate_up.fp8().unwrap();
        // Stacked: one grid per [2I, H] expert; per expert: one per [I, H] projection.
        let i = cfg.moe().unwrap().moe_intermediate_size;
        assert_eq!(
            g.rows,
            if experts == Experts::Stacked {
                2 * i
            } else {
                i
            }
        );
        // The values are those of the checkpoint's tensors, dequantized.
        let (name, saved) = tensors
            .iter()
            .find(|(n, _)| {
                n.ends_with("layers.1.mlp.experts.3.up_proj.weight")
                    || n.ends_with("layers.1.mlp.experts.gate_up_proj")
            })
            .unwrap();
        let all = gate_up.to_f32_vec();
        let h = cfg.hidden_size;
        if name.ends_with("up_proj.weight") {
            let at = 3 * 2 * i * h + i * h;
            assert_eq!(&all[at..at + i * h], &saved.to_f32_vec()[..]);
        } else {
            assert_eq!(all, saved.to_f32_vec());
        }
        // Storage: one byte per FP8 element plus 4 per scale.
        let bytes: usize = w.iter().map(|(_, t)| t.storage_bytes()).sum();
        assert_eq!(w.storage_bytes(), bytes);
        assert_eq!(
            q.storage_bytes(),
            q.numel() + 4 * q.fp8().unwrap().scale_inv.len()
        );
    }
}

/// Logits of the FP8 checkpoint and of its dequantized f32 copy (written
/// to disk as a plain checkpoint) agree within 1e-5.
#[test]
fn fp8_logits_equal_the_dequantized_f32_checkpoint() {
    let cfg = fp8_cfg();
    let tensors = fp8_checkpoint(&cfg, 22, Experts::PerExpert);
    let fp8_dir = tempfile::tempdir().unwrap();
    let fp8 = load(fp8_dir.path(), &tensors, &cfg).unwrap();
    let f32_tensors: Vec<(String, Tensor)> = tensors
        .iter()
        .map(|(n, t)| (n.clone(), t.clone().dequantized()))
        .collect();
    let mut plain = cfg.clone();
    plain.weight_format = WeightFormat::Plain;
    let f32_dir = tempfile::tempdir().unwrap();
    let f32w = load(f32_dir.path(), &f32_tensors, &plain).unwrap();
    assert!(f32w.iter().all(|(_, t)| !t.is_fp8()));
    let ids: Vec<u32> = (0..40u32)
        .map(|i| (i * 37 + 5) % cfg.vocab_size as u32)
        .collect();
    let opts = ForwardOptions {
        attention: AttentionPlan::Uniform(RouteRequest::Composed { query_block: 16 }),
        chunk: Some(16),
        logits: LogitsRows::All,
    };
    let logits = |cfg: &ModelConfig, w: Weights| {
        let m = Qwen35Model::load(CpuBackend::new(), cfg, w).unwrap();
        m.prefill(&mut m.new_session().unwrap(), &ids, &opts)
            .unwrap()
            .logits
    };
    let a = logits(&cfg, fp8);
    let b = logits(&plain, f32w);
    let err = rel_err(&a, &b);
    println!("fp8 vs dequantized f32 checkpoint: rel err {err:.2e}");
    assert!(err < 1e-5, "{err:.3e}");
    assert!(a.iter().all(|x| x.is_finite()));
}

fn load_err(tensors: &[(String, Tensor)], cfg: &ModelConfig) -> String {
    let dir = tempfile::tempdir().unwrap();
    load(dir.path(), tensors, cfg).unwrap_err().to_string()
}

const Q: &str = "model.layers.3.self_attn.q_proj.weight";

#[test]
fn fp8_weight_without_its_scale_is_an_error() {
    let cfg = fp8_cfg();
    let tensors = fp8_checkpoint(&cfg, 23, Experts::Stacked);
    // Written as raw parts: the weight's bytes without a scale tensor.
    let dir = tempfile::tempdir().unwrap();
    let q = tensors.iter().find(|(n, _)| n == Q).unwrap().1.clone();
    let bits = q.fp8().unwrap().bits.clone();
    let shape = q.shape.clone();
    let rest: Vec<(String, Tensor)> = tensors.into_iter().filter(|(n, _)| n != Q).collect();
    write(&dir.path().join("model-00001-of-00002.safetensors"), &rest);
    write_raw_f8(
        &dir.path().join("model-00002-of-00002.safetensors"),
        Q,
        &shape,
        &bits,
    );
    let err = Weights::load(dir.path(), &cfg).unwrap_err().to_string();
    assert!(
        err.contains("q_proj.weight") && err.contains("_scale_inv"),
        "{err}"
    );
    assert!(err.contains("[4, 1]"), "expected scale shape named: {err}");
}

#[test]
fn bf16_scales_are_read_as_f32() {
    let cfg = fp8_cfg();
    let tensors = fp8_checkpoint(&cfg, 32, Experts::Stacked);
    let dir = tempfile::tempdir().unwrap();
    let q = tensors.iter().find(|(n, _)| n == Q).unwrap().1.clone();
    let rest: Vec<(String, Tensor)> = tensors.into_iter().filter(|(n, _)| n != Q).collect();
    write(&dir.path().join("a.safetensors"), &rest);
    let scales = [0.5f32, 2.0, 1.0 / 1024.0, 3.0];
    let scale = Tensor::new(
        vec![4, 1],
        TensorData::Bf16(scales.iter().map(|&s| half::bf16::from_f32(s)).collect()),
    );
    let bits = q.fp8().unwrap().bits.clone();
    let shape = q.shape.clone();
    write(
        &dir.path().join("b.safetensors"),
        &[(format!("{Q}_scale_inv"), scale)],
    );
    write_raw_f8(&dir.path().join("c.safetensors"), Q, &shape, &bits);
    let w = Weights::load(dir.path(), &cfg).unwrap();
    let got = w.get("layers.3.self_attn.q_proj.weight").unwrap();
    assert_eq!(got.fp8().unwrap().scale_inv, scales);
    let v = got.to_f32_vec();
    let e4m3 = headroom_core::fp8::e4m3_to_f32;
    assert_eq!(v[200 * 128 + 5], e4m3(bits[200 * 128 + 5]) * 2.0);
}

/// A safetensors file holding one F8_E4M3 tensor (no scale).
fn write_raw_f8(path: &Path, name: &str, shape: &[usize], bits: &[u8]) {
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F8_E4M3, shape.to_vec(), bits)
            .unwrap();
    safetensors::tensor::serialize_to_file([(name, view)], None, path).unwrap();
}

#[test]
fn scale_without_an_fp8_weight_is_an_error() {
    let cfg = fp8_cfg();
    let mut tensors = fp8_checkpoint(&cfg, 24, Experts::Stacked);
    tensors.push((
        "model.layers.0.linear_attn.in_proj_b.weight_scale_inv".into(),
        Tensor::from_f32(vec![1, 1], vec![1.0]),
    ));
    let err = load_err(&tensors, &cfg);
    assert!(err.contains("in_proj_b.weight_scale_inv"), "{err}");
    assert!(
        err.contains("without an fp8 weight") && err.contains("f32"),
        "{err}"
    );
    let mut tensors = fp8_checkpoint(&cfg, 24, Experts::Stacked);
    tensors.push((
        "model.layers.0.linear_attn.nothing.weight_scale_inv".into(),
        Tensor::from_f32(vec![1, 1], vec![1.0]),
    ));
    let err = load_err(&tensors, &cfg);
    assert!(
        err.contains("no tensor `layers.0.linear_attn.nothing.weight`"),
        "{err}"
    );
}

#[test]
fn scale_of_the_wrong_shape_is_an_error() {
    let cfg = fp8_cfg();
    let tensors = fp8_checkpoint(&cfg, 25, Experts::Stacked);
    // A weight [512, 128] saved with the scales of a [512, 256] one.
    let dir = tempfile::tempdir().unwrap();
    let q = tensors.iter().find(|(n, _)| n == Q).unwrap().1.clone();
    let rest: Vec<(String, Tensor)> = tensors.into_iter().filter(|(n, _)| n != Q).collect();
    write(&dir.path().join("a.safetensors"), &rest);
    let bits = &q.fp8().unwrap().bits;
    let scales = [1.0f32; 8];
    let scale_bytes: Vec<u8> = scales.iter().flat_map(|s| s.to_le_bytes()).collect();
    let w =
        safetensors::tensor::TensorView::new(safetensors::Dtype::F8_E4M3, q.shape.clone(), bits)
            .unwrap();
    let s = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4, 2], &scale_bytes)
        .unwrap();
    let scale_name = format!("{Q}_scale_inv");
    safetensors::tensor::serialize_to_file(
        [(Q, w), (scale_name.as_str(), s)],
        None,
        &dir.path().join("b.safetensors"),
    )
    .unwrap();
    let err = Weights::load(dir.path(), &cfg).unwrap_err().to_string();
    assert!(err.contains("q_proj.weight_scale_inv"), "{err}");
    assert!(
        err.contains("[4, 2]") && err.contains("[4, 1]") && err.contains("[512, 128]"),
        "{err}"
    );
}

#[test]
fn fp8_in_a_module_not_converted_is_an_error() {
    let cfg = fp8_cfg();
    let mut tensors = fp8_checkpoint(&cfg, 26, Experts::Stacked);
    set(&mut tensors, "model.layers.1.mlp.gate.weight", |t| {
        *t = quantize(t)
    });
    let err = load_err(&tensors, &cfg);
    assert!(err.contains("layers.1.mlp.gate.weight"), "{err}");
    assert!(err.contains("modules_to_not_convert"), "{err}");
}

#[test]
fn fp8_tensor_in_a_plain_checkpoint_is_an_error() {
    let mut cfg = fp8_cfg();
    let tensors = fp8_checkpoint(&cfg, 27, Experts::Stacked);
    cfg.weight_format = WeightFormat::Plain;
    let err = load_err(&tensors, &cfg);
    assert!(
        err.contains("F8_E4M3") && err.contains("no fp8 quantization_config"),
        "{err}"
    );
}

#[test]
fn non_finite_scales_are_an_error() {
    let cfg = fp8_cfg();
    for bad in [f32::NAN, f32::INFINITY] {
        let mut tensors = fp8_checkpoint(&cfg, 28, Experts::Stacked);
        set(&mut tensors, Q, |t| fp8_mut(t).scale_inv[2] = bad);
        let err = load_err(&tensors, &cfg);
        assert!(err.contains("q_proj.weight_scale_inv"), "{err}");
        assert!(err.contains("1 non-finite"), "{err}");
    }
}

#[test]
fn e4m3_nan_bytes_are_an_error() {
    let cfg = fp8_cfg();
    let mut tensors = fp8_checkpoint(&cfg, 29, Experts::PerExpert);
    let name = "model.layers.2.mlp.experts.5.down_proj.weight";
    set(&mut tensors, name, |t| {
        let q = fp8_mut(t);
        q.bits[7] = 0x7F;
        q.bits[100] = 0xFF;
    });
    let err = load_err(&tensors, &cfg);
    assert!(err.contains("experts.5.down_proj.weight"), "{err}");
    assert!(
        err.contains("2 e4m3 NaN bytes") && err.contains("element 7"),
        "{err}"
    );
}

#[test]
fn experts_mixing_fp8_and_plain_are_an_error() {
    let cfg = fp8_cfg();
    let mut tensors = fp8_checkpoint(&cfg, 30, Experts::PerExpert);
    set(
        &mut tensors,
        "model.layers.0.mlp.experts.2.up_proj.weight",
        |t| {
            *t = t.clone().dequantized();
        },
    );
    let err = load_err(&tensors, &cfg);
    assert!(err.contains("layers.0.mlp.experts.gate_up_proj"), "{err}");
    assert!(err.contains("f32 part among fp8 parts"), "{err}");
}

#[test]
fn saved_fp8_tensors_load_back_unchanged() {
    let cfg = fp8_cfg();
    let tensors = fp8_checkpoint(&cfg, 31, Experts::Stacked);
    let dir = tempfile::tempdir().unwrap();
    let w = load(dir.path(), &tensors, &cfg).unwrap();
    for (name, t) in &tensors {
        let canonical = name.strip_prefix("model.").unwrap_or(name);
        assert_eq!(w.get(canonical).unwrap(), t, "{name}");
    }
    // The file holds the F8_E4M3 bytes and an f32 scale per 128 x 128 block.
    let bytes = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let gu = st
        .tensor("model.layers.1.mlp.experts.gate_up_proj")
        .unwrap();
    assert_eq!(
        (gu.dtype(), gu.shape()),
        (safetensors::Dtype::F8_E4M3, &[8usize, 128, 128][..])
    );
    let s = st
        .tensor("model.layers.1.mlp.experts.gate_up_proj_scale_inv")
        .unwrap();
    assert_eq!(
        (s.dtype(), s.shape()),
        (safetensors::Dtype::F32, &[8usize, 1, 1][..])
    );
}
