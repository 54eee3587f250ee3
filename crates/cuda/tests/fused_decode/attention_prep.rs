//! The fused attention prep of decode (`Backend::attention_prep`,
//! `kernels/attention_prep.cu`: RoPE, the q/k norms and the KV write of one
//! row a sequence) against the composition of the plain ops on the same GPU
//! and against the CPU backend (a module of `tests/fused_decode.rs`).

use super::*;

pub(crate) struct PrepWeights<B: Backend> {
    pub(crate) q_norm: B::Weight,
    pub(crate) k_norm: B::Weight,
}

pub(crate) fn prep_weights<B: Backend>(be: &B, d: usize, seed: u64) -> PrepWeights<B> {
    let v = |s: u64| {
        be.upload_vector(Tensor::from_f32(vec![d], uniform(s, d, -0.5, 0.5)))
            .unwrap()
    };
    PrepWeights {
        q_norm: v(seed),
        k_norm: v(seed + 1),
    }
}

/// One prep call on `be`; returns (q, k) after it and the attention output
/// of q over the cache (reads back what the KV write stored).
#[allow(clippy::too_many_arguments)]
fn run_prep<B: Backend>(
    be: &B,
    w: &PrepWeights<B>,
    shape: (usize, usize, usize, &RopeSpec),
    cache: &mut B::KvCache,
    data: &[Vec<f32>; 3],
    batch: &Batch,
    prep: impl FnOnce(
        &mut B::Act,
        &mut B::Act,
        &B::Act,
        &AttentionPrepWeights<'_, B::Weight>,
        &mut B::KvCache,
    ),
) -> [Vec<f32>; 3] {
    let (heads, kv_heads, d, rope) = shape;
    let t = batch.rows();
    let mut q = be.act_from_f32(t, heads * d, &data[0]).unwrap();
    let mut k = be.act_from_f32(t, kv_heads * d, &data[1]).unwrap();
    let v = be.act_from_f32(t, kv_heads * d, &data[2]).unwrap();
    let pw = AttentionPrepWeights {
        q_norm: &w.q_norm,
        k_norm: &w.k_norm,
        eps: 1e-6,
        heads,
        kv_heads,
        head_dim: d,
        rope,
    };
    prep(&mut q, &mut k, &v, &pw, cache);
    let (y, _) = be.attention(&q, cache, batch, RouteRequest::Fused).unwrap();
    [
        be.act_to_f32(&q).unwrap(),
        be.act_to_f32(&k).unwrap(),
        be.act_to_f32(&y).unwrap(),
    ]
}

pub(crate) fn prep_data(
    t: usize,
    heads: usize,
    kv_heads: usize,
    d: usize,
    seed: u64,
) -> [Vec<f32>; 3] {
    [
        uniform(seed, t * heads * d, -3.0, 3.0),
        uniform(seed + 1, t * kv_heads * d, -3.0, 3.0),
        uniform(seed + 2, t * kv_heads * d, -2.0, 2.0),
    ]
}

/// Prompts of 7, 3 and 12 tokens into scattered slots (composed prep), then
/// 8 decode steps: fused vs composed GPU vs CPU on q, k and the attention
/// over each cache.
pub(crate) fn attention_prep_case(
    heads: usize,
    kv_heads: usize,
    d: usize,
    rotary: usize,
    seed: u64,
) {
    attention_prep_case_after(heads, kv_heads, d, rotary, seed, [7, 3, 12]);
}

