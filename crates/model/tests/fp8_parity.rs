//! Parity with transformers on its own FP8 checkpoint: `fixtures/moe_fp8`
//! (a random Qwen3.5-MoE quantized by transformers' `FineGrainedFP8Config`
//! and saved by it; see `fixtures/make_fp8_fixture.py`) must give the
//! logits transformers computed in f32 on the dequantized weights within
//! 1e-4 relative Frobenius error, for both attention routes and chunked as
//! well as one-pass prefill.

mod common;

use common::{fixture, fixture_dir, read_f32_tensor, read_ids, rel_err};
use headroom_core::RouteRequest;
use headroom_cpu::CpuBackend;
use headroom_model::config::WeightFormat;
use headroom_model::weights::canonical_name;
use headroom_model::weights::CheckpointName;
use headroom_model::{
    AttentionPlan, ForwardOptions, LogitsRows, ModelConfig, Qwen35Model, Weights,
};
use std::collections::BTreeMap;

const TOLERANCE: f64 = 1e-4;

#[test]
fn the_fixture_loads_as_fp8_where_transformers_saved_fp8() {
    let dir = fixture_dir("moe_fp8");
    let cfg = ModelConfig::from_dir(&dir).unwrap();
    assert!(
        matches!(cfg.weight_format, WeightFormat::Fp8Block { block, .. } if block == [128, 128])
    );
    let w = Weights::load(&dir, &cfg).unwrap();
    let text = std::fs::read_to_string(dir.join("fp8_tensors.json")).unwrap();
    let listed: BTreeMap<String, (String, Vec<usize>)> = serde_json::from_str(&text).unwrap();
    let mut fp8 = 0;
    for (name, (dtype, _)) in &listed {
        let CheckpointName::Text(c) = canonical_name(name) else {
            continue;
        };
        if c.ends_with("_scale_inv") {
            continue;
        }
        // Per-expert tensors are stacked: look at the stacked tensor.
        let c = match c.split_once(".mlp.experts.") {
            Some((layer, rest)) => {
                let stacked = if rest.ends_with("down_proj.weight") {
                    "down_proj"
                } else {
                    "gate_up_proj"
                };
                format!("{layer}.mlp.experts.{stacked}")
            }
            None => c,
        };
        let t = w.get(&c).unwrap();
        assert_eq!(t.is_fp8(), dtype == "F8_E4M3", "{name} ({dtype}) -> {c}");
        fp8 += usize::from(t.is_fp8());
    }
    assert!(fp8 > 20, "{fp8} fp8 tensors");
}

#[test]
fn fp8_fixture_matches_transformers() {
    let (cfg, weights, dir) = fixture("moe_fp8");
    let model = Qwen35Model::load(CpuBackend::new(), &cfg, weights).unwrap();
    for n in [40usize, 300] {
        let ids = read_ids(&dir, n);
        let (shape, want) = read_f32_tensor(&dir.join(format!("logits_{n}.safetensors")), "logits");
        assert_eq!(shape, vec![n, cfg.vocab_size]);
        for route in [
            RouteRequest::Composed { query_block: 16 },
            RouteRequest::Fused,
        ] {
            for chunk in [None, Some(37)] {
                let opts = ForwardOptions {
                    attention: AttentionPlan::Uniform(route),
                    chunk,
                    logits: LogitsRows::All,
                };
                let out = model
                    .prefill(&mut model.new_session().unwrap(), &ids, &opts)
                    .unwrap();
                let err = rel_err(&out.logits, &want);
                println!("moe_fp8 n={n} route={route} chunk={chunk:?}: rel err {err:.2e}");
                assert!(err < TOLERANCE, "n={n} {route} chunk {chunk:?}: {err:.3e}");
            }
        }
    }
}
