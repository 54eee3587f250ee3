//! The gated delta rule and the MoE block (shared expert, routed experts).

use super::*;

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn moe_shared_expert_matches_f64_and_bad_top_k_is_refused() {
    let be = backend();
    let (t, h, inter, e, si) = (19, 64, 32, 4, 48);
    let x = uniform(70, t * h, 1.0);
    let wg = uniform(71, si * h, 0.3);
    let wu = uniform(72, si * h, 0.3);
    let wd = uniform(73, h * si, 0.3);
    let w = MoeWeights {
        router: matrix(&be, e, h, &uniform(74, e * h, 0.3)),
        gate_up: matrix(&be, e * 2 * inter, h, &uniform(75, e * 2 * inter * h, 0.3)),
        down: matrix(&be, e * h, inter, &uniform(76, e * h * inter, 0.3)),
        shared_gate_proj: matrix(&be, si, h, &wg),
        shared_up_proj: matrix(&be, si, h, &wu),
        shared_down_proj: matrix(&be, h, si, &wd),
        shared_gate: matrix(&be, 1, h, &uniform(77, h, 0.3)),
    };
    let xa = act(&be, t, h, &x);
    let got = be.act_to_f32(&be.shared_expert(&xa, &w).unwrap()).unwrap();
    let mut want = vec![0.0f64; t * h];
    for r in 0..t {
        let mid: Vec<f64> = (0..si)
            .map(|j| {
                let dot = |m: &[f32]| {
                    (0..h)
                        .map(|c| x[r * h + c] as f64 * m[j * h + c] as f64)
                        .sum::<f64>()
                };
                // The device rounds gate, up and their product to bf16.
                let (g, u) = (
                    bf16::from_f64(dot(&wg)).to_f64(),
                    bf16::from_f64(dot(&wu)).to_f64(),
                );
                bf16::from_f64(silu(g) * u).to_f64()
            })
            .collect();
        for c in 0..h {
            want[r * h + c] = (0..si).map(|j| mid[j] * wd[c * si + j] as f64).sum();
        }
    }
    let err = rel_err(&got, &want);
    assert!(err < 1e-2, "shared expert {err}");
    let spec = MoeSpec::all_experts(e, 2, inter, true);
    let bad = MoeSpec { top_k: 5, ..spec };
    assert!(be.moe(&xa, &w, &bad).is_err());
}

