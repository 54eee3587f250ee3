//! More cases of the MoE decode path (written with the weight-streaming
//! kernels of branch moestream, which lost to these GEMV kernels and were
//! deleted: docs/perf/cuda-decode.md): the 35B-A3B shape at every row count
//! 1..=8, tied router rows (the lower expert index wins), a NaN router row
//! (every probability NaN: the output NaN in every row, written over a finite
//! fill), hidden / intermediate / shared sizes just past and short of 1024
//! and 512 with a rank's slice of the experts, 8 rows of hidden 4096 (the
//! router stages x in rounds of 4 rows), and calls queued back to back whose
//! routings differ (the down kernel reads each row's experts before its
//! griddepcontrol.wait, as gate_up publishes them).

use super::*;

/// The 35B-A3B block at rows 1..=8 against f64 (outputs and workspaces
/// NaN-poisoned first).
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn the_35b_shape_matches_f64_for_1_to_8_rows() {
    let be = backend();
    let s = QWEN35B;
    let w = weights(&be, s, 51);
    for rows in 1..=8 {
        let x = inputs(&w, s, rows, 60 + rows as u64);
        let xa = be.act_from_f32(rows, s.hidden, &x).unwrap();
        let want = reference(&x, &w, s);
        let got = run_decode(&be, &w, s, rows, &xa);
        let e = rel_err(&got, &want);
        println!("35B, {rows} rows: {e:.2e} vs f64");
        assert!(e < 1e-2, "{rows} rows: rel err {e}");
    }
}

/// The smallest gap around the top-k between distinct logits when experts
/// 2j and 2j + 1 share a router row: top-k = the best k / 2 pairs and, for
/// odd k, one expert of the next pair, so the gaps after pair k / 2 - 1 and
/// after pair k / 2 must be clear.
fn pair_gap(x: &[f32], router: &[f32], s: Shape) -> f64 {
    let m = s.top_k / 2;
    x.chunks(s.hidden)
        .map(|xr| {
            let mut l: Vec<f64> = router
                .chunks(s.hidden)
                .step_by(2)
                .map(|r| dot(xr, r))
                .collect();
            l.sort_by(|a, b| b.total_cmp(a));
            (l[m - 1] - l[m]).min(l[m] - l[m + 1])
        })
        .fold(f64::INFINITY, f64::min)
}

/// Experts 2j and 2j + 1 share a router row, so their logits and
/// probabilities are equal bit for bit; with an odd top-k the pair at the
/// boundary gives the kernels its lower expert (the reference's rule); the
/// inputs are drawn so that the other rule's output is over 3e-2 away.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn tied_router_rows_pick_the_lower_expert() {
    let be = backend();
    let s = Shape {
        hidden: 256,
        experts: 16,
        top_k: 5,
        inter: 64,
        shared: 32,
        renormalise: true,
        first: 0,
        local: 16,
    };
    let h = s.hidden;
    let mut w = weights(&be, s, 21);
    for j in 0..s.experts / 2 {
        let (a, b) = w.router.split_at_mut((2 * j + 1) * h);
        b[..h].copy_from_slice(&a[2 * j * h..]);
    }
    w.dev.router = matrix(&be, s.experts, h, &w.router);
    for rows in [1, 3, 8] {
        // Clear pairs, and the two rules' outputs at least 3e-2 apart.
        let apart = |x: &[f32]| {
            let other: Vec<f32> = reference_ties(x, &w, s, false)
                .iter()
                .map(|&v| v as f32)
                .collect();
            rel_err(&other, &reference_ties(x, &w, s, true)) > 3e-2
        };
        let x = (0..256)
            .map(|n| uniform(900 + rows as u64 * 1000 + n, rows * h, 1.0))
            .find(|x| pair_gap(x, &w.router, s) > 1e-3 && apart(x))
            .expect("an input with clear pairs in 256 draws");
        let xa = be.act_from_f32(rows, h, &x).unwrap();
        let want = reference_ties(&x, &w, s, true);
        let got = run_decode(&be, &w, s, rows, &xa);
        let e = rel_err(&got, &want);
        assert!(e < 1e-2, "{rows} rows: rel err {e}");
    }
}

/// A NaN in one router row makes that expert's logit NaN in every row, so
/// every row's softmax sum and every probability is NaN: the top-k ranks all
/// experts as NaN (the lowest k indices) with NaN weights, and every output
/// is NaN, as on the grouped-GEMM path. The output blocks are filled with a
/// finite pattern first, so NaN is what the kernels wrote.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn nan_router_row_gives_nan_rows_like_the_grouped_path() {
    let be = backend();
    let s = Shape {
        hidden: 128,
        experts: 12,
        top_k: 3,
        inter: 32,
        shared: 16,
        renormalise: false,
        first: 0,
        local: 12,
    };
    let h = s.hidden;
    let mut w = weights(&be, s, 31);
    w.router[5 * h + 7] = f32::NAN;
    w.dev.router = matrix(&be, s.experts, h, &w.router);
    for rows in [1, 4] {
        let x = uniform(77 + rows as u64, rows * h, 1.0);
        let xa = be.act_from_f32(rows, h, &x).unwrap();
        let grouped = be.moe_marked(&xa, &w.dev, &spec(s), None, &mut |_| {});
        let grouped = be.act_to_f32(&grouped.unwrap()).unwrap();
        assert!(grouped.iter().all(|v| v.is_nan()), "grouped path: NaN");
        // 0x3F3F: bf16 0.746, finite.
        fill_pool(&be, &[rows * h * 2], 0x3F);
        let out = be.moe_decode(&xa, &w.dev, &spec(s)).unwrap();
        let out = be.act_to_f32(&out).unwrap();
        assert!(
            out.iter().all(|v| v.is_nan()),
            "{rows} rows: every output NaN"
        );
    }
}

