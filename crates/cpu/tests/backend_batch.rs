//! The CPU backend's stateful ops over packed varlen batches: running three
//! sequences (different slots, histories and lengths) in one call equals
//! running each alone, state advances only in the named slots, and
//! inconsistent batch descriptions are errors, never panics.

mod support;

use headroom_core::ops::{Backend, Batch, GdnSpec, KvSpec, RopeSpec};
use headroom_core::{OpError, RouteRequest, Tensor};
use headroom_cpu::{CpuAct, CpuBackend};
use support::{act, values};

fn rows(x: &CpuAct, r: std::ops::Range<usize>) -> Vec<f32> {
    x.data[r.start * x.cols..r.end * x.cols].to_vec()
}

const SPEC: GdnSpec = GdnSpec {
    slots: 4,
    k_heads: 2,
    v_heads: 4,
    k_dim: 8,
    v_dim: 6,
    kernel: 4,
};

/// (slot, rows) of the three sequences; the slots first see a warm-up chunk.
const SEQS: [(usize, usize); 3] = [(2, 5), (0, 1), (3, 9)];

#[test]
fn gdn_conv_and_rule_packed_equal_one_sequence_at_a_time() {
    let be = CpuBackend::new();
    let cd = SPEC.conv_dim();
    let conv_w = be
        .upload_vector(Tensor::from_f32(vec![cd, 1, 4], values(cd * 4, 9)))
        .unwrap();
    let mut packed = be.new_gdn_state(&SPEC).unwrap();
    let mut alone = be.new_gdn_state(&SPEC).unwrap();
    // Warm-up: every slot gets 3 rows of history, one sequence at a time.
    for (i, &(slot, _)) in SEQS.iter().enumerate() {
        for st in [&mut packed, &mut alone] {
            let b = Batch::single(slot, 0, 3);
            let x = act(&be, 3, cd, 100 + i as u64);
            let qkv = be.conv1d_silu(&x, &conv_w, st, &b).unwrap();
            let g = act(&be, 3, SPEC.v_heads, 200 + i as u64);
            let beta = act(&be, 3, SPEC.v_heads, 300 + i as u64);
            be.gated_delta_rule(&qkv, &g, &beta, st, &b).unwrap();
        }
    }
    let batch = Batch::packed(&SEQS.map(|(s, n)| (s, 3, n)));
    let t = batch.rows();
    let x = act(&be, t, cd, 1);
    let g = be
        .act_from_f32(
            t,
            SPEC.v_heads,
            &values(t * SPEC.v_heads, 2)
                .iter()
                .map(|v| -v.abs())
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let beta = act(&be, t, SPEC.v_heads, 3);
    let qkv = be.conv1d_silu(&x, &conv_w, &mut packed, &batch).unwrap();
    let out = be
        .gated_delta_rule(&qkv, &g, &beta, &mut packed, &batch)
        .unwrap();
    for i in 0..3 {
        let r = batch.seq_rows(i);
        let one = Batch::single(batch.slots[i], 3, r.len());
        let xi = be.act_from_f32(r.len(), cd, &rows(&x, r.clone())).unwrap();
        let gi = be
            .act_from_f32(r.len(), SPEC.v_heads, &rows(&g, r.clone()))
            .unwrap();
        let bi = be
            .act_from_f32(r.len(), SPEC.v_heads, &rows(&beta, r.clone()))
            .unwrap();
        let qi = be.conv1d_silu(&xi, &conv_w, &mut alone, &one).unwrap();
        assert_eq!(qi.data, rows(&qkv, r.clone()), "conv of sequence {i}");
        let oi = be
            .gated_delta_rule(&qi, &gi, &bi, &mut alone, &one)
            .unwrap();
        assert_eq!(oi.data, rows(&out, r.clone()), "rule of sequence {i}");
        assert!(oi.data.iter().all(|v| v.is_finite()));
    }
    assert_eq!(packed, alone, "every slot's state equal after both orders");
    // Slot 1 was never named: still zero.
    assert!(packed.conv[1]
        .iter()
        .chain(&packed.recurrent[1])
        .all(|&v| v == 0.0));
}

#[test]
fn attention_and_rope_packed_equal_one_sequence_at_a_time() {
    let be = CpuBackend::new();
    let (nq, nkv, d) = (4usize, 2usize, 64usize);
    let spec = KvSpec::contiguous(4, nkv, d, 64);
    let rope = RopeSpec {
        rotary_dim: 8,
        theta: 10_000.0,
    };
    let mut packed = be.new_kv_cache(&spec).unwrap();
    let mut alone = be.new_kv_cache(&spec).unwrap();
    let history = [4usize, 0, 7];
    for (i, &(slot, _)) in SEQS.iter().enumerate() {
        if history[i] == 0 {
            continue;
        }
        let b = Batch::single(slot, 0, history[i]);
        let k = act(&be, history[i], nkv * d, 40 + i as u64);
        let v = act(&be, history[i], nkv * d, 50 + i as u64);
        be.kv_write(&mut packed, &k, &v, &b).unwrap();
        be.kv_write(&mut alone, &k, &v, &b).unwrap();
    }
    let seqs: Vec<(usize, usize, usize)> = SEQS
        .iter()
        .zip(history)
        .map(|(&(s, n), h)| (s, h, n))
        .collect();
    let batch = Batch::packed(&seqs);
    let t = batch.rows();
    let mut q = act(&be, t, nq * d, 5);
    let mut k = act(&be, t, nkv * d, 6);
    let v = act(&be, t, nkv * d, 7);
    let (q0, k0) = (q.clone(), k.clone());
    be.rope(&mut q, nq, d, &rope, &batch).unwrap();
    be.rope(&mut k, nkv, d, &rope, &batch).unwrap();
    be.kv_write(&mut packed, &k, &v, &batch).unwrap();
    for route in [
        RouteRequest::Fused,
        RouteRequest::Composed { query_block: 3 },
    ] {
        let (out, rep) = be.attention(&q, &packed, &batch, route).unwrap();
        assert_eq!(
            rep.route.to_string(),
            if route == RouteRequest::Fused {
                "fused"
            } else {
                "composed"
            }
        );
        let mut cache = alone.clone();
        for (i, &hist) in history.iter().enumerate() {
            let r = batch.seq_rows(i);
            let one = Batch::single(batch.slots[i], hist, r.len());
            let mut qi = be
                .act_from_f32(r.len(), nq * d, &rows(&q0, r.clone()))
                .unwrap();
            let mut ki = be
                .act_from_f32(r.len(), nkv * d, &rows(&k0, r.clone()))
                .unwrap();
            let vi = be
                .act_from_f32(r.len(), nkv * d, &rows(&v, r.clone()))
                .unwrap();
            be.rope(&mut qi, nq, d, &rope, &one).unwrap();
            be.rope(&mut ki, nkv, d, &rope, &one).unwrap();
            assert_eq!(
                qi.data,
                rows(&q, r.clone()),
                "rope at the sequence's positions"
            );
            be.kv_write(&mut cache, &ki, &vi, &one).unwrap();
            let (oi, _) = be.attention(&qi, &cache, &one, route).unwrap();
            let got = rows(&out, r.clone());
            let err = oi
                .data
                .iter()
                .zip(&got)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(err < 1e-6, "{route} sequence {i}: {err}");
        }
    }
}

#[test]
fn inconsistent_batches_are_errors() {
    let be = CpuBackend::new();
    let spec = KvSpec::contiguous(2, 1, 8, 4);
    let mut cache = be.new_kv_cache(&spec).unwrap();
    let k = act(&be, 3, 8, 1);
    // History 2 but the slot holds 0 tokens.
    let err = be
        .kv_write(&mut cache, &k, &k, &Batch::single(0, 2, 3))
        .unwrap_err();
    assert!(matches!(err, OpError::State { slot: 0, .. }), "{err}");
    // Slot out of range.
    assert!(matches!(
        be.kv_write(&mut cache, &k, &k, &Batch::single(5, 0, 3)),
        Err(OpError::Batch(_))
    ));
    // Rows disagree with the batch.
    assert!(matches!(
        be.kv_write(&mut cache, &k, &k, &Batch::single(0, 0, 2)),
        Err(OpError::Shape { .. })
    ));
    // Capacity 4 exceeded on the second write.
    be.kv_write(&mut cache, &k, &k, &Batch::single(1, 0, 3))
        .unwrap();
    let err = be
        .kv_write(&mut cache, &k, &k, &Batch::single(1, 3, 3))
        .unwrap_err();
    assert!(err.to_string().contains("capacity 4"), "{err}");
    // Attention before the rows were written.
    let q = act(&be, 3, 8, 2);
    assert!(matches!(
        be.attention(&q, &cache, &Batch::single(0, 0, 3), RouteRequest::Fused),
        Err(OpError::State { .. })
    ));
    // A reset slot is empty again and its block's bytes are no longer counted.
    let before = be.memory().0;
    be.reset_kv_slot(&mut cache, 1).unwrap();
    assert_eq!(be.kv_len(&cache, 1), 0);
    assert_eq!(
        before - be.memory().0,
        64 * 2 * 8 * 4,
        "one block of 64 rows of k and v, 8 f32 each"
    );
}

#[test]
fn sampling_checks_rows_and_draws_per_row_streams() {
    use headroom_core::ops::SamplingParams;
    let be = CpuBackend::new();
    let logits = be
        .act_from_f32(2, 3, &[0.0, 5.0, 1.0, 2.0, 2.0, f32::NAN])
        .unwrap();
    let greedy = SamplingParams::default();
    assert_eq!(
        be.sample(&logits, &[greedy, greedy], &[0, 0]).unwrap(),
        vec![1, 0]
    );
    assert!(be.sample(&logits, &[greedy], &[0]).is_err());
    let nan = be.act_from_f32(1, 2, &[f32::NAN, f32::NAN]).unwrap();
    assert!(be.sample(&nan, &[greedy], &[0]).is_err());
}

/// The CPU records nothing: it says why, a request to record changes
/// nothing, and a step is queued once as it is with its own result.
#[test]
fn the_cpu_queues_a_step_as_it_is_and_says_why_it_records_none() {
    use headroom_core::ops::StepKey;
    let be = CpuBackend::new();
    let why = be.step_recording().unwrap_err();
    assert!(why.contains("cpu backend launches no kernels"), "{why}");
    be.set_step_recording(true);
    let key = StepKey {
        rows: 2,
        sequences: 2,
        drawn_ids: false,
    };
    let mut calls = 0;
    let out = be.queue_step(key, || {
        calls += 1;
        Ok::<_, String>(7)
    });
    assert_eq!(out.unwrap(), Ok(7));
    assert_eq!(calls, 1);
    let failed = be.queue_step(key, || Err::<u8, _>("no".to_string()));
    assert_eq!(
        failed.unwrap(),
        Err("no".to_string()),
        "the step's own error"
    );
}
