//! Chunked prefill, sessions and decode on synthetic models (no fixture):
//! prefill in chunks of any size equals one pass, a session continues where
//! it stopped, token-by-token decode equals prefill; bad requests are errors.

mod common;

use common::rel_err;
use headroom_core::ops::Backend;
use headroom_core::{Dtype, Route, RouteRequest};
use headroom_cpu::CpuBackend;
use headroom_model::profile::Part;
use headroom_model::{
    AttentionPlan, ForwardOptions, LogitsRows, ModelConfig, ModelError, Qwen35Model, Weights,
    WeightsError,
};

fn model_parts(name: &str, dtype: Dtype) -> (ModelConfig, Weights) {
    let mut cfg = ModelConfig::synthetic(name).unwrap();
    cfg.dtype = dtype;
    let weights = Weights::synthetic(&cfg, 7);
    (cfg, weights)
}

fn ids(n: usize, vocab: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 7) % vocab as u32)
        .collect()
}

fn opts(route: RouteRequest, chunk: Option<usize>) -> ForwardOptions {
    ForwardOptions {
        attention: AttentionPlan::Uniform(route),
        chunk,
        logits: LogitsRows::All,
    }
}

#[test]
fn chunks_of_any_size_equal_one_pass() {
    for (name, dtype) in [("tiny-d256", Dtype::F32), ("tiny-d64", Dtype::Bf16)] {
        let (cfg, w) = model_parts(name, dtype);
        let model = Qwen35Model::load(CpuBackend::new(), &cfg, w.clone()).unwrap();
        let prompt = ids(150, cfg.vocab_size, 3);
        for route in [
            RouteRequest::Composed { query_block: 32 },
            RouteRequest::Fused,
        ] {
            let whole = model.forward_logits(&prompt, &opts(route, None)).unwrap();
            assert!(whole.iter().all(|v| v.is_finite()));
            for chunk in [1usize, 7, 64, 149] {
                let got = model
                    .forward_logits(&prompt, &opts(route, Some(chunk)))
                    .unwrap();
                let err = rel_err(&got, &whole);
                assert!(
                    err < 1e-5,
                    "{name} {dtype} {route} chunk {chunk}: {err:.2e}"
                );
            }
        }
    }
}

#[test]
fn session_continues_and_decode_equals_prefill() {
    let (cfg, w) = model_parts("tiny-d256", Dtype::F32);
    let model = Qwen35Model::load(CpuBackend::new(), &cfg, w.clone()).unwrap();
    let v = cfg.vocab_size;
    let prompt = ids(60, v, 11);
    let route = RouteRequest::Composed { query_block: 16 };
    let whole = model.forward_logits(&prompt, &opts(route, None)).unwrap();

    // Two prefill calls on one session: the second returns rows 40..60.
    let mut s = model.new_session().unwrap();
    model
        .prefill(&mut s, &prompt[..40], &opts(route, None))
        .unwrap();
    assert_eq!(s.position(), 40);
    let tail = model
        .prefill(&mut s, &prompt[40..], &opts(route, Some(6)))
        .unwrap();
    assert_eq!(tail.rows, 20);
    assert!(rel_err(&tail.logits, &whole[40 * v..]) < 1e-5);
    // History offsets: each chunk's reports give its position.
    let starts: Vec<usize> = tail.attention.iter().map(|r| r.chunk_start).collect();
    assert_eq!(starts, vec![40, 46, 52, 58]);

    // Token-by-token decode after a 50-token prefill.
    let mut s = model.new_session().unwrap();
    model
        .prefill(&mut s, &prompt[..50], &opts(route, None))
        .unwrap();
    for (i, &id) in prompt[50..].iter().enumerate() {
        let row = model.decode(&mut s, id, RouteRequest::Fused).unwrap();
        let p = 50 + i;
        let err = rel_err(&row, &whole[p * v..(p + 1) * v]);
        assert!(err < 1e-5, "decode at {p}: {err:.2e}");
    }
    assert_eq!(s.position(), 60);
}

#[test]
fn per_layer_plan_runs_each_layer_its_route() {
    let (cfg, w) = model_parts("tiny-d64:layers=8", Dtype::F32);
    let model = Qwen35Model::load(CpuBackend::new(), &cfg, w.clone()).unwrap();
    assert_eq!(cfg.full_attention_layers(), vec![3, 7]);
    let plan = AttentionPlan::PerLayer(vec![
        (3, RouteRequest::Fused),
        (7, RouteRequest::Composed { query_block: 8 }),
    ]);
    let o = ForwardOptions {
        attention: plan,
        chunk: Some(20),
        logits: LogitsRows::Last,
    };
    let prompt = ids(30, cfg.vocab_size, 5);
    let out = model
        .prefill(&mut model.new_session().unwrap(), &prompt, &o)
        .unwrap();
    assert_eq!(out.rows, 1);
    let ran: Vec<(usize, Route, Option<usize>)> = out
        .attention
        .iter()
        .map(|r| (r.layer, r.report.route, r.report.query_block))
        .collect();
    assert_eq!(
        ran,
        vec![
            (3, Route::Fused, None),
            (7, Route::Composed, Some(8)),
            (3, Route::Fused, None),
            (7, Route::Composed, Some(8)),
        ]
    );
    let uniform = model
        .forward_logits(&prompt, &opts(RouteRequest::Fused, None))
        .unwrap();
    assert!(rel_err(&out.logits, &uniform[29 * cfg.vocab_size..]) < 1e-5);

    // A full layer without a route is an error, and the session is untouched.
    let mut s = model.new_session().unwrap();
    let missing = ForwardOptions {
        attention: AttentionPlan::PerLayer(vec![(3, RouteRequest::Fused)]),
        ..ForwardOptions::default()
    };
    let err = model.prefill(&mut s, &prompt, &missing).unwrap_err();
    assert!(matches!(err, ModelError::NoRoute { layer: 7 }), "{err}");
    assert_eq!(s.position(), 0);
}

