//! The MoE block with the next layer's input norm folded into its combine
//! (`Backend::add_rms_norm_moe_add_rms_norm`; on the grouped-GEMM path the
//! combine is `moe_combine_shared_norm(_fp8)`, `ops/moe/moe_route.cu`)
//! against the calls it replaces — the block (`add_rms_norm_moe_partial`),
//! then `add_rms_norm` — bit for bit: the normed rows, the residual, and the
//! rows' e4m3 codes and scales where the backend writes them. bf16 experts
//! on a backend before its first FP8 upload (no codes), FP8 experts after
//! (codes); decode rows (where the calls run), prefill rows, and rows over
//! two passes of the grouped GEMMs; a NaN row in every case; every output
//! and workspace NaN-poisoned first.

use super::norm_codes::{bits, read_codes, residual};
use super::*;

/// One side's normed rows, residual and codes (bits).
type Side = (Vec<u32>, Vec<u32>, Option<(Vec<u8>, Vec<u32>)>);

/// The folded call and the calls over the same fresh inputs of `t` rows.
fn both(be: &CudaBackend, w: &MoeWeights<CudaWeight>, s: Shape, t: usize, seed: u64) -> [Side; 2] {
    let h = s.hidden;
    let res = uniform(seed, t * h, 2.0);
    let mut del = uniform(seed + 1, t * h, 0.5);
    del[(t / 2) * h + 5] = f32::NAN; // row t / 2 NaN from here on
    let vector = |v: Vec<f32>| be.upload_vector(Tensor::from_f32(vec![h], v)).unwrap();
    let (post, next) = (
        vector(uniform(seed + 2, h, 0.5)),
        vector(uniform(seed + 3, h, 0.5)),
    );
    let d = be.act_from_f32(t, h, &del).unwrap();
    let sp = spec(s);
    [true, false].map(|fold| {
        let mut r = residual(be, t, h, &res);
        poison_pool(
            be,
            &[
                t * h,
                t * h * 2,
                t * h * 4,
                t * s.top_k * h * 2,
                t * (h / 128).max(1) * 4,
            ],
        );
        let y = if fold {
            be.add_rms_norm_moe_add_rms_norm(&mut r, &d, &post, 1e-6, w, &sp, &next)
                .unwrap()
        } else {
            let out = be
                .add_rms_norm_moe_partial(&mut r, &d, &post, 1e-6, w, &sp)
                .unwrap();
            be.add_rms_norm(&mut r, Some(&out), &next, 1e-6).unwrap()
        };
        assert_eq!((y.rows, y.cols, y.dtype), (t, h, Dtype::Bf16));
        (
            bits(be, &y),
            bits(be, &r),
            y.quantized().map(|q| read_codes(be, q)),
        )
    })
}

/// Asserts both sides equal, the NaN row NaN, the other rows finite and not
/// all zero, and codes present exactly when `codes`.
fn check(sides: [Side; 2], s: Shape, t: usize, codes: bool, what: &str) {
    let [fold, calls] = sides;
    assert_eq!(fold.0, calls.0, "{what}: the normed rows");
    assert_eq!(fold.1, calls.1, "{what}: the residual");
    assert_eq!(fold.2.is_some(), codes, "{what}: codes written");
    assert_eq!(fold.2, calls.2, "{what}: the codes and scales");
    let h = s.hidden;
    for (r, row) in fold.0.chunks(h).enumerate() {
        let nan = row.iter().all(|b| f32::from_bits(*b).is_nan());
        assert_eq!(nan, r == t / 2, "{what}: row {r} NaN");
        if r != t / 2 {
            assert!(
                row.iter().all(|b| f32::from_bits(*b).is_finite()),
                "{what}: row {r}"
            );
            assert!(
                row.iter().any(|b| f32::from_bits(*b) != 0.0),
                "{what}: row {r} zero"
            );
        }
    }
}

/// `w`'s experts and shared expert as bf16 matrices (the same values).
fn as_bf16(be: &CudaBackend, w: &Weights, s: Shape) -> MoeWeights<CudaWeight> {
    let (h, i, si, l) = (s.hidden, s.inter, s.shared, s.local);
    MoeWeights {
        router: bf16_matrix(be, s.experts, h, &w.router),
        gate_up: bf16_matrix(be, l * 2 * i, h, &w.gate_up),
        down: bf16_matrix(be, l * h, i, &w.down),
        shared_gate_proj: bf16_matrix(be, si, h, &w.sg),
        shared_up_proj: bf16_matrix(be, si, h, &w.su),
        shared_down_proj: bf16_matrix(be, h, si, &w.sd),
        shared_gate: bf16_matrix(be, 1, h, &w.gate),
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run by bench/gpu/check_fp8wire.sh"]
fn the_moe_block_with_the_next_norm_folded_in_gives_the_calls_bits() {
    // The 35B block's widths with 16 experts, and a small block whose rows
    // past 32,768 (CHUNK_TOKENS) take a second pass of the grouped GEMMs.
    let wide = Shape {
        hidden: 2048,
        experts: 16,
        top_k: 4,
        inter: 512,
        shared: 512,
        first: 0,
        local: 16,
    };
    let narrow = Shape {
        hidden: 256,
        experts: 8,
        top_k: 2,
        inter: 128,
        shared: 128,
        first: 0,
        local: 8,
    };
    // bf16 experts before any FP8 upload: no codes. A host copy of FP8
    // weights' values comes from a scratch backend (its uploads set its own
    // FP8 flag, not this one's).
    let scratch = backend();
    let be = backend();
    for (s, rows) in [(wide, &[5usize, 40, 300][..]), (narrow, &[33_000usize][..])] {
        let w = as_bf16(&be, &weights(&scratch, s, 31), s);
        for &t in rows {
            let what = format!("bf16 experts, hidden {}, {t} rows", s.hidden);
            check(both(&be, &w, s, t, 300 + t as u64), s, t, false, &what);
        }
    }
    // FP8 experts (the native FP8 grouped GEMMs above 32 rows): codes.
    let w = weights(&be, wide, 41);
    for t in [20usize, 40, 300] {
        let what = format!("FP8 experts, {t} rows");
        check(
            both(&be, &w.dev, wide, t, 400 + t as u64),
            wide,
            t,
            t > 8,
            &what,
        );
    }
}
