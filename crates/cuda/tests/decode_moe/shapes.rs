//! The MoE decode path's shapes beyond the 35B one: small shapes with tails
//! in every dimension and a rank's slice of the experts, the tensor-core
//! entries' shapes with tails, the model fixtures' blocks, shapes past one
//! pass of each kernel's loops; a NaN input row and repeated calls; the
//! router with the norm folded in against the two launches; and what the
//! path refuses.

use super::*;

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn small_shapes_with_tails_and_expert_parallel_slices_match_f64() {
    let be = backend();
    // hidden 200: not a multiple of 256 (the lanes' k loop has a tail);
    // inter 24 and shared 40: not multiples of 16 (column tails); 6 experts.
    let base = Shape {
        hidden: 200,
        experts: 6,
        top_k: 2,
        inter: 24,
        shared: 40,
        renormalise: false,
        first: 0,
        local: 6,
    };
    let cases = [
        base,
        Shape {
            renormalise: true,
            top_k: 3,
            ..base
        },
        // A rank holding experts 2..5 of 6.
        Shape {
            first: 2,
            local: 3,
            ..base
        },
        // The shared intermediate smaller than the routed one.
        Shape {
            shared: 8,
            hidden: 136,
            ..base
        },
    ];
    check_cases(&be, &cases, &[1, 2, 5, 8], 100);
}

/// Shapes the tensor-core kernels take (`moe_decode_gate_up_mma` at one row
/// and its `_rows` twin from three: hidden whole 32-column rounds up to
/// 2,048; `moe_decode_down_mma`: both
/// intermediates whole 64-column rounds up to 512) with their edges: hidden
/// 96 (most warps without a round), 1,056 (a warp's second stage of one
/// round, the last warps without rounds) and 1,024 (one stage a tile); tiles
/// of 8 columns cut short (intermediate 64 and 192 against 24 columns a
/// CTA); a shared intermediate longer and shorter than the routed one; 11
/// slots over the down kernel's 9 warps (warps with two slots); a rank's
/// slice of the experts. 1, 2, 5 and 8 rows; then a NaN in one row of the
/// 35B shape stays in that row.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn tensor_core_shapes_with_tails_match_f64() {
    let be = backend();
    let base = Shape {
        hidden: 96,
        experts: 12,
        top_k: 3,
        inter: 64,
        shared: 192,
        renormalise: true,
        first: 0,
        local: 12,
    };
    let cases = [
        base,
        Shape {
            first: 4,
            local: 5,
            ..base
        },
        Shape {
            hidden: 1056,
            experts: 40,
            top_k: 8,
            inter: 192,
            shared: 64,
            ..base
        },
        Shape {
            hidden: 1024,
            experts: 64,
            top_k: 10,
            inter: 128,
            shared: 512,
            renormalise: false,
            ..base
        },
        Shape {
            hidden: 2048,
            experts: 64,
            top_k: 10,
            inter: 512,
            shared: 128,
            ..base
        },
    ];
    check_cases(&be, &cases, &[1, 2, 5, 8], 1100);
    let s = QWEN35B;
    let w = weights(&be, s, 12);
    let (rows, h) = (3, s.hidden);
    let mut x = inputs(&w, s, rows, 5);
    x[h + 1000] = f32::NAN;
    let mut clean = x.clone();
    clean[h..2 * h].fill(0.0);
    let want = reference(&clean, &w, s);
    let xa = be.act_from_f32(rows, h, &x).unwrap();
    let got = run_decode(&be, &w, s, rows, &xa);
    assert!(got[h..2 * h].iter().all(|v| v.is_nan()), "row 1 is NaN");
    for r in [0, 2] {
        let e = rel_err(&got[r * h..(r + 1) * h], &want[r * h..(r + 1) * h]);
        assert!(e < 1e-2, "row {r}: rel err {e}");
    }
}

