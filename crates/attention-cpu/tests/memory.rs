//! Transient memory: the fused workspace is bounded by its tiles and does not
//! grow with kv_len; the composed workspace grows with qL × kv_len.

mod common;

use common::{inputs, run, shape};
use half::bf16;
use headroom_core::{AttentionReport, AttentionShape, RouteRequest};

/// Runs on a pool of a fixed 2 threads, so the worker count (and the
/// per-worker scratch) does not depend on the test machine.
fn report(s: &AttentionShape, route: RouteRequest) -> AttentionReport {
    let x = inputs::<bf16>(s, common::fresh_seed());
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("thread pool")
        .install(|| run(s, route, &x).1)
}

#[test]
fn doubling_kv_len_does_not_grow_fused_workspace() {
    // q_len fixed, history doubled twice.
    let base = report(&shape(64, 128, 16, 2, 256), RouteRequest::Fused);
    for kv_len in [256, 512] {
        let r = report(&shape(64, kv_len, 16, 2, 256), RouteRequest::Fused);
        assert_eq!(r.transient_bytes, base.transient_bytes, "kv_len {kv_len}");
    }
    // q_len and kv_len doubled together (no history), enough tiles to keep every worker busy.
    let a = report(&shape(256, 256, 16, 2, 256), RouteRequest::Fused);
    let b = report(&shape(512, 512, 16, 2, 256), RouteRequest::Fused);
    assert_eq!(a.transient_bytes, b.transient_bytes);
    assert!(a.transient_bytes > 0);
}

#[test]
fn composed_workspace_grows_with_kv_len_and_block() {
    let qb = RouteRequest::Composed { query_block: 32 };
    let a = report(&shape(64, 128, 4, 2, 64), qb);
    let b = report(&shape(64, 256, 4, 2, 64), qb);
    assert!(b.transient_bytes > a.transient_bytes, "{a:?} {b:?}");
    let c = report(
        &shape(64, 256, 4, 2, 64),
        RouteRequest::Composed { query_block: 64 },
    );
    assert!(c.transient_bytes > b.transient_bytes, "{b:?} {c:?}");
}

#[test]
fn fused_workspace_is_at_most_an_eighth_of_composed_512_at_4096() {
    // The Qwen3.6 full-attention shape with kv_len 4096. The composed score
    // block is qL x kv_len whatever q_len is, so 512 queries after 3584 rows
    // of history allocate exactly what a 4096-token prefill does (on 2
    // workers), at a fraction of the compute.
    let s = shape(512, 4096, 16, 2, 256);
    let fused = report(&s, RouteRequest::Fused);
    let composed = report(&s, RouteRequest::Composed { query_block: 512 });
    assert!(
        fused.transient_bytes * 8 <= composed.transient_bytes,
        "fused {} vs composed:512 {}",
        fused.transient_bytes,
        composed.transient_bytes
    );
}
