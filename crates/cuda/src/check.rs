//! On-device correctness checks of both routes against an f64 CPU reference.
//!
//! Each case draws fresh random inputs, poisons the output with NaN before
//! the launch, and compares sampled rows (all rows of short cases; the first,
//! last and random rows of long ones) by relative Frobenius error. Every row
//! of the output is scanned: a NaN left where no NaN belongs (an unwritten or
//! wrong row) fails the case, and a NaN planted in one key row must appear in
//! exactly the rows that attend to it.

use crate::attention::{prefill, AttentionBuffers};
use crate::device::CudaDevice;
use crate::timing::random_bits;
use crate::CudaError;
use half::{bf16, f16};
use headroom_core::{AttentionShape, Dtype, RouteRequest};
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use serde::Serialize;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct CheckCase {
    pub route: RouteRequest,
    pub dtype: Dtype,
    pub head_dim: usize,
    pub q_len: usize,
    pub kv_len: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    /// Plant a NaN in this key row (KV head 0).
    pub nan_key: Option<usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    pub case: CheckCase,
    pub rel_err: f64,
    pub tolerance: f64,
    pub rows_compared: usize,
    /// Rows whose NaN pattern was wrong (NaN expected and absent, or present and not expected).
    pub bad_nan_rows: usize,
    pub passed: bool,
}

/// Relative Frobenius tolerance of a storage dtype.
pub fn tolerance(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::Bf16 => 1e-2,
        Dtype::F16 => 2e-3,
        Dtype::F32 => 1e-5,
    }
}

/// The case list of `headroom kernels check`: every fused head dim and dtype at
/// lengths 1000, 2048, 8192, with and without history, GQA 8 and 1; the composed
/// route at qL 128 and 512; NaN propagation on both routes; tiny tails.
pub fn standard_cases() -> Vec<CheckCase> {
    let mut cases = Vec::new();
    let dtypes = [Dtype::Bf16, Dtype::F16];
    let base = |route, dtype, head_dim, q_len, history: usize, (q_heads, kv_heads)| CheckCase {
        route,
        dtype,
        head_dim,
        q_len,
        kv_len: q_len + history,
        q_heads,
        kv_heads,
        nan_key: None,
    };
    for dtype in dtypes {
        for d in [256, 128, 64] {
            for len in [1000, 2048, 8192] {
                for history in [0, 333] {
                    for heads in [(8, 1), (2, 2)] {
                        cases.push(base(RouteRequest::Fused, dtype, d, len, history, heads));
                    }
                }
            }
            // Tails: fewer rows than one tile, one query row.
            cases.push(base(RouteRequest::Fused, dtype, d, 5, 65, (4, 2)));
            cases.push(base(RouteRequest::Fused, dtype, d, 1, 700, (2, 1)));
        }
        for qb in [128, 512] {
            for len in [1000, 2048] {
                for history in [0, 333] {
                    cases.push(base(
                        RouteRequest::Composed { query_block: qb },
                        dtype,
                        256,
                        len,
                        history,
                        (8, 1),
                    ));
                }
            }
        }
        cases.push(base(
            RouteRequest::Composed { query_block: 0 },
            dtype,
            128,
            300,
            0,
            (2, 2),
        ));
        for route in [
            RouteRequest::Fused,
            RouteRequest::Composed { query_block: 128 },
        ] {
            let mut c = base(route, dtype, 256, 1000, 100, (4, 2));
            c.nan_key = Some(517);
            cases.push(c);
        }
    }
    cases
}

fn to_f64(bits: &[u16], dtype: Dtype) -> Vec<f64> {
    bits.par_iter()
        .map(|&b| match dtype {
            Dtype::Bf16 => bf16::from_bits(b).to_f64(),
            _ => f16::from_bits(b).to_f64(),
        })
        .collect()
}