/// The MoE blocks of the model fixtures (crates/model/tests/fixtures):
/// moe_d256 (hidden 64, top-2 of 8 experts, intermediate 16, shared 24: its
/// one-token-per-step decode hit an illegal address in the whole model) and
/// moe_d64 (top-3), with neighbours: intermediate 8, shared 8 / 16 / 40,
/// without renormalisation, a rank's half of the experts; rows 1..=8.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn model_fixture_shapes_match_f64() {
    let be = backend();
    let d256 = Shape {
        hidden: 64,
        experts: 8,
        top_k: 2,
        inter: 16,
        shared: 24,
        renormalise: true,
        first: 0,
        local: 8,
    };
    let cases = [
        d256,
        Shape { top_k: 3, ..d256 },
        Shape { inter: 8, ..d256 },
        Shape { shared: 8, ..d256 },
        Shape {
            shared: 40,
            inter: 8,
            ..d256
        },
        Shape {
            renormalise: false,
            ..d256
        },
        Shape {
            first: 4,
            local: 4,
            ..d256
        },
        Shape {
            top_k: 8,
            shared: 16,
            ..d256
        },
    ];
    check_cases(&be, &cases, &[1, 2, 3, 4, 5, 6, 7, 8], 300);
}

/// Shapes past one pass of each loop: hidden > 2048 (x staging and the dots
/// loop), intermediate and shared > 512 (the down kernel's chunk passes),
/// top-k > 8 (its slot groups), more than 256 experts and counts that are not
/// multiples of 32 (the routing's per-thread experts and partial warps), the
/// largest top-k and expert count.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn shapes_past_one_pass_match_f64() {
    let be = backend();
    let cases = [
        Shape {
            hidden: 2312,
            experts: 12,
            top_k: 10,
            inter: 520,
            shared: 536,
            renormalise: true,
            first: 0,
            local: 12,
        },
        Shape {
            hidden: 64,
            experts: 300,
            top_k: 10,
            inter: 16,
            shared: 24,
            renormalise: false,
            first: 0,
            local: 300,
        },
        Shape {
            hidden: 64,
            experts: 1024,
            top_k: 32,
            inter: 8,
            shared: 8,
            renormalise: true,
            first: 500,
            local: 300,
        },
    ];
    check_cases(&be, &cases, &[1, 3, 8], 700);
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn nan_row_stays_in_its_row_and_repeated_calls_agree() {
    let be = backend();
    let s = Shape {
        hidden: 256,
        experts: 16,
        top_k: 4,
        inter: 64,
        shared: 32,
        renormalise: true,
        first: 0,
        local: 16,
    };
    let w = weights(&be, s, 7);
    let rows = 4;
    let mut x = inputs(&w, s, rows, 3);
    x[s.hidden + 17] = f32::NAN;
    let xa = be.act_from_f32(rows, s.hidden, &x).unwrap();
    let h = s.hidden;
    let mut clean = x.clone();
    clean[h..2 * h].fill(0.0);
    let want = reference(&clean, &w, s);
    let first = run_decode(&be, &w, s, rows, &xa);
    assert!(first[h..2 * h].iter().all(|v| v.is_nan()), "row 1 is NaN");
    for r in [0, 2, 3] {
        let e = rel_err(&first[r * h..(r + 1) * h], &want[r * h..(r + 1) * h]);
        assert!(e < 1e-2, "row {r}: rel err {e}");
    }
    // Ten more calls at varying row counts: every call routes afresh.
    for c in 0..10 {
        let r = 1 + c % rows;
        let sub = be.act_from_f32(r, h, &clean[..r * h]).unwrap();
        let got = run_decode(&be, &w, s, r, &sub);
        let e = rel_err(&got, &want[..r * h]);
        assert!(e < 1e-2, "call {c} ({r} rows): rel err {e}");
    }
    let again = run_decode(&be, &w, s, rows, &xa);
    let same = first
        .iter()
        .zip(&again)
        .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
    assert!(same, "the same input gives the same bits");
}

