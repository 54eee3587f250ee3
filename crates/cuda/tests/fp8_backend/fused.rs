//! The decode kernels' FP8 instantiation (`ops/moe/moe_decode.cu`, entries
//! `moe_decode_*_fp8*`: routed experts e4m3 with 128 × 128 block scales, the
//! shared expert FP8 or bf16, router and shared gate bf16) at 1 ..= 8 rows
//! against f64 on the dequantized weights: block scales that differ by
//! 2^12 across blocks, shapes whose hidden and intermediates are not
//! multiples of 128, expert parallelism, outputs and workspaces
//! NaN-poisoned first; `moe` takes the same path (bit-identical results);
//! what the kernels cannot read is refused with a reason and `moe` still
//! answers it on the other FP8 paths.

use super::*;

/// A shape with tails: hidden 192 (1.5 blocks), intermediate 320 (2.5),
/// shared 96 (0.75), top-3 of 8.
const TAILS: Shape = Shape {
    hidden: 192,
    experts: 8,
    top_k: 3,
    inter: 320,
    shared: 96,
    first: 0,
    local: 8,
};

/// `rows × cols` values uniform in `[-sc, sc)` (bf16), each 128 × 128 block
/// of each `grid_rows`-row matrix times its own power of two in 2^-6 ..= 2^6
/// (exact in bf16), so the blocks' scales differ by up to 2^12.
fn blocky(seed: u64, rows: usize, cols: usize, grid_rows: usize, sc: f32) -> Vec<f32> {
    let mut v = uniform(seed, rows * cols, sc);
    for (r, row) in v.chunks_mut(cols).enumerate() {
        let rb = (r % grid_rows) / 128;
        for (c, x) in row.iter_mut().enumerate() {
            let k = (rb * 3 + (c / 128) * 5 + seed as usize) % 7;
            *x *= (2f32).powi(2 * k as i32 - 6);
        }
    }
    v
}

/// `weights` with blocky values, the shared expert FP8 (`shared_fp8`) or
/// bf16.
fn blocky_weights(be: &CudaBackend, s: Shape, seed: u64, shared_fp8: bool) -> Weights {
    let (h, i, si, l) = (s.hidden, s.inter, s.shared, s.local);
    let sc = 1.7 / (h as f32).sqrt();
    let router = uniform(seed, s.experts * h, 4.0 * sc);
    let gate = uniform(seed + 6, h, sc);
    let gu_v = blocky(seed + 1, l * 2 * i, h, 2 * i, sc / 8.0);
    let (gate_up_w, gate_up) = fp8(be, l * 2 * i, h, 2 * i, &gu_v);
    let down_v = blocky(seed + 2, l * h, i, h, 1.7 / (i as f32).sqrt() / 8.0);
    let (down_w, down) = fp8(be, l * h, i, h, &down_v);
    let shared = |seed: u64, rows: usize, cols: usize, sc: f32| {
        let v = blocky(seed, rows, cols, rows, sc / 8.0);
        if shared_fp8 {
            fp8(be, rows, cols, rows, &v)
        } else {
            (bf16_matrix(be, rows, cols, &v), v)
        }
    };
    let (sg_w, sg) = shared(seed + 3, si, h, sc);
    let (su_w, su) = shared(seed + 4, si, h, sc);
    let (sd_w, sd) = shared(seed + 5, h, si, 1.7 / (si as f32).sqrt());
    Weights {
        dev: MoeWeights {
            router: bf16_matrix(be, s.experts, h, &router),
            gate_up: gate_up_w,
            down: down_w,
            shared_gate_proj: sg_w,
            shared_up_proj: su_w,
            shared_down_proj: sd_w,
            shared_gate: bf16_matrix(be, 1, h, &gate),
        },
        router,
        gate_up,
        down,
        sg,
        su,
        sd,
        gate,
    }
}

/// Bytes of the decode kernels' workspace (`ops/moe/decode.rs`): logits,
/// routing, activations.
fn workspace_bytes(s: Shape, rows: usize) -> usize {
    let up16 = |b: usize| b.div_ceil(16) * 16;
    let stride = s.inter.max(s.shared).div_ceil(4) * 4;
    up16(rows * (s.experts + 1) * 4)
        + 2 * up16(rows * s.top_k * 4)
        + rows * (s.top_k + 1) * stride * 4
}

