//! Parity with transformers: the committed fixtures (random-weight
//! checkpoints saved by transformers' own Qwen3.5 classes, and the logits
//! transformers computed for each prompt; see `fixtures/make_fixtures.py`)
//! must be reproduced within 1e-4 relative Frobenius error, with both
//! attention routes and with chunked as well as one-pass prefill.

mod common;

use common::{fixture, read_f32_tensor, read_ids, rel_err};
use headroom_core::RouteRequest;
use headroom_cpu::CpuBackend;
use headroom_model::{AttentionPlan, ForwardOptions, LogitsRows, Qwen35Model};
use std::path::Path;

const TOLERANCE: f64 = 1e-4;

fn read_logits(dir: &Path, n: usize) -> (Vec<usize>, Vec<f32>) {
    read_f32_tensor(&dir.join(format!("logits_{n}.safetensors")), "logits")
}

/// Every prompt × route × chunking of one fixture.
fn check_fixture(name: &str) {
    let (cfg, weights, dir) = fixture(name);
    let model = Qwen35Model::load(CpuBackend::new(), &cfg, weights.clone()).unwrap();
    let routes = [
        RouteRequest::Composed { query_block: 16 },
        RouteRequest::Fused,
    ];
    for n in [40usize, 300] {
        let ids = read_ids(&dir, n);
        let (shape, want) = read_logits(&dir, n);
        assert_eq!(shape, vec![n, cfg.vocab_size]);
        for route in routes {
            // Chunk 1 (token-by-token decode) on the short prompt only.
            let chunks: &[Option<usize>] = if n == 40 {
                &[None, Some(64), Some(37), Some(1)]
            } else {
                &[None, Some(64), Some(37)]
            };
            for &chunk in chunks {
                let opts = ForwardOptions {
                    attention: AttentionPlan::Uniform(route),
                    chunk,
                    logits: LogitsRows::All,
                };
                let out = model
                    .prefill(&mut model.new_session().unwrap(), &ids, &opts)
                    .unwrap();
                assert_eq!((out.rows, out.vocab), (n, cfg.vocab_size));
                let err = rel_err(&out.logits, &want);
                println!("{name} n={n} route={route} chunk={chunk:?}: rel err {err:.2e}");
                assert!(
                    err < TOLERANCE,
                    "{name} n={n} {route} chunk {chunk:?}: {err:.3e}"
                );
                // The reports say the requested route ran, on every full layer and chunk.
                let chunks = n.div_ceil(chunk.unwrap_or(n));
                let full = cfg.full_attention_layers().len();
                assert_eq!(out.attention.len(), chunks * full);
                for r in &out.attention {
                    let ran = r.report.route.to_string();
                    assert!(route.to_string().starts_with(&ran), "{route} ran {ran}");
                }
            }
        }
    }
}

#[test]
fn moe_head_dim_256_matches_transformers() {
    check_fixture("moe_d256");
}

#[test]
fn moe_head_dim_64_matches_transformers() {
    check_fixture("moe_d64");
}

#[test]
fn dense_tied_head_dim_64_matches_transformers() {
    check_fixture("dense_d64");
}

#[test]
fn last_row_logits_equal_the_last_row_of_all() {
    let (cfg, weights, dir) = fixture("moe_d256");
    let model = Qwen35Model::load(CpuBackend::new(), &cfg, weights.clone()).unwrap();
    let ids = read_ids(&dir, 40);
    let (_, want) = read_logits(&dir, 40);
    let opts = ForwardOptions {
        chunk: Some(16),
        logits: LogitsRows::Last,
        ..ForwardOptions::default()
    };
    let out = model
        .prefill(&mut model.new_session().unwrap(), &ids, &opts)
        .unwrap();
    assert_eq!(out.rows, 1);
    assert!(rel_err(&out.logits, &want[39 * cfg.vocab_size..]) < TOLERANCE);
}

#[test]
fn qwen3_next_fused_projections_without_renormalisation_match_transformers() {
    check_fixture("next_d128");
}