/// f64 attention of query row `i` of head `h` (`None` when it reads a NaN).
fn reference_row(
    s: &AttentionShape,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    h: usize,
    i: usize,
) -> Vec<f64> {
    let d = s.head_dim;
    let kvh = h / s.group();
    let qrow = &q[(h * s.q_len + i) * d..][..d];
    let visible = s.history() + i + 1;
    let scale = s.scale_or_default() as f64;
    let scores: Vec<f64> = (0..visible)
        .map(|j| {
            let krow = &k[(kvh * s.kv_len + j) * d..][..d];
            qrow.iter().zip(krow).map(|(a, b)| a * b).sum::<f64>() * scale
        })
        .collect();
    let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let w: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
    let l: f64 = w.iter().sum();
    let mut out = vec![0f64; d];
    for (j, wj) in w.iter().enumerate() {
        let vrow = &v[(kvh * s.kv_len + j) * d..][..d];
        for (o, x) in out.iter_mut().zip(vrow) {
            *o += wj / l * x;
        }
    }
    out
}

/// Runs one case on the device; `seed` makes its inputs.
pub fn run_case(dev: &CudaDevice, case: &CheckCase, seed: u64) -> Result<CheckResult, CudaError> {
    let shape = AttentionShape {
        q_len: case.q_len,
        kv_len: case.kv_len,
        q_heads: case.q_heads,
        kv_heads: case.kv_heads,
        head_dim: case.head_dim,
        scale: None,
    };
    let dtype = case.dtype;
    let d = shape.head_dim;
    let q_bits = random_bits(shape.q_elems(), dtype, seed);
    let mut k_bits = random_bits(shape.kv_elems(), dtype, seed ^ 0x5555);
    let v_bits = random_bits(shape.kv_elems(), dtype, seed ^ 0xAAAA);
    let nan_bits: u16 = 0xFFFF; // a NaN in both f16 and bf16
    if let Some(j) = case.nan_key {
        k_bits[j * d + d / 3] = nan_bits;
    }
    let q = dev.upload(&q_bits)?;
    let k = dev.upload(&k_bits)?;
    let v = dev.upload(&v_bits)?;
    let out = dev.upload(&vec![nan_bits; shape.q_elems()])?;
    prefill(
        dev,
        &shape,
        dtype,
        case.route,
        &AttentionBuffers {
            q: &q,
            k: &k,
            v: &v,
            out: &out,
        },
    )?;
    let mut got_bits = vec![0u16; shape.q_elems()];
    dev.read(&out, &mut got_bits)?;
    let got = to_f64(&got_bits, dtype);

    // Every row: NaN exactly where a planted NaN is attended.
    let expects_nan = |h: usize, i: usize| {
        case.nan_key
            .is_some_and(|j| h / shape.group() == 0 && shape.history() + i >= j)
    };
    let bad_nan_rows = (0..shape.q_heads * shape.q_len)
        .into_par_iter()
        .filter(|r| {
            let (h, i) = (r / shape.q_len, r % shape.q_len);
            let row = &got[r * d..][..d];
            if expects_nan(h, i) {
                !row.iter().all(|x| x.is_nan())
            } else {
                row.iter().any(|x| !x.is_finite())
            }
        })
        .count();

    // Rows compared with the f64 reference.
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut rows: Vec<(usize, usize)> = Vec::new();
    for h in 0..shape.q_heads {
        if shape.q_len <= 1024 {
            rows.extend((0..shape.q_len).map(|i| (h, i)));
        } else {
            rows.extend((0..16).map(|i| (h, i)));
            rows.extend((shape.q_len - 16..shape.q_len).map(|i| (h, i)));
            rows.extend((0..64).map(|_| (h, rng.random_range(16..shape.q_len - 16))));
        }
    }
    rows.retain(|&(h, i)| !expects_nan(h, i));
    let qf = to_f64(&q_bits, dtype);
    let kf = to_f64(&k_bits, dtype);
    let vf = to_f64(&v_bits, dtype);
    let (num, den) = rows
        .par_iter()
        .map(|&(h, i)| {
            let r = reference_row(&shape, &qf, &kf, &vf, h, i);
            let g = &got[(h * shape.q_len + i) * d..][..d];
            r.iter().zip(g).fold((0f64, 0f64), |(n, dd), (a, b)| {
                (n + (a - b) * (a - b), dd + a * a)
            })
        })
        .reduce(|| (0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
    let rel_err = if den > 0.0 {
        (num / den).sqrt()
    } else {
        f64::NAN
    };
    let tol = tolerance(dtype);
    Ok(CheckResult {
        case: *case,
        rel_err,
        tolerance: tol,
        rows_compared: rows.len(),
        bad_nan_rows,
        passed: rel_err <= tol && bad_nan_rows == 0,
    })
}