/// hidden / intermediate / shared sizes just past and short of 1024 and 512
/// (hidden 1032, 1016, 2056; intermediate 520, 504), a shared intermediate smaller and larger than the routed one,
/// a rank's slice of the experts, top-k 1 and 3, rows 1, 4 and 8 (all rows
/// of one shared column in one warp).
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn tails_past_and_short_of_1024_and_512_match_f64() {
    let be = backend();
    let cases = [
        Shape {
            hidden: 1032,
            experts: 20,
            top_k: 3,
            inter: 520,
            shared: 8,
            renormalise: false,
            first: 0,
            local: 20,
        },
        Shape {
            hidden: 1016,
            experts: 20,
            top_k: 3,
            inter: 504,
            shared: 1032,
            renormalise: true,
            first: 5,
            local: 10,
        },
        Shape {
            hidden: 2056,
            experts: 9,
            top_k: 1,
            inter: 24,
            shared: 520,
            renormalise: true,
            first: 0,
            local: 9,
        },
    ];
    check_cases(&be, &cases, &[1, 4, 8], 1300);
}

/// 8 rows of hidden 4096 (the router stages x four rows at a time) match f64.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn eight_rows_of_hidden_4096_match_f64() {
    let be = backend();
    let s = Shape {
        hidden: 4096,
        experts: 8,
        top_k: 2,
        inter: 24,
        shared: 16,
        renormalise: true,
        first: 0,
        local: 8,
    };
    check_cases(&be, &[s], &[8], 1700);
}

/// The experts of each row's top-k on the host (f64 logits, ties to the
/// lower index), sorted.
fn top_k_sets(x: &[f32], router: &[f32], s: Shape) -> Vec<Vec<usize>> {
    x.chunks(s.hidden)
        .map(|xr| {
            let l: Vec<f64> = router.chunks(s.hidden).map(|r| dot(xr, r)).collect();
            let mut order: Vec<usize> = (0..s.experts).collect();
            order.sort_by(|&a, &b| l[b].total_cmp(&l[a]).then(a.cmp(&b)));
            let mut top = order[..s.top_k].to_vec();
            top.sort_unstable();
            top
        })
        .collect()
}

/// The down kernel loads its routed rows before its griddepcontrol.wait,
/// once gate_up's CTA has published the row's experts (the route kernel
/// marks them unwritten first): 16 calls queued on the stream with no host
/// synchronisation between them, two inputs whose routings differ taken in
/// turn, each call's workspace the memory the one before freed (first filled
/// with zeros: expert 0 everywhere, a plausible stale routing), give each
/// input's bits from a call alone, at 1 and 3 rows of the 35B-A3B shape.
#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_decode.sh"]
fn calls_back_to_back_each_read_their_own_routing() {
    let be = backend();
    let s = QWEN35B;
    let w = weights(&be, s, 23);
    for rows in [1usize, 3] {
        let xs: Vec<Vec<f32>> = (0..2)
            .map(|i| inputs(&w, s, rows, 40 + i + 10 * rows as u64))
            .collect();
        let sets: Vec<_> = xs.iter().map(|x| top_k_sets(x, &w.router, s)).collect();
        assert!(
            (0..rows).all(|r| sets[0][r] != sets[1][r]),
            "{rows} rows: the two inputs route every row differently"
        );
        let acts: Vec<CudaAct> = xs
            .iter()
            .map(|x| be.act_from_f32(rows, s.hidden, x).unwrap())
            .collect();
        let alone: Vec<Vec<f32>> = acts
            .iter()
            .map(|a| run_decode(&be, &w, s, rows, a))
            .collect();
        for (i, x) in xs.iter().enumerate() {
            let e = rel_err(&alone[i], &reference(x, &w, s));
            assert!(e < 1e-2, "{rows} rows, input {i} alone: rel err {e}");
        }
        fill_pool(&be, &[workspace_bytes(s, rows)], 0x00);
        let outs: Vec<CudaAct> = (0..16)
            .map(|c| be.moe_decode(&acts[c % 2], &w.dev, &spec(s)).unwrap())
            .collect();
        for (c, o) in outs.iter().enumerate() {
            let got = be.act_to_f32(o).unwrap();
            let want = &alone[c % 2];
            let same = got
                .iter()
                .zip(want)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "{rows} rows, call {c}: not the bits of its input alone"
            );
        }
    }
}
