//! CPU prefill attention: the composed (query-blocked) and fused (online
//! softmax) routes, and the f64 reference every backend is checked against.
//!
//! # Semantics (shared by every backend)
//!
//! * Layout is head-major and contiguous: `q` and `out` are
//!   `[q_heads][q_len][head_dim]`, `k` and `v` are `[kv_heads][kv_len][head_dim]`.
//! * The queries are the **last** `q_len` rows of a KV sequence of length
//!   `kv_len >= q_len`; the `kv_len - q_len` rows before them are history from
//!   earlier chunks.
//! * The causal mask is lower-right aligned: query row `i` attends to KV
//!   positions `0 ..= kv_len - q_len + i`.
//! * GQA with any integer ratio `group = q_heads / kv_heads`: query head `h`
//!   reads KV head `h / group`. Both routes process a KV head's whole query
//!   group in one task, so each K/V row is converted once per task for the
//!   group, not once per query head.
//! * `scale` is `1 / sqrt(head_dim)` unless the shape gives one.
//! * Storage is f32, f16 or bf16 ([`Element`]); products, accumulation and the
//!   softmax are f32 (the reference is f64).
//! * A NaN (or infinity) in an input yields NaN in exactly the output rows that
//!   read it: a NaN query row poisons its own output row, a NaN key or value
//!   row poisons the rows whose causal window contains it and no others (masked
//!   positions are never multiplied in, not even by zero).
//!
//! # Routes
//!
//! * [`RouteRequest::Composed`] `{ query_block }` — for each (KV head, block of
//!   `query_block` query rows; 0 = one block): scores = Q·Kᵀ with the `gemm`
//!   crate, masked softmax, · V. Its workspace grows with `query_block × kv_len`.
//! * [`RouteRequest::Fused`] — one pass per (KV head, query tile) with online
//!   softmax over KV tiles ([`fused::FUSED_QUERY_ROWS`], [`fused::FUSED_KV_TILE`]);
//!   no score matrix larger than one tile exists, so its workspace does not
//!   depend on `kv_len`. Head dims: [`headroom_core::fused_capability::FUSED_HEAD_DIMS`].
//!
//! Both run multi-threaded on the current rayon pool. Every call reports the
//! exact bytes of workspace it allocated ([`AttentionReport::transient_bytes`]);
//! all of it lives until the call returns, so the sum is also the peak.

mod composed;
mod convert;
pub mod fused;
mod matmul;
mod reference;
mod simd;
mod tasks;
mod workspace;

pub use reference::{reference_f64, reference_f64_subset, rel_frobenius_error};

use headroom_core::{AttentionError, AttentionReport, AttentionShape, Element, RouteRequest};

/// Runs prefill attention on the CPU with the requested route.
///
/// Validates the shape and every buffer length first (a typed error naming the
/// offending dimension, never a panic), then writes every element of `out`.
/// The report says what actually ran: the route, the query block (composed:
/// `q_len` when 0 was requested or the block exceeds `q_len`) and the exact
/// transient workspace bytes.
pub fn attention_prefill<T: Element>(
    shape: &AttentionShape,
    route: RouteRequest,
    q: &[T],
    k: &[T],
    v: &[T],
    out: &mut [T],
) -> Result<AttentionReport, AttentionError> {
    shape.validate_buffers(q.len(), k.len(), v.len(), out.len())?;
    match route {
        RouteRequest::Composed { query_block } => Ok(composed::run(
            shape,
            query_block,
            q,
            k,
            v,
            out,
            simd::Level::detect(),
        )),
        RouteRequest::Fused => {
            fused::check_supported::<T>(shape)?;
            Ok(fused::run(shape, q, k, v, out, simd::Level::detect()))
        }
    }
}

/// The transient bytes [`attention_prefill`] allocates for `shape` under
/// `route` with K/V stored in `T`, run on a pool of `threads` workers (the
/// call uses `rayon::current_num_threads()`): exactly what its report says.
pub fn workspace_bytes<T: Element>(
    shape: &AttentionShape,
    route: RouteRequest,
    threads: usize,
) -> u64 {
    match route {
        RouteRequest::Composed { query_block } => {
            composed::workspace_bytes::<T>(shape, query_block, threads)
        }
        RouteRequest::Fused => fused::workspace_bytes(shape, threads),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    /// [`workspace_bytes`] is what a call reports, for both routes, f32 and
    /// bf16 storage, one or several query blocks, with and without history.
    #[test]
    fn workspace_bytes_is_what_a_call_allocates() {
        fn case<T: Element>(shape: &AttentionShape, route: RouteRequest) {
            let q: Vec<T> = (0..shape.q_elems())
                .map(|i| T::from_f32((i % 7) as f32 / 7.0))
                .collect();
            let kv: Vec<T> = (0..shape.kv_elems())
                .map(|i| T::from_f32((i % 5) as f32 / 5.0))
                .collect();
            let mut out = vec![T::from_f32(0.0); shape.q_elems()];
            let report = attention_prefill(shape, route, &q, &kv, &kv, &mut out).unwrap();
            let predicted = workspace_bytes::<T>(shape, route, rayon::current_num_threads());
            assert_eq!(predicted, report.transient_bytes, "{shape:?} {route:?}");
        }
        for (q_len, kv_len) in [(1, 1), (33, 33), (45, 300), (300, 300)] {
            let shape = AttentionShape {
                q_len,
                kv_len,
                q_heads: 8,
                kv_heads: 2,
                head_dim: 64,
                scale: None,
            };
            for route in [
                RouteRequest::Composed { query_block: 0 },
                RouteRequest::Composed { query_block: 16 },
                RouteRequest::Fused,
            ] {
                case::<f32>(&shape, route);
                case::<bf16>(&shape, route);
            }
        }
    }

    /// The portable (non-AVX2) task bodies, which the public entry point only
    /// runs on CPUs without AVX2, match the reference too.
    #[test]
    fn baseline_level_routes_match_reference() {
        let shape = AttentionShape {
            q_len: 45,
            kv_len: 77,
            q_heads: 4,
            kv_heads: 2,
            head_dim: 64,
            scale: None,
        };
        let gen = |n: usize, m: usize| -> Vec<bf16> {
            (0..n)
                .map(|i| bf16::from_f32(((i * m) % 23) as f32 / 11.5 - 1.0))
                .collect()
        };
        let (q, k, mut v) = (
            gen(shape.q_elems(), 7),
            gen(shape.kv_elems(), 5),
            gen(shape.kv_elems(), 3),
        );
        // A NaN value row in the masked part of the last block: exercises the row-by-row path.
        v[(shape.kv_len - 2) * 64..(shape.kv_len - 1) * 64].fill(bf16::NAN);
        let reference = reference_f64(&shape, &q, &k, &v);
        let level = simd::Level::Baseline;
        for run in 0..2 {
            let mut out = vec![bf16::NAN; shape.q_elems()];
            if run == 0 {
                fused::run(&shape, &q, &k, &v, &mut out, level);
            } else {
                composed::run(&shape, 16, &q, &k, &v, &mut out, level);
            }
            for (i, (o, r)) in out.iter().zip(&reference).enumerate() {
                let (o, r) = (f64::from(o.to_f32()), *r);
                assert_eq!(o.is_nan(), r.is_nan(), "run {run} [{i}]");
                if !r.is_nan() {
                    assert!(
                        (o - r).abs() < 1e-2 * (1.0 + r.abs()),
                        "run {run} [{i}] {o} vs {r}"
                    );
                }
            }
        }
    }
}
