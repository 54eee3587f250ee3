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
#[cfg(target_arch = "x86_64")]
mod simd_x86;
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
        RouteRequest::Composed { query_block } => {
            Ok(composed::run(shape, query_block, q, k, v, out))
        }
        RouteRequest::Fused => {
            fused::check_supported::<T>(shape)?;
            Ok(fused::run(shape, q, k, v, out))
        }
    }
}
