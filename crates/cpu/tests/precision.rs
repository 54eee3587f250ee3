//! The CPU backend's bf16 emulation (`Precision`): each site rounds exactly
//! the op outputs it names, the f32 reference rounds nothing, matrices are
//! rounded on upload and vectors never, and what the CUDA backend keeps in
//! f32 (router logits, `g` / `beta`) stays unrounded.

use half::bf16;
use headroom_core::ops::{Backend, MoeSpec, MoeWeights};
use headroom_core::Tensor;
use headroom_cpu::{ActRounding, CpuAct, CpuBackend, CpuWeight, Precision};

fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|i| headroom_core::ops::rng::normal(seed, i) * 0.7)
        .collect()
}

fn is_bf16(x: &[f32]) -> bool {
    x.iter().all(|&v| bf16::from_f32(v).to_f32() == v)
}

fn matrix(be: &CpuBackend, rows: usize, cols: usize, seed: u64) -> CpuWeight {
    be.upload_matrix(Tensor::from_f32(
        vec![rows, cols],
        values(rows * cols, seed),
    ))
    .unwrap()
}

fn vector(be: &CpuBackend, n: usize, seed: u64) -> CpuWeight {
    be.upload_vector(Tensor::from_f32(vec![n], values(n, seed)))
        .unwrap()
}

#[test]
fn matrices_round_on_upload_vectors_never() {
    let be = CpuBackend::with_precision(Precision::BF16_WEIGHTS);
    let CpuWeight::Matrix(m) = matrix(&be, 5, 7, 1) else {
        panic!("a matrix")
    };
    assert_eq!(m.dtype(), headroom_core::Dtype::Bf16);
    let CpuWeight::Vector(v) = vector(&be, 9, 2) else {
        panic!("a vector")
    };
    assert_eq!(v, values(9, 2));
    let f32_be = CpuBackend::new();
    let CpuWeight::Matrix(m) = matrix(&f32_be, 5, 7, 1) else {
        panic!("a matrix")
    };
    assert_eq!(m.dtype(), headroom_core::Dtype::F32);
}

#[test]
fn each_site_rounds_its_ops_only() {
    let (t, h) = (6, 16);
    let x_data = values(t * h, 3);
    let run = |act: ActRounding| {
        let be = CpuBackend::with_precision(Precision::bf16(act));
        let x = be.act_from_f32(t, h, &x_data).unwrap();
        let w = matrix(&be, 24, h, 4);
        let y = be.linear(&x, &w).unwrap();
        let mut res = be.act_from_f32(t, h, &x_data).unwrap();
        let delta = CpuAct::new(t, h, values(t * h, 5));
        let normed = be
            .add_rms_norm(&mut res, Some(&delta), &vector(&be, h, 6), 1e-6)
            .unwrap();
        let s = be.swiglu(&y, &y).unwrap();
        let (g, beta) = be
            .gdn_gating(&y, &y, &vector(&be, 24, 7), &vector(&be, 24, 8))
            .unwrap();
        (y, res, normed, s, g, beta)
    };
    let (y, res, normed, s, g, beta) = run(ActRounding::NONE);
    assert!(!is_bf16(&y.data) && !is_bf16(&res.data) && !is_bf16(&normed.data));
    assert!(!is_bf16(&s.data));
    let (y, res, normed, s, ..) = run(ActRounding::LINEAR);
    assert!(is_bf16(&y.data), "linear rounds");
    assert!(!is_bf16(&res.data) && !is_bf16(&normed.data) && !is_bf16(&s.data));
    let (_, res, normed, ..) = run(ActRounding::RESIDUAL);
    assert!(is_bf16(&res.data), "the residual sum rounds");
    assert!(!is_bf16(&normed.data));
    let (_, res, normed, ..) = run(ActRounding::NORM);
    assert!(is_bf16(&normed.data) && !is_bf16(&res.data));
    let (_, _, _, s, g2, beta2) = run(ActRounding::ALL);
    assert!(is_bf16(&s.data), "swiglu rounds under mlp");
    // g and beta stay f32 (computed from the rounded inputs, never rounded themselves).
    assert!(!is_bf16(&g2.data) && !is_bf16(&beta2.data));
    assert_ne!(g.data, g2.data);
    assert!(!is_bf16(&beta.data));
}

