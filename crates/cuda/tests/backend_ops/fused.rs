//! The memory-bound kernels of the prefill against the CPU backend on the
//! same inputs: the 8-channel width-4 conv (wide channels, sequences that
//! start inside a row strip, state carried across calls; the one-channel
//! kernel for widths not a multiple of 8), the 4-wide group norms (and the
//! scalar ones past their group limits), and the gated attention (the gate
//! applied in the transpose back to token-major, one-row sequences gated
//! after) — every output from NaN-poisoned pool blocks.

use super::*;
use headroom_cpu::CpuBackend;

fn cpu_act(cpu: &CpuBackend, rows: usize, cols: usize, data: &[f32]) -> headroom_cpu::CpuAct {
    cpu.act_from_f32(rows, cols, data).unwrap()
}

fn cpu_vector(cpu: &CpuBackend, v: &[f32]) -> <CpuBackend as Backend>::Weight {
    cpu.upload_vector(Tensor::from_f32(vec![v.len()], v.to_vec()))
        .unwrap()
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Runs the same conv calls (batch list) on both backends from fresh states;
/// checks every output and, through a final one-row call per slot, the states.
fn conv_against_cpu(spec: GdnSpec, calls: &[Batch], seed: u64) {
    let (be, cpu) = (backend(), CpuBackend::new());
    let (c, k) = (spec.conv_dim(), spec.kernel);
    let w = uniform(seed, c * k, 1.0);
    let (wg, wc) = (vector(&be, &w), cpu_vector(&cpu, &w));
    let mut sg = be.new_gdn_state(&spec).unwrap();
    let mut sc = cpu.new_gdn_state(&spec).unwrap();
    let mut check = |batch: &Batch, what: &str, s: u64| {
        let x = uniform(s, batch.rows() * c, 2.0);
        poison_pool(&be, batch.rows() * c * 2);
        let got = be
            .act_to_f32(
                &be.conv1d_silu(&act(&be, batch.rows(), c, &x), &wg, &mut sg, batch)
                    .unwrap(),
            )
            .unwrap();
        let want = cpu
            .act_to_f32(
                &cpu.conv1d_silu(&cpu_act(&cpu, batch.rows(), c, &x), &wc, &mut sc, batch)
                    .unwrap(),
            )
            .unwrap();
        let e = rel_err(&got, &f64s(&want));
        assert!(e < 8e-3, "conv {what} (C {c}): rel err {e}");
        // Row by row too: a wrong window at a sequence start is a few rows of many.
        for (r, (g, w)) in got.chunks(c).zip(want.chunks(c)).enumerate() {
            let e = rel_err(g, &f64s(w));
            assert!(e < 1e-2, "conv {what} (C {c}) row {r}: rel err {e}");
        }
    };
    for (i, b) in calls.iter().enumerate() {
        check(b, &format!("call {i}"), seed + 1 + i as u64);
    }
    // Every slot's state: one more row each.
    let one: Vec<(usize, usize, usize)> = (0..spec.slots).map(|s| (s, 1000, 1)).collect();
    check(&Batch::packed(&one), "state read-back", seed + 100);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn conv1d_k4x8_matches_cpu_across_strips_sequences_and_calls() {
    // conv_dim 2304 = 288 groups of 8: two CTAs across the channels, the second partial.
    // The host's strips (32 rows; 8 to 32 with `CONV8_MIN_STRIP` lowered).
    let spec = GdnSpec {
        slots: 5,
        k_heads: 4,
        v_heads: 8,
        k_dim: 128,
        v_dim: 160,
        kernel: 4,
    };
    assert_eq!(spec.conv_dim() % 8, 0);
    let calls = [
        // Slot 0 sees 2 rows (fewer than kernel - 1), slot 2 45.
        Batch::packed(&[(0, 0, 2), (2, 0, 45)]),
        // Sequences of 1, 70, 2, 33 and 90 rows: starts inside the 32-row strips,
        // a one-row and a two-row sequence inside one strip.
        Batch::packed(&[(1, 0, 1), (0, 2, 70), (3, 0, 2), (2, 45, 33), (4, 0, 90)]),
        // A long single sequence (many strips), then decode-like rows.
        Batch::single(3, 2, 161),
        Batch::packed(&[(4, 90, 1), (0, 72, 1), (2, 78, 1)]),
        // Rows enough for full 32-row strips whatever `CONV8_MIN_STRIP` (2 channel
        // blocks x 66 strips on 132 SMs).
        Batch::packed(&[(1, 1, 1000), (3, 163, 1200)]),
    ];
    conv_against_cpu(spec, &calls, 200);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn conv1d_narrow_channels_keep_the_one_channel_kernel() {
    // conv_dim 60: not a multiple of 8.
    let spec = GdnSpec {
        slots: 3,
        k_heads: 2,
        v_heads: 2,
        k_dim: 10,
        v_dim: 10,
        kernel: 4,
    };
    assert_ne!(spec.conv_dim() % 8, 0);
    let calls = [
        Batch::packed(&[(0, 0, 2), (2, 0, 40)]),
        Batch::packed(&[(1, 0, 1), (0, 2, 37), (2, 40, 3)]),
    ];
    conv_against_cpu(spec, &calls, 300);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn group_norms_match_cpu_on_both_kernels_and_nan_stays_in_its_group() {
    let (be, cpu) = (backend(), CpuBackend::new());
    // 16 lanes per group: 128 and 256 (the model's), 200 (the second access
    // partial), 8 (one lane); 4-wide: 1024 (its limit), 100, 4; scalar: 102,
    // 1028. Odd group counts (a warp with one group, a partial last CTA).
    for (i, (d, groups)) in [
        (128, 331),
        (256, 93),
        (200, 61),
        (8, 1001),
        (1024, 13),
        (100, 33),
        (4, 77),
        (102, 45),
        (1028, 9),
    ]
    .into_iter()
    .enumerate()
    {
        let s = 400 + 10 * i as u64;
        let n = d * groups;
        let mut x = uniform(s, n, 3.0);
        x[5 * d + d / 2] = f32::NAN;
        let z = uniform(s + 1, n, 4.0);
        let (wq, wg) = (uniform(s + 2, d, 0.5), uniform(s + 3, d, 1.5));
        // One row of all the groups.
        poison_pool(&be, n * 2);
        let mut xg = act(&be, 1, n, &x);
        be.rms_norm_groups(&mut xg, &vector(&be, &wq), 1e-6)
            .unwrap();
        let mut xc = cpu_act(&cpu, 1, n, &x);
        cpu.rms_norm_groups(&mut xc, &cpu_vector(&cpu, &wq), 1e-6)
            .unwrap();
        let mut gg = act(&be, 1, n, &x);
        be.gated_rms_norm(&mut gg, &act(&be, 1, n, &z), &vector(&be, &wg), 1e-6)
            .unwrap();
        let mut gc = cpu_act(&cpu, 1, n, &x);
        cpu.gated_rms_norm(
            &mut gc,
            &cpu_act(&cpu, 1, n, &z),
            &cpu_vector(&cpu, &wg),
            1e-6,
        )
        .unwrap();
        for (what, got, want) in [
            (
                "rms_norm_groups",
                be.act_to_f32(&xg).unwrap(),
                cpu.act_to_f32(&xc).unwrap(),
            ),
            (
                "gated_rms_norm",
                be.act_to_f32(&gg).unwrap(),
                cpu.act_to_f32(&gc).unwrap(),
            ),
        ] {
            for (g, (a, b)) in got.chunks(d).zip(want.chunks(d)).enumerate() {
                if g == 5 {
                    assert!(a.iter().all(|v| v.is_nan()), "{what} d {d}: NaN group");
                    continue;
                }
                let e = rel_err(a, &f64s(b));
                assert!(e < 8e-3, "{what} d {d} group {g}: rel err {e}");
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_backend_ops.sh"]
fn gated_attention_equals_attention_then_gate_and_matches_cpu() {
    let (be, cpu) = (backend(), CpuBackend::new());
    let (nq, nkv) = (16, 2);
    // d 256 (the 16-byte transposes) and 100 (not a multiple of 8: scalar transposes).
    for d in [256, 100] {
        let spec = KvSpec::contiguous(4, nkv, d, 200);
        let routes: &[RouteRequest] = if d == 256 {
            &[
                RouteRequest::Fused,
                RouteRequest::Composed { query_block: 16 },
            ]
        } else {
            &[RouteRequest::Composed { query_block: 16 }]
        };
        for &route in routes {
            let mut cg = be.new_kv_cache(&spec).unwrap();
            let mut cc = cpu.new_kv_cache(&spec).unwrap();
            let mut seed = 500 + d as u64;
            let steps = [
                Batch::packed(&[(0, 0, 40), (1, 0, 3), (2, 0, 1)]),
                // Mixed: one-row sequences beside longer ones.
                Batch::packed(&[(1, 3, 1), (0, 40, 37), (3, 0, 1), (2, 1, 20)]),
                // Decode: every sequence one row.
                Batch::packed(&[(0, 77, 1), (1, 4, 1), (2, 21, 1), (3, 1, 1)]),
            ];
            for (si, batch) in steps.iter().enumerate() {
                let (t, kvw) = (batch.rows(), nkv * d);
                seed += 4;
                let (k, v) = (uniform(seed, t * kvw, 1.0), uniform(seed + 1, t * kvw, 1.0));
                let q = uniform(seed + 2, t * nq * d, 1.0);
                let g = uniform(seed + 3, t * nq * d, 4.0);
                be.kv_write(&mut cg, &act(&be, t, kvw, &k), &act(&be, t, kvw, &v), batch)
                    .unwrap();
                cpu.kv_write(
                    &mut cc,
                    &cpu_act(&cpu, t, kvw, &k),
                    &cpu_act(&cpu, t, kvw, &v),
                    batch,
                )
                .unwrap();
                let (qg, gg) = (act(&be, t, nq * d, &q), act(&be, t, nq * d, &g));
                poison_pool(&be, t * nq * d * 2);
                let (fused, rep) = be.attention_gated(&qg, &cg, batch, route, &gg).unwrap();
                let (mut plain, _) = be.attention(&qg, &cg, batch, route).unwrap();
                be.mul_sigmoid(&mut plain, &gg).unwrap();
                let fused = be.act_to_f32(&fused).unwrap();
                let plain = be.act_to_f32(&plain).unwrap();
                if route == RouteRequest::Fused {
                    // The paged kernel gates in f32 before its one rounding;
                    // attention then mul_sigmoid rounds twice: one bf16 step apart.
                    for (j, (a, b)) in fused.iter().zip(&plain).enumerate() {
                        assert!(
                            (a - b).abs() <= b.abs() * 2f32.powi(-7) + 1e-6,
                            "d {d} {route:?} step {si} [{j}]: gated {a} vs gate after {b}"
                        );
                    }
                } else {
                    assert_eq!(
                        fused, plain,
                        "d {d} {route:?} step {si}: the gate in the transpose = mul_sigmoid after"
                    );
                }
                assert_eq!(
                    rep.route,
                    match route {
                        RouteRequest::Fused => headroom_core::Route::Fused,
                        _ => headroom_core::Route::Composed,
                    }
                );
                let (want, _) = cpu
                    .attention_gated(
                        &cpu_act(&cpu, t, nq * d, &q),
                        &cc,
                        batch,
                        route,
                        &cpu_act(&cpu, t, nq * d, &g),
                    )
                    .unwrap();
                let want = cpu.act_to_f32(&want).unwrap();
                for i in 0..batch.sequences() {
                    let r = batch.seq_rows(i);
                    let span = r.start * nq * d..r.end * nq * d;
                    let e = rel_err(&fused[span.clone()], &f64s(&want[span]));
                    assert!(e < 1.5e-2, "d {d} {route:?} step {si} sequence {i}: {e}");
                }
            }
            // A gate of another shape is refused.
            let b = Batch::single(0, 0, 2);
            let q = act(&be, 2, nq * d, &uniform(9, 2 * nq * d, 1.0));
            let bad = act(&be, 1, nq * d, &uniform(9, nq * d, 1.0));
            let mut fresh = be.new_kv_cache(&spec).unwrap();
            let kv = act(&be, 2, nkv * d, &uniform(8, 2 * nkv * d, 1.0));
            be.kv_write(&mut fresh, &kv, &kv, &b).unwrap();
            assert!(be.attention_gated(&q, &fresh, &b, route, &bad).is_err());
        }
    }
}