/// The post-attention norm folded into the router
/// (`Backend::add_rms_norm_moe_partial` on the decode kernels:
/// `moe_decode_route_norm`) gives the bits of the two calls it replaces
/// (`add_rms_norm` then `moe`) — the new residual and the block's output —
/// at 1, 3 and 8 rows of the 35B-A3B shape and at hidden 4096 (4 rows: the
/// router's staging), with a NaN in one row's delta kept to that row; and a
/// bf16 residual (not the model's) takes the two calls.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn the_router_with_the_norm_folded_in_gives_the_two_launches_bits() {
    let be = backend();
    let wide = Shape {
        hidden: 4096,
        experts: 64,
        top_k: 4,
        inter: 256,
        shared: 384,
        renormalise: true,
        first: 0,
        local: 64,
    };
    for (n, (s, rows_list)) in [(QWEN35B, vec![1, 3, 8]), (wide, vec![4])]
        .into_iter()
        .enumerate()
    {
        let w = weights(&be, s, 900 + 10 * n as u64);
        let norm_w = uniform(901 + n as u64, s.hidden, 0.5);
        let norm = be
            .upload_vector(Tensor::from_f32(vec![s.hidden], norm_w))
            .unwrap();
        for rows in rows_list {
            let h = s.hidden;
            let res = uniform(910 + rows as u64, rows * h, 2.0);
            let mut delta = uniform(920 + rows as u64, rows * h, 1.0);
            if rows == 3 {
                delta[h + 17] = f32::NAN;
            }
            let d = be.act_from_f32(rows, h, &delta).unwrap();
            let mut r_two = be.act_from_f32_wide(rows, h, &res).unwrap();
            let mut r_one = be.act_from_f32_wide(rows, h, &res).unwrap();
            poison_pool(&be, &[rows * h * 2, rows * h * 4, workspace_bytes(s, rows)]);
            let normed = be.add_rms_norm(&mut r_two, Some(&d), &norm, 1e-6).unwrap();
            let two = be.moe(&normed, &w.dev, &spec(s)).unwrap();
            poison_pool(&be, &[rows * h * 2, rows * h * 4, workspace_bytes(s, rows)]);
            let one = be
                .add_rms_norm_moe_partial(&mut r_one, &d, &norm, 1e-6, &w.dev, &spec(s))
                .unwrap();
            let bits = |a: &CudaAct| -> Vec<u32> {
                be.act_to_f32(a)
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect()
            };
            assert_eq!(bits(&r_one), bits(&r_two), "{s:?} {rows} rows: residual");
            let (o1, o2) = (bits(&one), bits(&two));
            assert_eq!(o1, o2, "{s:?} {rows} rows: output");
            let out = be.act_to_f32(&one).unwrap();
            for (r, row) in out.chunks(h).enumerate() {
                let nan = row.iter().filter(|v| v.is_nan()).count();
                if rows == 3 && r == 1 {
                    assert!(nan > 0, "the NaN row");
                } else {
                    assert_eq!(nan, 0, "{s:?} {rows} rows: row {r} is finite");
                }
            }
        }
    }
    // A bf16 residual: not the fused form's; the two calls, the same values.
    let w = weights(&be, QWEN35B, 990);
    let norm = be
        .upload_vector(Tensor::from_f32(vec![2048], uniform(991, 2048, 0.5)))
        .unwrap();
    let res = uniform(992, 2048, 2.0);
    let d = be.act_from_f32(1, 2048, &uniform(993, 2048, 1.0)).unwrap();
    let mut r1 = be.act_from_f32(1, 2048, &res).unwrap();
    let mut r2 = be.act_from_f32(1, 2048, &res).unwrap();
    let one = be
        .add_rms_norm_moe_partial(&mut r1, &d, &norm, 1e-6, &w.dev, &spec(QWEN35B))
        .unwrap();
    let normed = be.add_rms_norm(&mut r2, Some(&d), &norm, 1e-6).unwrap();
    let two = be.moe(&normed, &w.dev, &spec(QWEN35B)).unwrap();
    assert_eq!(be.act_to_f32(&one).unwrap(), be.act_to_f32(&two).unwrap());
    assert_eq!(be.act_to_f32(&r1).unwrap(), be.act_to_f32(&r2).unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn refuses_what_it_does_not_take() {
    let be = backend();
    let s = Shape {
        hidden: 64,
        experts: 8,
        top_k: 2,
        inter: 16,
        shared: 16,
        renormalise: true,
        first: 0,
        local: 8,
    };
    let w = weights(&be, s, 9);
    let nine = be.act_from_f32(9, 64, &uniform(1, 9 * 64, 1.0)).unwrap();
    assert!(be.moe_decode(&nine, &w.dev, &spec(s)).is_err(), "9 rows");
    let one = be.act_from_f32(1, 64, &uniform(2, 64, 1.0)).unwrap();
    let bad_k = MoeSpec {
        top_k: 9,
        ..spec(s)
    };
    assert!(
        be.moe_decode(&one, &w.dev, &bad_k).is_err(),
        "top_k > experts"
    );
    let narrow = MoeSpec {
        intermediate: 12,
        ..spec(s)
    };
    assert!(
        be.moe_decode(&one, &w.dev, &narrow).is_err(),
        "weights of another shape"
    );
}
