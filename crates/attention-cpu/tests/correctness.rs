//! Both routes against the f64 reference on fresh random data: dtypes, query
//! blocks, tails, history offsets, GQA ratios and head dims.

mod common;

use common::{check, routes, shape};
use half::{bf16, f16};
use headroom_core::{Route, RouteRequest};

const F32_TOL: f64 = 1e-5;
const HALF_TOL: f64 = 1e-2;

#[test]
fn f32_every_route_and_block_matches_reference() {
    let s = shape(45, 45, 4, 2, 64);
    for route in routes(s.q_len) {
        check::<f32>(&s, route, F32_TOL);
    }
}

#[test]
fn bf16_and_f16_every_route_and_block_match_reference() {
    let s = shape(37, 50, 4, 1, 128);
    for route in routes(s.q_len) {
        check::<bf16>(&s, route, HALF_TOL);
        check::<f16>(&s, route, HALF_TOL);
    }
}

#[test]
fn tails_not_multiple_of_any_tile() {
    // 131 rows: not a multiple of the KV tile (64), the fused query rows, or the blocks.
    let s = shape(131, 131, 2, 2, 64);
    for route in routes(s.q_len) {
        check::<f32>(&s, route, F32_TOL);
    }
    let s = shape(1, 1, 1, 1, 64);
    for route in routes(s.q_len) {
        check::<f32>(&s, route, F32_TOL);
    }
}

#[test]
fn history_offsets_shift_the_causal_window() {
    for (q_len, kv_len) in [(1, 97), (20, 150), (65, 129), (70, 70)] {
        let s = shape(q_len, kv_len, 2, 1, 64);
        for route in routes(q_len) {
            check::<f32>(&s, route, F32_TOL);
        }
    }
}

#[test]
fn gqa_ratios_1_2_8() {
    for (q_heads, kv_heads) in [(2, 2), (4, 2), (16, 2), (8, 1)] {
        let s = shape(40, 60, q_heads, kv_heads, 64);
        for route in routes(s.q_len) {
            check::<f32>(&s, route, F32_TOL);
        }
    }
}

#[test]
fn head_dims_64_128_256_in_bf16() {
    for d in [64, 128, 256] {
        let s = shape(70, 90, 16, 2, d);
        for route in [
            RouteRequest::Fused,
            RouteRequest::Composed { query_block: 32 },
        ] {
            check::<bf16>(&s, route, HALF_TOL);
            check::<f32>(&s, route, F32_TOL);
        }
    }
}

#[test]
fn composed_supports_head_dims_fused_does_not() {
    let s = shape(33, 40, 3, 1, 96);
    check::<f32>(&s, RouteRequest::Composed { query_block: 16 }, F32_TOL);
}

#[test]
fn an_explicit_scale_is_used() {
    let mut s = shape(30, 40, 2, 1, 64);
    s.scale = Some(0.37);
    for route in routes(s.q_len) {
        check::<f32>(&s, route, F32_TOL);
    }
}

#[test]
fn reports_what_ran() {
    let s = shape(50, 60, 2, 1, 64);
    let r = check::<f32>(&s, RouteRequest::Composed { query_block: 0 }, F32_TOL);
    assert_eq!((r.route, r.query_block), (Route::Composed, Some(50)));
    let r = check::<f32>(&s, RouteRequest::Composed { query_block: 16 }, F32_TOL);
    assert_eq!((r.route, r.query_block), (Route::Composed, Some(16)));
    let r = check::<f32>(&s, RouteRequest::Composed { query_block: 500 }, F32_TOL);
    assert_eq!(
        r.query_block,
        Some(50),
        "a block beyond q_len runs as one block"
    );
    let r = check::<f32>(&s, RouteRequest::Fused, F32_TOL);
    assert_eq!((r.route, r.query_block), (Route::Fused, None));
    assert!(r.transient_bytes > 0);
}