#[test]
fn moe_rounds_its_output_and_routes_on_f32_logits() {
    let (t, h, e, i) = (9, 16, 4, 8);
    let spec = MoeSpec::all_experts(e, 2, i, true);
    let x_data: Vec<f32> = values(t * h, 10)
        .into_iter()
        .map(|v| bf16::from_f32(v).to_f32())
        .collect();
    let run = |act: ActRounding| {
        let be = CpuBackend::with_precision(Precision::bf16(act));
        let w = MoeWeights {
            router: matrix(&be, e, h, 11),
            gate_up: matrix(&be, e * 2 * i, h, 12),
            down: matrix(&be, e * h, i, 13),
            shared_gate_proj: matrix(&be, 12, h, 14),
            shared_up_proj: matrix(&be, 12, h, 15),
            shared_down_proj: matrix(&be, h, 12, 16),
            shared_gate: matrix(&be, 1, h, 17),
        };
        let x = be.act_from_f32(t, h, &x_data).unwrap();
        be.moe(&x, &w, &spec).unwrap().data
    };
    let f32_out = run(ActRounding::NONE);
    let out = run(ActRounding::MOE_OUT);
    assert!(is_bf16(&out) && !is_bf16(&f32_out));
    // Rounding only the output is the f32 result rounded: the routing did not change.
    let rounded: Vec<f32> = f32_out
        .iter()
        .map(|&v| bf16::from_f32(v).to_f32())
        .collect();
    assert_eq!(out, rounded);
    // The inner roundings (mlp, linear) move the result, but by bf16 noise only.
    let inner = run(ActRounding::MLP.with(ActRounding::LINEAR));
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (a, b) in inner.iter().zip(&f32_out) {
        num += (*a as f64 - *b as f64).powi(2);
        den += (*b as f64).powi(2);
    }
    let err = (num / den).sqrt();
    assert!(err > 1e-5 && err < 2e-2, "{err:e}");
}

#[test]
fn attention_probabilities_round_only_under_their_site() {
    use headroom_core::ops::{Batch, KvSpec};
    use headroom_core::RouteRequest;
    let (t, nq, nkv, d) = (11, 4, 2, 16);
    let run = |act: ActRounding| {
        let be = CpuBackend::with_precision(Precision::bf16(act));
        let spec = KvSpec::contiguous(1, nkv, d, 64);
        let mut cache = be.new_kv_cache(&spec).unwrap();
        let mut outs = Vec::new();
        // Two chunks: the second attends over the first as history.
        for (hist, rows, seed) in [(0, 7, 20), (7, t - 7, 30)] {
            let b = Batch::single(0, hist, rows);
            let k = be
                .act_from_f32(rows, nkv * d, &values(rows * nkv * d, seed))
                .unwrap();
            let v = be
                .act_from_f32(rows, nkv * d, &values(rows * nkv * d, seed + 1))
                .unwrap();
            be.kv_write(&mut cache, &k, &v, &b).unwrap();
            let q = be
                .act_from_f32(rows, nq * d, &values(rows * nq * d, seed + 2))
                .unwrap();
            let (o, _) = be
                .attention(&q, &cache, &b, RouteRequest::Composed { query_block: 4 })
                .unwrap();
            outs.extend(o.data);
        }
        outs
    };
    let exact = run(ActRounding::NONE);
    let p = run(ActRounding::ATTENTION_P);
    assert_ne!(exact, p);
    let (mut num, mut den) = (0.0f64, 0.0f64);
    for (a, b) in p.iter().zip(&exact) {
        num += (*a as f64 - *b as f64).powi(2);
        den += (*b as f64).powi(2);
    }
    let err = (num / den).sqrt();
    // bf16 probabilities: about 2^-9 relative per weight, averaged over the keys.
    assert!(err > 1e-5 && err < 4e-3, "{err:e}");
}
