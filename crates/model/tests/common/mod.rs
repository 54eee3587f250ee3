//! Helpers shared by the model crate's integration tests: synthetic weights
//! written as checkpoints in the layouts real checkpoints use, the
//! transformers fixtures (folder, config and weights, prompt ids), reading
//! f32 reference tensors, CPU tensor-parallel groups, and the relative error
//! every comparison uses.
#![allow(dead_code)] // each test file uses its own subset

use headroom_cpu::{CpuBackend, Precision};
use headroom_model::weights::write_safetensors;
use headroom_model::{ModelConfig, ModelError, Tensor, TpGroup, TpWeights, Weights};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, PartialEq)]
pub enum Experts {
    Stacked,
    PerExpert,
}

/// Canonical weights → checkpoint (name, tensor) pairs with `prefix` and the expert layout.
pub fn checkpoint(
    w: &Weights,
    cfg: &ModelConfig,
    prefix: &str,
    experts: Experts,
) -> Vec<(String, Tensor)> {
    let moe = *cfg.moe().unwrap();
    let (i, h) = (moe.moe_intermediate_size, cfg.hidden_size);
    let mut out = Vec::new();
    for (name, t) in w.iter() {
        let full = if name == "lm_head.weight" {
            name.to_string()
        } else {
            format!("{prefix}{name}")
        };
        let is_stack =
            name.ends_with("experts.gate_up_proj") || name.ends_with("experts.down_proj");
        if experts == Experts::PerExpert && is_stack {
            let base = full.rsplit_once('.').unwrap().0.to_string(); // ...mlp.experts
            let v = t.to_f32_vec();
            for e in 0..moe.num_experts {
                if name.ends_with("gate_up_proj") {
                    let off = e * 2 * i * h;
                    let gate = v[off..off + i * h].to_vec();
                    let up = v[off + i * h..off + 2 * i * h].to_vec();
                    out.push((
                        format!("{base}.{e}.gate_proj.weight"),
                        Tensor::from_f32(vec![i, h], gate),
                    ));
                    out.push((
                        format!("{base}.{e}.up_proj.weight"),
                        Tensor::from_f32(vec![i, h], up),
                    ));
                } else {
                    let d = v[e * h * i..(e + 1) * h * i].to_vec();
                    out.push((
                        format!("{base}.{e}.down_proj.weight"),
                        Tensor::from_f32(vec![h, i], d),
                    ));
                }
            }
        } else {
            out.push((full, t.clone()));
        }
    }
    out
}

/// The folder of the transformers fixture `name` (`tests/fixtures/<name>`).
pub fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The transformers fixture `name`: its config, weights and folder.
pub fn fixture(name: &str) -> (ModelConfig, Weights, PathBuf) {
    let dir = fixture_dir(name);
    let cfg = ModelConfig::from_dir(&dir).unwrap();
    let weights = Weights::load(&dir, &cfg).unwrap();
    (cfg, weights, dir)
}

/// The prompt ids `ids_<n>.json` of a fixture folder.
pub fn read_ids(dir: &Path, n: usize) -> Vec<u32> {
    let text = std::fs::read_to_string(dir.join(format!("ids_{n}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A CPU tensor-parallel group of `world` ranks computing in `precision`.
pub fn cpu_tp(
    cfg: &ModelConfig,
    world: usize,
    weights: TpWeights<'_>,
    precision: Precision,
) -> Result<TpGroup<CpuBackend>, ModelError> {
    let g = headroom_cpu::cpu_group(world, precision);
    TpGroup::build(g.backends, cfg, weights, Some(g.abort))
}

/// Writes `tensors` as one safetensors file.
pub fn write(path: &Path, tensors: &[(String, Tensor)]) {
    let refs: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    write_safetensors(path, &refs).unwrap();
}

/// Reads the f32 tensor `name` of a safetensors file: its shape and values.
pub fn read_f32_tensor(path: &Path, name: &str) -> (Vec<usize>, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(name).unwrap();
    assert_eq!(t.dtype(), safetensors::Dtype::F32, "{}", path.display());
    let data = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    (t.shape().to_vec(), data)
}

/// Relative Frobenius error of `got` against the reference `want`.
pub fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (a, b) in got.iter().zip(want) {
        num += (*a as f64 - *b as f64).powi(2);
        den += (*b as f64).powi(2);
    }
    (num / den).sqrt()
}