/// [`attention_prep_case`] after prompts of `prompts` tokens.
fn attention_prep_case_after(
    heads: usize,
    kv_heads: usize,
    d: usize,
    rotary: usize,
    seed: u64,
    prompts: [usize; 3],
) {
    let (be, cpu) = (backend(), CpuBackend::new());
    let rope = RopeSpec {
        rotary_dim: rotary,
        theta: 10_000_000.0,
    };
    let shape = (heads, kv_heads, d, &rope);
    let spec = KvSpec::contiguous(4, kv_heads, d, prompts.iter().max().unwrap() + 28);
    let (wg, wc) = (prep_weights(&be, d, seed), prep_weights(&cpu, d, seed));
    let mut c_f = be.new_kv_cache(&spec).unwrap();
    let mut c_g = be.new_kv_cache(&spec).unwrap();
    let mut c_c = cpu.new_kv_cache(&spec).unwrap();
    let prompt = Batch::packed(&[(2, 0, prompts[0]), (0, 0, prompts[1]), (3, 0, prompts[2])]);
    let data = prep_data(prompt.rows(), heads, kv_heads, d, seed + 5);
    let composed =
        |q: &mut CudaAct,
         k: &mut CudaAct,
         v: &CudaAct,
         pw: &AttentionPrepWeights<'_, _>,
         c: &mut _| { attention_prep_composed(&be, q, k, v, pw, c, &prompt).unwrap() };
    let f = run_prep(&be, &wg, shape, &mut c_f, &data, &prompt, composed);
    let g = run_prep(&be, &wg, shape, &mut c_g, &data, &prompt, composed);
    assert_eq!(f, g);
    let c = run_prep(
        &cpu,
        &wc,
        shape,
        &mut c_c,
        &data,
        &prompt,
        |q, k, v, pw, c| cpu.attention_prep(q, k, v, pw, c, &prompt).unwrap(),
    );
    for i in 0..3 {
        assert!(rel_err(&g[i], &c[i], "prompt") < 2e-2);
    }
    let mut hist = prompts;
    let label = format!("{heads}/{kv_heads} heads d{d} rotary {rotary}");
    for step in 0..8u64 {
        let batch = Batch::packed(&[(2, hist[0], 1), (0, hist[1], 1), (3, hist[2], 1)]);
        let data = prep_data(3, heads, kv_heads, d, seed + 100 + step);
        poison_pool(&be, 3 * heads * d * 2);
        let f = run_prep(
            &be,
            &wg,
            shape,
            &mut c_f,
            &data,
            &batch,
            |q, k, v, pw, c| be.attention_prep_fused(q, k, v, pw, c, &batch).unwrap(),
        );
        let g = run_prep(
            &be,
            &wg,
            shape,
            &mut c_g,
            &data,
            &batch,
            |q, k, v, pw, c| attention_prep_composed(&be, q, k, v, pw, c, &batch).unwrap(),
        );
        let c = run_prep(
            &cpu,
            &wc,
            shape,
            &mut c_c,
            &data,
            &batch,
            |q, k, v, pw, c| cpu.attention_prep(q, k, v, pw, c, &batch).unwrap(),
        );
        for (i, what) in ["q", "k", "attention over the cache"].iter().enumerate() {
            let eg = rel_err(&f[i], &g[i], what);
            let ec = rel_err(&f[i], &c[i], what);
            println!("{label} step {step} {what}: fused vs composed {eg:.2e}, vs cpu {ec:.2e}");
            assert!(
                eg < 2e-3,
                "{label} step {step} {what}: fused vs composed {eg}"
            );
            assert!(ec < 2e-2, "{label} step {step} {what}: fused vs cpu {ec}");
        }
        for h in &mut hist {
            *h += 1;
        }
    }
    for slot in 0..4 {
        assert_eq!(
            be.kv_len(&c_f, slot),
            be.kv_len(&c_g, slot),
            "slot {slot} length"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn_decode.sh"]
fn attention_prep_fused_35b_a3b_shape_and_others() {
    attention_prep_case(16, 2, 256, 64, 11); // GQA 8, partial rotary (the model)
    attention_prep_case(8, 4, 128, 128, 12); // GQA 2, full rotary
    attention_prep_case(4, 4, 64, 16, 13); // GQA 1
}

/// The paged kernel right after the fused prep over long histories: decode
/// rows whose keys split over many CTAs, the prep (which lets the attention
/// grid start early) writing this step's rows into the cache whose unwritten
/// rows hold whatever its memory held. Histories at, one short of and past a
/// multiple of the 64-row key tile (session 20 ran it on a branch that loads
/// history-only tiles before the wait, too).
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_gdn_decode.sh"]
fn attention_prep_fused_then_attention_over_long_histories() {
    attention_prep_case_after(16, 2, 256, 64, 21, [640, 1023, 1500]);
    attention_prep_case_after(8, 4, 128, 128, 22, [2048, 130, 1216]);
}
