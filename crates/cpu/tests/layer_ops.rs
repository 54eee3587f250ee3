//! The layer-level ops' defaults on the CPU backend (the reference the CUDA
//! fused decode kernels are tested against): `gdn_core` equals conv1d_silu →
//! gdn_gating → gated_delta_rule → gated_rms_norm written out by hand, and
//! `attention_prep` equals the q/k norms, RoPE and KV write, over a prompt
//! and then decode steps, states included (each path on its own pool).

mod support;

use headroom_core::ops::{
    AttentionPrepWeights, Backend, Batch, GdnCoreInputs, GdnCoreWeights, GdnSpec, KvSpec, RopeSpec,
};
use headroom_core::{RouteRequest, Tensor};
use headroom_cpu::{CpuBackend, CpuWeight};
use support::{act, values};

fn vector(be: &CpuBackend, n: usize, seed: u64) -> CpuWeight {
    be.upload_vector(Tensor::from_f32(vec![n], values(n, seed)))
        .unwrap()
}

const SPEC: GdnSpec = GdnSpec {
    slots: 3,
    k_heads: 2,
    v_heads: 4,
    k_dim: 8,
    v_dim: 6,
    kernel: 4,
};

#[test]
fn gdn_core_is_the_composition_of_the_plain_ops() {
    let be = CpuBackend::new();
    let (conv, a_log, dt_bias, norm) = (
        vector(&be, SPEC.conv_dim() * SPEC.kernel, 1),
        vector(&be, SPEC.v_heads, 2),
        vector(&be, SPEC.v_heads, 3),
        vector(&be, SPEC.v_dim, 4),
    );
    let w = GdnCoreWeights {
        conv: &conv,
        a_log: &a_log,
        dt_bias: &dt_bias,
        norm: &norm,
        eps: 1e-6,
    };
    let mut s_op = be.new_gdn_state(&SPEC).unwrap();
    let mut s_hand = be.new_gdn_state(&SPEC).unwrap();
    let batches = [
        Batch::packed(&[(2, 0, 5), (0, 0, 3)]),
        Batch::packed(&[(2, 5, 1), (0, 3, 1)]),
        Batch::packed(&[(0, 4, 1), (2, 6, 1), (1, 0, 1)]),
    ];
    for (i, batch) in batches.iter().enumerate() {
        let t = batch.rows();
        let seed = 100 * (i as u64 + 1);
        let vd = SPEC.v_heads * SPEC.v_dim;
        let (z, b, a) = (
            act(&be, t, vd, seed + 1),
            act(&be, t, SPEC.v_heads, seed + 2),
            act(&be, t, SPEC.v_heads, seed + 3),
        );
        let mixed = || act(&be, t, SPEC.conv_dim(), seed);
        let got = be
            .gdn_core(
                GdnCoreInputs {
                    mixed: mixed(),
                    z: &z,
                    b: &b,
                    a: &a,
                },
                &w,
                &mut s_op,
                batch,
            )
            .unwrap();
        let qkv = be.conv1d_silu(&mixed(), &conv, &mut s_hand, batch).unwrap();
        let (g, beta) = be.gdn_gating(&a, &b, &a_log, &dt_bias).unwrap();
        let mut want = be
            .gated_delta_rule(&qkv, &g, &beta, &mut s_hand, batch)
            .unwrap();
        be.gated_rms_norm(&mut want, &z, &norm, 1e-6).unwrap();
        assert_eq!(got.data, want.data, "call {i}");
        assert!(got.data.iter().all(|v| v.is_finite()));
    }
}

#[test]
fn attention_prep_is_the_composition_of_the_plain_ops() {
    let be = CpuBackend::new();
    let (heads, kv_heads, d) = (4, 2, 16);
    let rope = RopeSpec {
        rotary_dim: 8,
        theta: 10_000.0,
    };
    let (qn, kn) = (vector(&be, d, 7), vector(&be, d, 8));
    let w = AttentionPrepWeights {
        q_norm: &qn,
        k_norm: &kn,
        eps: 1e-6,
        heads,
        kv_heads,
        head_dim: d,
        rope: &rope,
    };
    let spec = KvSpec::contiguous(2, kv_heads, d, 16);
    let mut c_op = be.new_kv_cache(&spec).unwrap();
    let mut c_hand = be.new_kv_cache(&spec).unwrap();
    let batches = [
        Batch::packed(&[(1, 0, 4), (0, 0, 2)]),
        Batch::packed(&[(1, 4, 1), (0, 2, 1)]),
    ];
    for (i, batch) in batches.iter().enumerate() {
        let t = batch.rows();
        let seed = 50 * (i as u64 + 1);
        let (mut q1, mut k1) = (
            act(&be, t, heads * d, seed),
            act(&be, t, kv_heads * d, seed + 1),
        );
        let (mut q2, mut k2) = (
            act(&be, t, heads * d, seed),
            act(&be, t, kv_heads * d, seed + 1),
        );
        let v = act(&be, t, kv_heads * d, seed + 2);
        be.attention_prep(&mut q1, &mut k1, &v, &w, &mut c_op, batch)
            .unwrap();
        be.rms_norm_groups(&mut q2, &qn, 1e-6).unwrap();
        be.rms_norm_groups(&mut k2, &kn, 1e-6).unwrap();
        be.rope(&mut q2, heads, d, &rope, batch).unwrap();
        be.rope(&mut k2, kv_heads, d, &rope, batch).unwrap();
        be.kv_write(&mut c_hand, &k2, &v, batch).unwrap();
        assert_eq!((q1.data.clone(), k1.data), (q2.data, k2.data), "call {i}");
        let route = RouteRequest::Composed { query_block: 0 };
        let (y1, _) = be.attention(&q1, &c_op, batch, route).unwrap();
        let (y2, _) = be.attention(&q1, &c_hand, batch, route).unwrap();
        assert_eq!(y1.data, y2.data, "call {i}: the caches differ");
    }
}