/// The gated delta rule of one sequence in f64 (the recurrent form), state
/// `[hv][dk][dv]` carried in `s`.
fn gdn_ref(spec: &GdnSpec, qkv: &[f32], g: &[f32], beta: &[f32], s: &mut [f64]) -> Vec<f64> {
    let (hk, hv, dk, dv) = (spec.k_heads, spec.v_heads, spec.k_dim, spec.v_dim);
    let c = spec.conv_dim();
    let t = qkv.len() / c;
    let norm = |x: &[f32], scale: f64| -> Vec<f64> {
        let ss: f64 = x.iter().map(|&a| (a as f64).powi(2)).sum();
        x.iter()
            .map(|&a| a as f64 / (ss + 1e-6).sqrt() * scale)
            .collect()
    };
    let mut out = vec![0.0; t * hv * dv];
    for r in 0..t {
        let row = &qkv[r * c..(r + 1) * c];
        for h in 0..hv {
            let kh = h / (hv / hk);
            let q = norm(&row[kh * dk..(kh + 1) * dk], 1.0 / (dk as f64).sqrt());
            let k = norm(&row[hk * dk + kh * dk..hk * dk + (kh + 1) * dk], 1.0);
            let v = &row[2 * hk * dk + h * dv..2 * hk * dk + (h + 1) * dv];
            let st = &mut s[h * dk * dv..(h + 1) * dk * dv];
            let decay = (g[r * hv + h] as f64).exp();
            st.iter_mut().for_each(|x| *x *= decay);
            for j in 0..dv {
                let mem: f64 = (0..dk).map(|i| st[i * dv + j] * k[i]).sum();
                let delta = (v[j] as f64 - mem) * beta[r * hv + h] as f64;
                for i in 0..dk {
                    st[i * dv + j] += k[i] * delta;
                }
                out[(r * hv + h) * dv + j] = (0..dk).map(|i| st[i * dv + j] * q[i]).sum();
            }
        }
    }
    out
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn gated_delta_rule_matches_f64_across_varlen_chunks_or_reports_unmerged() {
    let be = backend();
    // The 35B-A3B GDN shape: 16 key heads, 32 value heads, head dims 128.
    let spec = GdnSpec {
        slots: 3,
        k_heads: 16,
        v_heads: 32,
        k_dim: 128,
        v_dim: 128,
        kernel: 4,
    };
    let (c, hv) = (spec.conv_dim(), spec.v_heads);
    let mut st = be.new_gdn_state(&spec).unwrap();
    let one = Batch::single(0, 0, 5);
    let qkv5 = act(&be, 5, c, &uniform(80, 5 * c, 1.0));
    let gb = act(&be, 5, hv, &uniform(81, 5 * hv, 1.0));
    // bf16 g / beta are refused: they must come from gdn_gating (f32).
    assert!(matches!(
        be.gated_delta_rule(&qkv5, &gb, &gb, &mut st, &one),
        Err(OpError::Shape { .. })
    ));
    let a_log = vector(&be, &uniform(82, hv, 1.0));
    let dt = vector(&be, &uniform(83, hv, 1.0));
    let mut refs = vec![vec![0.0f64; spec.recurrent_len()]; spec.slots];
    // Two steps: slot 2 and 0 start (37 and 70 rows), then continue with 29 and 1 rows.
    let steps = [
        Batch::packed(&[(2, 0, 37), (0, 0, 70)]),
        Batch::packed(&[(0, 70, 29), (2, 37, 1)]),
    ];
    for (n, batch) in steps.iter().enumerate() {
        let t = batch.rows();
        let qkv = uniform(84 + n as u64, t * c, 1.0);
        let a = act(&be, t, hv, &uniform(90 + n as u64, t * hv, 3.0));
        let b = act(&be, t, hv, &uniform(95 + n as u64, t * hv, 3.0));
        let (g, beta) = be.gdn_gating(&a, &b, &a_log, &dt).unwrap();
        poison_pool(&be, t * hv * spec.v_dim * 2);
        let out = match be.gated_delta_rule(&act(&be, t, c, &qkv), &g, &beta, &mut st, batch) {
            Err(OpError::Unsupported { reason, .. }) => {
                assert!(reason.contains("not merged yet"), "{reason}");
                return;
            }
            other => be.act_to_f32(&other.unwrap()).unwrap(),
        };
        let (gh, bh) = (be.act_to_f32(&g).unwrap(), be.act_to_f32(&beta).unwrap());
        for i in 0..batch.sequences() {
            let r = batch.seq_rows(i);
            let want = gdn_ref(
                &spec,
                &qkv[r.start * c..r.end * c],
                &gh[r.start * hv..r.end * hv],
                &bh[r.start * hv..r.end * hv],
                &mut refs[batch.slots[i]],
            );
            let got = &out[r.start * hv * spec.v_dim..r.end * hv * spec.v_dim];
            let e = rel_err(got, &want);
            assert!(e < 2e-2, "step {n} sequence {i}: rel err {e}");
        }
    }
}

/// The sparse MoE block in f64 (router softmax, top-k, renormalise, SwiGLU
/// experts, shared expert with its sigmoid gate).
#[allow(clippy::too_many_arguments)]
fn moe_ref(
    x: &[f32],
    h: usize,
    spec: &MoeSpec,
    router: &[f32],
    gate_up: &[f32],
    down: &[f32],
    shared: &[f64],
    sgate: &[f32],
) -> Vec<f64> {
    let (e, i_dim) = (spec.num_experts, spec.intermediate);
    let t = x.len() / h;
    let dot = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(&p, &q)| p as f64 * q as f64)
            .sum::<f64>()
    };
    let mut out = vec![0.0; t * h];
    for r in 0..t {
        let xr = &x[r * h..(r + 1) * h];
        let logits: Vec<f64> = (0..e)
            .map(|j| dot(xr, &router[j * h..(j + 1) * h]))
            .collect();
        let m = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = logits.iter().map(|l| (l - m).exp()).sum();
        let mut order: Vec<usize> = (0..e).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let chosen = &order[..spec.top_k];
        let kept: f64 = chosen.iter().map(|&j| (logits[j] - m).exp() / z).sum();
        for &ex in chosen {
            let mut w = (logits[ex] - m).exp() / z;
            if spec.renormalise {
                w /= kept;
            }
            let mid: Vec<f64> = (0..i_dim)
                .map(|k| {
                    let g = dot(xr, &gate_up[(ex * 2 * i_dim + k) * h..][..h]);
                    let u = dot(xr, &gate_up[(ex * 2 * i_dim + i_dim + k) * h..][..h]);
                    silu(g) * u
                })
                .collect();
            for col in 0..h {
                let row = &down[(ex * h + col) * i_dim..][..i_dim];
                out[r * h + col] += w * mid
                    .iter()
                    .zip(row)
                    .map(|(&a, &b)| a * b as f64)
                    .sum::<f64>();
            }
        }
        let sg = sigmoid(dot(xr, sgate));
        for col in 0..h {
            out[r * h + col] += sg * shared[r * h + col];
        }
    }
    out
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn moe_block_matches_f64_or_reports_unmerged() {
    let be = backend();
    let (t, h, inter, e, si) = (67, 256, 128, 16, 128);
    let spec = MoeSpec::all_experts(e, 4, inter, true);
    let x = uniform(100, t * h, 1.0);
    let router = uniform(101, e * h, 0.2);
    let gate_up = uniform(102, e * 2 * inter * h, 0.1);
    let down = uniform(103, e * h * inter, 0.1);
    let sgate = uniform(104, h, 0.1);
    let w = MoeWeights {
        router: matrix(&be, e, h, &router),
        gate_up: matrix(&be, e * 2 * inter, h, &gate_up),
        down: matrix(&be, e * h, inter, &down),
        shared_gate_proj: matrix(&be, si, h, &uniform(105, si * h, 0.1)),
        shared_up_proj: matrix(&be, si, h, &uniform(106, si * h, 0.1)),
        shared_down_proj: matrix(&be, h, si, &uniform(107, h * si, 0.1)),
        shared_gate: matrix(&be, 1, h, &sgate),
    };
    let xa = act(&be, t, h, &x);
    // The shared expert (checked against f64 in its own test) as the device computes it.
    let shared: Vec<f64> = be
        .act_to_f32(&be.shared_expert(&xa, &w).unwrap())
        .unwrap()
        .iter()
        .map(|&v| v as f64)
        .collect();
    poison_pool(&be, t * h * 2);
    match be.moe(&xa, &w, &spec) {
        Err(OpError::Unsupported { reason, .. }) => {
            assert!(reason.contains("not merged yet"), "{reason}")
        }
        other => {
            let got = be.act_to_f32(&other.unwrap()).unwrap();
            let want = moe_ref(&x, h, &spec, &router, &gate_up, &down, &shared, &sgate);
            let err = rel_err(&got, &want);
            assert!(err < 2e-2, "moe rel err {err}");
            assert!(be
                .supports(&OpKey::Moe {
                    num_experts: e,
                    top_k: 4
                })
                .is_ok());
        }
    }
}