#[test]
fn bad_requests_are_errors() {
    let (cfg, w) = model_parts("tiny-d64", Dtype::F32);
    let model = Qwen35Model::load(CpuBackend::new(), &cfg, w.clone()).unwrap();
    let d = ForwardOptions::default();
    let mut bad = ids(10, cfg.vocab_size, 1);
    bad[4] = cfg.vocab_size as u32;
    let err = model.forward_logits(&bad, &d).unwrap_err();
    assert!(
        matches!(err, ModelError::TokenOutOfRange { position: 4, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("512"), "{err}");
    assert!(matches!(
        model.forward_logits(&[], &d),
        Err(ModelError::EmptyInput)
    ));
    let zero = ForwardOptions {
        chunk: Some(0),
        ..ForwardOptions::default()
    };
    assert!(matches!(
        model.forward_logits(&[1, 2], &zero),
        Err(ModelError::ZeroChunk)
    ));
    // Fused attention on a head dim the kernel lacks is refused up front,
    // naming the layer, and leaves the session untouched; composed runs.
    let mut odd = ModelConfig::synthetic("tiny-d64").unwrap();
    odd.head_dim = 48;
    odd.rope.rotary_dim = 12;
    let ow = Weights::synthetic(&odd, 1);
    let om = Qwen35Model::load(CpuBackend::new(), &odd, ow.clone()).unwrap();
    let mut s = om.new_session().unwrap();
    let err = om
        .prefill(&mut s, &[1, 2, 3], &opts(RouteRequest::Fused, None))
        .unwrap_err();
    assert!(
        matches!(err, ModelError::RouteUnsupported { layer: 3, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("48"), "{err}");
    assert_eq!(s.position(), 0);
    for l in s.state().layers() {
        if let headroom_model::LayerState::Full(c) = l {
            assert_eq!(om.backend().kv_len(c, 0), 0, "no key was written");
        }
    }
    let composed = RouteRequest::Composed { query_block: 2 };
    assert!(om
        .prefill(&mut s, &[1, 2, 3], &opts(composed, None))
        .is_ok());
}

#[test]
fn an_invalid_config_is_an_error_not_a_panic() {
    let (mut cfg, w) = model_parts("tiny-d64", Dtype::F32);
    cfg.rope.rotary_dim = 13;
    let err = Qwen35Model::load(CpuBackend::new(), &cfg, w.clone()).unwrap_err();
    assert!(matches!(err, ModelError::Config(_)), "{err}");
    assert!(err.to_string().contains("partial_rotary_factor"), "{err}");
}

#[test]
fn missing_or_misshapen_weights_are_errors_naming_the_tensor() {
    let (cfg, mut w) = model_parts("tiny-d64", Dtype::F32);
    let name = "layers.3.self_attn.k_norm.weight";
    let t = w.remove(name).unwrap();
    let err = Qwen35Model::load(CpuBackend::new(), &cfg, w.clone()).unwrap_err();
    assert!(
        matches!(&err, ModelError::Weights(WeightsError::Missing { name: n, .. }) if n == name),
        "{err}"
    );
    let mut wrong = t.clone();
    wrong.shape = vec![t.numel() / 2, 2];
    w.insert(name, wrong);
    let err = Qwen35Model::load(CpuBackend::new(), &cfg, w.clone()).unwrap_err();
    assert!(err.to_string().contains(name), "{err}");
    assert!(matches!(
        err,
        ModelError::Weights(WeightsError::Shape { .. })
    ));
}

/// The MoE layers take their post-attention norm with the MoE block in one
/// backend call (`Backend::add_rms_norm_moe_partial`, which CUDA's decode path
/// folds into the router), and every MoE layer but the last the next layer's
/// input norm too (`Backend::add_rms_norm_moe_add_rms_norm`, which CUDA's
/// grouped-GEMM path folds into its combine): the profiler counts one norm
/// (the first layer's input norm; the final norm is not timed) and one MoE
/// call a layer — more norms would mean the model went back to calling a
/// norm on its own.
#[test]
fn moe_layers_take_the_post_attention_norm_with_the_block() {
    let (cfg, w) = model_parts("tiny-d256", Dtype::F32);
    assert!(cfg.moe().is_some(), "tiny-d256 is a MoE model");
    let model = Qwen35Model::load(CpuBackend::new(), &cfg, w).unwrap();
    let prompt = ids(20, cfg.vocab_size, 5);
    let route = RouteRequest::Composed { query_block: 16 };
    let plain = model.forward_logits(&prompt, &opts(route, None)).unwrap();
    model.set_profile_mode(headroom_model::profile::ProfileMode::Synced);
    let timed = model.forward_logits(&prompt, &opts(route, None)).unwrap();
    let parts = model.take_profile();
    assert_eq!(timed, plain, "profiling changes no value");
    let calls = |p: Part| parts.iter().find(|t| t.part == p).map_or(0, |t| t.calls);
    let layers = cfg.num_hidden_layers as u64;
    assert_eq!(calls(Part::Norm), 1, "{parts:?}");
    assert_eq!(calls(Part::Moe), layers, "{parts:?}");
}
