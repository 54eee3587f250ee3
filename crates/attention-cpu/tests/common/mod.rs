//! Test helpers: fresh random inputs (seed printed on failure), poisoned
//! outputs, and the comparison against the f64 reference.
#![allow(dead_code)]

use headroom_attention_cpu::{attention_prefill, reference_f64, rel_frobenius_error};
use headroom_core::{AttentionReport, AttentionShape, Element, RouteRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub fn shape(
    q_len: usize,
    kv_len: usize,
    q_heads: usize,
    kv_heads: usize,
    head_dim: usize,
) -> AttentionShape {
    AttentionShape {
        q_len,
        kv_len,
        q_heads,
        kv_heads,
        head_dim,
        scale: None,
    }
}

/// A fresh seed each run; the caller prints it in every assertion message.
pub fn fresh_seed() -> u64 {
    rand::rng().random()
}

pub struct Inputs<T> {
    pub q: Vec<T>,
    pub k: Vec<T>,
    pub v: Vec<T>,
}

/// Uniform values in [-2, 2) stored as `T`.
pub fn inputs<T: Element>(shape: &AttentionShape, seed: u64) -> Inputs<T> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut gen = |n: usize| -> Vec<T> {
        (0..n)
            .map(|_| T::from_f32(rng.random_range(-2.0f32..2.0)))
            .collect()
    };
    Inputs {
        q: gen(shape.q_elems()),
        k: gen(shape.kv_elems()),
        v: gen(shape.kv_elems()),
    }
}

/// Runs a route on an output poisoned with NaN first.
pub fn run<T: Element>(
    shape: &AttentionShape,
    route: RouteRequest,
    x: &Inputs<T>,
) -> (Vec<T>, AttentionReport) {
    let mut out = vec![T::from_f32(f32::NAN); shape.q_elems()];
    let report = attention_prefill(shape, route, &x.q, &x.k, &x.v, &mut out)
        .unwrap_or_else(|e| panic!("{route} on {shape:?}: {e}"));
    (out, report)
}

/// Runs `route` on fresh inputs and asserts it matches the f64 reference
/// within `tol` and wrote every output element.
pub fn check<T: Element>(shape: &AttentionShape, route: RouteRequest, tol: f64) -> AttentionReport {
    let seed = fresh_seed();
    let x = inputs::<T>(shape, seed);
    let (out, report) = run(shape, route, &x);
    let ctx = format!("{} {route} {shape:?} seed {seed}", T::DTYPE);
    assert!(
        out.iter().all(|o| o.to_f32().is_finite()),
        "{ctx}: output not fully written (NaN poison left)"
    );
    let reference = reference_f64(shape, &x.q, &x.k, &x.v);
    let err = rel_frobenius_error(&out, &reference);
    assert!(err <= tol, "{ctx}: rel err {err:e} > {tol:e}");
    report
}

/// The routes every correctness test runs: fused and composed with blocks
/// 0 (one block), 1, 7 (not dividing), 32 and one larger than q_len.
pub fn routes(q_len: usize) -> Vec<RouteRequest> {
    let mut r = vec![RouteRequest::Fused];
    for qb in [0, 1, 7, 32, q_len + 5] {
        r.push(RouteRequest::Composed { query_block: qb });
    }
    r
}