/// An input of `rows` rows with a clear routing (top-k gap > 1e-3).
fn input(w: &Weights, s: Shape, rows: usize, seed: u64) -> Vec<f32> {
    (0..64)
        .map(|n| uniform(seed + 1000 * n, rows * s.hidden, 1.0))
        .find(|x| routing_gap(x, w, s) > 1e-3)
        .expect("an input with a clear routing in 64 draws")
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8wire.sh"]
fn the_fused_fp8_decode_matches_f64_at_1_to_8_rows() {
    let be = backend();
    let cases = [
        ("35B, fp8 shared", QWEN35B, true),
        ("tails, fp8 shared", TAILS, true),
        ("tails, bf16 shared", TAILS, false),
        (
            "tails, experts 2..6 of 8",
            Shape {
                first: 2,
                local: 4,
                ..TAILS
            },
            true,
        ),
    ];
    for (c, &(what, s, shared_fp8)) in cases.iter().enumerate() {
        let w = blocky_weights(&be, s, 700 + 10 * c as u64, shared_fp8);
        assert_eq!(w.dev.shared_down_proj.is_fp8(), shared_fp8);
        for rows in 1..=8usize {
            let x = input(&w, s, rows, 7000 * c as u64 + rows as u64);
            let xa = be.act_from_f32(rows, s.hidden, &x).unwrap();
            poison_pool(&be, &[rows * s.hidden * 2, workspace_bytes(s, rows)]);
            let out = be.moe_decode(&xa, &w.dev, &spec(s)).unwrap();
            assert_eq!(
                (out.rows, out.cols, out.dtype),
                (rows, s.hidden, Dtype::Bf16)
            );
            let got = be.act_to_f32(&out).unwrap();
            let err = rel_err(&got, &reference(&x, &w, s, rows, false));
            println!("fp8_fused_moe: {what} rows {rows}: rel err {err:.2e}");
            assert!(err < 1e-2, "{what} rows {rows}: {err:.3e}");
            // The op takes the same kernels: the same bits.
            poison_pool(&be, &[rows * s.hidden * 2, workspace_bytes(s, rows)]);
            let via_moe = be
                .act_to_f32(&be.moe(&xa, &w.dev, &spec(s)).unwrap())
                .unwrap();
            let same = got
                .iter()
                .zip(&via_moe)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{what} rows {rows}: moe took another path");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8wire.sh"]
fn the_fused_fp8_decode_refuses_what_it_cannot_read_and_moe_still_answers() {
    let be = backend();
    let refused = |x: &CudaAct, w: &MoeWeights<CudaWeight>, s: Shape, why: &str| {
        let e = be.moe_decode(x, w, &spec(s)).unwrap_err().to_string();
        assert!(e.contains("not supported"), "{why}: {e}");
        println!("fp8_fused_moe: refused ({why}): {e}");
    };
    // hidden 200: a multiple of 8 (bf16 chunks), not of 16 (e4m3 chunks).
    let odd = Shape {
        hidden: 200,
        ..TAILS
    };
    let w = blocky_weights(&be, odd, 31, true);
    for rows in [1usize, 3] {
        let x = input(&w, odd, rows, 77 + rows as u64);
        let xa = be.act_from_f32(rows, odd.hidden, &x).unwrap();
        refused(&xa, &w.dev, odd, "hidden 200");
        poison_pool(&be, &[rows * odd.hidden * 2]);
        let got = be
            .act_to_f32(&be.moe(&xa, &w.dev, &spec(odd)).unwrap())
            .unwrap();
        let err = rel_err(&got, &reference(&x, &w, odd, rows, false));
        println!("fp8_fused_moe: hidden 200 rows {rows} on moe: rel err {err:.2e}");
        assert!(err < 1e-2, "hidden 200 rows {rows}: {err:.3e}");
    }
    let mut w = blocky_weights(&be, TAILS, 41, true);
    let nine = be
        .act_from_f32(9, TAILS.hidden, &uniform(5, 9 * TAILS.hidden, 1.0))
        .unwrap();
    refused(&nine, &w.dev, TAILS, "9 rows");
    let one = be
        .act_from_f32(1, TAILS.hidden, &uniform(6, TAILS.hidden, 1.0))
        .unwrap();
    // A shared expert of mixed formats, and an FP8 router: not read.
    let (h, si) = (TAILS.hidden, TAILS.shared);
    let bf16_up = bf16_matrix(&be, si, h, &w.su);
    let fp8_up = std::mem::replace(&mut w.dev.shared_up_proj, bf16_up);
    refused(&one, &w.dev, TAILS, "mixed shared expert");
    w.dev.shared_up_proj = fp8_up;
    let (router, _) = fp8(&be, TAILS.experts, h, TAILS.experts, &w.router);
    let bf16_router = std::mem::replace(&mut w.dev.router, router);
    refused(&one, &w.dev, TAILS, "fp8 router");
    w.dev.router = bf16_router;
    be.moe_decode(&one, &w.dev, &spec(TAILS)).unwrap();
}
